"""The opt-in hook that serves ``import safetensors`` with fastst. Each case
runs in a fresh interpreter: the hook changes process-wide import state."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional, Tuple

import fastst
import pytest

pytestmark = pytest.mark.slow


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
            assert safetensors.__version__ == "0.9.0rc1"
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


def test_uninstall_leaves_the_finder_list_as_an_import_walks_it() -> None:
    """``uninstall`` makes the hook's finder inert instead of taking it off
    ``sys.meta_path`` (mutant: removed; then an import walking the list
    skips the finder after it, as the start-up finder's test shows), and the
    next ``install`` answers with it again: cycles do not grow the list."""
    check(
        run_python(
            """
            import sys, fastst
            fastst.install()
            import safetensors
            before = list(sys.meta_path)
            walk = iter(sys.meta_path)
            while next(walk) is not fastst._dropin.hook._finder:
                pass
            after = before[before.index(fastst._dropin.hook._finder) + 1:]
            fastst.uninstall()
            assert list(walk) == after, "an import walking the finders skipped one"
            assert not fastst.installed() and "safetensors" not in sys.modules
            assert fastst._dropin.hook._finder.find_spec("safetensors") is None
            for _ in range(3):
                with fastst.install():
                    import safetensors.numpy
                    assert safetensors.numpy is fastst.numpy
                assert not fastst.installed()
            assert sys.meta_path == before, (sys.meta_path, before)
            """,
            hide_reference=True,
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
        import fastst._dropin.hook
        fastst._dropin.hook.install_from_environment()
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
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


# --- the start-up switch: the .pth file and _fastst_boot --------------------------------------

ROOT = Path(__file__).resolve().parents[2]
PTH = ROOT / "python" / "fastst-as-safetensors.pth"
VAR = "FASTST_AS_SAFETENSORS"
FASTST_MODULES = "sorted(m for m in sys.modules if m.split('.')[0] in ('fastst', 'numpy'))"


def test_the_start_up_finder_stops_without_leaving_the_finder_list() -> None:
    """The start-up finder, once done, goes inert and stays on
    ``sys.meta_path``: another thread's import may be walking that list, and
    taking an entry off makes it skip the next finder (mutant: the finder
    removed; then ``ModuleNotFoundError`` for a fastst module that exists,
    seen in ``test_threads_importing_safetensors_and_fastst_at_once...``)."""
    import _fastst_boot

    finder = _fastst_boot.Finder()
    sys.meta_path.insert(0, finder)
    try:
        walk = iter(sys.meta_path)
        assert next(walk) is finder
        after = list(sys.meta_path[1:])
        _fastst_boot.stop()
        assert not finder.active and finder.find_spec("safetensors") is None
        assert list(walk) == after, "an import walking the finders skipped one"
    finally:
        sys.meta_path.remove(finder)


def installed_pth() -> Optional[Path]:
    """fastst's .pth file where a wheel install put it, or None (the
    editable install has none)."""
    for folder in site.getsitepackages():
        if (Path(folder) / PTH.name).is_file():
            return Path(folder)
    return None


def start_up(tmp_path: Path, value: Optional[str], *extra: Path) -> Tuple[dict, Path]:
    """An environment whose interpreters process fastst's .pth file at
    start-up: the installed one (a wheel install), or else a copy in a site
    folder that a sitecustomize adds (the editable install has none).
    ``extra`` folders come first on the path. Returns the environment and
    the site folder holding the .pth file."""
    env = dict(os.environ)
    env.pop(VAR, None)
    if value is not None:
        env[VAR] = value
    site_dir = installed_pth()
    paths = [*map(str, extra)]
    if site_dir is None:
        site_dir = tmp_path / "site"
        custom = tmp_path / "custom"
        for folder in (site_dir, custom):
            folder.mkdir(exist_ok=True)
        shutil.copy(PTH, site_dir / PTH.name)
        (custom / "sitecustomize.py").write_text(
            f"import site\nsite.addsitedir({str(site_dir)!r})\n"
        )
        paths.append(str(custom))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env, site_dir


def python(env: dict, *args: str, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd
    )


@pytest.mark.parametrize("value", ["0", "false", "off", "no", "", " ", "FALSE", "garbage", "2"])
def test_other_values_import_nothing_at_start_up(tmp_path: Path, value: str) -> None:
    env, _ = start_up(tmp_path, value)
    result = python(env, "-X", "importtime", "-c", "pass")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("import time:") for line in lines), result.stderr
    assert installed_pth() or "sitecustomize" in result.stderr  # the .pth file was read
    assert "fastst" not in result.stderr
    code = f"import sys, warnings; print({FASTST_MODULES}); import safetensors; print(safetensors)"
    out = check(python(env, "-W", "ignore", "-c", code))
    assert out.startswith("[]") and "__fastst_version__" not in out and "fastst" not in out


@pytest.mark.parametrize("value", ["1", "true", "YES", " On "])
def test_true_values_load_fastst_only_when_safetensors_is_imported(
    tmp_path: Path, value: str
) -> None:
    env, _ = start_up(tmp_path, value)
    listing = "import sys; print(sorted(sys.modules))"
    off = set(eval(check(python(start_up(tmp_path, None)[0], "-c", listing))))
    on = set(eval(check(python(env, "-c", listing))))
    assert on - off == {"_fastst_boot", "_fastst_switch"}  # stdlib-only, importing nothing else
    code = f"""
        import sys, warnings
        print({FASTST_MODULES})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import safetensors
        print(hasattr(safetensors, "__fastst_version__"), len(caught), "fastst" in sys.modules)
        """
    result = python(env, "-c", textwrap.dedent(code))
    assert result.stdout.split("\n")[:2] == ["[]", "True 1 True"], result.stdout + result.stderr


def test_a_waiting_switch_counts_as_installed_and_uninstall_turns_it_off(tmp_path: Path) -> None:
    env, _ = start_up(tmp_path, "1")
    code = """
        import fastst
        print(fastst.installed())
        fastst.uninstall()
        import safetensors
        print(fastst.installed(), hasattr(safetensors, "__fastst_version__"))
        """
    assert check(python(env, "-c", textwrap.dedent(code))).split() == ["True", "False", "False"]


def test_a_broken_install_never_breaks_start_up(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    (shadow / "fastst").mkdir(parents=True)
    (shadow / "fastst" / "__init__.py").write_text("raise RuntimeError('broken fastst')\n")
    env, _ = start_up(tmp_path, "1", shadow)
    started = python(env, "-c", "pass")
    assert (started.returncode, started.stdout, started.stderr) == (0, "", "")
    code = "import safetensors; print(hasattr(safetensors, '__fastst_version__'))"
    used = python(env, "-c", code)
    assert used.returncode == 0 and used.stdout.strip() == "False"
    assert used.stderr.splitlines() == [
        f"fastst: {VAR} is set but fastst could not be loaded (RuntimeError); "
        "'safetensors' is the reference package"
    ]
    # The start-up module itself broken: one short line, no traceback.
    (shadow / "_fastst_boot.py").write_text("raise RuntimeError('broken boot')\n")
    started = python(env, "-c", "pass")
    assert started.returncode == 0
    assert started.stderr == f"fastst: {VAR} is set but ignored (RuntimeError)\n"


SPAWNING = """
import multiprocessing
import sys


