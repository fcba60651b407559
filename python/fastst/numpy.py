"""``fastst.numpy``: save and load numpy arrays, with the same functions as
``safetensors.numpy`` (``save``, ``save_file``, ``load``, ``load_file``).

Beyond the reference: every dtype with a safetensors equivalent works,
including the ``ml_dtypes`` kinds (bfloat16, float8, float6, float4), and
arrays of any layout (strided, Fortran-ordered, reversed, big-endian) are
written correctly.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Union

import numpy as np

from ._dtypes import to_numpy
from ._fastst import parse_bytes
from ._open import safe_open
from ._write import BYTES_NAME, serialize, serialize_file

__all__ = ["save", "save_file", "load", "load_file", "save_sharded"]


def save(tensor_dict: Mapping[str, Any], metadata: Optional[Mapping[str, str]] = None) -> bytes:
    """The ``.safetensors`` bytes of ``tensor_dict`` (name -> array) with
    optional str -> str ``metadata``."""
    return serialize(tensor_dict, metadata=metadata)


def save_file(
    tensor_dict: Mapping[str, Any],
    filename: Union[str, os.PathLike[str]],
    metadata: Optional[Mapping[str, str]] = None,
    *,
    durable: Optional[bool] = None,
) -> None:
    """Writes ``tensor_dict`` (name -> array) to ``filename``, replacing it
    atomically; ``durable`` as for :func:`fastst.serialize_file` (by default
    the data is flushed to disk before replacing an existing file)."""
    serialize_file(tensor_dict, filename, metadata=metadata, durable=durable)


def load(data: bytes) -> Dict[str, np.ndarray]:
    """The arrays of a file held in memory, keyed by name; each array is a
    writable copy, independent of ``data`` and of the others."""
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    start, entries, _metadata = parse_bytes(view, BYTES_NAME)
    out: Dict[str, np.ndarray] = {}
    for name, dtype, shape, begin, end in entries:
        buffer = bytearray(view[start + begin : start + end])
        out[name] = to_numpy(buffer, dtype, shape)
    return out


def load_file(
    filename: Union[str, os.PathLike[str]],
    *,
    backend: str = "mmap",
    dtype: Any = None,
    copy: bool = False,
) -> Dict[str, np.ndarray]:
    """The arrays of ``filename``, keyed by name, in file order.

    ``dtype`` converts each tensor on load and ``copy=True`` asks for owned
    arrays rather than views of the file; both are passed on to
    :meth:`fastst.safe_open.get_tensor`.
    """
    with safe_open(filename, framework="np", backend=backend) as f:
        if dtype is None and not copy:
            return f.get_tensors()
        options: Dict[str, Any] = {}
        if dtype is not None:
            options["dtype"] = dtype
        if copy:
            options["copy"] = True
        return {name: f.get_tensor(name, **options) for name in f.offset_keys()}


def save_sharded(
    tensor_dict: Mapping[str, Any],
    folder: Union[str, os.PathLike[str]],
    *,
    max_shard_size: Union[int, str] = "5GB",
    metadata: Optional[Mapping[str, str]] = None,
    prefix: str = "model",
) -> str:
    """Writes ``tensor_dict`` as a sharded checkpoint in ``folder``: shards
    ``{prefix}-00001-of-0000N.safetensors`` of at most ``max_shard_size``
    bytes each (in the dict's order) and ``{prefix}.safetensors.index.json``,
    the layout the Hugging Face ecosystem reads (the index's metadata has
    ``total_size`` and ``total_parameters``). Returns the index's path,
    which :class:`fastst.safe_open` opens as one file."""
    from ._sharded import write_sharded

    arrays = {k: np.asarray(v) for k, v in tensor_dict.items()}
    sizes = {k: int(a.nbytes) for k, a in arrays.items()}

    def save_one(subset: Dict[str, Any], path: str, meta: Optional[Mapping[str, str]]) -> None:
        serialize_file(subset, path, metadata=meta)

    return write_sharded(
        arrays,
        folder,
        sizes,
        save_one,
        max_shard_size=max_shard_size,
        metadata=dict(metadata) if metadata is not None else None,
        prefix=prefix,
        index_metadata={"total_parameters": sum(int(a.size) for a in arrays.values())},
    )


# The reference's private helpers, for callers that import them.
from ._compat_numpy import *  # noqa: E402,F401,F403
