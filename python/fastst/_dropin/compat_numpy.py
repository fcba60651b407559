"""The reference's private ``safetensors.numpy`` helpers, for callers that reach for them.

The names its module imports too. ``fastst.numpy`` re-exports them; they
are not part of fastst's own API."""

from __future__ import annotations

import sys
from typing import Any, Dict, Iterable, List, Tuple

import numpy as np

from .._dtypes import NUMPY_DTYPES, to_numpy
from .._read.load import deserialize
from .._read.safe_open import safe_open
from .._write.tensors import TensorSpec, serialize, serialize_file

#: Header dtype name -> numpy dtype, for the dtypes numpy has natively.
_TYPES: Dict[str, Any] = {
    name: NUMPY_DTYPES[name].type
    for name in ("F64", "F32", "F16", "I64", "U64", "I32", "U32", "I16", "U16", "I8", "U8")
}
_TYPES.update({"BOOL": bool, "C64": np.complex64})


def _getdtype(dtype_str: str) -> Any:
    """The numpy dtype of a header dtype name (KeyError for an unknown one)."""
    return _TYPES[dtype_str]


def _is_little_endian(tensor: np.ndarray) -> bool:
    """True when ``tensor``'s bytes are little-endian (or byte order does
    not apply)."""
    order = tensor.dtype.byteorder
    if order == "=":
        return sys.byteorder == "little"
    if order in ("<", "|"):
        return True
    if order == ">":
        return False
    raise ValueError(f"Unexpected byte order {order}")


def _flatten(tensor_dict: Dict[str, np.ndarray], keep_alive_buffer: List[Any]) -> Dict[str, Any]:
    """``TensorSpec``s over the arrays' memory (big-endian arrays are
    byte-swapped into copies kept in ``keep_alive_buffer``)."""
    specs: Dict[str, Any] = {}
    for name, array in tensor_dict.items():
        if not _is_little_endian(array):
            array = array.byteswap().view(array.dtype.newbyteorder("<"))
            keep_alive_buffer.append(array)
        array = np.ascontiguousarray(array)
        keep_alive_buffer.append(array)
        specs[name] = TensorSpec(
            dtype=array.dtype.name,
            shape=list(array.shape),
            data_ptr=int(array.ctypes.data),
            data_len=int(array.nbytes),
        )
    return specs


def _view2np(safeview: Iterable[Tuple[str, Dict[str, Any]]]) -> Dict[str, np.ndarray]:
    """Arrays from ``deserialize``'s ``(name, {"dtype", "shape", "data"})``
    pairs."""
    return {
        name: to_numpy(bytearray(view["data"]), view["dtype"], view["shape"])
        for name, view in safeview
    }


__all__ = [
    "TensorSpec",
    "deserialize",
    "safe_open",
    "serialize",
    "serialize_file",
    "_TYPES",
    "_getdtype",
    "_is_little_endian",
    "_flatten",
    "_view2np",
]
