"""``fastst.numpy``: save and load numpy arrays, with the functions of ``safetensors.numpy``.

Those are ``save``, ``save_file``, ``load`` and ``load_file``.

Beyond the reference: every dtype with a safetensors equivalent works,
including the ``ml_dtypes`` kinds (bfloat16, float8, float6, float4), and
arrays of any layout (strided, Fortran-ordered, reversed, big-endian) are
written correctly.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import numpy as np

import fastst  # noqa: F401  (the package whole first: see fastst._dropin.hook._FacadeLoader.exec_module)

from ._faces.io import FrameworkIO
from ._write.sharded import write_sharded, write_sharded_from
from ._write.streaming import Layout

__all__ = ["save", "save_file", "load", "load_file", "save_sharded"]


def _arrays(tensor_dict: Mapping[str, Any], _keep_alive: List[Any]) -> Mapping[str, Any]:
    return tensor_dict  # the writer takes numpy arrays (and TensorSpec) as they are


_io = FrameworkIO("numpy", _arrays)


def save(
    tensor_dict: Mapping[str, Any],
    metadata: Optional[Mapping[str, str]] = None,
    *,
    align: Optional[int] = None,
) -> bytes:
    """The ``.safetensors`` bytes of ``tensor_dict`` (name -> array) with
    optional str -> str ``metadata``; ``align`` (a power of two up to 4096)
    starts the data section at a multiple of it, as for
    :func:`fastst.serialize`."""
    return _io.save(tensor_dict, metadata, align)


def save_file(
    tensor_dict: Mapping[str, Any],
    filename: Union[str, os.PathLike[str]],
    metadata: Optional[Mapping[str, str]] = None,
    *,
    durable: Optional[bool] = None,
    align: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> None:
    """Writes ``tensor_dict`` (name -> array) to ``filename``, replacing it
    atomically; ``durable`` and ``align`` as for
    :func:`fastst.serialize_file` (by default the data is flushed to disk
    before replacing an existing file, and the header padded to a multiple
    of 8 bytes). A URL (``s3://``, ``gs://``, ``az://``...) is written with
    a multipart upload, configured by ``storage_options`` (see
    :func:`fastst.serialize_file`)."""
    _io.save_file(tensor_dict, filename, metadata, durable, align, storage_options)


def load(data: bytes) -> Dict[str, np.ndarray]:
    """The arrays of a file held in memory, keyed by name; each array is a
    writable copy, independent of ``data`` and of the others."""
    return _io.load(data)


def load_file(
    filename: Union[str, os.PathLike[str]],
    *,
    backend: str = "mmap",
    dtype: Any = None,
    copy: bool = False,
    progress: Any = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> Dict[str, np.ndarray]:
    """The arrays of ``filename``, keyed by name, in file order.

    ``dtype`` converts each tensor on load and ``copy=True`` asks for owned
    arrays rather than views of the file; both are passed on to
    :meth:`fastst.safe_open.get_tensor`. Owned loads read the whole file in
    one batch (several threads, large requests, GIL released).
    ``progress`` (off by default) is a callable ``(bytes_done,
    bytes_total)`` called from this thread at most every 64 MiB and at the
    end (an exception it raises stops the load), or True for a bar (a line
    on a terminal's stderr, else tqdm's bar when installed, else plain lines
    on stderr); see :meth:`fastst.safe_open.get_tensors`.
     A URL (``s3://``, ``gs://``,
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


def save_sharded(
    tensor_dict: Union[Mapping[str, Any], Iterable[Tuple[str, Any]]],
    folder: Union[str, os.PathLike[str]],
    *,
    max_shard_size: Union[int, str] = "5GB",
    metadata: Optional[Mapping[str, str]] = None,
    prefix: str = "model",
    align: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    layout: Optional[Layout] = None,
) -> str:
    """Writes ``tensor_dict`` as a sharded checkpoint in ``folder``: shards
    ``{prefix}-00001-of-0000N.safetensors`` of at most ``max_shard_size``
    bytes each (in the dict's order) and ``{prefix}.safetensors.index.json``,
    the layout the Hugging Face ecosystem reads (the index's metadata has
    ``total_size`` and ``total_parameters``). Returns the index's path,
    which :class:`fastst.safe_open` opens as one file. ``align`` is passed
    to each shard's :func:`save_file`. A URL prefix (``s3://bucket/run/``,
    configured by ``storage_options``) gets shards whose names carry a part
    of this save's own and the index last (see ``docs/remote.md``); the
    index's URL is returned.

    With ``layout`` (``name -> (dtype, shape)``, as for
    :func:`fastst.open_writer`), the shards are planned from it and
    ``tensor_dict`` may be any iterable of ``(name, array)`` pairs (a
    generator), each written at its place as it comes, so a checkpoint
    larger than memory can be saved (see :func:`fastst.open_sharded_writer`;
    to a URL prefix too)."""
    if layout is not None:
        return write_sharded_from(
            tensor_dict,
            folder,
            layout,
            max_shard_size=max_shard_size,
            metadata=metadata,
            prefix=prefix,
            align=align,
            storage_options=storage_options,
        )
    if not isinstance(tensor_dict, Mapping):
        raise TypeError("save_sharded takes a dict of arrays, or (name, array) pairs with layout=")
    save_one = _io.shard_saver(folder, align, storage_options)
    arrays = {k: np.asarray(v) for k, v in tensor_dict.items()}
    sizes = {k: int(a.nbytes) for k, a in arrays.items()}

    return write_sharded(
        arrays,
        folder,
        sizes,
        save_one,
        max_shard_size=max_shard_size,
        metadata=dict(metadata) if metadata is not None else None,
        prefix=prefix,
        index_metadata={"total_parameters": sum(int(a.size) for a in arrays.values())},
        storage_options=storage_options,
    )


# The reference's private helpers, for callers that import them.
from ._dropin.compat_numpy import *  # noqa: E402,F401,F403
