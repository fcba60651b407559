"""The .pyi stub of the compiled module matches the module: every public
name and method is declared, and nothing is declared that doesn't exist."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import fastst._fastst as native

STUB = Path(native.__file__).with_name("_fastst.pyi")
if not STUB.exists():  # editable installs keep the stub in the source tree
    STUB = Path(__file__).resolve().parents[2] / "python" / "fastst" / "_fastst.pyi"


def stub_names():
    tree = ast.parse(STUB.read_text())
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
    return top, members


def test_stub_declares_exactly_the_module() -> None:
    top, members = stub_names()
    public = {n for n in dir(native) if not n.startswith("__") or n == "__version__"}
    public.discard("__doc__")
    assert top == public
    for cls_name, declared in members.items():
        cls = getattr(native, cls_name)
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
