"""TensorFlow support: ``fastst.tensorflow`` has the functions of ``safetensors.tensorflow``.

Those are ``save``, ``save_file``, ``load`` and ``load_file``. Unlike the
reference it never modifies the dict it is given."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Union

import numpy as np

import fastst  # noqa: F401  (the package whole first: see fastst._dropin.hook._FacadeLoader.exec_module)

from . import _frameworks
from ._faces.io import FrameworkIO

try:
    import tensorflow as tf
except ImportError as _exc:
    raise _frameworks.missing("tensorflow", _exc) from _exc

__all__ = ["save", "save_file", "load", "load_file"]

PathLike = Union[str, "os.PathLike[str]"]


def _to_numpy(tensors: Dict[str, tf.Tensor], _keep_alive: List[Any]) -> Dict[str, np.ndarray]:
    # BF16/F8/F4 tensors come back with their ml_dtypes types.
    return {name: value.numpy() for name, value in tensors.items()}


_io = FrameworkIO("tensorflow", _to_numpy)


def save(
    tensors: Dict[str, tf.Tensor],
    metadata: Optional[Dict[str, str]] = None,
    *,
    align: Optional[int] = None,
) -> bytes:
    """The bytes of a ``.safetensors`` file holding ``tensors`` and ``metadata``;
    ``align`` as :func:`fastst.numpy.save`'s."""
    return _io.save(tensors, metadata, align)


def save_file(
    tensors: Dict[str, tf.Tensor],
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


def load(data: bytes) -> Dict[str, tf.Tensor]:
    """Every tensor of a ``.safetensors`` file given as bytes, as ``tf.Tensor``."""
    return _io.load(data)


def load_file(
    filename: PathLike,
    *,
    backend: str = "mmap",
    copy: bool = False,
    dtype: Any = None,
    progress: Any = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> Dict[str, tf.Tensor]:
    """Every tensor of ``filename``, in file order, as TensorFlow tensors.
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
