"""Conversion on load: every value of the 16- and 8-bit float kinds to F32,
and F32 to BF16/F16 with round-to-nearest-even, checked against
ml_dtypes/numpy; owned copies are independent of the file."""

from __future__ import annotations

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
