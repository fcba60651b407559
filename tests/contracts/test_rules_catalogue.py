"""The rule catalogue exported by the core is the one source of rule ids: the
documentation table matches it, and the exceptions and findings fastst
produces carry ids from it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import fastst
import fastst.numpy
import numpy as np
import pytest
from fastst import _fastst

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = {
    "HeaderFramingError",
    "HeaderJsonError",
    "MetadataError",
    "TensorTableError",
    "LayoutError",
    "TensorNotFoundError",
    "ClosedFileError",
    "SerializeError",
    "UnsupportedDtypeError",
    "ShardIndexError",
    "FileAccessError",
    "ProvenanceError",
    "FolderError",
    "DistributedLoadError",
    "HookError",
    "StorageOptionsError",
    "SafetensorError",
    "ValueError",
    "MemoryError",
    "OSError",
    "Finding",
}


def _gen_module():
    spec = importlib.util.spec_from_file_location(
        "gen_rules_doc", ROOT / "scripts/gen_rules_doc.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_table_matches_the_catalogue() -> None:
    gen = _gen_module()
    expected = gen.render(list(_fastst.catalogue.rule_catalogue()))
    assert (ROOT / "docs" / "rules.md").read_text(encoding="utf-8") == expected


def test_docs_table_rows_are_the_catalogue_in_order() -> None:
    # Independent of the renderer: parse the table back.
    rows = []
    for line in (ROOT / "docs" / "rules.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| `([^`]+)` \| (\w+) \| (\w+) \| ([\w-]+) \| (.*) \|$", line)
        if m:
            rows.append((m[1], m[2], m[3], m[4], m[5].replace("\\|", "|")))
    expected = [
        (r["id"], r["family"], r["severity"], r["verdict"] or "-", r["summary"])
        for r in _fastst.catalogue.rule_catalogue()
    ]
    assert rows == expected


def test_catalogue_shape() -> None:
    catalogue = _fastst.catalogue.rule_catalogue()
    ids = [r["id"] for r in catalogue]
    assert len(ids) == len(set(ids))
    for r in catalogue:
        assert set(r) == {"id", "family", "severity", "verdict", "summary"}
        assert r["verdict"] in {"malformed", "red-flag", None}
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", r["id"]), r["id"]
        assert r["family"] in FAMILIES, r
        assert r["severity"] in {"info", "low", "medium", "high", "critical"}
        assert r["summary"]
        assert _fastst.catalogue.error_family(r["id"]) == r["family"]
    for family in FAMILIES - {"ValueError", "MemoryError", "OSError", "Finding"}:
        assert family in {r["family"] for r in catalogue}, family


def test_every_python_family_class_exists() -> None:
    import fastst._errors as errors

    classes = {r["family"] for r in _fastst.catalogue.rule_catalogue()} - {
        "ValueError",
        "MemoryError",
        "OSError",
        "Finding",
    }
    for name in classes:
        cls = getattr(errors, name)
        assert issubclass(cls, fastst.SafetensorError), name


def test_verify_rules_are_the_format_and_finding_rules() -> None:
    catalogue = _fastst.catalogue.rule_catalogue()
    format_families = {
        "HeaderFramingError",
        "HeaderJsonError",
        "MetadataError",
        "TensorTableError",
        "LayoutError",
        "Finding",
    }
    expected = [
        {"id": r["id"], "severity": r["severity"], "verdict": r["verdict"], "summary": r["summary"]}
        for r in catalogue
        if r["family"] in format_families and r["id"] != "too-many-tensors"
    ]
    assert _fastst.inspect.verify_rules() == expected
    # What a finding says: every format rule that the file is malformed.
    for r in expected:
        malformed = _fastst.catalogue.error_family(r["id"]) != "Finding"
        assert (r["verdict"] == "malformed") >= malformed, r


def test_rule_error_builds_the_family_class() -> None:
    err = _fastst.catalogue.rule_error("closed-file", "m.safetensors", "file is closed")
    assert isinstance(err, fastst.ClosedFileError)
    assert str(err) == "m.safetensors: file is closed"
    assert (err.filename, err.tensor, err.rule) == ("m.safetensors", None, "closed-file")
    err = _fastst.catalogue.rule_error("bad-shape", "out.safetensors", "bad", tensor="w")
    assert isinstance(err, fastst.SerializeError) and isinstance(err, ValueError)
    assert err.tensor == "w"
    err = _fastst.catalogue.rule_error("conversion-not-allowed", "", "no conversion")
    assert type(err) is ValueError and str(err) == "no conversion"
    with pytest.raises(ValueError, match="no rule"):
        _fastst.catalogue.rule_error("no-such-rule", "f", "m")
    with pytest.raises(ValueError, match="no rule"):
        _fastst.catalogue.error_family("no-such-rule")


def test_every_rule_makes_its_family_exception() -> None:
    import builtins

    import fastst._errors as errors

    for r in _fastst.catalogue.rule_catalogue():
        err = _fastst.catalogue.rule_error(r["id"], "m.safetensors", "message", tensor="t")
        family = r["family"]
        if family == "Finding":
            expected = fastst.SafetensorError
        elif hasattr(errors, family):
            expected = getattr(errors, family)
        elif hasattr(builtins, family):
            expected = getattr(builtins, family)
        else:  # a class not (yet) in _errors.py: the root class stands in
            expected = fastst.SafetensorError
        assert isinstance(err, expected), (r, type(err))
        assert err.rule == r["id"] and err.tensor == "t"
        assert str(err) == "m.safetensors: message"


def test_closed_file_error_is_made_in_one_place(tmp_path: Path) -> None:
    made = _fastst.catalogue.closed_file_error("m.safetensors")
    assert isinstance(made, fastst.ClosedFileError)
    assert (made.filename, made.tensor, made.rule) == ("m.safetensors", None, "closed-file")
    path = tmp_path / "m.safetensors"
    fastst.numpy.save_file({"x": np.zeros(2, np.uint8)}, str(path))
    f = fastst.safe_open(str(path), "np")
    f.__exit__(None, None, None)
    with pytest.raises(fastst.ClosedFileError) as raised:
        f.keys()
    assert str(raised.value) == str(_fastst.catalogue.closed_file_error(str(path)))
    assert (raised.value.filename, raised.value.rule) == (str(path), "closed-file")


def test_errors_raised_by_the_core_carry_catalogue_ids(tmp_path: Path) -> None:
    ids = {r["id"] for r in _fastst.catalogue.rule_catalogue()}
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00" * 4)
    with pytest.raises(fastst.SafetensorError) as info:
        fastst.safe_open(str(bad), "np")
    assert info.value.rule == "file-too-short" and info.value.rule in ids
    good = tmp_path / "good.safetensors"
    fastst.numpy.save_file({"x": np.zeros(3, np.int32)}, str(good))
    with fastst.safe_open(str(good), "np") as f:
        with pytest.raises(ValueError) as conv:
            f.get_tensor("x", dtype="F16")
    assert conv.value.rule == "conversion-not-allowed"
    assert conv.value.tensor == "x" and conv.value.filename
    with pytest.raises(fastst.ClosedFileError) as closed:
        f.get_tensor("x")
    assert closed.value.rule == "closed-file" and closed.value.filename


def test_dtype_facts_and_conversions() -> None:
    facts = _fastst.catalogue.dtype_facts()
    assert facts["F32"] == {"bits": 32, "packed": False, "float": True}
    assert facts["F4"] == {"bits": 4, "packed": True, "float": True}
    assert facts["F6_E2M3"]["packed"] and facts["F6_E3M2"]["bits"] == 6
    assert facts["I8"] == {"bits": 8, "packed": False, "float": False}
    assert {n for n, f in facts.items() if f["packed"]} == {"F4", "F6_E2M3", "F6_E3M2"}
    assert len(facts) == 22
    conv = set(_fastst.catalogue.conversions())
    assert ("BF16", "F32") in conv and ("F32", "F16") in conv and ("F8_E4M3", "F32") in conv
    assert ("I32", "F16") not in conv
    assert all(a != b for a, b in conv)
    assert all(not facts[a]["packed"] and not facts[b]["packed"] for a, b in conv)
