"""Editing metadata from the command: `fastst meta --set/--unset --output/--in-place`:
tensors byte-identical (checked by hash), hostile keys escaped, usage errors. (The library's
``fastst.update_metadata``: tests/write/test_metadata.py.)"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import fastst.tools.inspect as fi
import pytest
from helpers.cli_files import run, run_envelope
from helpers.raw_files import data_of as _data
from helpers.raw_files import header_of as _header
from helpers.raw_files import save_with_metadata as _save


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
