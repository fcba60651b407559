"""`fastst hash`: every hash against hashlib over the byte ranges each one is
defined on, the canonical header, per-tensor hashes and `--check`."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any, Dict, Optional

import fastst.tools.inspect as fi
import numpy as np
import pytest
import safetensors.numpy
from helpers.cli_files import run, run_json, write_raw


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tensors() -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "model.embed.weight": rng.standard_normal((700, 512)).astype(np.float32),  # 1.4 MB
        "model.norm.weight": rng.standard_normal(512).astype(np.float16),
        "model.ids": np.arange(10, dtype=np.int64),
        "empty": np.zeros((0, 3), np.float32),
    }


def _save(path: Path, metadata: Optional[Dict[str, str]] = None) -> bytes:
    safetensors.numpy.save_file(_tensors(), str(path), metadata=metadata)
    return path.read_bytes()


def _after_header(raw: bytes) -> bytes:
    (n,) = struct.unpack("<Q", raw[:8])
    return raw[8 + n :]


def _canonical(raw: bytes) -> bytes:
    """The canonical header, built independently with the json module."""
    (n,) = struct.unpack("<Q", raw[:8])
    header: Dict[str, Any] = json.loads(raw[8 : 8 + n])
    out: Dict[str, Any] = {}
    for name, value in header.items():
        if name == "__metadata__":
            if value:
                out[name] = value
        else:
            out[name] = {k: value[k] for k in ("data_offsets", "dtype", "shape")}
    return json.dumps(out, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def test_hashes_match_hashlib(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.safetensors"
    raw = _save(path, {"format": "pt", "ss_note": 'tab\there, quote" and é'})
    assert len(raw) > 0x110000
    code, (h,) = run_json(["hash", "--json", "--tensors", str(path)], capsys)
    assert code == 0
    assert h["file_len"] == len(raw)
    assert h["sha256"] == _sha(raw)
    assert h["autov2"] == _sha(raw)[:10]
    assert h["autov1"] == _sha(raw[0x100000:0x110000])[:8]
    assert h["autov3"] == _sha(_after_header(raw))
    assert h["header_sha256"] == _sha(_canonical(raw))
    assert h["header_problem"] is None
    tensors = _tensors()
    assert set(h["tensors"]) == set(tensors)
    for name, digest in h["tensors"].items():
        assert digest == _sha(np.ascontiguousarray(tensors[name]).tobytes()), name
    # File order: offsets increase.
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    begins = [header[name]["data_offsets"][0] for name in h["tensors"]]
    assert begins == sorted(begins)


def test_threads_do_not_change_results(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    _save(path)
    one = fi.hash_file(path, tensors=True, threads=1)
    many = fi.hash_file(path, tensors=True, threads=8)
    assert one == many


def test_small_and_broken_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = tmp_path / "small.safetensors"
    raw = _save_small(small)
    h = fi.hash_file(small)
    # Shorter than 0x100000: AutoV1 hashes nothing (as the webui's read does).
    assert h["autov1"] == _sha(b"")[:8]
    assert h["autov3"] == _sha(_after_header(raw))
    assert h["tensors"] is None
    broken = tmp_path / "broken.safetensors"
    write_raw(broken, '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"\1" * 12)
    code, (b,) = run_json(["hash", "--json", str(broken)], capsys)
    assert code == 0
    braw = broken.read_bytes()
    assert b["sha256"] == _sha(braw)
    assert b["autov3"] == _sha(b"\1" * 12)
    assert b["header_sha256"] is None
    assert b["header_problem"]["rule"] == "trailing-bytes"
    past = tmp_path / "past.safetensors"
    past.write_bytes(struct.pack("<Q", 999) + b"{}")
    p = fi.hash_file(past)
    assert p["autov3"] is None and p["sha256"] == _sha(past.read_bytes())


def _save_small(path: Path) -> bytes:
    safetensors.numpy.save_file({"x": np.arange(4, dtype=np.float32)}, str(path))
    return path.read_bytes()


def test_canonical_header_ignores_layout_of_the_json(tmp_path: Path) -> None:
    a = tmp_path / "a.safetensors"
    b = tmp_path / "b.safetensors"
    data = b"\0" * 8
    write_raw(
        a,
        '{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        '"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"__metadata__":{}}',
        data,
    )
    write_raw(
        b,
        '  {"y": {"shape": [1], "data_offsets": [4, 8], "dtype": "F32", "note": "x"},\n'
        '   "\\u0078": {"data_offsets": [0, 4], "dtype": "F32", "shape": [1]}}     ',
        data,
    )
    ha, hb = fi.hash_file(a), fi.hash_file(b)
    assert ha["header_sha256"] == hb["header_sha256"]
    assert ha["sha256"] != hb["sha256"]
    assert ha["autov3"] == hb["autov3"]
    c = tmp_path / "c.safetensors"
    write_raw(
        c,
        '{"x":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},'
        '"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
        data,
    )
    assert fi.hash_file(c)["header_sha256"] != ha["header_sha256"]


def _with_embedded(path: Path, key: str, value_of: Any) -> str:
    """Saves the tensors, computes the data hash, and saves again with the
    hash embedded (the tensor bytes do not move when metadata changes)."""
    raw = _save(path, {"ss_output_name": "x"})
    digest = _sha(_after_header(raw))
    _save(path, {"ss_output_name": "x", key: value_of(digest)})
    assert _sha(_after_header(path.read_bytes())) == digest
    return digest


@pytest.mark.parametrize(
    "key,value_of",
    [("sshs_model_hash", lambda d: d), ("modelspec.hash_sha256", lambda d: "0x" + d)],
)
def test_check_passes(
    key: str, value_of: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ok.safetensors"
    _with_embedded(path, key, value_of)
    code, (h,) = run_json(["hash", "--json", "--check", str(path)], capsys)
    assert code == 0
    assert h["check"] == []
    code, out, _err = run(["hash", "--check", str(path)], capsys)
    assert code == 0 and "OK: embedded hashes match" in out


def test_check_reports_mismatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.safetensors"
    _with_embedded(path, "sshs_model_hash", lambda d: d[::-1])
    code, (h,) = run_json(["hash", "--json", "--check", str(path)], capsys)
    assert code == 1
    (finding,) = h["check"]
    assert finding["rule"] == "hash-mismatch"
    assert finding["severity"] == "high"
    assert finding["key"] == "sshs_model_hash"
    assert run(["hash", "--check", "--fail-on", "critical", str(path)], capsys)[0] == 0
    # A tampered tensor byte is caught by an honest embedded hash.
    tampered = tmp_path / "tampered.safetensors"
    _with_embedded(tampered, "modelspec.hash_sha256", lambda d: "0x" + d)
    raw = bytearray(tampered.read_bytes())
    raw[-1] ^= 0xFF
    tampered.write_bytes(bytes(raw))
    code, (t,) = run_json(["hash", "--json", "--check", str(tampered)], capsys)
    assert code == 1 and t["check"][0]["rule"] == "hash-mismatch"


def test_check_without_embedded_hash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plain.safetensors"
    _save_small(path)
    code, (h,) = run_json(["hash", "--json", "--check", str(path)], capsys)
    assert code == 0
    assert [f["rule"] for f in h["check"]] == ["no-embedded-hash"]
    assert h["check"][0]["severity"] == "info"
    assert run(["hash", "--check", "--fail-on", "info", str(path)], capsys)[0] == 1


def test_text_output_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.safetensors"
    raw = _save_small(path)
    code, out, err = run(
        ["hash", "--tensors", str(path), str(tmp_path / "gone.safetensors")], capsys
    )
    assert code == 2
    assert f"sha256         {_sha(raw)}" in out
    assert f"{_sha(np.arange(4, dtype=np.float32).tobytes())}  x" in out
    assert err.count("\n") == 1 and "gone.safetensors" in err


def test_progress_goes_to_stderr(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.safetensors"
    raw = _save(path)
    h = fi.hash_file(path, progress=True)
    captured = capfd.readouterr()
    assert h["sha256"] == _sha(raw)
    assert captured.out == ""
    assert "100.0%" in captured.err and str(path) in captured.err
    # The line's last state stays, ended by a newline.
    assert captured.err.endswith("\n")


def test_the_progress_line_escapes_a_hostile_file_name(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p\x1b[2J\x1b]0;owned\x07.safetensors"
    raw = _save(path)
    for h in (fi.hash_file(path, progress=True), fi.verify_file(path, progress=True)):
        assert h["path"] == str(path)
    assert fi.hash_file(path)["sha256"] == _sha(raw)
    err = capfd.readouterr().err
    assert "100.0%" in err
    assert "p\\u{1b}[2J\\u{1b}]0;owned\\u{7}.safetensors" in err
    assert err.replace("\r\x1b[K", "").replace("\n", "").isprintable()


def test_check_when_the_data_cannot_be_hashed() -> None:
    (finding,) = fi.check_hashes({"autov3": None}, {"modelspec.hash_sha256": "0x" + "a" * 64})
    assert finding["rule"] == "hash-mismatch" and "cannot be hashed" in finding["message"]
    # An upper-case embedded hash, with or without 0x, still matches.
    assert fi.check_hashes({"autov3": "ab" * 32}, {"sshs_model_hash": "AB" * 32}) == []
    assert (
        fi.check_hashes({"autov3": "ab" * 32}, {"modelspec.hash_sha256": "0xAB" + "ab" * 31}) == []
    )
