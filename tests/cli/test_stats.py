"""`fastst stats`: the table, the per-layer profile and the bar chart fit
every width asked for, hostile names come out escaped, `--ascii` (and an
output that is not UTF-8) draws in ASCII, `--json` follows the schema, and
unreadable inputs are errors (exit 2)."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Dict

import ml_dtypes
import numpy as np
import pytest
from fastst.cli import charts, main
from fastst.numpy import save_file
from helpers.cli_files import run, run_envelope, write_raw

BLOCKS = "▁▂▃▄▅▆▇█▏▎▍▌▋▊▉"


def _model(path: Path, layers: int = 6, scale: float = 1.0) -> Path:
    rng = np.random.default_rng(0)
    tensors: Dict[str, np.ndarray] = {
        "model.embed_tokens.weight": rng.standard_normal((64, 16)).astype(ml_dtypes.bfloat16),
        "evil\x1b[2J\u202ename": np.array([1, 0, 2], dtype=np.int8),
    }
    for n in range(layers):
        w = rng.standard_normal((16, 16)).astype(np.float32) * (1 + n / 4) * scale
        tensors[f"model.layers.{n}.mlp.down_proj.weight"] = w
        tensors[f"model.layers.{n}.input_layernorm.weight"] = np.ones(16, np.float16)
    save_file(tensors, path)
    return path


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_every_line_fits_the_width(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], width: int
) -> None:
    path = _model(tmp_path / "m.safetensors")
    for extra in ([], ["--tensor", "model.layers.2.mlp.*"], ["--ascii"]):
        code, out, err = run(["stats", "--width", str(width), str(path), *extra], capsys)
        assert code == 0, err
        lines = out.splitlines()
        assert lines and all(len(line) <= width for line in lines), (width, extra)
        assert "\x1b" not in out and "\u202e" not in out
        assert "evil\\u{1b}[2J\\u{202e}name" in out or extra
    code, out, _ = run(["stats", "--width", str(width), str(path)], capsys)
    assert "std by layer" in out and "▁▃▅▇██  1.019 .. 2.104" in out


def test_one_tensor_gets_bars_and_ascii_is_ascii(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _model(tmp_path / "m.safetensors")
    args = ["stats", "--width", "80", str(path), "--tensor", "model.embed_tokens.weight"]
    code, out, _ = run([*args, "--bins", "8"], capsys)
    assert code == 0
    assert "8 bins of" in out and "█" in out
    code, out, _ = run([*args, "--bins", "8", "--ascii"], capsys)
    assert "#" in out and not any(c in out for c in BLOCKS)
    # An output that cannot encode the blocks gets ASCII without being asked
    # (the command writes what else it cannot encode as escapes).
    latin = io.TextIOWrapper(io.BytesIO(), encoding="latin-1")
    assert not charts.unicode_ok(latin) and charts.unicode_ok(io.TextIOWrapper(io.BytesIO()))
    monkeypatch.setattr(sys, "stdout", latin)
    for command in (args, ["diff", str(path), str(_model(tmp_path / "other.safetensors", 6, 1.5))]):
        assert main(command) in (0, 1)
        latin.flush()
        written = latin.buffer.getvalue()
        assert b"#" in written and b"\\u25" not in written, command
    assert b"model.layers.N  ######" in written


def test_json_follows_the_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _model(tmp_path / "m.safetensors")
    nan = tmp_path / "nan.safetensors"
    save_file({"x": np.array([np.nan, np.inf, 0.0, 2.0], np.float32)}, nan)
    code, doc, _ = run_envelope(["stats", "--json", "--bins", "5", str(path), str(nan)], capsys)
    assert code == 0 and doc["command"] == "stats"
    m, n = doc["results"]
    assert m["kind"] == "file" and len(m["tensors"]) == 14
    (x,) = n["tensors"]
    assert (x["nan"], x["inf"], x["zero"], x["min"], x["max"], x["mean"]) == (1, 1, 1, 0, 2, 1)
    assert x["histogram"]["counts"] == [1, 0, 0, 0, 1]


def test_errors_and_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write_raw(tmp_path / "bad.safetensors", "{not json")
    code, out, err = run(["stats", str(bad)], capsys)
    assert code == 2 and "bad.safetensors" in err and "json" in err.lower()
    code, _, err = run(["stats", "--bins", "0", str(bad)], capsys)
    assert code == 2 and "--bins" in err
    code, _, err = run(["stats", "--bins", "5000", str(bad)], capsys)
    assert code == 2 and "at most" in err
    code, doc, _ = run_envelope(["stats", "--json", str(tmp_path / "missing.safetensors")], capsys)
    assert code == 2 and doc["results"] == [] and doc["errors"]


def test_charts() -> None:
    assert charts.sparkline([0, 1, 2, 4, 8]) == " ▁▂▄█"
    assert charts.sparkline([0, 1, 2, 4, 8], ascii=True) == " _.:#"
    assert charts.sparkline(list(range(10)), 5) == charts.sparkline([1, 5, 9, 13, 17])
    assert len(charts.sparkline(list(range(100)), 7)) == 7
    assert charts.sparkline([None, float("nan"), 3.0]) == "  █"
    assert charts.sparkline([2.0, 2.0, None], relative=True) == "▁▁ "
    assert charts.sparkline([1.0, 1.5, 8.0], relative=True) == "▁▂█"
    assert charts.bar(1, 2, 4) == "██" and charts.bar(1, 16, 4) == "▎"
    assert charts.bar(0, 2, 4) == "" and charts.bar(1, 100, 4, ascii=True) == "#"
