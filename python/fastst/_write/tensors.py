"""Tensors to ``.safetensors`` bytes and files, and the input side of writing them.

``serialize`` and ``serialize_file``; their input side is ``TensorSpec``
(the reference package's), :func:`prepare` (one input) and :func:`plan` (a
dict of them), and :func:`check_align` (the ``align=`` argument of every
writer).

The layout, header and file handling are in the compiled core; this module
turns each input into a dtype, a shape and a stream of little-endian,
C-ordered byte chunks. Contiguous little-endian arrays are written straight
from their memory; any other layout (strided, Fortran-ordered, reversed,
big-endian) is converted a few megabytes at a time, so the extra memory a
save needs stays small whatever the inputs.
"""

from __future__ import annotations

import ctypes
import operator
import os
from collections import abc
from typing import (
    Any,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import numpy as np

from .._dtypes import NUMPY_DTYPES, PACKED_BITS, header_dtype, pack_bits
from .._errors import BYTES_NAME, UnsupportedDtypeError, rule_error, save_errors
from .._fastst.read import DEFAULT_HEADER_CAP
from .._fastst.write import MAX_ALIGN, WritePlan
from .._paths import os_path, readable
from .._sources.remote import refuse_local_options
from . import remote as _remote
from .shared_folder import drop_sharded_layout

PathLike = Union[str, "os.PathLike[str]"]

#: Bytes converted at a time for inputs that are not already contiguous
#: little-endian memory.
CHUNK_BYTES = 8 << 20

#: The alignment of the data section without ``align=``: the header is
#: padded with spaces to a multiple of 8 bytes, as the reference pads it.
DEFAULT_ALIGN = 8

#: Spellings of dtypes accepted by ``TensorSpec`` and dict inputs (the
#: reference's constructor names), besides the header names themselves.
SPEC_DTYPES: Dict[str, str] = {
    "bool": "BOOL",
    "int8": "I8",
    "uint8": "U8",
    "int16": "I16",
    "uint16": "U16",
    "int32": "I32",
    "uint32": "U32",
    "int64": "I64",
    "uint64": "U64",
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
    "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2": "F8_E5M2",
    "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "float8_e8m0fnu": "F8_E8M0",
    "float4_e2m1fn_x2": "F4",
    "complex64": "C64",
}


def _fail(where: str, tensor: str, rule: str, message: str) -> BaseException:
    return rule_error(rule, where, f"tensor {tensor!r}: {message}", tensor)


class TensorSpec:
    """Describes one tensor held in raw memory, as the reference's
    ``TensorSpec``: ``TensorSpec(dtype=, shape=, data_ptr=, data_len=)``.

    ``dtype`` is a constructor-style name (``"float32"``, ``"bfloat16"``,
    ``"float4_e2m1fn_x2"``...) or a header name (``"F32"``). For
    ``float4_e2m1fn_x2`` (two F4 values per byte) ``shape`` is the storage
    shape and the last dimension is doubled, as the reference does.
    The memory at ``data_ptr`` must stay valid while it is serialised.
    """

    __slots__ = ("_dtype", "_shape", "_data_ptr", "_data_len")

    def __init__(self, *, dtype: str, shape: Sequence[int], data_ptr: int, data_len: int) -> None:
        name = _spec_dtype(dtype)
        if name is None:
            known = ", ".join(SPEC_DTYPES)
            raise rule_error(
                "unknown-spec-dtype", "", f"Unknown dtype {dtype!r}. Supported dtypes: {known}"
            )
        dims = [int(d) for d in shape]
        if any(d < 0 for d in dims):
            raise ValueError(f"shape {dims} has a negative dimension")
        if dtype == "float4_e2m1fn_x2" and dims:
            dims[-1] *= 2
        if int(data_ptr) < 0 or int(data_len) < 0:
            raise ValueError("data_ptr and data_len must be non-negative")
        self._dtype = name
        self._shape = dims
        self._data_ptr = int(data_ptr)
        self._data_len = int(data_len)

    @property
    def dtype(self) -> str:
        """The header dtype name (``"F32"``, ``"BF16"``...)."""
        return self._dtype

    @property
    def shape(self) -> List[int]:
        """The logical shape, in elements."""
        return list(self._shape)

    @property
    def data_ptr(self) -> int:
        return self._data_ptr

    @property
    def data_len(self) -> int:
        return self._data_len

    def __repr__(self) -> str:
        return (
            f"TensorSpec(dtype={self._dtype!r}, shape={self._shape}, "
            f"data_ptr={self._data_ptr}, data_len={self._data_len})"
        )


def _spec_dtype(name: object) -> Optional[str]:
    if not isinstance(name, str):
        return None
    if name in NUMPY_DTYPES:
        return name
    return SPEC_DTYPES.get(name)


class _Tensor:
    """One input ready to write: header dtype, shape and its bytes, either
    one C-contiguous uint8 buffer or an iterator of them (evaluated lazily,
    while the file is written)."""

    __slots__ = ("name", "dtype", "shape", "data")

    def __init__(self, name: str, dtype: str, shape: Tuple[int, ...], data: Any) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self.data = data


def _pieces(a: np.ndarray) -> Iterator[np.ndarray]:
    """Splits ``a`` into sub-arrays of at most about CHUNK_BYTES that, taken
    in order, cover its elements in C order."""
    if a.ndim == 0 or a.nbytes <= CHUNK_BYTES:
        yield a
        return
    if a.ndim == 1:
        step = max(1, CHUNK_BYTES // max(1, a.itemsize))
        for i in range(0, a.shape[0], step):
            yield a[i : i + step]
        return
    row = a[0].nbytes
    if row <= CHUNK_BYTES:
        step = max(1, CHUNK_BYTES // max(1, row))
        for i in range(0, a.shape[0], step):
            yield a[i : i + step]
    else:
        for i in range(a.shape[0]):
            yield from _pieces(a[i])


def _converted(a: np.ndarray, little: np.dtype) -> Iterator[Any]:
    """C-ordered little-endian bytes of ``a``, a few megabytes at a time."""
    for piece in _pieces(a):
        yield np.ascontiguousarray(piece, dtype=little).reshape(-1).view(np.uint8)


def _packed(a: np.ndarray, bits: int) -> Iterator[Any]:
    """Packed bytes of a sub-byte kind, converted a chunk at a time (chunks
    hold a multiple of 8 elements, so every chunk fills whole bytes)."""
    # A strided array is read through its flat iterator, a chunk at a time,
    # rather than copied whole; packing needs 8 bytes of scratch per element.
    flat: Any = a.reshape(-1) if a.flags.c_contiguous else a.flat
    step = max(8, (CHUNK_BYTES // 64) * 8)
    for i in range(0, a.size, step):
        yield pack_bits(np.asarray(flat[i : i + step]), bits)


def _array_data(a: np.ndarray, dtype: str) -> Any:
    bits = PACKED_BITS.get(dtype)
    if bits is not None:
        return _packed(a, bits)
    little = a.dtype.newbyteorder("<")
    if a.flags.c_contiguous and a.dtype == little and a.dtype.isnative:
        return a.reshape(-1).view(np.uint8)  # written straight from its memory
    return _converted(a, little)


def _raw_data(address: int, length: int) -> Any:
    if not length:
        return b""
    memory = (ctypes.c_ubyte * length).from_address(address)
    return np.frombuffer(memoryview(memory), dtype=np.uint8)


def byte_view(data: Any) -> Any:
    """The bytes of the buffer ``data`` as a flat, C-contiguous byte view (a numpy array
    of any dtype viewed as uint8; another buffer cast, or copied when not contiguous);
    ``TypeError`` for an object that is no buffer."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    view = memoryview(data)
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _shape_of(where: str, name: str, shape: Any) -> Tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError) as exc:
        raise _fail(where, name, "bad-shape", f"shape {shape!r} is not a sequence of ints") from exc
    if any(d < 0 for d in dims):
        raise _fail(where, name, "bad-shape", f"shape {list(dims)} has a negative dimension")
    return dims


def prepare(where: str, name: str, value: Any) -> _Tensor:
    """Turns one input (an array, ``TensorSpec``, dict form, bytes, or
    anything numpy reads) into a :class:`_Tensor`, or raises naming
    ``where`` and the tensor."""
    if isinstance(value, np.ndarray):
        return _from_array(where, name, value)
    # Raw memory described by a TensorSpec (ours or the reference's).
    if hasattr(value, "data_ptr") and hasattr(value, "data_len") and hasattr(value, "shape"):
        ptr, length = value.data_ptr, value.data_len
        if isinstance(ptr, int) and isinstance(length, int):
            dtype = _spec_dtype(value.dtype)
            if dtype is None:
                raise _fail(where, name, "unsupported-dtype", f"unknown dtype {value.dtype!r}")
            return _Tensor(name, dtype, _shape_of(where, name, value.shape), _raw_data(ptr, length))
    # The older dict form {"dtype": ..., "shape": ..., "data": bytes-like}.
    if isinstance(value, abc.Mapping):
        if not {"dtype", "shape", "data"} <= set(value):
            raise TypeError(
                f"{where}: tensor {name!r}: a dict input needs the keys "
                f"'dtype', 'shape' and 'data', got {sorted(map(str, value))}"
            )
        dtype = _spec_dtype(value["dtype"])
        if dtype is None:
            raise _fail(where, name, "unsupported-dtype", f"unknown dtype {value['dtype']!r}")
        shape = _shape_of(where, name, value["shape"])
        if value["dtype"] == "float4_e2m1fn_x2" and shape:
            shape = shape[:-1] + (shape[-1] * 2,)
        try:
            data = byte_view(value["data"])
        except TypeError:
            raise TypeError(
                f"{where}: tensor {name!r}: 'data' must be a bytes-like object, "
                f"got {type(value['data']).__name__}"
            ) from None
        return _Tensor(name, dtype, shape, data)
    # Plain bytes are a U8 vector (numpy alone would make them one string).
    if isinstance(value, (bytes, bytearray)):
        return _from_array(where, name, np.frombuffer(value, dtype=np.uint8))
    # Anything else numpy can read: scalars, __array__, buffers.
    if isinstance(value, np.generic) or _array_like(value):
        try:
            array = np.asarray(value)
        except Exception as exc:
            raise TypeError(
                f"{where}: tensor {name!r}: cannot read a {type(value).__name__} as an array: {exc}"
            ) from exc
        return _from_array(where, name, array)
    raise TypeError(
        f"{where}: tensor {name!r}: expected an array (numpy, the buffer protocol "
        f"or __array__), got {type(value).__name__}"
    )


def _from_array(where: str, name: str, array: np.ndarray) -> _Tensor:
    try:
        dtype = header_dtype(array.dtype)
    except UnsupportedDtypeError:
        raise _fail(
            where,
            name,
            "unsupported-dtype",
            f"numpy dtype {array.dtype} has no safetensors equivalent "
            f"(supported: bool, (u)int8-64, float16/32/64, complex64 and the "
            f"ml_dtypes bfloat16, float8, float6 and float4 kinds)",
        ) from None
    return _Tensor(name, dtype, array.shape, _array_data(array, dtype))


def _array_like(value: Any) -> bool:
    if hasattr(value, "__array__") or hasattr(value, "__array_interface__"):
        return True
    try:
        memoryview(value)
    except TypeError:
        return False
    return True


def check_align(where: str, align: Any) -> int:
    """The alignment of the data section asked for with ``align=`` (None:
    :data:`DEFAULT_ALIGN`); anything but an int power of two from 1 to 4096
    raises :class:`fastst.SerializeError` (a ``ValueError``) with rule
    ``bad-alignment``."""
    if align is None:
        return DEFAULT_ALIGN
    if not isinstance(align, bool):
        try:
            value = operator.index(align)
        except TypeError:
            value = None
        if value is not None and 1 <= value <= MAX_ALIGN and value & (value - 1) == 0:
            return value
    raise rule_error(
        "bad-alignment",
        where,
        f"align={align!r} is not a power of two from 1 to {MAX_ALIGN} "
        "(the data section starts at a multiple of it)",
    )


def check_metadata(where: str, metadata: Any) -> Optional[List[Tuple[str, str]]]:
    if metadata is None:
        return None
    if not isinstance(metadata, abc.Mapping):
        raise TypeError(
            f"{where}: metadata must be a dict mapping str to str, got {type(metadata).__name__}"
        )
    pairs: List[Tuple[str, str]] = []
    for key, val in metadata.items():
        if not isinstance(key, str):
            raise TypeError(
                f"{where}: metadata key {key!r} is a {type(key).__name__}; keys must be str"
            )
        if not isinstance(val, str):
            raise TypeError(
                f"{where}: metadata value for key {key!r} is a {type(val).__name__}; "
                "values must be str"
            )
        pairs.append((key, val))
    return pairs


def plan(
    where: str, tensor_dict: Any, metadata: Any, header_cap: int, align: Any = None
) -> Tuple[WritePlan, List[Any]]:
    """The layout of the file ``tensor_dict`` and ``metadata`` make (its
    data aligned to ``align``, see :func:`check_align`), and the data of
    each tensor (in ``tensor_dict``'s order) to pass to its ``write_file``
    or ``to_bytes``; raises naming ``where`` and the tensor at fault."""
    if not isinstance(tensor_dict, abc.Mapping):
        raise TypeError(
            f"{where}: expected a dict of tensor name -> tensor, got {type(tensor_dict).__name__}"
        )
    meta = check_metadata(where, metadata)
    unit = check_align(where, align)
    tensors: List[_Tensor] = []
    for name, value in tensor_dict.items():
        if not isinstance(name, str):
            raise TypeError(
                f"{where}: tensor names must be str, got {type(name).__name__} {name!r}"
            )
        tensors.append(prepare(where, name, value))
    entries = [(t.name, t.dtype, list(t.shape)) for t in tensors]
    return WritePlan(entries, meta, where, header_cap, unit), [t.data for t in tensors]


def serialize(
    tensor_dict: Mapping[str, Any],
    metadata: Optional[Mapping[str, str]] = None,
    *,
    header_cap: int = DEFAULT_HEADER_CAP,
    align: Optional[int] = None,
) -> bytes:
    """The ``.safetensors`` bytes of ``tensor_dict`` (name -> array, or
    ``TensorSpec``, or ``{"dtype", "shape", "data"}`` dict) with optional
    str -> str ``metadata``. Tensors are laid out as the reference writer
    lays them out; metadata keys are written sorted.

    ``align`` (a power of two from 1 to 4096) pads the header with spaces so
    that the data section starts at a multiple of it (what readers that map
    or read the file page by page, or hand tensors to kernels wanting
    aligned memory, prefer); the default, None, pads to a multiple of 8 as
    the reference does, and so do 1, 2 and 4."""
    layout, sources = plan(BYTES_NAME, tensor_dict, metadata, header_cap, align)
    return layout.to_bytes(BYTES_NAME, sources)


def serialize_file(
    tensor_dict: Mapping[str, Any],
    filename: PathLike,
    metadata: Optional[Mapping[str, str]] = None,
    *,
    durable: Optional[bool] = None,
    header_cap: int = DEFAULT_HEADER_CAP,
    align: Optional[int] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> None:
    """Writes ``tensor_dict`` to ``filename`` (see :func:`serialize`, which
    ``align`` is as for).

    The file is written to a temporary file in the same folder and renamed
    over ``filename`` once complete: readers never see a partial file, a
    file open with ``safe_open`` keeps its old contents, and on any error the
    old file is left untouched and the temporary file removed.

    ``durable`` says whether the data is flushed to disk before the rename,
    so that a system crash cannot leave a truncated file in its place. The
    default (``None``) flushes when an existing file is replaced, which is
    when a crash could cost good data, and skips the flush for a new file
    (as fast as a plain write); ``True`` always flushes, ``False`` never.

    A URL (``s3://``, ``gs://``, ``az://``...) is written with a multipart
    upload, configured by ``storage_options`` as reading is (else by the
    environment): the object appears only when the upload completes, and on
    any error the upload is aborted and an old object left as it was
    (``durable`` does not apply; see ``docs/remote.md``).
    """
    if _remote.is_url(filename):
        url = str(filename)
        layout, sources = plan(readable(url), tensor_dict, metadata, header_cap, align)
        _remote.upload(layout, url, sources, storage_options)
        return
    refuse_local_options(storage_options, filename)
    path = os_path(filename)
    name = readable(path)
    layout, sources = plan(name, tensor_dict, metadata, header_cap, align)
    with save_errors(name):
        layout.write_file(path, name, sources, durable)
    drop_sharded_layout(path)
