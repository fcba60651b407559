"""`fastst inspect`: the summary, the tensor table (sorted, filtered), tensor
values printed like numpy, errors, folders and `python -m fastst`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Dict

import fastst.numpy
import fastst.tools.inspect as fi
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
from fastst.tools.card import strict_json
from helpers.cli_files import run, run_json, write_raw


def _tensors() -> Dict[str, np.ndarray]:
    return {
        "b.weight": np.arange(12, dtype=np.float32).reshape(3, 4),
        "a.bias": np.array([0.5, -1.25, 3.0], dtype=ml_dtypes.bfloat16),
        "c.ids": np.arange(5, dtype=np.int64),
        "z.half": np.array([[1.0, 2.5], [np.inf, -0.0]], dtype=np.float16),
        "scalar": np.array(7, dtype=np.int32),
    }


def _save(path: Path) -> Path:
    safetensors.numpy.save_file(_tensors(), str(path), metadata={"format": "np", "k": "v"})
    return path


def test_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path / "m.safetensors")
    code, (info,) = run_json(["inspect", "--json", str(path)], capsys)
    assert code == 0
    tensors = _tensors()
    assert info["tensors"] == 5
    assert info["parameters"] == sum(t.size for t in tensors.values())
    assert info["file_len"] == path.stat().st_size
    assert info["data_start"] == 8 + info["header_len"]
    assert info["data_len"] == info["file_len"] - info["data_start"]
    by = {d["dtype"]: d for d in info["by_dtype"]}
    assert by["F32"] == {"dtype": "F32", "tensors": 1, "parameters": 12, "bytes": 48}
    assert by["BF16"]["bytes"] == 6 and by["I64"]["bytes"] == 40
    assert sum(d["bytes"] for d in info["by_dtype"]) == info["data_len"]
    assert info["metadata"] == {"format": "np", "k": "v"}
    assert "table" not in info


def test_table_sorted_and_filtered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path / "m.safetensors")
    code, (info,) = run_json(["inspect", "--json", "--tensors", str(path)], capsys)
    rows = info["table"]
    begins = [r["begin"] for r in rows]
    assert begins == sorted(begins)
    with safetensors.safe_open(str(path), "numpy") as f:
        for r in rows:
            s = f.get_slice(r["name"])
            assert s.get_shape() == r["shape"] and s.get_dtype() == r["dtype"]
    code, (info,) = run_json(
        ["inspect", "--json", "--tensors", "--sort", "name", str(path)], capsys
    )
    assert [r["name"] for r in info["table"]] == sorted(_tensors())
    code, (info,) = run_json(
        ["inspect", "--json", "--tensors", "--filter", "*.weight", str(path)], capsys
    )
    assert [r["name"] for r in info["table"]] == ["b.weight"]
    code, out, _ = run(
        ["inspect", "--tensors", "--sort", "name", "--filter", "[ab].*", str(path)], capsys
    )
    lines = [
        line for line in out.splitlines() if line.startswith("  a.") or line.startswith("  b.")
    ]
    assert [line.split()[0] for line in lines] == ["a.bias", "b.weight"]
    assert "  b.weight  F32" in out and "[3, 4]" in out
    assert "(2 of 5 tensors match '[ab].*')" in out


def test_text_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path / "m.safetensors")
    code, out, err = run(["inspect", str(path)], capsys)
    assert code == 0 and err == ""
    assert out.startswith(str(path) + "\n")
    assert "  tensors      5" in out
    assert "  metadata     2 keys: format, k" in out or "  metadata     2 keys: k, format" in out


@pytest.mark.parametrize("name", ["a.bias", "z.half", "b.weight", "c.ids", "scalar"])
def test_tensor_values_print_like_numpy(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _save(tmp_path / "m.safetensors")
    code, out, _ = run(["inspect", "--tensor", name, str(path)], capsys)
    assert code == 0
    expected = _tensors()[name]
    if expected.dtype in (np.float16, np.dtype(ml_dtypes.bfloat16)):
        expected = expected.astype(np.float32)
        assert "(shown as float32)" in out
    printed = np.array2string(expected, separator=" ")
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {name}: "))
    body = "\n".join(line[4:] for line in lines[start + 1 :] if line.startswith("    "))
    assert body == printed
    code, (info,) = run_json(["inspect", "--json", "--tensor", name, str(path)], capsys)
    # Strict JSON: infinities and NaN are written as the strings JSON5 uses.
    assert info["tensor"]["values"] == strict_json(expected.tolist())


def test_tensor_values_fp8(tmp_path: Path) -> None:
    path = tmp_path / "f8.safetensors"
    x = np.array([1.0, -2.0, 0.5], dtype=ml_dtypes.float8_e4m3fn)
    write_raw(path, '{"x":{"dtype":"F8_E4M3","shape":[3],"data_offsets":[0,3]}}', x.tobytes())
    dtype, values = fi.tensor_values(path, "x")
    assert dtype == "F8_E4M3" and values.dtype == np.float32
    assert values.tolist() == [1.0, -2.0, 0.5]


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _save(tmp_path / "good.safetensors")
    bad = tmp_path / "bad.safetensors"
    write_raw(bad, '{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', b"\0" * 4)
    code, out, err = run(["inspect", str(bad), str(good), str(tmp_path / "nope")], capsys)
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"fastst: {bad}: ") and "needs 8" in lines[0]
    assert str(tmp_path / "nope") in lines[1]
    assert str(good) in out
    code, out, err = run(["inspect", "--tensor", "missing", str(good)], capsys)
    assert code == 2 and "missing" in err and err.count("\n") == 1


def test_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "d").mkdir()
    _save(tmp_path / "d" / "one.safetensors")
    _save(tmp_path / "two.SAFETENSORS")
    code, infos = run_json(["inspect", "--json", str(tmp_path)], capsys)
    assert code == 0
    assert sorted(Path(i["path"]).name for i in infos) == ["one.safetensors", "two.SAFETENSORS"]


def test_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert run([], capsys)[0] == 2
    assert run(["verify", "--fail-on", "severe", "x"], capsys)[0] == 2
    assert run(["--version"], capsys)[0] == 0


def test_python_dash_m(tmp_path: Path) -> None:
    path = _save(tmp_path / "m.safetensors")
    proc = subprocess.run(
        [sys.executable, "-m", "fastst", "inspect", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "tensors      5" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "fastst", "verify", str(tmp_path / "absent.safetensors")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


def test_bad_numbers_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path / "m.safetensors")
    for argv in (
        ["hash", "--threads", "-1", str(path)],
        ["verify", "--header-cap", "-5", str(path)],
        ["inspect", "--max-values", "x", str(path)],
    ):
        code, out, err = run(argv, capsys)
        assert code == 2 and out == "" and "usage:" in err, argv


def test_parameter_counts_in_thousands_millions_billions_trillions(tmp_path, capsys):
    """Counts read as ``n`` with separators and a K/M/B/T figure from a
    thousand up, at each unit's exact boundary (mutant: a unit's scale
    changed); ``fastst inspect`` shows them for the parameter count."""
    from fastst.cli.render import count_text

    assert count_text(999) == "999"
    assert count_text(1000) == "1,000 (1.00K)"
    assert count_text(999_999) == "999,999 (1000.00K)"
    assert count_text(10**6) == "1,000,000 (1.00M)"
    assert count_text(10**9 - 1) == "999,999,999 (1000.00M)"
    assert count_text(10**9) == "1,000,000,000 (1.00B)"
    assert count_text(2_500_000_000) == "2,500,000,000 (2.50B)"
    assert count_text(10**12) == "1,000,000,000,000 (1.00T)"
    path = tmp_path / "p.safetensors"
    fastst.numpy.save_file({"w": np.zeros(1_500_000, dtype=np.uint8)}, path)
    code, out, _ = run(["inspect", str(path)], capsys)
    assert code == 0 and "parameters   1,500,000 (1.50M)" in out
