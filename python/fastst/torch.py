"""PyTorch support: ``fastst.torch`` has the functions of ``safetensors.torch``.

Same signatures, results and errors as the reference's.

Loading gives CPU tensors that share the file's pages (copy-on-write, so
they are writable and independent) or lands them on a CUDA device through
pinned staging memory; saving writes contiguous CPU tensors straight from
their storage, without an intermediate copy.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from collections import defaultdict  # noqa: F401 (in the reference module's namespace too)
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import fastst  # noqa: F401  (the package whole first: see fastst._dropin.hook._FacadeLoader.exec_module)

from . import _frameworks
from ._faces.io import FrameworkIO
from ._write.sharded import write_sharded, write_sharded_from
from ._write.streaming import Layout

try:
    import torch
except ImportError as _exc:
    raise _frameworks.missing("torch", _exc) from _exc

from ._distributed import DistributedLoadError, load_distributed, load_tensor_parallel  # noqa: E402

__all__ = [
    "load_file",
    "load",
    "save",
    "save_file",
    "save_sharded",
    "save_model",
    "load_model",
    "storage_ptr",
    "storage_size",
    "load_distributed",
    "load_tensor_parallel",
    "DistributedLoadError",
]

PathLike = Union[str, "os.PathLike[str]"]
Device = Union[str, int, Any]

# Re-exported: the reference's module has these names and loaders reach for them.
from ._frameworks.torch_storage import (  # noqa: E402,F401
    _SHARED_DOCS,
    _SIZE,
    _TYPES,
    _check_saveable,
    _extent,
    _find_shared_tensors,
    _is_complete,
    _split_disjoint,
    storage_ptr,
    storage_size,
)
from ._frameworks.torch_storage import as_writable as _as_numpy  # noqa: E402,F401
from ._frameworks.torch_storage import (  # noqa: E402
    remove_duplicate_names as _remove_duplicate_names,
)
from ._frameworks.torch_storage import to_arrays as _to_arrays  # noqa: E402

_io = FrameworkIO("torch", _to_arrays)


def save(
    tensors: Dict[str, torch.Tensor],
    metadata: Optional[Dict[str, str]] = None,
    *,
    align: Optional[int] = None,
) -> bytes:
    """The bytes of a ``.safetensors`` file holding ``tensors`` (dense,
    contiguous, not sharing memory) and optional string ``metadata``;
    ``align`` as for :func:`fastst.serialize`."""
    return _io.save(tensors, metadata, align)


def save_file(
    tensors: Dict[str, torch.Tensor],
    filename: PathLike,
    metadata: Optional[Dict[str, str]] = None,
    *,
    align: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> None:
    """Writes ``tensors`` (dense, contiguous, not sharing memory) and optional
    string ``metadata`` to ``filename``. Tensors are written from their own
    memory: do not modify them while this runs. ``align`` (a power of two up
    to 4096) starts the data section at a multiple of it, as for
    :func:`fastst.serialize_file`. A URL (``s3://``, ``gs://``, ``az://``...)
    is written with a multipart upload, configured by ``storage_options``
    (see :func:`fastst.serialize_file`)."""
    _io.save_file(tensors, filename, metadata, None, align, storage_options)


def save_sharded(
    tensors: Union[Mapping[str, torch.Tensor], Iterable[Tuple[str, torch.Tensor]]],
    folder: PathLike,
    *,
    max_shard_size: Union[int, str] = "5GB",
    metadata: Optional[Dict[str, str]] = None,
    prefix: str = "model",
    force_contiguous: bool = True,
    shared_tensors_to_discard: Optional[List[str]] = None,
    align: Optional[int] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    layout: Optional[Layout] = None,
) -> str:
    """Writes ``tensors`` as a sharded checkpoint in ``folder`` (shards of at
    most ``max_shard_size`` bytes plus ``{prefix}.safetensors.index.json``,
    the Hugging Face layout), with :func:`save_file`'s rules for each shard.
    Returns the index's path, which :class:`fastst.safe_open`,
    :func:`load_file` and transformers' ``from_pretrained`` open.

    As huggingface_hub's ``save_torch_state_dict`` does: tensors sharing
    memory (tied weights) are stored once, under one name per group (not one
    of ``shared_tensors_to_discard`` if possible), each dropped name being
    recorded as ``dropped -> kept`` in the index's metadata; tensors are
    made contiguous first (``force_contiguous``); every shard's metadata
    has ``"format": "pt"``; the index's metadata has ``total_size`` (bytes)
    and ``total_parameters`` (elements) of what was stored. ``align`` is
    passed to each shard's :func:`save_file`. A URL prefix
    (``s3://bucket/run/``, configured by ``storage_options``) gets shards
    whose names carry a part of this save's own and the index last (see
    ``docs/remote.md``); the index's URL is returned.

    With ``layout`` (``name -> (dtype, shape)``, as for
    :func:`fastst.open_writer`), the shards are planned from it and
    ``tensors`` may be any iterable of ``(name, tensor)`` pairs (a
    generator), each written at its place as it comes, so a checkpoint
    larger than memory can be saved (see :func:`fastst.open_sharded_writer`;
    to a URL prefix too). The layout names exactly what is stored: tied
    weights are not looked for, and every shard's metadata has
    ``"format": "pt"``."""
    if layout is not None:
        return write_sharded_from(
            tensors,
            folder,
            layout,
            max_shard_size=max_shard_size,
            metadata={"format": "pt", **(metadata or {})},
            prefix=prefix,
            align=align,
            storage_options=storage_options,
        )
    if not isinstance(tensors, Mapping):
        raise TypeError("save_sharded takes a dict, or (name, tensor) pairs and layout=")
    save_one = _io.shard_saver(folder, align, storage_options)
    state = dict(tensors)
    dropped: Dict[str, str] = {}
    for kept, names in _remove_duplicate_names(
        state, discard_names=shared_tensors_to_discard
    ).items():
        for name in names:
            dropped[name] = kept
            del state[name]
    if force_contiguous:
        state = {name: tensor.contiguous() for name, tensor in state.items()}
    shard_metadata = {"format": "pt", **(metadata or {})}
    index_metadata: Dict[str, Any] = {
        "total_parameters": sum(int(t.numel()) for t in state.values())
    }
    for name, kept in dropped.items():
        if name not in shard_metadata:
            index_metadata[name] = kept
    sizes = {k: int(t.numel() * t.element_size()) for k, t in state.items()}
    return write_sharded(
        state,
        folder,
        sizes,
        save_one,
        max_shard_size=max_shard_size,
        metadata=shard_metadata,
        prefix=prefix,
        index_metadata=index_metadata,
        storage_options=storage_options,
    )


def save_model(
    model: torch.nn.Module,
    filename: str,
    metadata: Optional[Dict[str, str]] = None,
    force_contiguous: bool = True,
) -> None:
    """Saves ``model.state_dict()`` to ``filename``, keeping one name per group
    of tied (memory-sharing) tensors; each dropped name is recorded in the
    metadata as ``dropped -> kept`` unless the caller's metadata already has
    that key. ``force_contiguous`` packs non-contiguous tensors first."""
    state_dict = model.state_dict()
    merged = dict(metadata) if metadata is not None else None
    for kept, dropped_names in _remove_duplicate_names(state_dict).items():
        for dropped in dropped_names:
            if merged is None:
                merged = {}
            merged.setdefault(dropped, kept)
            del state_dict[dropped]
    if force_contiguous:
        state_dict = {name: tensor.contiguous() for name, tensor in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=merged)
    except ValueError as exc:
        raise ValueError(
            f"{exc} Or use save_model(..., force_contiguous=True), read the docs for potential "
            "caveats."
        ) from None


# loading ------------------------------------------------------------------


def load_file(
    filename: PathLike,
    device: Device = "cpu",
    *,
    backend: str = "mmap",
    copy: bool = False,
    dtype: Any = None,
    progress: Any = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> Dict[str, torch.Tensor]:
    """Every tensor of ``filename``, in file order, on ``device`` ("cpu",
    "cuda", "cuda:N", an int N, or a torch.device). CPU tensors share the
    file's pages copy-on-write: no copy until written. ``copy=True`` gives
    tensors with memory of their own (allocated by torch, then the whole
    file read in one batch by several threads), ``dtype`` (e.g.
    ``torch.float32``) converts while loading; see
    :meth:`fastst.safe_open.get_tensor`. ``progress`` (off by default) is a
    callable ``(bytes_done, bytes_total)`` called from this thread at most
    every 64 MiB and at the end (an exception it raises stops the load), or
    True for a bar (a line on a terminal's stderr, else tqdm's bar when
    installed, else plain lines on stderr; see
    :meth:`fastst.safe_open.get_tensors`). A URL (``s3://``, ``gs://``,
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


def load(data: bytes) -> Dict[str, torch.Tensor]:
    """Every tensor of a ``.safetensors`` file given as bytes, on the CPU, in
    file order. The tensors are writable and do not alias ``data``."""
    return _io.load(data)


def load_model(
    model: torch.nn.Module,
    filename: PathLike,
    strict: bool = True,
    device: Device = "cpu",
    *,
    backend: str = "mmap",
) -> Tuple[List[str], List[str]]:
    """Loads ``filename`` into ``model``, tied tensors included (a dropped
    name of a tied group is filled through the name kept in the file).

    Returns ``(missing, unexpected)``: model names the file did not set and
    file names the model did not use. With ``strict`` (the default) either
    being non-empty raises RuntimeError listing them.
    """
    state_dict = load_file(filename, device=device, backend=backend)
    to_remove = _remove_duplicate_names(model.state_dict(), preferred_names=list(state_dict))
    missing_keys, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = set(missing_keys)
    for dropped_names in to_remove.values():
        for dropped in dropped_names:
            if dropped in missing:
                missing.remove(dropped)
            else:
                unexpected.append(dropped)
    if strict and (missing or unexpected):
        message = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            listed = ", ".join(f'"{k}"' for k in sorted(missing))
            message += f"\n    Missing key(s) in state_dict: {listed}"
        if unexpected:
            listed = ", ".join(f'"{k}"' for k in sorted(unexpected))
            message += f"\n    Unexpected key(s) in state_dict: {listed}"
        raise RuntimeError(message)
    return missing, unexpected  # type: ignore[return-value]


class _LazyModule(types.ModuleType):
    """A module whose public names come from another one, imported when one
    of them is first used (dunder names never import it, so tools that
    scan ``sys.modules`` do not)."""

    def __init__(self, name: str, source: str, names: List[str], doc: str) -> None:
        super().__init__(name, doc)
        self.__all__ = names
        self._fastst_source = source

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_fastst_source":
            raise AttributeError(name)
        value = getattr(importlib.import_module(self._fastst_source), name)
        setattr(self, name, value)
        return value

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | set(self.__all__))


#: torch.distributed.checkpoint storage on fastst (:mod:`fastst._dcp.storage`, imported with
#: ``torch.distributed.checkpoint`` when one of its names is first used), importable as
#: ``fastst.torch.dcp`` too.
dcp = _LazyModule(
    __name__ + ".dcp",
    "fastst._dcp.storage",
    ["StorageWriter", "StorageReader", "consolidate", "consolidate_on_every_rank"],
    "torch.distributed.checkpoint storage and consolidation on fastst.",
)
sys.modules.setdefault(dcp.__name__, dcp)

# The reference's private helpers, for callers that import them.
from ._dropin.compat_torch import *  # noqa: E402,F401,F403
