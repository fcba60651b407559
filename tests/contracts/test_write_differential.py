"""Differential tests of the writer against the reference package: the same
tensors and metadata (at most one key: the reference orders more keys by
hash) give the same bytes; each reads what the other writes; random
dtypes, shapes and memory layouts round-trip exactly."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import fastst
import fastst.numpy as fnp
import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy as ref_numpy
import safetensors.torch as ref_torch
import torch
from fastst._dtypes import NUMPY_DTYPES, PACKED_BITS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

#: Header dtype -> reference TensorSpec dtype name (every dtype it can write).
REF_SPEC = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "U16": "uint16",
    "I16": "int16",
    "F16": "float16",
    "BF16": "bfloat16",
    "U32": "uint32",
    "I32": "int32",
    "F32": "float32",
    "C64": "complex64",
    "U64": "uint64",
    "I64": "int64",
    "F64": "float64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F8_E8M0": "float8_e8m0fnu",
}
from helpers.torch_kinds import TORCH_KINDS as TORCH  # noqa: E402

ALL_DTYPES = sorted(NUMPY_DTYPES)


def random_array(rng: np.random.Generator, dtype: str, shape: Tuple[int, ...]) -> np.ndarray:
    """Random values of a header dtype, as numpy (packed kinds unpacked)."""
    np_dtype = NUMPY_DTYPES[dtype]
    n = int(np.prod(shape)) if shape else 1
    if dtype == "BOOL":
        raw = rng.integers(0, 2, n, dtype=np.uint8)
    elif dtype in PACKED_BITS:
        raw = rng.integers(0, 1 << PACKED_BITS[dtype], n, dtype=np.uint8)
    else:
        raw = rng.integers(0, 256, n * np_dtype.itemsize, dtype=np.uint8)
    return raw.view(np_dtype).reshape(shape)


def le_bytes(a: np.ndarray) -> bytes:
    """What a correct writer stores for ``a`` (C order, little-endian)."""
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()


def ref_serialize(tensors: Dict[str, np.ndarray], metadata: Optional[Dict[str, str]]) -> bytes:
    """The reference's bytes for contiguous little-endian copies of ``tensors``."""
    keep: List[np.ndarray] = []
    specs = {}
    for name, a in tensors.items():
        dtype = fastst._dtypes.header_dtype(a.dtype)
        c = np.frombuffer(le_bytes(a), dtype=np.uint8).copy()
        keep.append(c)
        specs[name] = safetensors.TensorSpec(
            dtype=REF_SPEC[dtype],
            shape=list(a.shape),
            data_ptr=c.ctypes.data,
            data_len=c.nbytes,
        )
    return bytes(safetensors.serialize(specs, metadata=metadata))


def header_of(data: bytes) -> dict:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n])


# --------------------------------------------------------------------- bytes


def test_one_tensor_of_every_dtype_matches_reference_bytes() -> None:
    rng = np.random.default_rng(0)
    tensors = {
        f"t{i:02d}_{d}": random_array(rng, d, (3, 2)) for i, d in enumerate(sorted(REF_SPEC))
    }
    ours = fastst.serialize(tensors, metadata={"format": "np"})
    assert ours == ref_serialize(tensors, {"format": "np"})
    # And the order is by dtype first: names alone would give another order.
    order = [k for k in header_of(ours) if k != "__metadata__"]
    assert order != sorted(order)


@pytest.mark.parametrize("metadata", [None, {}, {"format": "pt"}, {'é\n"\\': "\x00\u2028😀"}])
def test_metadata_forms_match_reference(metadata) -> None:
    tensors = {"a": np.arange(5, dtype=np.float32), "b": np.zeros((2, 0), np.int8)}
    assert fnp.save(tensors, metadata) == ref_numpy.save(tensors, metadata)


def test_awkward_names_match_reference() -> None:
    names = [
        "",
        " ",
        "a\x01b",
        "\n\t\r\x08\x0c",
        '"quoted"',
        "back\\slash",
        "/",
        "\x7f",
        "日本",
        "😀",
        "\u2028\u2029",
        "a" * 300,
        "A",
        "a",
        "_",
        "0",
    ]
    tensors = {n: np.full(2, i, dtype=np.int16) for i, n in enumerate(names)}
    assert fnp.save(tensors) == ref_numpy.save(tensors)


