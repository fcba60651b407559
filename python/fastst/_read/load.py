"""Whole files loaded as a framework's tensors, from bytes or from a path.

Whole files loaded as a framework's tensors: from bytes (:func:`deserialize`,
:func:`load_bytes`) or from a path (:func:`load_path`)."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from .._fastst import parse_bytes
from .._frameworks import Where
from .._frameworks import backend as framework_backend
from .._settings import prefetch_enabled, read_backend
from .._write.tensors import BYTES_NAME
from .safe_open import safe_open

PathLike = Union[str, "os.PathLike[str]"]

__all__ = [
    "deserialize",
    "load_bytes",
    "load_path",
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


def load_path(
    filename: Any,
    framework: str,
    *,
    device: Any = "cpu",
    backend: str = "mmap",
    copy: bool = False,
    dtype: Any = None,
    progress: Any = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """Every tensor of ``filename`` as tensors of ``framework``, in file
    order, on ``device``; ``backend`` is safe_open's, ``copy`` and ``dtype``
    are :meth:`fastst.safe_open.get_tensor`'s, ``progress`` is
    :meth:`fastst.safe_open.get_tensors`', ``storage_options`` safe_open's.
    Returns once every tensor has landed on its device. While the drop-in
    hook is on, ``FASTST_READ`` may turn ``backend="mmap"`` into ``"pread"``
    (:func:`fastst._settings.read_backend`)."""
    backend = read_backend(backend)
    # Views are touched after this returns: read the file ahead of that.
    views = not copy and dtype is None and backend == "mmap"
    with safe_open(
        filename,
        framework,
        device=device,
        backend=backend,
        prefetch=None,
        storage_options=storage_options,
    ) as f:
        if views and f._prefetch is not None and prefetch_enabled():
            f._prefetch.declare("all")
        tensors = f.get_tensors(copy=copy, dtype=dtype, progress=progress)
        f._settle()
        if f._prefetch is not None:
            f._prefetch.detach()
    return tensors
