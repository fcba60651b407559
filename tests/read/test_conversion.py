"""Conversion on load: every value of the 16- and 8-bit float kinds to F32,
and F32 to BF16/F16 with round-to-nearest-even, checked against
ml_dtypes/numpy; every pair between F64, F32, F16 and BF16 and from the F8
kinds to those four, against numpy/ml_dtypes or (where they round twice) an
exact nearest-even oracle; owned copies are independent of the file."""

from __future__ import annotations

from typing import Any

import fastst
import ml_dtypes
import numpy as np
import pytest
from helpers.raw_files import raw_file

ALL16 = np.arange(1 << 16, dtype=np.uint16)
ALL8 = np.arange(256, dtype=np.uint8)

KINDS = {
    "BF16": (ALL16, ml_dtypes.bfloat16),
    "F16": (ALL16, np.float16),
    "F8_E4M3": (ALL8, ml_dtypes.float8_e4m3fn),
    "F8_E5M2": (ALL8, ml_dtypes.float8_e5m2),
    "F8_E4M3FNUZ": (ALL8, ml_dtypes.float8_e4m3fnuz),
    "F8_E5M2FNUZ": (ALL8, ml_dtypes.float8_e5m2fnuz),
    "F8_E8M0": (ALL8, ml_dtypes.float8_e8m0fnu),
}


def same_floats(a: np.ndarray, b: np.ndarray) -> None:
    """Bit-identical except that any NaN matches any NaN."""
    assert a.dtype == b.dtype and a.shape == b.shape
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    np.testing.assert_array_equal(nan_a, nan_b)
    bits = a.dtype.itemsize * 8
    ui = {16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]
    np.testing.assert_array_equal(a[~nan_a].view(ui), b[~nan_b].view(ui))


@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_value_widens_exactly(kind, backend, write) -> None:
    raw, ml = KINDS[kind]
    path = write(raw_file({"x": (kind, raw.shape, raw.tobytes())}))
    with fastst.safe_open(path, "np", backend=backend) as f:
        got = f.get_tensor("x", dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = raw.view(ml).astype(np.float32)
    same_floats(got, expected)


def f32_probe() -> np.ndarray:
    """Every bf16/f16 value, the midpoints between neighbours (ties), values
    just around them, specials and random bit patterns."""
    rng = np.random.default_rng(3)
    bf = ALL16.astype(np.uint32) << 16
    around = np.concatenate([bf, bf | 0x8000, bf | 0x7FFF, bf | 0x8001, bf | 0x18000])
    h = ALL16.view(np.float16).astype(np.float32)
    h = h[np.isfinite(h)]
    mids = ((h[:-1].astype(np.float64) + h[1:]) / 2).astype(np.float32)
    extra = np.array([np.inf, -np.inf, np.nan, 65504, 65520, 65519.996, 1e-8, -0.0], np.float32)
    rand = rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([around.view(np.float32), h, mids, np.nextafter(mids, 0), extra, rand])


@pytest.mark.parametrize("target,ml", [("BF16", ml_dtypes.bfloat16), (np.float16, np.float16)])
def test_f32_narrows_with_round_to_nearest_even(target, ml, write) -> None:
    probe = f32_probe()
    path = write(raw_file({"x": ("F32", probe.shape, probe.tobytes())}))
    with fastst.safe_open(path, "np") as f:
        got = f.get_tensor("x", dtype=target)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = probe.astype(ml)
    assert got.dtype == np.dtype(ml)
    same_floats(got.view(np.uint16).view(np.float16) if ml is np.float16 else got, expected)


NUMPY = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}
WIDE = sorted(NUMPY)
EIGHT = [k for k in KINDS if k.startswith("F8")]


def nearest_even(x: np.ndarray, kind: str) -> np.ndarray:
    """``x`` (float64) rounded once to the nearest value of the 16-bit
    ``kind``, ties to the even bit pattern, past the largest value (by half
    a step or more) to infinity, NaN to NaN: chosen among the kind's own
    values, an oracle independent of any conversion code."""
    with np.errstate(invalid="ignore"):
        return _nearest_even(x, kind)


