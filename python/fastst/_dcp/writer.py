"""The DCP storage writer: every rank streams its safetensors files, and the save commits as one.

:class:`StorageWriter` is a ``torch.distributed.checkpoint.StorageWriter``
for ``dcp.save`` and ``dcp.async_save`` taking the arguments of torch's
``HuggingFaceStorageWriter`` and writing the same layout (file names,
``DCP_SHARDING_INFO`` metadata, index), so that torch's reader and
consolidation read what it writes. Each rank writes its files with
:func:`fastst.open_writer`: the layout is known from the plan, and each
tensor's bytes go from the rank's tensor to the file with the GIL
released, from ``thread_count`` threads; no file is ever held in memory.
The files are staged and committed by the coordinator once every rank's
writes succeeded (:mod:`fastst._dcp.commit`): a rank that
fails or is killed leaves the previous checkpoint in place. Under a URL
prefix of object storage each rank uploads its files instead
(:func:`fastst._write.streaming.upload_layout`, each tensor asked for when
the upload reaches it), under names with a part of this save's own, and
the coordinator writes the commit object last
(:mod:`fastst._dcp.remote`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter as _StorageWriter
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from .._layout import rank_file_name
from .._paths import readable
from .._sources.remote import refuse_local_options
from .._write.remote import is_url
from .._write.sharded import UrlCommit
from .._write.streaming import TensorWriter, open_writer, upload_layout
from . import commit as dcp_commit
from . import remote as dcp_remote
from .consolidate import consolidate
from .files import check_mapping, file_metadata, run_all, threads

__all__ = ["StorageWriter", "SHARDED_DIR"]

PathLike = Union[str, "os.PathLike[str]"]

#: The sub-folder the ranks' files go to when the save is consolidated (torch's name).
SHARDED_DIR = "sharded"


@dataclass(frozen=True)
class StoredChunk:
    """Where a chunk was saved: the ``storage_data`` of its ``WriteResult``."""

    relative_path: str
    length: int


def _local(tensor: Any, fqn: str) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{fqn!r}: the planner gave a {type(tensor).__name__}, not a tensor")
    tensor = tensor.detach()
    return tensor if tensor.device.type == "cpu" else tensor.cpu()


class StorageWriter(_StorageWriter):
    """Saves a ``torch.distributed.checkpoint`` checkpoint as safetensors
    files in the Hugging Face layout, written by fastst (see the module's
    documentation)::

        import torch.distributed.checkpoint as dcp
        from fastst.torch import dcp as fdcp

        dcp.save(state_dict, storage_writer=fdcp.StorageWriter(
            "ckpt", save_distributed=True, enable_consolidation=True))

    ``path``: the checkpoint's folder, or a URL prefix of object storage
    (``s3://``, ``gs://``, ``az://``; configured by ``storage_options`` as
    fastst's other writers are, else by the environment) whose files are
    named with a part of each save's own (see ``docs/distributed.md``).
    ``fqn_to_index_mapping``:
    tensor name -> index of the output file (1..N) it goes to; by default one
    file per rank. ``thread_count``: threads writing tensors on each rank
    (None: up to 8, by the cores). ``save_distributed``: every rank saves its own
    chunks, in files ``shard-<rank>-model-<i>-of-<N>.safetensors``; otherwise
    (one rank saving whole tensors) files ``model-<i>-of-<N>.safetensors`` and
    an index. ``enable_consolidation`` (with ``save_distributed``): the ranks'
    files go to ``path/sharded`` and, once committed, are consolidated into
    ``path`` by :func:`fastst.torch.dcp.consolidate` with
    ``thread_count_consolidation`` threads and ``max_shard_size`` (under a URL
    prefix: ``url/sharded/`` and the prefix itself, the consolidated files named
    with a part of their own, the index written last).

    Only tensors are saved (the layout holds nothing else): a state dict
    holding other objects raises ``ValueError`` when the plan is made.
    """

    def __init__(
        self,
        path: PathLike,
        fqn_to_index_mapping: Optional[Mapping[str, int]] = None,
        thread_count: Optional[int] = None,
        save_distributed: bool = False,
        enable_consolidation: bool = False,
        thread_count_consolidation: Optional[int] = None,
        *,
        max_shard_size: Any = None,
        storage_options: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__()
        self.storage_options = storage_options
        self.fqn_to_index_mapping = check_mapping(fqn_to_index_mapping)
        self.thread_count = thread_count
        self.save_distributed = bool(save_distributed)
        self.enable_consolidation = bool(enable_consolidation)
        self.thread_count_consolidation = thread_count_consolidation
        self.max_shard_size = max_shard_size
        threads(thread_count, 1)
        threads(thread_count_consolidation, 1)
        self._set_path(path)
        self.save_id = str(uuid.uuid4())
        self.is_coordinator = True
        self.rank = 0
        self._token: Optional[str] = None
        self._save: Optional[UrlCommit] = None

    def _set_path(self, path: PathLike) -> None:
        self.remote = is_url(path)
        if self.remote:
            self.path = str(path)
            base = dcp_remote.prefix(self.path)
            self.consolidated_output_path: Optional[str] = (
                base if self.enable_consolidation else None
            )
            self.folder = (
                dcp_remote.object_url(base, SHARDED_DIR) + "/"
                if self.enable_consolidation
                else base
            )
            self.shown = readable(self.folder)
            return
        refuse_local_options(self.storage_options, path)
        self.path = os.fsdecode(os.fspath(path))
        self.consolidated_output_path = self.path if self.enable_consolidation else None
        self.folder = (
            os.path.join(self.path, SHARDED_DIR) if self.enable_consolidation else self.path
        )
        #: The folder or prefix as messages show it.
        self.shown = readable(self.folder)

    # -- the StorageWriter protocol ------------------------------------------

    def reset(self, checkpoint_id: Union[str, os.PathLike, None] = None) -> None:
        if checkpoint_id is not None:
            self._set_path(checkpoint_id)
        self.save_id = str(uuid.uuid4())
        self._token = None

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        rank = kwargs.get("rank")
        self.rank = rank if isinstance(rank, int) else 0

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        for item in plan.items:
            fqn = item.index.fqn
            if item.type == WriteItemType.BYTE_IO or item.tensor_data is None:
                raise ValueError(
                    f"{self.shown}: {fqn!r} is not a tensor; a safetensors checkpoint holds "
                    "tensors only"
                )
            if self.fqn_to_index_mapping is not None and fqn not in self.fqn_to_index_mapping:
                raise ValueError(f"{self.shown}: tensor {fqn!r} is not in fqn_to_index_mapping")
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        if self.remote:
            self._save = dcp_remote.begin(self.folder, self._kind, self.storage_options)
            self._token = self._save.part
        else:
            os.makedirs(self.folder, exist_ok=True)
            dcp_commit.recover(self.folder)
            self._token = os.urandom(8).hex()
        out = []
        for shard, plan in enumerate(plans, start=1):
            data = {
                "token": self._token,
                "remote": self.remote,
                "shard": shard if self.save_distributed else None,
                "mapping": self.fqn_to_index_mapping,
            }
            out.append(dataclasses.replace(plan, storage_data=data))
        return out

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[List[WriteResult]]:
        results = self._write(plan, planner) if plan.items else []
        fut: Future[List[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        if self._token is None:
            raise RuntimeError(f"{self.shown}: finish() before prepare_global_plan()")
        stored: Dict[str, int] = {}
        writer_of: Dict[str, int] = {}
        weight_map: Dict[str, str] = {}
        for rank, rank_results in enumerate(results):
            for r in rank_results:
                info = r.storage_data
                if not isinstance(info, StoredChunk):
                    raise TypeError(f"{self.shown}: a write result that fastst did not make")
                first = writer_of.setdefault(info.relative_path, rank)
                if first != rank:
                    raise ValueError(
                        f"{self.shown}: ranks {first} and {rank} both wrote "
                        f"{info.relative_path!r}; pass save_distributed=True when every rank "
                        "saves its own part (the previous checkpoint is kept)"
                    )
                stored[info.relative_path] = stored.get(info.relative_path, 0) + info.length
                weight_map[r.index.fqn] = info.relative_path
        index = None
        if not self.save_distributed:
            body = {"metadata": {"total_size": sum(stored.values())}, "weight_map": weight_map}
            index = (json.dumps(body, indent=2) + "\n").encode("utf-8")
        if self.remote:
            assert self._save is not None
            dcp_remote.commit(self._save, self._kind, sorted(stored), index)
            self._save = None
        else:
            dcp_commit.commit(self.folder, self._token, sorted(stored), self._kind, index)
        self._token = None
        if self.save_distributed and self.enable_consolidation:
            assert self.consolidated_output_path is not None
            consolidate(
                self.folder,
                self.consolidated_output_path,
                self.fqn_to_index_mapping,
                max_shard_size=self.max_shard_size,
                thread_count=self.thread_count_consolidation,
                storage_options=self.storage_options if self.remote else None,
            )

    @property
    def _kind(self) -> str:
        """The kind of save (:data:`fastst._dcp.commit.FAMILIES`)."""
        return "rank" if self.save_distributed else "model"

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.path, save_id=self.save_id)

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint's folder or URL prefix."""
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, os.PathLike]) -> bool:
        return isinstance(checkpoint_id, (str, os.PathLike))

    # -- writing one rank's files --------------------------------------------

    def _files(self, plan: SavePlan) -> Dict[str, List[WriteItem]]:
        data = plan.storage_data
        if not isinstance(data, dict) or "token" not in data:
            raise RuntimeError(f"{self.shown}: a save plan that fastst's writer did not prepare")
        mapping: Optional[Dict[str, int]] = data["mapping"]
        last = max(mapping.values()) if mapping else 1
        part = data["token"] if data["remote"] else ""
        files: Dict[str, List[WriteItem]] = {}
        for item in plan.items:
            index = mapping[item.index.fqn] if mapping else 1
            files.setdefault(rank_file_name(index, last, data["shard"], part), []).append(item)
        return files

    def _write(self, plan: SavePlan, planner: SavePlanner) -> List[WriteResult]:
        self.prepare_local_plan(plan)
        token: str = plan.storage_data["token"]
        files = self._files(plan)
        if plan.storage_data["remote"]:
            self._upload(files, planner)
            return _results(files)
        os.makedirs(dcp_commit.staging_dir(self.folder, token), exist_ok=True)
        writers: List[Tuple[str, TensorWriter, List[WriteItem]]] = []
        try:
            for final, items in files.items():
                layout = {}
                offsets = {}
                for item in items:
                    td = item.tensor_data
                    assert td is not None
                    layout[item.index.fqn] = (td.properties.dtype, list(td.chunk.sizes))
                    offsets[item.index.fqn] = list(td.chunk.offsets)
                path = dcp_commit.staged_path(self.folder, token, final)
                w = open_writer(path, layout, metadata=file_metadata(offsets), durable=True)
                writers.append((final, w, items))
            jobs = [(w, item) for _final, w, items in writers for item in items]

            def put(job: Tuple[TensorWriter, WriteItem]) -> None:
                w, item = job
                w.write(item.index.fqn, _local(planner.resolve_data(item), item.index.fqn))

            run_all(put, jobs, self.thread_count, "fastst-dcp")
            for _final, w, _items in writers:
                w.close()
            return _results(files)
        except BaseException:
            for _final, w, _items in writers:
                w.abort()
            raise

    def _upload(self, files: Dict[str, List[WriteItem]], planner: SavePlanner) -> None:
        """Uploads this rank's ``files`` (name -> items) under the prefix, each tensor
        asked of the planner when its upload reaches it, ``thread_count`` files at once.
        On a failure the files uploaded so far are deleted (no commit object names them;
        an upload cut short is aborted)."""
        done: List[str] = []

        def upload(name: str) -> None:
            items = {item.index.fqn: item for item in files[name]}
            layout = {}
            offsets = {}
            for fqn, item in items.items():
                td = item.tensor_data
                assert td is not None
                layout[fqn] = (td.properties.dtype, list(td.chunk.sizes))
                offsets[fqn] = list(td.chunk.offsets)

            def fetch(fqn: str) -> torch.Tensor:
                return _local(planner.resolve_data(items[fqn]), fqn)

            upload_layout(
                dcp_remote.object_url(self.folder, name),
                layout,
                fetch,
                metadata=file_metadata(offsets),
                storage_options=self.storage_options,
            )
            done.append(name)

        try:
            run_all(upload, list(files), self.thread_count, "fastst-dcp")
        except BaseException:
            dcp_remote.forget(self.folder, done, self.storage_options)
            raise


def _results(files: Dict[str, List[WriteItem]]) -> List[WriteResult]:
    """The write results of the items of ``files`` (name -> items), once saved."""
    results = []
    for name, items in files.items():
        for item in items:
            td = item.tensor_data
            assert td is not None
            n = td.chunk.sizes.numel() * td.properties.dtype.itemsize
            results.append(
                WriteResult(index=item.index, size_in_bytes=n, storage_data=StoredChunk(name, n))
            )
    return results