def test_empty_dict_and_scalars_match_reference() -> None:
    assert fnp.save({}) == ref_numpy.save({})
    t = {"s": np.array(2.5, dtype=np.float64), "z": np.zeros((0,), dtype=np.float16)}
    assert fnp.save(t) == ref_numpy.save(t)


def test_f4_matches_reference_torch_packing() -> None:
    rng = np.random.default_rng(1)
    values = rng.integers(0, 16, (3, 8), dtype=np.uint8)
    packed = (values[:, 0::2] | (values[:, 1::2] << 4)).astype(np.uint8)
    t = torch.from_numpy(packed.copy()).view(torch.float4_e2m1fn_x2)
    theirs = ref_torch.save({"q": t, "w": torch.ones(3)})
    ours = fastst.serialize(
        {"q": values.view(ml_dtypes.float4_e2m1fn), "w": np.ones(3, np.float32)}
    )
    assert ours == theirs


def test_spec_and_dict_inputs_match_reference() -> None:
    a = np.arange(6, dtype=np.float32)
    ref = safetensors.serialize(
        {
            "a": safetensors.TensorSpec(
                dtype="float32", shape=[2, 3], data_ptr=a.ctypes.data, data_len=a.nbytes
            )
        }
    )
    ours_spec = fastst.serialize(
        {
            "a": fastst.TensorSpec(
                dtype="float32", shape=[2, 3], data_ptr=a.ctypes.data, data_len=a.nbytes
            )
        }
    )
    # The reference's own TensorSpec objects are accepted too.
    ours_refspec = fastst.serialize(
        {
            "a": safetensors.TensorSpec(
                dtype="float32", shape=[2, 3], data_ptr=a.ctypes.data, data_len=a.nbytes
            )
        }
    )
    ours_dict = fastst.serialize({"a": {"dtype": "float32", "shape": [2, 3], "data": a.tobytes()}})
    ours_dict_f32 = fastst.serialize({"a": {"dtype": "F32", "shape": (2, 3), "data": a.data}})
    assert bytes(ref) == ours_spec == ours_refspec == ours_dict == ours_dict_f32


def test_layouts_write_what_reference_writes_for_a_contiguous_copy() -> None:
    base = np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5)
    cases = {
        "fortran": np.asfortranarray(base),
        "strided": base[::2, 1::3, ::2],
        "reversed": base[::-1, :, ::-1],
        "transposed": base.transpose(2, 0, 1),
        "bigendian": base.astype(">f4"),
        "big_strided": base.astype(">f4")[:, ::-2],
    }
    for name, a in cases.items():
        assert fnp.save({"x": a}) == ref_numpy.save({"x": np.ascontiguousarray(a)}), name


# ------------------------------------------------------------ readability


def test_reference_reads_every_dtype_fastst_writes(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    tensors = {d: random_array(rng, d, (2, 4)) for d in sorted(REF_SPEC)}
    path = tmp_path / "ours.safetensors"
    fnp.save_file(tensors, path, metadata={"k": "v"})
    with safetensors.safe_open(path, "pt") as f:
        assert f.metadata() == {"k": "v"}
        assert sorted(f.keys()) == sorted(tensors)
        for name, a in tensors.items():
            t = f.get_tensor(name)
            assert t.dtype == TORCH[name]
            assert tuple(t.shape) == a.shape
            assert t.contiguous().view(torch.uint8).numpy().tobytes() == le_bytes(a)


def test_fastst_reads_what_reference_writes(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    tensors = {d: random_array(rng, d, (3, 2)) for d in sorted(REF_SPEC)}
    data = ref_serialize(tensors, {"m": "1"})
    path = tmp_path / "ref.safetensors"
    path.write_bytes(data)
    for loaded in (fnp.load(data), fnp.load_file(path)):
        assert sorted(loaded) == sorted(tensors)
        for name, a in tensors.items():
            assert loaded[name].dtype == a.dtype
            assert le_bytes(loaded[name]) == le_bytes(a)
    des = dict(fastst.deserialize(data))
    ref_des = dict(safetensors.deserialize(data))
    assert des.keys() == ref_des.keys()
    for name in des:
        assert des[name]["dtype"] == ref_des[name]["dtype"]
        assert des[name]["shape"] == ref_des[name]["shape"]
        assert des[name]["data"] == ref_des[name]["data"]
        assert isinstance(des[name]["data"], bytearray)


# ------------------------------------------------------------- hypothesis

NAMES = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=12
).filter(lambda s: s != "__metadata__")
SHAPES = st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple)
LAYOUTS = st.sampled_from(["c", "fortran", "strided", "reversed", "transposed", "bigendian"])