def _nearest_even(x: np.ndarray, kind: str) -> np.ndarray:
    values = ALL16.view(NUMPY[kind]).astype(np.float64)
    finite = np.flatnonzero(np.isfinite(values) & ~np.signbit(values))  # bit patterns, ascending
    grid = np.append(values[finite], 2 * values[finite[-1]] - values[finite[-2]])
    codes = np.append(finite, np.flatnonzero(values == np.inf)[0]).astype(np.uint16)
    mag = np.abs(x)
    hi = np.clip(np.searchsorted(grid, mag), 1, len(grid) - 1)
    lo = hi - 1
    dlo, dhi = mag - grid[lo], grid[hi] - mag
    up = (dhi < dlo) | ((dhi == dlo) & (codes[hi] % 2 == 0))
    out = np.where(up, codes[hi], codes[lo])
    out = np.where(mag >= grid[-1], codes[-1], out)  # infinity
    out = out | (np.signbit(x).astype(np.uint16) << 15)
    out = np.where(np.isnan(x), ALL16[np.isnan(values)][0], out)
    return out.astype(np.uint16).view(NUMPY[kind])


def f64_probe() -> np.ndarray:
    """Every F16 and BF16 value, the ties between neighbours and values a
    hair (below F32's resolution) either side of them, F32's specials and
    edges, signed zeros, infinities, NaN, subnormals of every kind, random
    doubles."""
    with np.errstate(invalid="ignore"):
        return _f64_probe()


def _f64_probe() -> np.ndarray:
    rng = np.random.default_rng(5)
    parts = [f32_probe().astype(np.float64)]
    for kind in ("F16", "BF16"):
        v = ALL16.view(NUMPY[kind]).astype(np.float64)
        v = np.unique(v[np.isfinite(v)])
        mids = (v[:-1] + v[1:]) / 2
        parts += [v, mids, mids * (1 + 2.0**-40), mids * (1 - 2.0**-40)]
    tiny = np.array([2.0**-1074, 2.0**-1022, 2.0**-149, 2.0**-126, 2.0**-134, 2.0**-25, 1e308])
    big = np.array([np.finfo(np.float32).max, 3.5e38, 65520.0, 65519.99999, np.inf, np.nan, 0.0])
    rand = rng.integers(0, 1 << 63, 100_000, dtype=np.uint64).view(np.float64)
    parts += [tiny, big, rand]
    out = np.concatenate(parts)
    return np.concatenate([out, -out])


@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize("target", WIDE)
@pytest.mark.parametrize("source", WIDE + EIGHT)
def test_every_float_pair_converts_exactly(source, target, backend, write) -> None:
    if source == target:
        return
    if source in NUMPY:
        with np.errstate(over="ignore", invalid="ignore"):
            values = f64_probe().astype(NUMPY[source])  # numpy/ml_dtypes: the source values
    else:
        values = KINDS[source][0].view(KINDS[source][1])
    path = write(raw_file({"x": (source, values.shape, values.tobytes())}))
    with fastst.safe_open(path, "np", backend=backend) as f:
        got = f.get_tensor("x", dtype=NUMPY[target])
    exact = values.astype(np.float64)  # every kind widens exactly to F64
    if target in ("F16", "BF16"):
        expected = nearest_even(exact, target)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            expected = exact.astype(NUMPY[target])  # numpy: one IEEE rounding
    assert got.dtype == np.dtype(NUMPY[target])
    if target in ("F16", "BF16"):  # bit patterns; any NaN matches any NaN
        nan = np.isnan(expected.astype(np.float32))
        np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
        np.testing.assert_array_equal(got[~nan].view(np.uint16), expected[~nan].view(np.uint16))
    else:
        same_floats(got, expected)


def test_the_oracle_agrees_with_numpy_and_ml_dtypes_where_they_round_once() -> None:
    probe = f64_probe()
    with np.errstate(over="ignore", invalid="ignore"):
        by_numpy = probe.astype(np.float16)  # numpy rounds doubles to F16 once
        singles = probe.astype(np.float32)
        by_ml = singles.astype(ml_dtypes.bfloat16)  # singles to BF16: once
    nan = np.isnan(probe)
    ours = nearest_even(probe, "F16")
    np.testing.assert_array_equal(ours[~nan].view(np.uint16), by_numpy[~nan].view(np.uint16))
    ours = nearest_even(singles.astype(np.float64), "BF16")
    np.testing.assert_array_equal(ours[~nan].view(np.uint16), by_ml[~nan].view(np.uint16))
    # Where ml_dtypes rounds doubles twice (through F32), the oracle rounds once.
    x = np.array([1 + 2.0**-8 + 2.0**-30])
    assert x.astype(ml_dtypes.bfloat16).view(np.uint16)[0] == 0x3F80
    assert nearest_even(x, "BF16").view(np.uint16)[0] == 0x3F81


