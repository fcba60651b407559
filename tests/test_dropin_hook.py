"""The opt-in hook that serves ``import safetensors`` with fastst. Each case
runs in a fresh interpreter: the hook changes process-wide import state."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import fastst
import pytest


def run_python(code: str, *args: str, env: dict = None, hide_reference: bool = False):
    environment = dict(os.environ)
    environment.pop("FASTST_AS_SAFETENSORS", None)
    if env:
        environment.update(env)
    prelude = ""
    if hide_reference:
        # Make the reference package impossible to import.
        prelude = textwrap.dedent(
            """
            import sys
            class _Block:
                def find_spec(self, name, path=None, target=None):
                    if name == "safetensors" or name.startswith("safetensors."):
                        raise ModuleNotFoundError(f"No module named {name!r}")
            sys.meta_path.insert(0, _Block())
            """
        )
    return subprocess.run(
        [sys.executable, *args, "-c", prelude + textwrap.dedent(code)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def check(result) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_install_serves_every_module_and_uninstall_restores_the_reference() -> None:
    out = check(
        run_python(
            """
            import sys, fastst
            assert not fastst.installed()
            fastst.install()
            assert fastst.installed()
            import safetensors, safetensors.torch, safetensors.numpy
            from safetensors import safe_open, SafetensorError, TensorSpec, _safe_open_handle
            from safetensors._safetensors_rust import serialize
            import fastst.torch, fastst.numpy
            assert safetensors.torch is fastst.torch and safetensors.numpy is fastst.numpy
            assert SafetensorError is fastst.SafetensorError
            assert safetensors.__version__ == "0.8.0"
            assert safetensors.__fastst_version__ == fastst.__version__
            assert fastst.torch.__spec__.name == "fastst.torch"
            try:
                import safetensors.nothing
            except ModuleNotFoundError as exc:
                print("missing", exc.name)
            fastst.uninstall()
            assert not fastst.installed()
            assert not [m for m in sys.modules if m.startswith("safetensors")]
            import safetensors
            import os
            home = os.path.dirname(fastst.__file__)
            print("after", not hasattr(safetensors, "__fastst_version__")
                  and not safetensors.__file__.startswith(home))
            """
        )
    )
    assert "missing safetensors.nothing" in out
    assert "after True" in out


def test_install_after_the_reference_was_imported_raises_and_changes_nothing() -> None:
    out = check(
        run_python(
            """
            import sys, safetensors, fastst
            before = (list(sys.meta_path), dict(sys.modules))
            try:
                fastst.install()
            except fastst.HookError as exc:
                assert isinstance(exc, RuntimeError)
                print("refused:", exc)
            assert not fastst.installed()
            assert sys.meta_path == before[0]
            assert sys.modules["safetensors"] is before[1]["safetensors"]
            """
        )
    )
    assert "refused: cannot serve 'safetensors' with fastst" in out
    assert "already imported" in out


def test_context_manager_and_nesting() -> None:
    check(
        run_python(
            """
            import fastst
            with fastst.install():
                with fastst.install():  # already on: does not own it
                    pass
                assert fastst.installed()
                import safetensors.numpy
            assert not fastst.installed()
            """
        )
    )


def test_works_without_the_reference_installed() -> None:
    out = check(
        run_python(
            """
            try:
                import safetensors
            except ModuleNotFoundError:
                print("no reference")
            import fastst, numpy as np
            fastst.install()
            import importlib.util
            assert importlib.util.find_spec("safetensors") is not None
            from safetensors.numpy import save, load
            print(load(save({"a": np.arange(3)}))["a"].tolist())
            """,
            hide_reference=True,
        )
    )
    assert "no reference" in out and "[0, 1, 2]" in out


def test_environment_variable_installs_and_warns() -> None:
    code = """
        import warnings
        warnings.simplefilter("always")
        import fastst._hook
        fastst._hook.install_from_environment()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import safetensors
        print(fastst.installed(), [str(w.message) for w in caught])
        """
    on = check(run_python(code, env={"FASTST_AS_SAFETENSORS": "1"}))
    assert on.startswith("True") and "served by fastst" in on
    off = check(run_python(code, env={"FASTST_AS_SAFETENSORS": "0"}))
    assert off.startswith("False")


def test_pth_file_line_is_valid_and_reads_the_variable() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "python", "fastst-as-safetensors.pth")) as fh:
        lines = [line for line in fh.read().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("import ")
    code = lines[0] + "\nimport fastst\nprint(fastst.installed())\n"
    assert check(run_python(code, env={"FASTST_AS_SAFETENSORS": "1"})).strip() == "True"
    assert check(run_python(code)).strip() == "False"


def test_python_m_fastst_run(tmp_path) -> None:
    script = tmp_path / "user_script.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import safetensors.torch, torch
            safetensors.torch.save_file({"w": torch.ones(2)}, sys.argv[1])
            print(type(safetensors.torch.load_file(sys.argv[1])["w"]).__name__,
                  safetensors.torch.__name__)
            """
        )
    )
    target = str(tmp_path / "out.safetensors")
    result = subprocess.run(
        [sys.executable, "-m", "fastst", "run", str(script), target],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["Tensor", "fastst.torch"]
    module = subprocess.run(
        [sys.executable, "-m", "fastst", "run", "-m", "json.tool", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert module.returncode == 0 and "json.tool" in module.stdout
    usage = subprocess.run(
        [sys.executable, "-m", "fastst", "run"], capture_output=True, text=True, timeout=60
    )
    assert usage.returncode == 2 and "usage" in usage.stderr


def test_in_process_state_is_off_by_default() -> None:
    assert not fastst.installed()


@pytest.mark.parametrize("name", ["flax", "tensorflow", "paddle", "mlx"])
def test_framework_modules_resolve(name: str) -> None:
    out = check(
        run_python(
            f"""
            import fastst
            fastst.install()
            import safetensors.{name} as m
            print(m.__name__)
            """
        )
    )
    assert out.strip() == f"fastst.{name}"