def served(_):
    import safetensors
    return hasattr(safetensors, "__fastst_version__")


if __name__ == "__main__":
    for method in ("spawn", "forkserver"):
        with multiprocessing.get_context(method).Pool(1) as pool:
            print(method, pool.map(served, [0]))
"""


def test_run_reaches_spawned_children(tmp_path: Path) -> None:
    env, _ = start_up(tmp_path, None)
    script = tmp_path / "spawning.py"
    script.write_text(SPAWNING)
    command = os.path.join(os.path.dirname(sys.executable), "fastst")
    for argv in ([sys.executable, "-m", "fastst", "run"], [command, "run"]):
        result = subprocess.run(
            [*argv, str(script)], env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split("\n")[:2] == ["spawn [True]", "forkserver [True]"], argv


def test_a_reference_imported_before_the_switch_names_its_importer(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env, site_dir = start_up(tmp_path, "1")
    # A start-up file read before fastst's imports the reference.
    early = [site_dir / "aaa-early.pth", site_dir / "early_loader.py"]
    early[0].write_text("import early_loader\n")
    early[1].write_text("import safetensors\n")
    request.addfinalizer(lambda: [path.unlink(missing_ok=True) for path in early])
    code = "import safetensors; print(hasattr(safetensors, '__fastst_version__'))"
    result = python(env, "-c", code)
    assert result.returncode == 0 and result.stdout.strip() == "False"
    [line] = result.stderr.splitlines()
    assert "imported by module 'early_loader' during start-up" in line
    assert f"set {VAR}" not in line and "python -m fastst run" not in line
    # python -m fastst run: the same start-up import, named; nothing run.
    env.pop(VAR)
    script = tmp_path / "script.py"
    script.write_text("print('ran')\n")
    result = python(env, "-m", "fastst", "run", str(script))
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("fastst run: cannot serve 'safetensors' with fastst")
    assert "imported by module 'early_loader'" in line and "python -m fastst run" not in line


def test_a_late_install_names_the_module_that_imported_the_reference(tmp_path: Path) -> None:
    (tmp_path / "model_loader.py").write_text("from safetensors import safe_open\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    env.pop(VAR, None)
    code = """
        import sys, {first}
        import fastst
        try:
            fastst.install()
        except fastst.HookError as exc:
            print(exc)
        """
    for first, named in (("model_loader", "model_loader"), ("safetensors", "__main__")):
        out = check(python(env, "-c", textwrap.dedent(code.format(first=first))))
        assert f"imported by module {named!r}); install the hook before" in out, out


def _env(**extra: str) -> dict:
    env = dict(os.environ)
    env.pop("FASTST_AS_SAFETENSORS", None)
    env.update(extra)
    return env


def test_run_puts_the_scripts_folder_first_on_the_path(tmp_path):
    """``python -m fastst run script.py`` imports modules beside the script,
    as ``python script.py`` does (mutant: the script's folder not put on
    ``sys.path``)."""
    (tmp_path / "helper_beside_script.py").write_text("VALUE = 'from beside the script'\n")
    script = tmp_path / "main_script.py"
    script.write_text(
        "import sys, helper_beside_script, safetensors\n"
        "served = hasattr(safetensors, '__fastst_version__')\n"
        "print(helper_beside_script.VALUE, sys.argv[1:], served)\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "fastst", "run", str(script), "x", "y"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        cwd="/",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "from beside the script ['x', 'y'] True"


def test_run_help_prints_usage_and_succeeds():
    """``-h`` / ``--help`` print the usage and exit 0; no argument exits 2."""
    for args, code in ((["-h"], 0), (["--help"], 0), ([], 2)):
        result = subprocess.run(
            [sys.executable, "-m", "fastst", "run", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(),
        )
        assert result.returncode == code, (args, result.stderr)
        assert result.stderr.startswith("usage: python -m fastst run")


def test_announcement_points_at_the_importing_line(tmp_path):
    """The warning of ``FASTST_AS_SAFETENSORS=1`` is attributed to the line
    that imported ``safetensors`` (mutant: a wrong ``stacklevel``)."""
    script = tmp_path / "importer.py"
    script.write_text(
        textwrap.dedent(
            """\
            import warnings
            import fastst._dropin.hook

            def load():
                import safetensors  # line 5
                return safetensors

            fastst._dropin.hook.install_from_environment()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                load()
            [w] = [w for w in caught if "served by fastst" in str(w.message)]
            print(type(w.message).__name__, w.filename, w.lineno)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(FASTST_AS_SAFETENSORS="1"),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["DropinWarning", str(script), "5"]