def test_dtype_names_and_errors(write) -> None:
    x = np.arange(4, dtype=np.float32)
    path = write(raw_file({"x": ("F32", x.shape, x.tobytes()), "i": ("I32", [1], bytes(4))}))
    with fastst.safe_open(path, "np") as f:
        for spec in (np.float32, "float32", "F32", np.dtype("<f4")):
            np.testing.assert_array_equal(f.get_tensor("x", dtype=spec), x)
        assert f.get_tensor("x", dtype="bfloat16").dtype == ml_dtypes.bfloat16
        with pytest.raises(ValueError, match='tensor "i".*no conversion from I32 to F16') as info:
            f.get_tensor("i", dtype=np.float16)
        assert info.value.rule == "conversion-not-allowed"  # type: ignore[attr-defined]
        assert "between F64, F32, F16, BF16 (each way), and from F8_E4M3" in str(info.value)
        with pytest.raises(TypeError, match="dtype"):
            f.get_tensor("x", dtype=object)


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_owned_copies(backend, write) -> None:
    big = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)
    data = raw_file({"big": ("F32", big.shape, big.tobytes()), "s": ("U8", [2], b"ab")})
    path = write(data)
    big_at = 8 + int.from_bytes(data[:8], "little")  # "big" starts the data section
    with fastst.safe_open(path, "np", backend=backend) as f:
        tensors = f.get_tensors(copy=True)
        one = f.get_tensor("big", copy=True)
    assert tensors["big"].flags.writeable and one.flags.writeable
    # Memory of its own: a copy of 1 MiB or more at its file offset modulo
    # 4096 (where a view would be, modulo 64), a smaller one 64-byte aligned
    # like torch's allocator (numpy's own gives 16).
    assert big_at % 64 and all(a.ctypes.data % 4096 == big_at % 4096 for a in (tensors["big"], one))
    assert tensors["s"].ctypes.data % 64 == 0
    np.testing.assert_array_equal(tensors["big"], big)
    np.testing.assert_array_equal(one, big)
    np.testing.assert_array_equal(tensors["s"], np.frombuffer(b"ab", np.uint8))
    assert not np.shares_memory(one, tensors["big"])


def test_numpy_load_file_options(write) -> None:
    from fastst.numpy import load_file

    b = np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16)
    path = write(raw_file({"b": ("BF16", [2, 3], b.tobytes())}))
    got = load_file(path, dtype=np.float32)
    assert got["b"].dtype == np.float32 and got["b"].shape == (2, 3)
    np.testing.assert_array_equal(got["b"].reshape(-1), np.arange(6, dtype=np.float32))
    owned = load_file(path, copy=True)
    assert owned["b"].ctypes.data % 64 == 0 and owned["b"].flags.writeable


def test_torch_load_file_converts_and_copies(write) -> None:
    import torch
    from fastst.torch import load_file

    b = torch.arange(-8, 8, dtype=torch.float32).to(torch.bfloat16).reshape(4, 4)
    raw = b.view(torch.uint16).numpy().tobytes()
    path = write(raw_file({"b": ("BF16", [4, 4], raw)}))
    got = load_file(path, dtype=torch.float32)["b"]
    assert got.dtype == torch.float32 and got.shape == (4, 4)
    assert torch.equal(got, b.float())
    owned = load_file(path, copy=True)["b"]
    assert owned.dtype == torch.bfloat16 and torch.equal(owned, b)
    owned[0, 0] = 100
    assert load_file(path)["b"][0, 0] == b[0, 0]


# Above PARALLEL_MIN (1 << 20 elements, rust/fastst-core/src/parallel.rs): the
# conversion is split between threads; an odd count leaves a short last chunk.
BIG = (2 << 20) + 7


def big_halves() -> np.ndarray:
    """Every 16-bit pattern (NaNs included), then random ones."""
    rng = np.random.default_rng(16)
    rand = rng.integers(0, 1 << 16, BIG - (1 << 16), dtype=np.uint32).astype(np.uint16)
    return np.concatenate([ALL16, rand])


def big_singles() -> np.ndarray:
    """Random F32 bit patterns without NaNs (NaNs have their own test)."""
    rng = np.random.default_rng(17)
    bits = rng.integers(0, 1 << 32, BIG, dtype=np.uint64).astype(np.uint32)
    nan = (bits & 0x7F800000 == 0x7F800000) & (bits & 0x007FFFFF != 0)
    bits[nan] &= 0xFF7FFFFF
    bits[:4] = [0x7F800000, 0xFF800000, 0x80000000, 0x477FF000]  # inf, -inf, -0, f16 tie
    return bits


