"""The JSON Schema of ``--json`` output is generated from the wing's
TypedDicts (fastst.tools.results): the committed file is what the generator
writes, every object is closed, and what the wing's functions return has the
shape their types say."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any, Dict, List, Literal, Optional, Tuple, TypedDict, Union

import fastst.numpy
import fastst.tools.inspect as fi
import jsonschema
import numpy as np
import pytest
from fastst.cli import schema
from fastst.tools import results as r
from fastst.tools.stats import tensor_stats
from helpers.cli_files import SCHEMA_PATH


def _check(value: Any, tp: Any) -> None:
    """``value``, as JSON, has type ``tp``."""
    doc = schema.schema_of(tp)
    jsonschema.Draft202012Validator.check_schema(doc)
    jsonschema.Draft202012Validator(doc).validate(json.loads(json.dumps(value)))


def test_committed_schema_is_what_the_generator_writes() -> None:
    assert SCHEMA_PATH.read_text("utf-8") == schema.render()
    assert schema.main(["--check"]) == 0
    doc = json.loads(SCHEMA_PATH.read_text("utf-8"))
    jsonschema.Draft202012Validator.check_schema(doc)
    assert doc["$id"].endswith("/python/fastst/cli/output.schema.json")
    assert set(schema.NAMES) <= set(doc["$defs"])


def test_check_reports_a_hand_edited_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    edited = tmp_path / "output.schema.json"
    edited.write_text(schema.render().replace('"minimum": 0', '"minimum": 1', 1), "utf-8")
    monkeypatch.setattr(schema, "PATH", edited)
    assert schema.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert schema.main([]) == 0
    assert edited.read_text("utf-8") == schema.render()


class _Inner(TypedDict):
    n: Annotated[int, r.Schema(minimum=0)]


class _Base(TypedDict):
    name: str
    kind: Literal["a", "b"]
    one: Literal[1]
    inner: Optional[_Inner]
    maybe: Optional[str]
    either: Union[int, Literal["inf"], None]
    pair: Tuple[str, int]
    items: List[float]
    by_name: Dict[str, bool]
    anything: Dict[str, Any]


class _Sample(_Base, total=False):
    extra: Tuple[int, ...]


def test_generator_rules() -> None:
    doc = schema.schema_of(_Sample)
    assert doc["type"] == "object" and doc["additionalProperties"] is False
    assert "extra" in doc["properties"] and "extra" not in doc["required"]
    assert doc["required"] == [k for k in _Base.__annotations__]
    p = doc["properties"]
    assert p["name"] == {"type": "string"}
    assert p["kind"] == {"enum": ["a", "b"]} and p["one"] == {"const": 1}
    assert p["inner"] == {"anyOf": [{"$ref": "#/$defs/_inner"}, {"type": "null"}]}
    assert doc["$defs"]["_inner"]["properties"]["n"] == {"type": "integer", "minimum": 0}
    assert doc["$defs"]["_inner"]["additionalProperties"] is False
    assert p["maybe"] == {"type": ["string", "null"]}
    assert p["either"] == {"anyOf": [{"type": "integer"}, {"const": "inf"}, {"type": "null"}]}
    assert p["pair"]["prefixItems"] == [{"type": "string"}, {"type": "integer"}]
    assert p["pair"]["items"] is False and p["pair"]["minItems"] == 2
    assert p["items"] == {"type": "array", "items": {"type": "number"}}
    assert p["by_name"] == {"type": "object", "additionalProperties": {"type": "boolean"}}
    assert p["anything"] == {"type": "object"}
    assert p["extra"] == {"type": "array", "items": {"type": "integer"}}
    with pytest.raises(TypeError, match="no JSON Schema"):
        schema.schema_of(Dict[int, str])


def _finding(**changes: Any) -> Dict[str, Any]:
    f = {
        "rule": "nan-values",
        "severity": "medium",
        "verdict": "red-flag",
        "message": "m",
        "tensor": "w",
        "key": None,
        "offset": 8,
        "length": 4,
        "count": 1,
    }
    f.update(changes)
    return f


def _verify_doc(finding: Dict[str, Any], **report: Any) -> Dict[str, Any]:
    result = {
        "path": "m.safetensors",
        "kind": "file",
        "file_len": 100,
        "header_len": 80,
        "tensors": 1,
        "accepted": True,
        "complete": True,
        "values_checked": None,
        "findings": [finding],
        "fails": True,
        "malformed": False,
        "inconclusive": False,
    }
    result.update(report)
    return {
        "fastst": {"version": "0", "schema": 2},
        "command": "verify",
        "fail_on": "low",
        "results": [result],
        "errors": [],
    }


@pytest.mark.parametrize(
    "finding, report",
    [
        (_finding(extra=1), {}),  # an unknown key
        (_finding(severity="severe"), {}),  # not a severity
        (_finding(verdict="bad"), {}),  # not a verdict
        (_finding(offset=-1), {}),  # offsets are not negative
        ({k: v for k, v in _finding().items() if k != "count"}, {}),  # a key missing
        (_finding(), {"kind": "archive"}),
        (_finding(), {"unknown": True}),
    ],
)
def test_schema_rejects_what_the_types_do_not_allow(
    finding: Dict[str, Any], report: Dict[str, Any]
) -> None:
    validator = jsonschema.Draft202012Validator(schema.document())
    validator.validate(_verify_doc(_finding()))
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(_verify_doc(finding, **report))


def _checkpoint(folder: Path) -> Path:
    tensors = {
        "a": np.arange(64, dtype=np.float32).reshape(8, 8),
        "b": np.ones((16, 4), np.float16),
    }
    meta = {"format": "np", "ss_network_module": "networks.lora", "ss_network_dim": "8"}
    return Path(fastst.numpy.save_sharded(tensors, folder, max_shard_size=300, metadata=meta))


def test_the_wing_returns_what_its_types_say(tmp_path: Path) -> None:
    index = _checkpoint(tmp_path / "ckpt")
    shard = str(sorted(index.parent.glob("*.safetensors"))[0])
    nan = tmp_path / "nan.safetensors"
    fastst.numpy.save_file({"a": np.array([np.nan, 1.0], np.float32)}, nan)
    _check(fi.inspect_file(shard, tensors=True), r.FileSummary)
    _check(fi.inspect_checkpoint(index, tensors=True), r.CheckpointSummary)
    _check(fi.verify_file(nan, values=True), r.FileVerification)
    _check(fi.verify_checkpoint(index, values=True), r.CheckpointVerification)
    hashes = fi.hash_file(shard, tensors=True)
    _check(hashes, r.FileHashes)
    _check(fi.hash_checkpoint(index, tensors=True), r.CheckpointHashes)
    _check(fi.check_hashes(hashes, fi.read_metadata(shard)), List[r.Finding])
    _check(fi.metadata_card(fi.read_metadata(shard)), r.MetadataCard)
    _check(fi.diff(shard, nan), r.DiffReport)
    _check(tensor_stats(index.parent), List[r.TensorStats])


def test_provenance_results_have_the_keys_of_their_types() -> None:
    from fastst.tools import provenance as prov
    from fastst.tools.provenance.findings import Finding

    for cls, tp in (
        (prov.SignResult, r.SignReport),
        (prov.VerifyResult, r.SignatureReport),
        (prov.SignedFile, r.SignedFile),
        (Finding, r.ProvenanceFinding),
    ):
        fields = [f.name for f in dataclasses.fields(cls)]
        assert fields == list(tp.__annotations__), cls
        assert tp.__required_keys__ == set(fields)
