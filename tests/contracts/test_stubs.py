"""The .pyi stubs of the compiled module match the module: one submodule per
job, each importable by its dotted name and with a stub of its own
(``python/fastst/_fastst/<job>.pyi``); every public name and method is
declared, and nothing is declared that doesn't exist."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import fastst._fastst as native
import pytest

#: The compiled module's submodules, one per job.
JOBS = ("catalogue", "inspect", "read", "remote", "text", "write")

STUBS = Path(native.__file__).with_name("_fastst")
if not (STUBS / "__init__.pyi").exists():  # editable installs keep the stubs in the source tree
    STUBS = Path(__file__).resolve().parents[2] / "python" / "fastst" / "_fastst"


def stub_names(stub: Path):
    tree = ast.parse(stub.read_text())
    top, members = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            top.add(node.name)
            members[node.name] = {
                n.name
                for n in node.body
                if isinstance(n, (ast.FunctionDef, ast.AnnAssign))
                for n in [n]
                if not isinstance(n, ast.AnnAssign)
            } | {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
        elif isinstance(node, ast.FunctionDef):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
            top.update(a.asname or a.name for a in node.names)
    return top, members


def public(module: ModuleType) -> set:
    names = {n for n in dir(module) if not n.startswith("__") or n == "__version__"}
    return names - {"__doc__", "__all__"}


def test_the_root_holds_the_version_and_one_submodule_per_job() -> None:
    assert public(native) == {"__version__", *JOBS}
    assert sorted(p.stem for p in STUBS.glob("*.pyi")) == sorted(["__init__", *JOBS])
    assert stub_names(STUBS / "__init__.pyi")[0] == {"__version__", *JOBS}


@pytest.mark.parametrize("job", JOBS)
def test_each_stub_declares_exactly_its_submodule(job: str) -> None:
    module = importlib.import_module(f"fastst._fastst.{job}")
    assert module is getattr(native, job)
    assert module.__name__ == f"fastst._fastst.{job}"
    top, members = stub_names(STUBS / f"{job}.pyi")
    assert top == public(module)
    for name in top:
        obj = getattr(module, name)
        if callable(obj):
            assert obj.__module__ == module.__name__, name
    for cls_name, declared in members.items():
        cls = getattr(module, cls_name)
        actual = {
            n
            for n, _ in inspect.getmembers(cls)
            if not n.startswith("_")
            or n
            in {
                "__new__",
                "__len__",
                "__contains__",
                "__buffer__",
                "__release_buffer__",
                "__enter__",
                "__exit__",
                "__iter__",
                "__getitem__",
            }
        }
        actual = {n for n in actual if n in declared or not n.startswith("__")}
        if sys.version_info < (3, 12):
            # The buffer protocol is not visible as methods before 3.12.
            declared = declared - {"__buffer__", "__release_buffer__"}
        assert declared == actual, cls_name


@pytest.mark.parametrize("job", JOBS)
def test_each_stubbed_function_takes_the_parameters_of_the_compiled_one(job: str) -> None:
    module = importlib.import_module(f"fastst._fastst.{job}")
    tree = ast.parse((STUBS / f"{job}.pyi").read_text("utf-8"))
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    for f in functions:
        params = list(inspect.signature(getattr(module, f.name)).parameters)
        assert params == [a.arg for a in [*f.args.posonlyargs, *f.args.args]], f.name


def test_submodules_import_by_their_dotted_names_in_a_fresh_interpreter() -> None:
    # `import fastst._fastst.read` and `from fastst._fastst.read import X`
    # find the submodules the compiled module registered at its start.
    code = (
        "import fastst._fastst.read\n"
        "from fastst._fastst.write import WritePlan\n"
        "from fastst._fastst.catalogue import rule_catalogue\n"
        "import fastst._fastst.text as text\n"
        "assert fastst._fastst.read.RawFile.__module__ == 'fastst._fastst.read'\n"
        "assert WritePlan.__module__ == 'fastst._fastst.write'\n"
        "assert rule_catalogue() and text.display_text('x') == 'x'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
