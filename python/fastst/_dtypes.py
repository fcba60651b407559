"""Header dtype names <-> numpy dtypes, and the facts about each dtype that Python needs.

BF16 and the F8/F6/F4 kinds go through ``ml_dtypes``, which fastst imports
itself; the facts are taken from the core
(``_fastst.catalogue.dtype_facts()``) rather than repeated here."""

from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

import ml_dtypes
import numpy as np

from ._errors import rule_error
from ._fastst.catalogue import dtype_facts

#: Header name -> ``{"bits", "packed", "float"}``, as the core defines them.
FACTS: Dict[str, Dict[str, Any]] = dtype_facts()

#: Header name -> numpy dtype of one element (little-endian where it matters).
NUMPY_DTYPES: Dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "F32": np.dtype("<f4"),
    "C64": np.dtype("<c8"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F64": np.dtype("<f8"),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "F8_E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "F8_E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "F4": np.dtype(ml_dtypes.float4_e2m1fn),
    "F6_E2M3": np.dtype(ml_dtypes.float6_e2m3fn),
    "F6_E3M2": np.dtype(ml_dtypes.float6_e3m2fn),
}

#: Bits per element of the kinds stored packed (several per byte).
PACKED_BITS: Dict[str, int] = {n: f["bits"] for n, f in FACTS.items() if f["packed"]}

#: Floating-point kinds narrower than F32 (shown or taken as float32 where
#: numpy or a framework has nothing narrower).
NARROW_FLOATS = frozenset(n for n, f in FACTS.items() if f["float"] and f["bits"] < 32)

#: numpy dtype -> header name (native and explicit byte orders both map).
_FROM_NUMPY: Dict[np.dtype, str] = {}
for _name, _dt in NUMPY_DTYPES.items():
    _FROM_NUMPY[_dt] = _name
    _FROM_NUMPY[_dt.newbyteorder("=")] = _name


def header_dtype(dtype: np.dtype) -> str:
    """The header name of a numpy dtype; raises for dtypes the format lacks."""
    dt = np.dtype(dtype)
    name = _FROM_NUMPY.get(dt)
    if name is None and dt.byteorder == ">":
        name = _FROM_NUMPY.get(dt.newbyteorder("<"))
    if name is None:
        raise rule_error("framework-dtype", "", f"numpy dtype {dt} has no safetensors equivalent")
    return name


def target_dtype(spec: object) -> str:
    """The header name of a dtype given as a header name (``"F32"``), a numpy
    dtype or anything ``np.dtype`` accepts (``np.float32``, ``"bfloat16"``), or
    a framework dtype whose name numpy or ml_dtypes knows (``torch.float16``)."""
    if isinstance(spec, str) and spec in NUMPY_DTYPES:
        return spec
    if type(spec).__module__.split(".")[0] in ("torch", "paddle", "tensorflow", "mlx", "jax"):
        name = str(spec).rsplit(".", 1)[-1]
        spec = getattr(ml_dtypes, name, None) or name
    if isinstance(spec, str):
        ml = getattr(ml_dtypes, spec, None)
        if ml is not None:
            spec = ml
    try:
        dt = np.dtype(spec)  # type: ignore[call-overload]
    except TypeError as exc:
        raise rule_error(
            "framework-dtype", "", f"dtype {spec!r} is not a dtype fastst knows: {exc}"
        ) from None
    return header_dtype(dt)


def unpack_bits(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Unpacks ``count`` little-endian ``bits``-wide fields from a byte array.

    Element ``i`` occupies bits ``[i*bits, (i+1)*bits)`` of the byte string
    read as one little-endian integer (so for F4 the first element is the low
    nibble of the first byte).
    """
    if count == 0:
        return np.zeros(0, dtype=np.uint8)
    as_bits = np.unpackbits(np.asarray(packed, dtype=np.uint8), bitorder="little")
    fields = as_bits[: count * bits].reshape(count, bits)
    weights = (1 << np.arange(bits, dtype=np.uint8)).astype(np.uint8)
    return (fields * weights).sum(axis=1, dtype=np.uint8)


def pack_bits(values: np.ndarray, bits: int) -> bytes:
    """Inverse of :func:`unpack_bits`: packs the low ``bits`` of each byte."""
    flat = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    if (flat.size * bits) % 8:
        raise rule_error(
            "bad-tensor-size", "", f"{flat.size} elements of {bits} bits do not fill whole bytes"
        )
    fields = np.unpackbits(flat[:, None], axis=1, bitorder="little")[:, :bits]
    return np.packbits(fields.reshape(-1), bitorder="little").tobytes()


def to_numpy(buffer: object, dtype: str, shape: Sequence[int]) -> np.ndarray:
    """Wraps a tensor buffer as a numpy array without copying (packed kinds
    are unpacked to one byte per element, which copies)."""
    np_dtype = NUMPY_DTYPES[dtype]
    bits = PACKED_BITS.get(dtype)
    if bits is not None:
        count = 1
        for d in shape:
            count *= d
        raw = np.frombuffer(buffer, dtype=np.uint8)  # type: ignore[call-overload]
        return unpack_bits(raw, bits, count).view(np_dtype).reshape(tuple(shape))
    return np.frombuffer(buffer, dtype=np_dtype).reshape(tuple(shape))  # type: ignore[call-overload]


def shape_of(shape: Sequence[int]) -> Tuple[int, ...]:
    return tuple(int(d) for d in shape)