@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize("kind", ["BF16", "F16"])
def test_large_tensor_widens_bit_for_bit(kind, backend, write) -> None:
    raw = big_halves()
    path = write(raw_file({"x": (kind, [BIG], raw.tobytes())}))
    with fastst.safe_open(path, "np", backend=backend) as f:
        got = f.get_tensor("x", dtype=np.float32)
    expected = raw.view(KINDS[kind][1]).astype(np.float32)
    assert got.shape == (BIG,)
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize("target", [ml_dtypes.bfloat16, np.float16])
def test_large_tensor_narrows_bit_for_bit(target, backend, write) -> None:
    bits = big_singles()
    path = write(raw_file({"x": ("F32", [BIG], bits.tobytes())}))
    with fastst.safe_open(path, "np", backend=backend) as f:
        got = f.get_tensor("x", dtype=target)
    with np.errstate(over="ignore"):
        expected = bits.view(np.float32).astype(target)
    assert got.shape == (BIG,)
    np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))


def narrowed(bits: np.ndarray, target: Any, write) -> np.ndarray:
    path = write(raw_file({"x": ("F32", bits.shape, bits.astype(np.uint32).tobytes())}))
    with fastst.safe_open(path, "np") as f:
        return f.get_tensor("x", dtype=target).view(np.uint16)


def nan_patterns(exp: int, man_bits: int) -> np.ndarray:
    """Every quiet NaN of a 16-bit format, both signs."""
    quiet = 1 << (man_bits - 1)
    man = np.arange(quiet, 1 << man_bits, dtype=np.uint32)
    pos = (exp << man_bits) | man
    return np.concatenate([pos, pos | 0x8000]).astype(np.uint16)


def test_nan_payloads_survive_narrowing_to_f16(write) -> None:
    # Every quiet F16 NaN, widened exactly by numpy, comes back bit for bit.
    h = nan_patterns(0x1F, 10)
    wide = h.view(np.float16).astype(np.float32).view(np.uint32)
    np.testing.assert_array_equal(narrowed(wide, np.float16, write), h)
    # Quiet F32 NaNs with payload bits below F16's: the top ones are kept,
    # as numpy does, bit for bit.
    rng = np.random.default_rng(4)
    low = rng.integers(0, 1 << 22, 5000, dtype=np.uint32)
    sign = rng.integers(0, 2, 5000, dtype=np.uint32) << 31
    quiet = sign | 0x7FC00000 | low
    with np.errstate(invalid="ignore"):
        expected = quiet.view(np.float32).astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(narrowed(quiet, np.float16, write), expected)
    # Signalling NaNs come out quiet (as IEEE 754 and the F16C instruction
    # do; numpy keeps them signalling), with the payload's top bits kept.
    signalling = sign | 0x7F800000 | (low >> 1) | 1
    want = ((signalling >> 16) & 0x8000) | 0x7E00 | ((signalling & 0x7FFFFF) >> 13)
    np.testing.assert_array_equal(narrowed(signalling, np.float16, write), want.astype(np.uint16))


def test_nan_payloads_survive_narrowing_to_bf16(write) -> None:
    # Every quiet BF16 NaN, widened exactly by ml_dtypes, comes back bit for bit.
    b = nan_patterns(0xFF, 7)
    wide = b.view(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32)
    np.testing.assert_array_equal(narrowed(wide, ml_dtypes.bfloat16, write), b)
    # ml_dtypes narrows any NaN to the default NaN of its sign: they agree there.
    canonical = np.array([0x7FC00000, 0xFFC00000], np.uint32)
    expected = canonical.view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(narrowed(canonical, ml_dtypes.bfloat16, write), expected)
    # Other NaNs: payload truncated to the top 7 bits, made quiet (ml_dtypes
    # drops the payload instead).
    rng = np.random.default_rng(5)
    bits = (rng.integers(0, 2, 5000, dtype=np.uint32) << 31) | 0x7F800000
    bits |= rng.integers(1, 1 << 23, 5000, dtype=np.uint32)
    want = ((bits >> 16) | 0x0040).astype(np.uint16)
    np.testing.assert_array_equal(narrowed(bits, ml_dtypes.bfloat16, write), want)
