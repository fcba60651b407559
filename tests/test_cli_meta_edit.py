"""Editing metadata: `fastst meta --set/--unset --output/--in-place` and
`fastst.update_metadata`: tensors byte-identical (checked by hash), the
header deterministic, the atomic writer, usage errors."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any, Dict

import fastst
import fastst.tools.inspect as fi
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
from cli_files import run, run_envelope


def _save(path: Path, metadata: Dict[str, str]) -> Path:
    tensors = {
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "b": np.array([1, 2, 3], ml_dtypes.bfloat16),
        "ids": np.arange(5, dtype=np.int64),
    }
    safetensors.numpy.save_file(tensors, str(path), metadata=metadata)
    return path


def _header(path: Path) -> Dict[str, Any]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n])


def _data(path: Path) -> bytes:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return raw[8 + n :]


def test_update_metadata_api(tmp_path: Path) -> None:
    src = _save(tmp_path / "m.safetensors", {"format": "np", "old": "1", "keep": "k"})
    before = src.read_bytes()
    out = tmp_path / "out.safetensors"
    result = fastst.update_metadata(src, {"old": "2", "new": "n"}, remove=["keep"], output=out)
    assert src.read_bytes() == before  # the source is left alone
    assert result["metadata"] == {"format": "np", "old": "2", "new": "n"}
    assert result["set"] == ["old", "new"] and result["removed"] == ["keep"]
    assert result["tensors"] == 3 and result["data_unchanged"] is True
    assert _header(out)["__metadata__"] == {"format": "np", "old": "2", "new": "n"}
    # The writer lays the header out as for any file it writes (keys sorted).
    assert list(_header(out)["__metadata__"]) == ["format", "new", "old"]
    assert _data(out) == _data(src)
    with safetensors.safe_open(str(out), "numpy") as f:
        assert f.metadata() == result["metadata"]
        reference = safetensors.numpy.load_file(str(src))
        for name in f.keys():
            assert np.array_equal(f.get_tensor(name), reference[name])
    # Deterministic: the same edit gives the same bytes.
    again = tmp_path / "again.safetensors"
    fastst.update_metadata(src, {"old": "2", "new": "n"}, remove=["keep"], output=again)
    assert again.read_bytes() == out.read_bytes()
    # Removing every key drops __metadata__.
    fastst.update_metadata(out, remove=["format", "old", "new", "absent"])
    assert "__metadata__" not in _header(out)


def test_update_metadata_errors(tmp_path: Path) -> None:
    src = _save(tmp_path / "m.safetensors", {"a": "1"})
    with pytest.raises(ValueError):
        fastst.update_metadata(src, {"a": "2"}, remove=["a"])
    with pytest.raises(TypeError):
        fastst.update_metadata(src, {"a": 2})  # type: ignore[dict-item]
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(src.read_bytes() + b"junk")
    with pytest.raises(fastst.SafetensorError):
        fastst.update_metadata(broken, {"a": "2"})
    assert broken.read_bytes() == src.read_bytes() + b"junk"


def test_meta_set_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _save(tmp_path / "m.safetensors", {"format": "np", "ss_output_name": "x"})
    hashes = fi.hash_file(src, tensors=True)
    code, out, err = run(
        [
            "meta",
            "--set",
            "modelspec.title=My model",
            "--set",
            "note=a=b",
            "--unset",
            "ss_output_name",
            "--in-place",
            str(src),
        ],
        capsys,
    )
    assert code == 0 and err == ""
    assert f"wrote {src}" in out and "3 tensors copied unchanged" in out
    assert _header(src)["__metadata__"] == {
        "format": "np",
        "modelspec.title": "My model",
        "note": "a=b",
    }
    after = fi.hash_file(src, tensors=True)
    assert after["tensors"] == hashes["tensors"] and after["autov3"] == hashes["autov3"]
    assert hashlib.sha256(_data(src)).hexdigest() == hashes["autov3"]
    code, doc, _ = run_envelope(["meta", "--json", "--set", "k=v", "--in-place", str(src)], capsys)
    (result,) = doc["results"]
    assert result["metadata"]["k"] == "v" and result["card"]["title"] == "My model"
    assert result["written"]["source"] == str(src) and result["written"]["data_unchanged"]


def test_meta_set_output_and_hostile_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _save(tmp_path / "m.safetensors", {})
    out = tmp_path / "o.safetensors"
    code, text, _ = run(
        ["meta", "--set", "k\x1b[2J=v\u202e", "--output", str(out), str(src)], capsys
    )
    assert code == 0 and "\x1b" not in text and "k\\u{1b}[2J" in text
    assert _header(out)["__metadata__"] == {"k\x1b[2J": "v\u202e"}


@pytest.mark.parametrize(
    "argv",
    [
        ["--set", "k=v"],  # neither --output nor --in-place
        ["--set", "novalue", "--in-place"],
        ["--set", "=v", "--in-place"],
        ["--set", "k=v", "--in-place", "--output", "o.safetensors"],
        ["--in-place"],
        ["--set", "k=v", "--raw", "--in-place"],
    ],
)
def test_meta_edit_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: Any
) -> None:
    src = _save(tmp_path / "m.safetensors", {"a": "1"})
    before = src.read_bytes()
    code, out, err = run(["meta", *argv, str(src)], capsys)
    assert code == 2 and out == "" and "usage:" in err
    assert src.read_bytes() == before


def test_meta_edit_refuses_foreign_and_many_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _save(tmp_path / "m.safetensors", {"a": "1"})
    other = _save(tmp_path / "n.safetensors", {"a": "1"})
    code, _, err = run(["meta", "--set", "k=v", "--output", "x", str(src), str(other)], capsys)
    assert code == 2 and "exactly one FILE" in err
    html = tmp_path / "page.safetensors"
    html.write_text("<html>denied</html>")
    code, _, err = run(["meta", "--set", "k=v", "--in-place", str(html)], capsys)
    assert code == 2 and "HTML page" in err and html.read_text() == "<html>denied</html>"
