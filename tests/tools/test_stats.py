"""`fastst.tools.stats`: every dtype against a float64 numpy reference
computed independently from the raw bytes (ml_dtypes for the small floats),
on hypothesis-generated values with NaN, Inf, subnormals, empty tensors and
scalars; tensors over several chunks and threads; checkpoints and folders;
hostile files give the reader's errors.

Tolerances: min, max, abs-max, the counts and (for kinds of at most 16
bits) the histogram are exact; mean and std match to 1e-12 relative for
kinds of at most 16 bits, 1e-9 for the 32/64-bit kinds, whose histogram
matches numpy's over the values cut to bfloat16 precision."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any, Dict, List, Mapping, Tuple

import ml_dtypes
import numpy as np
import pytest
from fastst import SafetensorError
from fastst.tools.stats import stats_checkpoint, tensor_stats
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

BINS = 7

#: dtype -> (bytes per element or None for packed, numpy dtype of a decoded element)
NUMPY: Dict[str, Any] = {
    "BOOL": np.uint8,
    "U8": np.uint8,
    "I8": np.int8,
    "U16": "<u2",
    "I16": "<i2",
    "U32": "<u4",
    "I32": "<i4",
    "U64": "<u8",
    "I64": "<i8",
    "F16": "<f2",
    "BF16": ml_dtypes.bfloat16,
    "F32": "<f4",
    "F64": "<f8",
    "C64": "<f4",
    "F8_E4M3": ml_dtypes.float8_e4m3fn,
    "F8_E5M2": ml_dtypes.float8_e5m2,
    "F8_E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
    "F8_E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
    "F8_E8M0": ml_dtypes.float8_e8m0fnu,
    "F4": ml_dtypes.float4_e2m1fn,
    "F6_E2M3": ml_dtypes.float6_e2m3fn,
    "F6_E3M2": ml_dtypes.float6_e3m2fn,
}
WIDE = {"U32", "I32", "U64", "I64", "F32", "F64", "C64"}
INTS = {"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64"}
ITEM = {"F4": (1, 2), "F6_E2M3": (3, 4), "F6_E3M2": (3, 4), "C64": (8, 1)}  # bytes per n values


def _nbytes(dtype: str, n: int) -> int:
    if dtype in ITEM:
        b, per = ITEM[dtype]
        return n * b // per
    return n * np.dtype(NUMPY[dtype]).itemsize


def _write(path: Path, tensors: List[Tuple[str, str, List[int], bytes]]) -> None:
    header: Dict[str, Any] = {}
    data = b""
    for name, dtype, shape, raw in tensors:
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def _decode(dtype: str, raw: bytes) -> np.ndarray:
    """The values of ``raw`` as float64 (ints as int64/uint64), independently
    of fastst."""
    b = np.frombuffer(raw, dtype=np.uint8)
    if dtype == "BOOL":
        return (b != 0).astype(np.int64)
    if dtype == "F4":
        codes = np.stack([b & 15, b >> 4], axis=1).reshape(-1)
    elif dtype in ("F6_E2M3", "F6_E3M2"):
        w = b.reshape(-1, 3).astype(np.uint32)
        word = w[:, 0] | (w[:, 1] << 8) | (w[:, 2] << 16)
        codes = np.stack([(word >> (6 * i)) & 63 for i in range(4)], axis=1).reshape(-1)
    else:
        x = np.frombuffer(raw, dtype=NUMPY[dtype])
        if dtype in INTS:
            return x
        with np.errstate(invalid="ignore"):  # signalling NaNs
            return x.astype(np.float64)
    return codes.astype(np.uint8).view(NUMPY[dtype]).astype(np.float64)


def _bf16_cut(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        bits = x.astype(np.float64).astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32).astype(np.float64)


def _check(dtype: str, raw: bytes, got: Mapping[str, Any]) -> None:
    x = _decode(dtype, raw)
    assert got["values"] == x.size
    if dtype in INTS:
        finite = x
        assert got["nan"] == got["inf"] == 0
    else:
        finite = x[np.isfinite(x)]
        assert got["nan"] == int(np.isnan(x).sum())
        assert got["inf"] == int(np.isinf(x).sum())
    assert got["finite"] == finite.size
    assert got["zero"] == int((x == 0).sum())
    if finite.size == 0:
        assert got["min"] is got["max"] is got["mean"] is got["std"] is got["histogram"] is None
        return
    if dtype in INTS:
        ints = [int(v) for v in finite]
        lo, hi = min(ints), max(ints)  # type: Tuple[float, float]
        assert (got["min"], got["max"], got["abs_max"]) == (lo, hi, max(abs(lo), abs(hi)))
        assert all(type(got[k]) is int for k in ("min", "max", "abs_max"))
        mean = sum(ints) / len(ints)
        floats = finite.astype(np.float64)
    else:
        floats = finite
        lo, hi = float(finite.min()), float(finite.max())
        assert (got["min"], got["max"], got["abs_max"]) == (lo, hi, max(-lo, hi))
        mean = math.fsum(finite) / finite.size
    rel = 1e-9 if dtype in WIDE else 1e-12
    scale = max(abs(float(lo)), abs(float(hi)))
    with np.errstate(over="ignore", invalid="ignore"):
        std = float(np.sqrt(np.mean((floats - mean) ** 2)))
    for key, want in (("mean", mean), ("std", std)):
        if math.isfinite(want):
            assert math.isclose(got[key], want, rel_tol=rel, abs_tol=rel * scale), key
        else:  # beyond float64: no value rather than inf
            assert got[key] is None
    binned = np.clip(_bf16_cut(floats), lo, hi) if dtype in WIDE else floats
    h = got["histogram"]
    try:
        counts, edges = np.histogram(binned, BINS, range=(float(lo), float(hi)))
    except ValueError:  # numpy cannot split a range this narrow into BINS bins
        assert sum(h["counts"]) == finite.size
        return
    assert h["counts"] == counts.tolist()
    assert (h["lo"], h["hi"], h["exact"]) == (edges[0], edges[-1], dtype not in WIDE)


def _floats(dtype: str) -> Any:
    if dtype == "F64":  # squares of larger values overflow float64 in the reference too
        finite = st.floats(-1e150, 1e150, allow_subnormal=True)
    else:
        finite = st.floats(width=32, allow_nan=False, allow_infinity=False, allow_subnormal=True)
    special = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0])
    return st.one_of(finite, finite, finite, special)


@st.composite
def _tensor(draw: Any) -> Tuple[str, List[int], bytes]:
    dtype = draw(st.sampled_from(sorted(NUMPY)))
    shape = draw(st.sampled_from([[], [0], [1], [4], [3, 4], [64], [4, 300]]))
    n = int(np.prod(shape, dtype=np.int64))
    if dtype in ("F6_E2M3", "F6_E3M2") and n % 4 or dtype == "F4" and n % 2:
        shape, n = [4 * n], 4 * n
    if dtype in ("F32", "F64", "C64") and draw(st.booleans()):
        count = 2 * n if dtype == "C64" else n
        values = draw(st.lists(_floats(dtype), min_size=count, max_size=count))
        raw = np.array(values, dtype="<f8" if dtype == "F64" else "<f4").tobytes()
    else:
        size = _nbytes(dtype, n)
        raw = draw(st.binary(min_size=size, max_size=size))
    return dtype, shape, raw


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_tensor())
def test_every_dtype_matches_numpy(
    tmp_path_factory: Any, tensor: Tuple[str, List[int], bytes]
) -> None:
    dtype, shape, raw = tensor
    path = tmp_path_factory.mktemp("st") / "t.safetensors"
    _write(path, [("t", dtype, shape, raw)])
    (got,) = tensor_stats(path, bins=BINS)
    assert (got["name"], got["dtype"], got["shape"], got["shard"]) == ("t", dtype, shape, None)
    _check(dtype, raw, got)


def test_extremes_of_every_integer_kind(tmp_path: Path) -> None:
    tensors = []
    for dtype in ("U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64"):
        info = np.iinfo(np.dtype(NUMPY[dtype]))
        values = np.array([info.min, info.max, info.max, 0], dtype=NUMPY[dtype])
        tensors.append((dtype.lower(), dtype, [4], values.tobytes()))
    path = tmp_path / "ints.safetensors"
    _write(path, tensors)
    for (_, dtype, _, raw), got in zip(tensors, tensor_stats(path, bins=BINS), strict=True):
        _check(dtype, raw, got)


def test_large_tensors_over_many_chunks_and_threads(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    big = rng.standard_normal(5_000_000).astype(np.float32) * 3 + 1  # 20 MB: 3 chunks
    big[::1_000_003] = np.nan
    half = rng.standard_normal(6_000_000).astype(ml_dtypes.bfloat16)
    tensors = [("f", "F32", [big.size], big.tobytes()), ("h", "BF16", [half.size], half.tobytes())]
    path = tmp_path / "big.safetensors"
    _write(path, tensors)
    one = tensor_stats(path, bins=BINS, threads=1)
    assert tensor_stats(path, bins=BINS, threads=3) == one
    for (_, dtype, _, raw), got in zip(tensors, one, strict=True):
        _check(dtype, raw, got)


def test_patterns_checkpoints_and_folders(tmp_path: Path) -> None:
    a = np.arange(6, dtype=np.float32)
    b = np.array([1, -2], dtype=np.int8)
    _write(tmp_path / "m-1.safetensors", [("x.weight", "F32", [6], a.tobytes())])
    _write(tmp_path / "m-2.safetensors", [("y.bias", "I8", [2], b.tobytes())])
    index = {"weight_map": {"x.weight": "m-1.safetensors", "y.bias": "m-2.safetensors"}}
    (tmp_path / "m.safetensors.index.json").write_text(json.dumps(index))
    rows = stats_checkpoint(tmp_path / "m.safetensors.index.json")
    assert [(r["name"], r["shard"]) for r in rows] == [
        ("x.weight", "m-1.safetensors"),
        ("y.bias", "m-2.safetensors"),
    ]
    assert [r["name"] for r in tensor_stats(tmp_path, "*.bias")] == ["y.bias"]
    assert tensor_stats(tmp_path / "m-1.safetensors", "nothing*") == []
    (single,) = tensor_stats(tmp_path / "m-2.safetensors", "y.*")
    assert (single["min"], single["max"], single["mean"]) == (-2, 1, -0.5)


def test_hostile_files_give_the_readers_errors(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    _write(path, [("t", "F32", [4], b"\0" * 16)])
    whole = path.read_bytes()
    path.write_bytes(whole[:-3])
    with pytest.raises(SafetensorError) as info:
        tensor_stats(path)
    assert info.value.rule == "data-too-short" and "t.safetensors" in str(info.value)
    path.write_bytes(struct.pack("<Q", 5) + b"{nope")
    with pytest.raises(SafetensorError) as info:
        tensor_stats(path)
    assert info.value.rule == "json-syntax"
    path.write_bytes(b"\x01")
    with pytest.raises(SafetensorError):
        tensor_stats(path)
    with pytest.raises(FileNotFoundError):
        tensor_stats(tmp_path / "missing.safetensors")
