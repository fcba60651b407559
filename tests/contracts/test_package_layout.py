"""The Python package's structure: modules import downward only (no
circle, nothing taken from the package root, nothing of the tools wing from
the library), every exception class lives in ``_errors.py``, rule errors
raised from Python come from one helper and carry file, tensor and rule,
every module states its one job in its docstring's first line, and the
package root holds at most 15 files."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import fastst
import numpy as np
import pytest
from fastst import _errors, _fastst

PACKAGE = Path(fastst.__file__).resolve().parent
FRAMEWORK_MODULES = ("numpy", "torch", "flax", "tensorflow", "paddle", "mlx")


def sources() -> Iterator[Tuple[str, Path]]:
    """(dotted module name, path) of every Python source of the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(["fastst", *parts]), path


MODULES: Dict[str, Path] = dict(sources())


def resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute name a relative ``from ... import`` designates."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for _ in range(node.level - 1):
        package = package.rsplit(".", 1)[0]
    return f"{package}.{node.module}" if node.module else package


def imports(module: str) -> List[Tuple[str, str]]:
    """(imported module, name) pairs of every import of ``module`` from within
    fastst, function-local imports included; ``name`` is "" for a whole
    module (``from . import x`` where x is a submodule gives (pkg.x, ""))."""
    path = MODULES[module]
    found: List[Tuple[str, str]] = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = resolve(module, path, node) if node.level else (node.module or "")
            if not base.startswith("fastst"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in MODULES or sub == "fastst._fastst":
                    found.append((sub, ""))
                else:
                    found.append((base, alias.name))
        elif isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names if a.name.startswith("fastst")]
    return found


def test_the_module_list_is_complete() -> None:
    # Guards the other tests against scanning nothing.
    for name in (
        "_errors",
        "_read.load",
        "_read.safe_open",
        "_write.tensors",
        "_sources.opener",
        "cli.commands",
        "tools.inspect",
        *FRAMEWORK_MODULES,
    ):
        assert f"fastst.{name}" in MODULES


def test_no_module_imports_names_from_the_package_root() -> None:
    for module in MODULES:
        if module == "fastst":
            continue
        upward = [name for base, name in imports(module) if base == "fastst" and name]
        assert not upward, f"{module} imports {upward} from the package root"


