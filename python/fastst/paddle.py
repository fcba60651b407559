"""Paddle support: ``fastst.paddle`` has the functions of ``safetensors.paddle``.

Those are ``save``, ``save_file``, ``load`` and ``load_file``, with
``device``. CPU tensors are loaded and saved without copying their data."""

from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, List, Mapping, Optional, Union

import numpy as np

import fastst  # noqa: F401  (the package whole first: see fastst._dropin.hook._FacadeLoader.exec_module)

from . import _frameworks
from ._dtypes import NUMPY_DTYPES
from ._errors import rule_error
from ._faces.io import FrameworkIO

try:
    import paddle
except ImportError as _exc:
    raise _frameworks.missing("paddle", _exc) from _exc

from ._frameworks import paddle as _fw_paddle  # noqa: E402  (needs paddle imported first)

__all__ = ["save", "save_file", "load", "load_file"]

PathLike = Union[str, "os.PathLike[str]"]

#: paddle dtype -> header dtype name.
_HEADER_NAMES: Dict[Any, str] = {dt: name for name, dt in _fw_paddle.PADDLE_DTYPES.items()}
_HEADER_NAMES[paddle.uint32] = "U32"
_HEADER_NAMES[paddle.uint64] = "U64"


def _as_numpy(name: str, tensor: paddle.Tensor, keep_alive: List[Any]) -> np.ndarray:
    """A numpy array over ``tensor``'s memory (a CPU copy first for tensors
    on another place)."""
    if not tensor.is_contiguous():
        raise ValueError(
            f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. It "
            "either means you are trying to save tensors which are reference of each other in "
            "which case it's recommended to save only the full tensors, and reslice at load "
            "time, or simply call `.contiguous()` on your tensor to pack it before saving."
        )
    if not tensor.place.is_cpu_place():
        tensor = tensor.cpu()
    header = _HEADER_NAMES.get(tensor.dtype)
    if header is None:
        raise rule_error(
            "framework-dtype",
            "",
            f"tensor {name!r}: paddle dtype {tensor.dtype} has no safetensors equivalent",
            name,
        )
    np_dtype = NUMPY_DTYPES[header]
    shape = tuple(int(d) for d in tensor.shape)
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.empty(shape, dtype=np_dtype)
    keep_alive.append(tensor)
    raw = (ctypes.c_ubyte * (count * np_dtype.itemsize)).from_address(tensor.data_ptr())
    return np.frombuffer(memoryview(raw), dtype=np.uint8).view(np_dtype).reshape(shape)


def _to_numpy(tensors: Dict[str, paddle.Tensor], keep_alive: List[Any]) -> Dict[str, np.ndarray]:
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, paddle.Tensor] but received {type(tensors)}")
    for name, value in tensors.items():
        if not isinstance(value, paddle.Tensor):
            raise ValueError(
                f"Key `{name}` is invalid, expected paddle.Tensor but received {type(value)}"
            )
    return {name: _as_numpy(name, value, keep_alive) for name, value in tensors.items()}


_io = FrameworkIO("paddle", _to_numpy)


def save(
    tensors: Dict[str, paddle.Tensor],
    metadata: Optional[Dict[str, str]] = None,
    *,
    align: Optional[int] = None,
) -> bytes:
    """The bytes of a ``.safetensors`` file holding ``tensors`` and ``metadata``;
    ``align`` as :func:`fastst.numpy.save`'s."""
    return _io.save(tensors, metadata, align)


def save_file(
    tensors: Dict[str, paddle.Tensor],
    filename: PathLike,
    metadata: Optional[Dict[str, str]] = None,
    *,
    durable: Optional[bool] = None,
    align: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> None:
    """Writes ``tensors`` and optional string ``metadata`` to ``filename``,
    atomically; ``durable``, ``align``, and a URL with ``storage_options``
    as :func:`fastst.numpy.save_file` takes them."""
    _io.save_file(
        tensors,
        filename,
        metadata,
        durable=durable,
        align=align,
        storage_options=storage_options,
    )


def load(data: bytes, device: str = "cpu") -> Dict[str, paddle.Tensor]:
    """Every tensor of a ``.safetensors`` file given as bytes, on ``device``."""
    return _io.load(data, device)


def load_file(
    filename: PathLike,
    device: str = "cpu",
    *,
    backend: str = "mmap",
    copy: bool = False,
    dtype: Any = None,
    progress: Any = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> Dict[str, paddle.Tensor]:
    """Every tensor of ``filename``, in file order, on ``device`` (a paddle
    place such as ``"cpu"`` or ``"gpu:0"``). ``backend``, ``copy``, ``dtype``
    and ``progress`` as :func:`fastst.numpy.load_file`'s. A URL (``s3://``, ``gs://``,
    ``az://``, ``https://``...) is read with ranged GETs, configured by
    ``storage_options`` (see :class:`fastst.safe_open`)."""
    return _io.load_file(
        filename,
        device,
        backend=backend,
        copy=copy,
        dtype=dtype,
        progress=progress,
        storage_options=storage_options,
    )
