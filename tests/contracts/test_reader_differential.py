"""Differential tests: fastst and the reference package read the same files
and must return identical keys, metadata, shapes, dtypes and values."""

from __future__ import annotations

import fastst
import numpy as np
import pytest
import torch
from helpers.raw_files import raw_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open as ref_open

# Header dtype -> (bytes per element, torch dtype the reference gives)
DTYPES = {
    "BOOL": (1, torch.bool),
    "U8": (1, torch.uint8),
    "I8": (1, torch.int8),
    "U16": (2, torch.uint16),
    "I16": (2, torch.int16),
    "F16": (2, torch.float16),
    "BF16": (2, torch.bfloat16),
    "U32": (4, torch.uint32),
    "I32": (4, torch.int32),
    "F32": (4, torch.float32),
    "C64": (8, torch.complex64),
    "U64": (8, torch.uint64),
    "I64": (8, torch.int64),
    "F64": (8, torch.float64),
    "F8_E4M3": (1, torch.float8_e4m3fn),
    "F8_E5M2": (1, torch.float8_e5m2),
    "F8_E8M0": (1, torch.float8_e8m0fnu),
}
NUMPY_NATIVE = {
    "BOOL",
    "U8",
    "I8",
    "U16",
    "I16",
    "F16",
    "U32",
    "I32",
    "F32",
    "C64",
    "U64",
    "I64",
    "F64",
}


def random_bytes(rng: np.random.Generator, dtype: str, n: int) -> bytes:
    size = DTYPES[dtype][0]
    if dtype == "BOOL":
        return rng.integers(0, 2, n, dtype=np.uint8).tobytes()
    return rng.integers(0, 256, n * size, dtype=np.uint8).tobytes()


def as_bytes_torch(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5), (2, 0, 4), (2, 3, 4, 5)])
def test_every_dtype_and_shape_matches_reference(dtype: str, shape, write) -> None:
    rng = np.random.default_rng(abs(hash((dtype, shape))) % 2**32)
    n = int(np.prod(shape)) if shape else 1
    data = random_bytes(rng, dtype, n)
    path = write(raw_file({"x": (dtype, shape, data), "pad": ("U8", (3,), b"abc")}, {"k": "v"}))
    with fastst.safe_open(path, "numpy") as f, ref_open(path, "pt") as r:
        assert f.keys() == r.keys()
        assert f.offset_keys() == r.offset_keys()
        assert f.metadata() == r.metadata()
        ours = f.get_tensor("x")
        theirs = r.get_tensor("x")
        assert ours.shape == tuple(theirs.shape)
        assert ours.tobytes() == as_bytes_torch(theirs)
        assert ours.dtype.itemsize == DTYPES[dtype][0]
        # Values, not just bytes: floats widened to float64 agree (NaN == NaN).
        if theirs.dtype not in (torch.uint16, torch.uint32, torch.uint64) and n:
            if theirs.is_complex():
                expected = theirs.numpy()
                np.testing.assert_array_equal(ours, expected)
            elif theirs.is_floating_point():
                expected = theirs.to(torch.float64).numpy()
                with np.errstate(invalid="ignore"):
                    widened = ours.astype(np.float64)
                np.testing.assert_array_equal(widened, expected)
            else:
                np.testing.assert_array_equal(ours, theirs.numpy())
    if dtype in NUMPY_NATIVE:
        with fastst.safe_open(path, "np") as f, ref_open(path, "np") as r:
            a, b = f.get_tensor("x"), r.get_tensor("x")
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes()


def test_fnuz_kinds_have_ml_dtypes_values(write) -> None:
    import ml_dtypes

    raw = bytes(range(256))
    path = write(raw_file({"a": ("F8_E4M3FNUZ", [256], raw), "b": ("F8_E5M2FNUZ", [256], raw)}))
    with fastst.safe_open(path, "np") as f:
        a, b = f.get_tensor("a"), f.get_tensor("b")
    assert a.dtype == ml_dtypes.float8_e4m3fnuz and b.dtype == ml_dtypes.float8_e5m2fnuz
    # 0x80 is the single NaN of the FNUZ kinds; 0x00 is zero.
    assert np.isnan(a[0x80].astype(np.float32)) and a[0].astype(np.float32) == 0
    ref = torch.frombuffer(bytearray(raw), dtype=torch.float8_e4m3fnuz).float().numpy()
    np.testing.assert_array_equal(a.astype(np.float32), ref)


def test_packed_f4_and_f6_unpack_in_element_order(write) -> None:
    import ml_dtypes

    # F4: element 2i is the low nibble of byte i.
    values = np.arange(16, dtype=np.uint8)
    packed = bytes((values[2 * i] | (values[2 * i + 1] << 4)) for i in range(8))
    # F6: 4 elements of 6 bits in 3 bytes, little-endian bit order.
    six = [0b000001, 0b100000, 0b111111, 0b010101]
    bits = sum(v << (6 * i) for i, v in enumerate(six))
    path = write(
        raw_file({"f4": ("F4", [4, 4], packed), "f6": ("F6_E2M3", [4], bits.to_bytes(3, "little"))})
    )
    with fastst.safe_open(path, "np") as f:
        f4, f6 = f.get_tensor("f4"), f.get_tensor("f6")
    assert f4.dtype == ml_dtypes.float4_e2m1fn and f4.shape == (4, 4)
    np.testing.assert_array_equal(f4.reshape(-1).view(np.uint8), values)
    np.testing.assert_array_equal(f6.view(np.uint8), six)
    assert f6.dtype == ml_dtypes.float6_e2m3fn


names = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12
).filter(lambda s: s != "__metadata__")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tensors=st.dictionaries(
        names,
        st.tuples(
            st.sampled_from(sorted(DTYPES)),
            st.lists(st.integers(0, 5), max_size=4),
            st.integers(0, 2**31),
        ),
        max_size=6,
    ),
    metadata=st.none() | st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
)
def test_random_files_match_reference(tensors, metadata, write) -> None:
    spec = {}
    for name, (dtype, shape, seed) in tensors.items():
        n = int(np.prod(shape)) if shape else 1
        spec[name] = (dtype, shape, random_bytes(np.random.default_rng(seed), dtype, n))
    path = write(raw_file(spec, metadata))
    with fastst.safe_open(path, "np") as f, ref_open(path, "pt") as r:
        assert f.keys() == r.keys()
        assert f.metadata() == r.metadata()
        for k in f.keys():
            ours, theirs = f.get_tensor(k), r.get_tensor(k)
            assert ours.shape == tuple(theirs.shape)
            assert ours.tobytes() == as_bytes_torch(theirs)
