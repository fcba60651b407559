"""docs/architecture.md's module tables are generated from each module's first sentence and
cannot drift from the code (scripts/gen_architecture_doc.py)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_architecture_doc.py"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_architecture_doc", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tables_match_the_modules() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr


def test_a_changed_row_is_caught() -> None:
    gen = generator()
    doc = gen.DOC.read_text("utf-8")
    row = "| `_settings.py` |"
    assert row in doc
    drifted = doc.replace(row, "| `_settings.py` | something else |", 1)
    assert gen.updated(drifted) == doc != drifted


def test_every_module_of_the_library_and_crates_has_a_row() -> None:
    gen = generator()
    doc = gen.DOC.read_text("utf-8")
    for path in (ROOT / "python" / "fastst").rglob("*.py"):
        assert f"`{path.name}`" in doc or f"/{path.name}`" in doc, path
    assert gen.missing_jobs() == []
