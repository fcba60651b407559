"""The DCP storage reader: each rank reads exactly the chunks its load plan asks for, into place.

:class:`StorageReader` is a ``torch.distributed.checkpoint.StorageReader``
for ``dcp.load`` taking the arguments of torch's
``HuggingFaceStorageReader``; it reads what that writer and fastst's
writer write (and plain Hugging Face checkpoints: a tensor without
sharding metadata is one whole chunk). The metadata comes from the files'
headers alone (:func:`fastst._dcp.files.chunk_table`, checked
as hostile input). Each read item of the plan, the overlap of a saved
chunk with a destination, is read once as exactly its byte ranges, on
``thread_count`` threads with the GIL released, straight into the
destination tensor when it is a contiguous CPU tensor of the saved dtype
(else into a temporary the destination copies from): loading into
another world size or placement reads no byte twice. Under a URL prefix
the files are those its commit objects name
(:mod:`fastst._dcp.remote`), and each read item is served by
ranged reads of its byte ranges (the remote read path: nearby ranges
coalesced), several items at once.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
import torch
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.distributed.checkpoint.storage import StorageReader as _StorageReader
from torch.futures import Future

from .._dtypes import PACKED_BITS
from .._errors import Where, rule_error
from .._fastst.read import RawFile
from .._frameworks import torch as _fw_torch
from .._paths import readable
from .._sources.remote import refuse_local_options
from .._write.remote import is_url
from . import remote as dcp_remote
from .files import chunk_table, run_all, threads

__all__ = ["StorageReader"]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class StoredChunk:
    """Where a chunk is: the ``storage_data`` entry of its ``MetadataIndex``."""

    relative_path: str
    shape: Tuple[int, ...]
    dtype: torch.dtype


def _as_bytes(t: torch.Tensor) -> np.ndarray:
    """The memory of the contiguous CPU tensor ``t`` as a writable uint8 array."""
    return t.reshape(-1).view(torch.uint8).numpy()


class StorageReader(_StorageReader):
    """Loads a checkpoint in the Hugging Face layout of
    ``torch.distributed.checkpoint`` with fastst (see the module's
    documentation)::

        import torch.distributed.checkpoint as dcp
        from fastst.torch import dcp as fdcp

        dcp.load(state_dict, storage_reader=fdcp.StorageReader("ckpt/sharded"))

    ``path``: the folder holding the checkpoint's ``.safetensors`` files, or
    the URL prefix a save to object storage wrote (``storage_options``
    configure the store, as for fastst's other readers; else the
    environment). ``thread_count``: read items served at once on each rank
    (None: up to 8, by the cores)."""

    def __init__(
        self,
        path: PathLike,
        thread_count: Optional[int] = None,
        *,
        storage_options: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__()
        threads(thread_count, 1)
        self.thread_count = thread_count
        self.storage_options = storage_options
        self._set_path(path)
        self.load_id = str(uuid.uuid4())
        self.storage_data: Dict[MetadataIndex, StoredChunk] = {}
        self._files: Dict[str, RawFile] = {}

    def _set_path(self, path: PathLike) -> None:
        if is_url(path):
            self.path = str(path)
        else:
            refuse_local_options(self.storage_options, path)
            self.path = os.fsdecode(os.fspath(path))
        #: The folder or prefix as messages show it.
        self.shown = readable(self.path)

    def _close(self) -> None:
        files, self._files = self._files, {}
        for raw in files.values():
            raw.close()

    # -- the StorageReader protocol ------------------------------------------

    def reset(self, checkpoint_id: Union[str, os.PathLike, None] = None) -> None:
        self._close()
        self.storage_data = {}
        if checkpoint_id is not None:
            self._set_path(checkpoint_id)
        self.load_id = str(uuid.uuid4())

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        self._close()
        self._files = dcp_remote.open_checkpoint(self.path, self.storage_options)
        try:
            table = chunk_table(self._files)
            state: Dict[str, TensorStorageMetadata] = {}
            storage: Dict[MetadataIndex, StoredChunk] = {}
            for name, t in table.items():
                where = t.chunks[0].file
                if t.dtype in PACKED_BITS:
                    raise rule_error(
                        "framework-dtype",
                        where,
                        f"tensor {name!r}: {t.dtype} is not read through DCP",
                        name,
                    )
                dtype = _fw_torch.torch_dtype(t.dtype, Where(where, name))
                state[name] = TensorStorageMetadata(
                    properties=TensorProperties(dtype=dtype),
                    size=torch.Size(t.shape),
                    chunks=[
                        ChunkStorageMetadata(
                            offsets=torch.Size(c.offsets), sizes=torch.Size(c.shape)
                        )
                        for c in t.chunks
                    ],
                )
                for c in t.chunks:
                    storage[MetadataIndex(fqn=name, offset=c.offsets)] = StoredChunk(
                        c.file, c.shape, dtype
                    )
        except BaseException:
            self._close()
            raise
        metadata = Metadata(state_dict_metadata=state, storage_data=storage)  # type: ignore[arg-type]
        metadata.storage_meta = StorageMeta(checkpoint_id=self.path, load_id=self.load_id)
        return metadata

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        self.storage_data = metadata.storage_data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        try:
            self._read(plan, planner)
        finally:
            self._close()
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint's folder or URL prefix."""
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, os.PathLike]) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))

    # -- reading ----------------------------------------------------------------

    def _file(self, path: str) -> RawFile:
        raw = self._files.get(path)
        if raw is None:
            raw = dcp_remote.reopen(path, self.storage_options)
            self._files[path] = raw
        return raw

    def _read(self, plan: LoadPlan, planner: LoadPlanner) -> None:
        items = []
        for req in plan.items:
            if req.type == LoadItemType.BYTE_IO:
                raise ValueError(
                    f"{self.shown}: {req.storage_index.fqn!r} is not a tensor; a safetensors "
                    "checkpoint holds tensors only"
                )
            info = self.storage_data[req.storage_index]
            if not isinstance(info, StoredChunk):
                raise TypeError(f"{self.shown}: metadata that fastst's reader did not make")
            items.append((info.relative_path, tuple(req.storage_offsets), req, info))
        items.sort(key=lambda x: (x[0], x[1]))
        for path in sorted({x[0] for x in items}):
            self._file(path)

        def one(job: Tuple[str, Tuple[int, ...], ReadItem, StoredChunk]) -> None:
            path, offsets, req, info = job
            _read_item(self._files[path], planner, req, info, offsets)

        run_all(one, items, self.thread_count, "fastst-dcp-read")


def _read_item(
    raw: RawFile,
    planner: LoadPlanner,
    req: ReadItem,
    info: StoredChunk,
    offsets: Tuple[int, ...],
) -> None:
    """Serves one read item: its byte ranges of the saved chunk, into the
    destination the planner resolves (see the module's documentation)."""
    name = req.storage_index.fqn
    lengths = tuple(req.lengths)
    dest = planner.resolve_tensor(req).detach()
    if tuple(dest.shape) != lengths:
        raise AssertionError(
            f"{raw.name}: tensor {name!r}: the destination's shape {list(dest.shape)} "
            f"is not the read item's {list(lengths)}"
        )
    direct = dest.device.type == "cpu" and dest.dtype == info.dtype and dest.is_contiguous()
    target = dest if direct else torch.empty(lengths, dtype=info.dtype)
    if target.numel():
        out = _as_bytes(target)
        if not any(offsets) and lengths == info.shape:
            raw.read_into(name, out)
        else:
            dims = [(o, n, 1) for o, n in zip(offsets, lengths, strict=True)]
            raw.read_slice_into(name, dims, out)
    if not direct:
        dest.copy_(target)
    planner.commit_tensor(req, dest)