def test_imports_form_no_circle() -> None:
    graph: Dict[str, Set[str]] = {
        m: {base for base, _ in imports(m) if base in MODULES and base != m} for m in MODULES
    }
    # A package's __init__ runs before its submodules; importing a submodule
    # from it is downward, and a submodule importing its package is the
    # upward edge checked above. Only edges between modules count here.
    for module, targets in graph.items():
        graph[module] = {t for t in targets if not module.startswith(t + ".")}
        if MODULES[module].name == "__init__.py":
            graph[module] = {t for t in graph[module] if not t.startswith(module + ".")}
    state: Dict[str, int] = {}
    trail: List[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        trail.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circle = trail[trail.index(nxt) :] + [nxt]
                pytest.fail("import circle: " + " -> ".join(circle))
            if nxt not in state:
                visit(nxt)
        trail.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


def test_framework_modules_load_and_save_through_load_module() -> None:
    for name in FRAMEWORK_MODULES:
        bases = {base for base, _ in imports(f"fastst.{name}")}
        assert "fastst._frameworks.io" in bases, name
        assert "fastst._write.tensors" not in bases or name == "torch", name  # torch: TensorSpec


def exception_classes(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ClassDef):
            bases = [getattr(b, "id", None) or getattr(b, "attr", "") for b in node.bases]
            if any(b.endswith(("Error", "Exception")) for b in bases):
                yield node.name


def test_every_exception_class_is_in_errors_module() -> None:
    elsewhere = {
        module: list(exception_classes(path))
        for module, path in MODULES.items()
        if module != "fastst._errors"
    }
    assert {m: c for m, c in elsewhere.items() if c} == {}
    assert fastst.ShardIndexError is _errors.ShardIndexError
    from fastst._sources.sharded import ShardIndexError

    assert ShardIndexError is _errors.ShardIndexError
    for name in fastst.__all__:
        value = getattr(fastst, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert value.__module__ == "fastst._errors", name


def rule_ids_raised_from_python() -> Dict[str, Set[str]]:
    """Rule ids passed as literals to ``rule_error``, ``Where.error``, the
    writer's ``_fail`` (which forward them to it) and ``ShardProblem`` (whose
    ``error`` does), by module."""
    found: Dict[str, Set[str]] = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            position = {"rule_error": 0, "error": 0, "_fail": 2, "ShardProblem": 0}.get(name)
            if position is None or len(node.args) <= position:
                continue
            arg = node.args[position]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.setdefault(module, set()).add(arg.value)
    return found


CATALOGUE = {r["id"]: r for r in _fastst.catalogue.rule_catalogue()}
BUILTIN_FAMILIES = {"ValueError": ValueError, "MemoryError": MemoryError, "OSError": OSError}


def test_every_family_of_the_catalogue_is_a_class() -> None:
    families = {r["family"] for r in CATALOGUE.values()}
    assert "ShardIndexError" in families and "ClosedFileError" in families
    for family in families - {"Finding"}:
        if family in BUILTIN_FAMILIES:
            continue
        cls = getattr(_errors, family)
        assert issubclass(cls, fastst.SafetensorError), family
        assert cls.__module__ == "fastst._errors", family


def test_rule_ids_raised_from_python_are_in_the_catalogue() -> None:
    raised = rule_ids_raised_from_python()
    everything = set().union(*raised.values())
    # The scan finds the ids this package is known to raise.
    assert {
        "bad-shape",
        "unsupported-dtype",
        "shard-missing",
        "folder-ambiguous",
        "framework-dtype",
    } <= everything
    for module, ids in raised.items():
        for rule in ids:
            assert rule in CATALOGUE, (module, rule)
            assert CATALOGUE[rule]["family"] not in ("Finding", "OSError"), (module, rule)


def test_rule_error_builds_the_family_with_attributes() -> None:
    err = _errors.rule_error("bad-shape", "x.safetensors", "tensor 'w': shape is bad", "w")
    assert type(err) is fastst.SerializeError
    assert str(err) == "x.safetensors: tensor 'w': shape is bad"
    assert (err.filename, err.tensor, err.rule) == ("x.safetensors", "w", "bad-shape")
    err = _errors.rule_error("shard-missing", "i.json", "shard 'a' is missing")
    assert type(err) is fastst.ShardIndexError and err.tensor is None
    for rule, r in CATALOGUE.items():
        if r["family"] in ("Finding", "OSError"):
            continue
        err = _errors.rule_error(rule, "f", "m")
        expected = BUILTIN_FAMILIES.get(r["family"]) or getattr(_errors, r["family"])
        assert type(err) is expected and err.rule == rule
    with pytest.raises(ValueError, match="no rule"):
        _errors.rule_error("no-such-rule", "x", "message")


def test_closed_file_errors_carry_file_and_rule(tmp_path) -> None:
    import fastst.numpy as fnp

    path = tmp_path / "a.safetensors"
    fnp.save_file({"a": np.arange(4, dtype=np.float32)}, path)
    index = fnp.save_sharded({"a": np.arange(4, dtype=np.float32)}, tmp_path / "sharded")
    f = fastst.safe_open(path, "np")
    f.close()
    with pytest.raises(fastst.ClosedFileError) as from_core:
        f.get_tensor("a")
    for where, backend in ((path, "mmap"), (path, "pread"), (index, "mmap")):
        f = fastst.safe_open(where, "np", backend=backend)
        piece = f.get_slice("a")
        f.close()
        with pytest.raises(fastst.ClosedFileError) as info:
            piece[1:]
        assert info.value.filename == str(where)
        assert info.value.rule == "closed-file"
        # The same text as the core's, but for the file name.
        assert str(info.value).replace(str(where), str(path)) == str(from_core.value)
    with pytest.raises(fastst.ClosedFileError) as info:
        f.keys()  # the sharded file itself
    assert (info.value.filename, info.value.rule) == (str(index), "closed-file")


def test_framework_dtype_errors_carry_file_tensor_and_rule(tmp_path) -> None:
    import fastst.numpy as fnp
    import ml_dtypes

    path = tmp_path / "f6.safetensors"
    fnp.save_file({"w": np.zeros(4, ml_dtypes.float6_e2m3fn)}, path)
    with fastst.safe_open(path, "pt") as f:
        with pytest.raises(fastst.UnsupportedDtypeError) as info:
            f.get_tensor("w")
    assert str(info.value).startswith(f"{path}: tensor 'w': dtype F6_E2M3 has no torch")
    assert (info.value.filename, info.value.tensor, info.value.rule) == (
        str(path),
        "w",
        "framework-dtype",
    )
    from fastst.torch import load

    with pytest.raises(fastst.UnsupportedDtypeError) as info:
        load(path.read_bytes())
    assert str(info.value).startswith("tensor 'w': dtype F6_E2M3 has no torch")
    assert (info.value.tensor, info.value.rule) == ("w", "framework-dtype")


def test_dtype_facts_come_from_the_core() -> None:
    from fastst import _dtypes

    facts = _fastst.catalogue.dtype_facts()
    assert set(_dtypes.NUMPY_DTYPES) == set(facts)
    assert _dtypes.PACKED_BITS == {n: f["bits"] for n, f in facts.items() if f["packed"]}
    for name, dt in _dtypes.NUMPY_DTYPES.items():
        if name not in _dtypes.PACKED_BITS:
            assert dt.itemsize * 8 == facts[name]["bits"], name
        assert (dt.kind in "fcV") == facts[name]["float"] or name == "BOOL", name


def states_one_job(path: Path) -> str:
    """Why the docstring's first line of the module at ``path`` is not a
    statement of its job ("" when it is): one sentence on a line of its own
    (PEP 257's summary line), as docs/architecture.md's tables show it."""
    doc = ast.get_docstring(ast.parse(path.read_text("utf-8")), clean=False)
    if doc is None:
        return "no docstring"
    first, _, rest = doc.partition("\n")
    if not first.strip():
        return "an empty first line"
    if first != first.strip():
        return f"a first line with spaces around it: {first!r}"
    if not first.endswith("."):
        return f"a first line that is not a whole sentence (no full stop): {first!r}"
    if rest and rest.split("\n", 1)[0].strip():
        return f"a first sentence that goes on past its line: {first!r}"
    if len(first.split()) < 3:
        return f"a first line too short to state a job: {first!r}"
    return ""


def test_every_module_states_its_one_job_in_its_first_line() -> None:
    # Size follows cohesion, not a line cap: a module is one job, and says
    # which in one sentence.
    unstated = {module: why for module, path in MODULES.items() if (why := states_one_job(path))}
    assert unstated == {}, "\n".join(f"{m}: {why}" for m, why in sorted(unstated.items()))


def test_the_job_check_refuses_what_is_no_statement(tmp_path) -> None:
    cases = {
        "": "no docstring",
        '""""""': "an empty first line",
        '"""\nThe job, on the second line."""': "an empty first line",
        '"""The job of this module: reading\nfiles of many kinds."""': "no full stop",
        '"""Reads the files of a folder.\nAnd more."""': "goes on past its line",
        '"""Reads files."""': "too short",
        '"""Reads the files of a folder.\n\nMore."""': "",
        '"""Reads the files of a folder."""': "",
    }
    for source, why in cases.items():
        path = tmp_path / "m.py"
        path.write_text(source + "\nx = 1\n", "utf-8")
        found = states_one_job(path)
        if why:
            assert why in found, (source, found)
        else:
            assert found == "", (source, found)


#: The compiled extension, which the build puts beside the sources (a
#: product of the Rust crates, in no folder of the repository).
def is_compiled_extension(path: Path) -> bool:
    return path.name.startswith("_fastst.") and path.suffix in (".so", ".pyd")


def test_the_package_root_holds_at_most_15_files() -> None:
    # The root is the public modules and the foundations every room uses;
    # everything else lives in a room (a folder).
    files = sorted(
        p.name for p in PACKAGE.iterdir() if p.is_file() and not is_compiled_extension(p)
    )
    assert "__init__.py" in files and "_errors.py" in files
    assert len(files) <= 15, f"{len(files)} files at the root of fastst: {files}"


#: The tools wing and the command: built on the library, never imported by it.
WING = ("fastst.tools", "fastst.cli")


def in_wing(module: str) -> bool:
    return any(module == w or module.startswith(w + ".") for w in WING)


def test_the_library_never_imports_the_wing() -> None:
    library = [m for m in MODULES if not in_wing(m) and m != "fastst.__main__"]
    assert "fastst._read.safe_open" in library and "fastst.torch" in library
    for module in library:
        upward = sorted({base for base, _ in imports(module) if in_wing(base)})
        assert not upward, f"{module} imports {upward} of the wing"


@pytest.mark.slow
def test_loading_a_file_imports_no_module_of_the_wing(tmp_path) -> None:
    import subprocess
    import sys

    code = f"""
import sys
import fastst, fastst.numpy, fastst.torch
import numpy as np
path = {str(tmp_path / "a.safetensors")!r}
fastst.numpy.save_file({{"a": np.arange(4, dtype=np.float32)}}, path)
fastst.torch.load_file(path)
fastst.numpy.load_file(path)
with fastst.safe_open(path, "np") as f:
    f.get_tensor("a")
print("\\n".join(sorted(m for m in sys.modules if m.startswith("fastst"))))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "fastst.torch" in out and "fastst._read.safe_open" in out
    assert [m for m in out if in_wing(m)] == []
