"""The drop-in hook's runner and announcement: behaviour no other test pinned
down, found by the Python mutation pass (scripts/pymutants.py; the mutant each
test kills is named in its docstring, see docs/python-mutants.md). Each case
runs in a fresh interpreter: the hook changes process-wide import state."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


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
            import fastst._hook

            def load():
                import safetensors  # line 5
                return safetensors

            fastst._hook.install_from_environment()
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