def with_layout(a: np.ndarray, layout: str) -> np.ndarray:
    """``a``'s values in another memory layout (same logical array)."""
    if layout == "fortran":
        return np.asfortranarray(a)
    if layout == "strided":
        if a.ndim == 0:
            return a
        return np.repeat(a[..., None], 3, axis=-1)[..., 1]
    if layout == "reversed":
        if a.ndim == 0:
            return a
        return np.flip(np.flip(a).copy())
    if layout == "transposed":
        return np.ascontiguousarray(a.T).T
    if layout == "bigendian":
        if a.dtype.itemsize > 1 and a.dtype.kind in "biufc":
            return a.astype(a.dtype.newbyteorder(">"))
        return a
    return a


@st.composite
def tensor_dicts(draw, dtypes: List[str]) -> Dict[str, np.ndarray]:
    names = draw(st.lists(NAMES, min_size=0, max_size=5, unique=True))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    out = {}
    for name in names:
        dtype = draw(st.sampled_from(dtypes))
        shape = draw(SHAPES)
        if dtype == "F4":
            shape = shape + (2,)
        elif dtype in ("F6_E2M3", "F6_E3M2"):
            shape = shape + (4,)
        out[name] = with_layout(random_array(rng, dtype, shape), draw(LAYOUTS))
    return out


SMALL_META = st.one_of(st.none(), st.dictionaries(NAMES, st.text(max_size=20), max_size=1))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensors=tensor_dicts(sorted(REF_SPEC)), metadata=SMALL_META)
def test_hypothesis_bytes_equal_reference(tensors, metadata) -> None:
    ours = fastst.serialize(tensors, metadata)
    theirs = ref_serialize(tensors, metadata)
    if not tensors and metadata == {}:
        # The reference writes the invalid header `{},"__metadata__":{}}` here.
        assert header_of(ours) == {"__metadata__": {}}
        with pytest.raises(ValueError):
            header_of(theirs)
        return
    assert ours == theirs


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    tensors=tensor_dicts(ALL_DTYPES),
    metadata=st.one_of(st.none(), st.dictionaries(NAMES, st.text(max_size=20), max_size=4)),
)
@pytest.mark.slow
def test_hypothesis_round_trip_every_dtype_and_layout(tmp_path: Path, tensors, metadata) -> None:
    path = tmp_path / "rt.safetensors"
    fnp.save_file(tensors, path, metadata=metadata)
    data = path.read_bytes()
    assert data == fnp.save(tensors, metadata=metadata)
    for loaded in (fnp.load_file(path), fnp.load(data)):
        assert list(loaded) == [n for n in fastst.safe_open(path, "np").offset_keys()]
        assert sorted(loaded) == sorted(tensors)
        for name, a in tensors.items():
            got = loaded[name]
            assert got.shape == a.shape
            assert got.dtype == a.dtype.newbyteorder("<") or got.dtype == a.dtype
            assert le_bytes(got) == le_bytes(a), name
    with fastst.safe_open(path, "np") as f:
        expected_meta = None if metadata is None else dict(metadata)
        assert f.metadata() == expected_meta
    # Metadata keys are written sorted; the header is space-padded to 8.
    header = header_of(data)
    if metadata:
        assert list(header["__metadata__"]) == sorted(metadata)
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0
