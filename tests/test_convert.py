"""Conversion on load: every value of the 16- and 8-bit float kinds to F32,
and F32 to BF16/F16 with round-to-nearest-even, checked against
ml_dtypes/numpy; owned copies are independent of the file."""

from __future__ import annotations

from typing import Any

import fastst
import ml_dtypes
import numpy as np
import pytest
from conftest import raw_file

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
    ui = {16: np.uint16, 32: np.uint32}[bits]
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


def test_dtype_names_and_errors(write) -> None:
    x = np.arange(4, dtype=np.float32)
    path = write(raw_file({"x": ("F32", x.shape, x.tobytes()), "i": ("I32", [1], bytes(4))}))
    with fastst.safe_open(path, "np") as f:
        for spec in (np.float32, "float32", "F32", np.dtype("<f4")):
            np.testing.assert_array_equal(f.get_tensor("x", dtype=spec), x)
        assert f.get_tensor("x", dtype="bfloat16").dtype == ml_dtypes.bfloat16
        with pytest.raises(ValueError, match='tensor "i".*no conversion from I32 to F16'):
            f.get_tensor("i", dtype=np.float16)
        with pytest.raises(TypeError, match="dtype"):
            f.get_tensor("x", dtype=object)


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_owned_copies(backend, write) -> None:
    big = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)
    path = write(raw_file({"big": ("F32", big.shape, big.tobytes()), "s": ("U8", [2], b"ab")}))
    with fastst.safe_open(path, "np", backend=backend) as f:
        tensors = f.get_tensors(copy=True)
        one = f.get_tensor("big", copy=True)
    assert tensors["big"].flags.owndata and tensors["big"].flags.writeable
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
    assert owned["b"].flags.owndata


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
