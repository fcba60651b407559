"""Whole files held in memory, as bytes, loaded as a framework's tensors.

:func:`deserialize` (the reference's) and :func:`load_bytes`; files read from
a path are loaded by :func:`fastst._read.safe_open.load_path`."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Tuple, Union

from .._fastst.read import parse_bytes
from .._frameworks import Where
from .._frameworks import backend as framework_backend
from .._write.tensors import BYTES_NAME

PathLike = Union[str, "os.PathLike[str]"]

__all__ = [
    "deserialize",
    "load_bytes",
]


def _entries(data: Any, caller: str) -> Iterator[Tuple[str, str, Tuple[int, ...], bytearray]]:
    """``(name, dtype, shape, bytes)`` of each tensor of a whole file held in
    memory, in file order; each ``bytes`` is a copy of its own. The header
    is parsed and validated before the first tensor is produced."""
    try:
        view = memoryview(data)
    except TypeError:
        got = type(data).__name__
        raise TypeError(f"{caller} expects a bytes-like object, got {got}") from None
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    start, entries, _metadata = parse_bytes(view, BYTES_NAME)
    return (
        (name, dtype, shape, bytearray(view[start + begin : start + end]))
        for name, dtype, shape, begin, end in entries
    )


def deserialize(data: Any) -> List[Tuple[str, Dict[str, Any]]]:
    """Parses the bytes of a whole file: ``[(name, {"dtype": "F32",
    "shape": [2, 3], "data": bytearray}), ...]`` in file order, each
    ``data`` an independent copy."""
    return [
        (name, {"dtype": dtype, "shape": list(shape), "data": data})
        for name, dtype, shape, data in _entries(data, "deserialize")
    ]


def load_bytes(data: Any, framework: str, device: Any = "cpu") -> Dict[str, Any]:
    """Every tensor of a ``.safetensors`` file given as bytes, as tensors of
    ``framework`` (a canonical name), in file order. Each tensor gets its own
    writable copy of its bytes, so none aliases ``data`` or another tensor."""
    found = framework_backend(framework)
    target = found.device(device)
    return {
        name: found.tensor(buffer, dtype, shape, target, Where("", name))
        for name, dtype, shape, buffer in _entries(data, "load")
    }
