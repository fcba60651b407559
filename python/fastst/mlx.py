"""MLX support: ``fastst.mlx`` has the functions of ``safetensors.mlx``.

Those are ``save``, ``save_file``, ``load`` and ``load_file``, BF16 included."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Union

import numpy as np

import fastst  # noqa: F401  (the package whole first: see fastst._dropin.hook._FacadeLoader.exec_module)

from . import _frameworks
from ._faces.io import FrameworkIO

try:
    import mlx.core as mx
except ImportError as _exc:
    raise _frameworks.missing("mlx", _exc) from _exc

__all__ = ["save", "save_file", "load", "load_file"]

PathLike = Union[str, "os.PathLike[str]"]


def _as_numpy(value: mx.array) -> np.ndarray:
    if value.dtype == mx.bfloat16:
        # numpy cannot take MLX's bfloat16 buffer format: reinterpret the bits.
        import ml_dtypes

        return np.asarray(value.view(mx.uint16)).view(ml_dtypes.bfloat16)
    return np.asarray(value)


def _to_numpy(tensors: Dict[str, mx.array], _keep_alive: List[Any]) -> Dict[str, np.ndarray]:
    return {name: _as_numpy(value) for name, value in tensors.items()}


_io = FrameworkIO("mlx", _to_numpy)


def save(
    tensors: Dict[str, mx.array],
    metadata: Optional[Dict[str, str]] = None,
    *,
    align: Optional[int] = None,
) -> bytes:
    """The bytes of a ``.safetensors`` file holding ``tensors`` and ``metadata``;
    ``align`` as :func:`fastst.numpy.save`'s."""
    return _io.save(tensors, metadata, align)


def save_file(
    tensors: Dict[str, mx.array],
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


def load(data: bytes) -> Dict[str, mx.array]:
    """Every tensor of a ``.safetensors`` file given as bytes, as ``mx.array``."""
    return _io.load(data)


def load_file(
    filename: PathLike,
    *,
    backend: str = "mmap",
    copy: bool = False,
    dtype: Any = None,
    progress: Any = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> Dict[str, mx.array]:
    """Every tensor of ``filename``, in file order, as MLX arrays.
    ``backend``, ``copy``, ``dtype`` and ``progress`` as
    :func:`fastst.numpy.load_file`'s. A URL (``s3://``, ``gs://``,
    ``az://``, ``https://``...) is read with ranged GETs, configured by
    ``storage_options`` (see :class:`fastst.safe_open`)."""
    return _io.load_file(
        filename,
        backend=backend,
        copy=copy,
        dtype=dtype,
        progress=progress,
        storage_options=storage_options,
    )