FIRST_IMPORT_RACE = """
import sys, threading, time

name = sys.argv[1]
errors = []


def first():
    try:
        from safetensors.torch import save, load_file
    except Exception as exc:
        errors.append(repr(exc))


def second():
    # In as soon as the module is listed, while the first import is still running.
    while name not in sys.modules:
        time.sleep(0.0001)
    try:
        from safetensors.torch import save, load_file
        assert callable(save) and callable(load_file)
        import safetensors.torch as module
        assert module.save is save
    except Exception as exc:
        errors.append(repr(exc))


threads = [threading.Thread(target=second) for _ in range(4)]
threads.append(threading.Thread(target=first))
for t in threads:
    t.start()
for t in threads:
    t.join()
print(errors)
"""


def test_threads_importing_at_once_right_after_the_switch_all_get_the_module(
    tmp_path: Path,
) -> None:
    """Right after start-up with the switch on, threads running ``from
    safetensors.torch import save`` while the first such import is under way
    (the name already listed in ``sys.modules``) all get the names: the
    module object they find listed is never an empty stand-in. (Before the
    fix: ImportError "cannot import name 'save'".)"""
    # This fastst first on the path (the start-up's PYTHONPATH replaces the caller's).
    env, _ = start_up(tmp_path, "1", Path(fastst.__file__).resolve().parents[1])
    for _ in range(2):
        result = python(env, "-W", "ignore", "-c", FIRST_IMPORT_RACE, "safetensors.torch")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "[]", result.stdout + result.stderr


_RACE = """\
import faulthandler, sys, threading
faulthandler.dump_traceback_later(30, exit=True)  # a deadlock ends the process
import torch  # already imported, as in a torch.distributed program
names = ["safetensors.torch", "safetensors.numpy", "safetensors",
         "fastst", "fastst.torch", "fastst.numpy"]
barrier = threading.Barrier(10)
errors = []

def work(i):
    import importlib
    name = names[i % len(names)]
    try:
        barrier.wait()
        module = importlib.import_module(name)
        if name.startswith("safetensors."):
            assert module is sys.modules[name]
            assert callable(module.save_file) and callable(module.load_file)
            assert module.__name__.startswith("fastst."), module
    except BaseException as exc:
        errors.append(f"{name}: {exc!r}")

threads = [threading.Thread(target=work, args=(i,)) for i in range(10)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("ERR", errors) if errors else print("OK")
"""


@pytest.mark.slow
def test_threads_importing_safetensors_and_fastst_at_once_do_not_deadlock(tmp_path):
    """With ``FASTST_AS_SAFETENSORS=1``, threads importing ``safetensors.*``
    while others import ``fastst`` modules each get a whole module (mutant:
    the start-up finder importing fastst inside ``find_spec``, under the
    global import lock: a deadlock with the thread holding ``fastst``'s
    module lock, every round)."""
    script = tmp_path / "race.py"
    script.write_text(_RACE)
    failed = []
    for _round in range(4):
        result = subprocess.run(
            [sys.executable, "-W", "ignore", str(script)],
            capture_output=True,
            text=True,
            timeout=120,
            env=_env(FASTST_AS_SAFETENSORS="1"),
        )
        if result.returncode != 0 or not result.stdout.startswith("OK"):
            failed.append((result.returncode, result.stdout[-300:], result.stderr[-600:]))
    assert not failed, failed
