"""`fastst diff A B`: tensors only in one side, dtype and shape changes,
identical tensors, value differences computed in the core (checked against
numpy), metadata differences, checkpoints against single files, exit codes
0 identical / 1 different / 2 error, JSON against the schema."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import fastst.numpy
import fastst.tools.inspect as fi
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
from fastst import _fastst
from helpers.cli_files import run, run_envelope


def _model(seed: int = 0) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "embed.weight": rng.standard_normal((64, 32)).astype(np.float32),
        "norm.weight": rng.standard_normal(32).astype(ml_dtypes.bfloat16),
        "head.weight": rng.standard_normal((16, 32)).astype(np.float16),
        "ids": np.arange(10, dtype=np.int64),
        "mask": np.array([True, False, True]),
    }


def test_identical_files_and_resaves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = tmp_path / "a.safetensors"
    b = tmp_path / "b.safetensors"
    fastst.numpy.save_file(_model(), a, metadata={"format": "np"})
    safetensors.numpy.save_file(_model(), str(b), metadata={"format": "np"})
    code, doc, _ = run_envelope(["diff", "--json", str(a), str(b)], capsys)
    assert code == 0
    (d,) = doc["results"]
    assert d["identical"] and d["identical_tensors"] == 5 and d["tensors"] == 5
    code, out, _ = run(["diff", str(a), str(b)], capsys)
    assert code == 0 and "identical" in out


def test_value_differences_match_numpy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _model()
    tuned = {k: v.copy() for k, v in base.items()}
    tuned["embed.weight"][::7, ::3] += np.float32(0.01)
    tuned["head.weight"][0, :5] *= np.float16(2)
    tuned["ids"][3] = 1000
    tuned["mask"][1] = True
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    fastst.numpy.save_file(base, a)
    fastst.numpy.save_file(tuned, b)
    code, doc, _ = run_envelope(["diff", "--json", "--threads", "3", str(a), str(b)], capsys)
    assert code == 1
    (d,) = doc["results"]
    assert d["identical_tensors"] == 1  # norm.weight
    found = {t["name"]: t for t in d["different"]}
    assert set(found) == {"embed.weight", "head.weight", "ids", "mask"}
    for name, t in found.items():
        x = base[name].astype(np.float64)
        y = tuned[name].astype(np.float64)
        differ = x != y
        assert t["differing"] == int(differ.sum()) and t["elements"] == x.size
        if base[name].dtype == np.bool_:
            assert t["max_abs"] is None
            continue
        assert t["max_abs"] == pytest.approx(np.abs(x - y).max())
        scale = np.maximum(np.abs(x), np.abs(y))[differ]
        assert t["max_rel"] == pytest.approx((np.abs(x - y)[differ] / scale).max())
    code, out, _ = run(["diff", str(a), str(b)], capsys)
    assert "embed.weight (F32 [64, 32]):" in out and "max abs 0.01" in out


def test_structure_and_metadata_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _model()
    other = dict(base)
    other.pop("ids")
    other["extra"] = np.zeros(1, np.float32)
    other["embed.weight"] = base["embed.weight"].astype(np.float16)
    other["head.weight"] = base["head.weight"].reshape(32, 16)
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    fastst.numpy.save_file(base, a, metadata={"same": "1", "k": "old", "gone": "x"})
    fastst.numpy.save_file(other, b, metadata={"same": "1", "k": "new", "added": "y"})
    code, doc, _ = run_envelope(["diff", "--json", str(a), str(b)], capsys)
    (d,) = doc["results"]
    assert code == 1
    assert d["only_in_a"] == ["ids"] and d["only_in_b"] == ["extra"]
    (change,) = d["dtype_changed"]
    assert (change["name"], change["a"], change["b"]) == ("embed.weight", "F32", "F16")
    # Same shape: the values are compared as float64.
    x = base["embed.weight"].astype(np.float64)
    y = other["embed.weight"].astype(np.float64)
    assert change["differing"] == int((x != y).sum())
    assert change["max_abs"] == np.abs(x - y).max()
    assert change["rel_l2"] == pytest.approx(np.linalg.norm(x - y) / np.linalg.norm(x), rel=1e-9)
    assert d["shape_changed"] == [{"name": "head.weight", "a": [16, 32], "b": [32, 16]}]
    assert d["metadata"] == {
        "only_in_a": {"gone": "x"},
        "only_in_b": {"added": "y"},
        "changed": {"k": ["old", "new"]},
    }
    # Only the metadata differs: still different.
    c = tmp_path / "c.safetensors"
    fastst.numpy.save_file(base, c, metadata={"same": "1"})
    assert run(["diff", str(a), str(c)], capsys)[0] == 1


def test_nan_and_signed_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    fastst.numpy.save_file({"x": np.array([np.nan, 0.0, 1.0], np.float32)}, a)
    fastst.numpy.save_file({"x": np.array([np.nan, -0.0, np.inf], np.float32)}, b)
    code, doc, _ = run_envelope(["diff", "--json", str(a), str(b)], capsys)
    (t,) = doc["results"][0]["different"]
    assert t["differing"] == 1 and t["max_abs"] == "inf"  # JSON has no infinity


def test_checkpoint_against_single_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    single = tmp_path / "m.safetensors"
    fastst.numpy.save_file(_model(), single)
    index = fastst.numpy.save_sharded(_model(), tmp_path / "ckpt", max_shard_size=4096)
    for other in (index, str(tmp_path / "ckpt")):
        code, doc, _ = run_envelope(["diff", "--json", str(single), other], capsys)
        assert code == 0 and doc["results"][0]["identical"], doc


def test_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = tmp_path / "a.safetensors"
    fastst.numpy.save_file(_model(), a)
    pickled = tmp_path / "p.safetensors"
    pickled.write_bytes(b"\x80\x04\x95" + b"\0" * 30)
    for other in (tmp_path / "missing.safetensors", pickled):
        code, out, err = run(["diff", str(a), str(other)], capsys)
        assert code == 2 and out == "" and err.count("\n") == 1
        code, doc, _ = run_envelope(["diff", "--json", str(a), str(other)], capsys)
        assert code == 2 and doc["results"] == [] and len(doc["errors"]) == 1
    assert "pickle" in doc["errors"][0]["message"]
    code, _, err = run(["diff", str(a)], capsys)
    assert code == 2 and "usage:" in err


def test_hostile_names_are_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    fastst.numpy.save_file({"x\x1b[2J\n": np.zeros(2, np.float32)}, a, metadata={"k\x07": "\u202e"})
    fastst.numpy.save_file({"y\u202e": np.zeros(2, np.float32)}, b)
    code, out, _ = run(["diff", str(a), str(b)], capsys)
    assert code == 1 and "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert "x\\u{1b}[2J\\n" in out


def test_many_threads_agree_with_one() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(3_000_017).astype(np.float32)
    y = x.copy()
    y[::1001] += 1
    one = _fastst.inspect.diff_buffers(memoryview(x).cast("B"), memoryview(y).cast("B"), "F32", 1)
    many = _fastst.inspect.diff_buffers(memoryview(x).cast("B"), memoryview(y).cast("B"), "F32", 5)
    assert one == many and one["differing"] == len(range(0, x.size, 1001))
    with pytest.raises(ValueError):
        _fastst.inspect.diff_buffers(b"\0" * 4, b"\0" * 8, "F32")
    with pytest.raises(ValueError):
        _fastst.inspect.diff_buffers(b"", b"", "F99")
    assert fi.diff is not None


def test_change_profile_and_layers_match_numpy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(3)
    base = {
        f"model.layers.{n}.{w}": rng.standard_normal((8, 8)).astype(np.float32)
        for n in range(5)
        for w in ("q.weight", "k.weight")
    }
    base["model.norm.weight"] = np.ones(8, ml_dtypes.bfloat16)
    tuned = {k: v.copy() for k, v in base.items()}
    tuned["model.layers.1.q.weight"] += np.float32(0.5)
    tuned["model.layers.3.k.weight"] *= np.float32(-1)
    tuned["model.norm.weight"] = (base["model.norm.weight"].astype(np.float32) * 2).astype(
        ml_dtypes.bfloat16
    )
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    fastst.numpy.save_file(base, a)
    fastst.numpy.save_file(tuned, b)
    code, doc, _ = run_envelope(["diff", "--json", str(a), str(b)], capsys)
    (d,) = doc["results"]
    assert code == 1 and d["values_compared"]
    for t in d["different"]:
        x = base[t["name"]].astype(np.float64).ravel()
        y = tuned[t["name"]].astype(np.float64).ravel()
        assert t["rel_l2"] == pytest.approx(np.linalg.norm(x - y) / np.linalg.norm(x), rel=1e-12)
        cos = x @ y / (np.linalg.norm(x) * np.linalg.norm(y))
        assert t["cosine"] == pytest.approx(cos, rel=1e-12)
    flipped = next(t for t in d["different"] if t["name"] == "model.layers.3.k.weight")
    assert flipped["cosine"] == pytest.approx(-1) and flipped["rel_l2"] == pytest.approx(2)
    layers = {x["layer"]: x for x in d["layers"]}
    assert list(layers) == [f"model.layers.{n}" for n in range(5)]
    assert [x["changed"] for x in d["layers"]] == [0, 1, 0, 1, 0]
    assert layers["model.layers.3"]["max_rel_l2"] == pytest.approx(2)
    assert layers["model.layers.0"] == {
        "layer": "model.layers.0",
        "tensors": 2,
        "changed": 0,
        "max_rel_l2": None,
    }
    for width in (60, 80, 120, 200):
        code, out, _ = run(["diff", "--width", str(width), str(a), str(b)], capsys)
        mine = out[out.index("  layers ") :].splitlines()
        assert all(len(line) <= width for line in mine), width
        assert "layers       model.layers.N  " in out and "2 of 5 layers changed" in out
        assert "model.layers.3: 1/2 tensors, max rel L2 2" in out
    code, out, _ = run(["diff", "--ascii", str(a), str(b)], capsys)
    assert "model.layers.N   - #\n" in out
    # Headers only: no data read, nothing about values.
    code, doc, _ = run_envelope(["diff", "--json", "--no-values", str(a), str(b)], capsys)
    (d,) = doc["results"]
    assert code == 0 and not d["values_compared"] and d["different"] == []
    assert d["identical_tensors"] == 0 and d["identical"]
    code, out, _ = run(["diff", "--no-values", str(a), str(b)], capsys)
    assert "not compared (--no-values)" in out
