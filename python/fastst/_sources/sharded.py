"""Sharded checkpoints opened as one logical file.

A ``model.safetensors.index.json``, or the folder holding it.

The index is the Hugging Face layout: ``{"metadata": {...}, "weight_map":
{tensor name: shard file name}}`` with shard files beside the index. Opening
validates that the index and the shards agree, naming the shard at fault.

The index is read by :func:`fastst._sources.folders.read_index` and checked
against its shards by :func:`fastst._sources.shard_rules.check_shards`, the
rule set ``fastst verify`` reports as findings: the reader raises the first
problem it reports.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from .._errors import ShardIndexError, closed_file_error, rule_error
from .._fastst.read import RawFile
from .._layout import names_an_index
from .._paths import readable
from .file import open_file
from .folders import read_index
from .shard_rules import ShardProblem, Table, check_shards

__all__ = ["ShardIndexError", "ShardedFile", "find_index"]


def find_index(path: str) -> Optional[str]:
    """The index file ``path`` designates (a folder was replaced by its
    checkpoint before: :func:`fastst._sources.folders.checkpoint_in`), or None
    when it is a plain file."""
    return path if names_an_index(path) else None


class ShardedFile:
    """The ``RawFile`` interface (``fastst._sources.raw.RawSource``) over several
    shards."""

    def __init__(
        self,
        index_path: str,
        backend: str,
        header_cap: int,
        index: Optional[Dict[str, Any]] = None,
    ) -> None:
        """``index``: the index's object when the caller has read it
        (:func:`read_index`), else it is read here."""
        folder = os.path.dirname(os.path.abspath(index_path))
        if index is None:
            index = read_index(index_path)[1]

        def open_shard(shard: str) -> Optional[RawFile]:
            path = os.path.join(folder, shard)
            if not os.path.exists(path):
                return None
            return open_file(path, backend, header_cap)

        self._open(readable(index_path), folder, index, open_shard)

    @classmethod
    def of_objects(
        cls, name: str, index: Dict[str, Any], open_shard: Callable[[str], Optional[RawFile]]
    ) -> ShardedFile:
        """The checkpoint of the remote index named ``name`` (its JSON object
        ``index``): each shard opened by ``open_shard`` (``fastst._sources.remote``),
        the shard names held to :func:`fastst._sources.folders.object_problem`."""
        self = cls.__new__(cls)
        self._open(name, None, index, open_shard)
        return self

    def _open(
        self,
        name: str,
        folder: Optional[str],
        index: Dict[str, Any],
        open_shard: Callable[[str], Optional[RawFile]],
    ) -> None:
        """Opens every shard the index names (``open_shard``: None when it
        is missing) and raises the first problem
        :func:`fastst._sources.shard_rules.check_shards` reports."""
        self.name = name
        meta = index.get("metadata", {})
        self._index_metadata: Dict[str, Any] = meta if isinstance(meta, dict) else {}
        weight_map: Dict[str, str] = index["weight_map"]
        self._shards: Dict[str, RawFile] = {}

        def table(shard: str, _placed: List[str]) -> Union[List[str], Table]:
            raw = open_shard(shard)
            if raw is None:
                return Table.MISSING
            self._shards[shard] = raw
            return list(raw.keys())

        def refuse(problem: ShardProblem) -> None:
            raise problem.error(self.name, lambda shard: str(self._shards[shard].name))

        try:
            check_shards(folder, weight_map, table, refuse)
        except BaseException:
            self.close()
            raise
        self._shard_names = weight_map
        self._where: Dict[str, RawFile] = {t: self._shards[s] for t, s in weight_map.items()}
        self._closed = False

    # the RawFile interface ------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        for raw in getattr(self, "_shards", {}).values():
            raw.close()
        self._closed = True

    def share(self) -> ShardedFile:
        """A second handle on the same open shards, closed on its own
        (``RawFile.share``)."""
        self._check()
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._shards = {shard: raw.share() for shard, raw in self._shards.items()}
        other._where = {name: other._shards[s] for name, s in self._shard_names.items()}
        return other

    def cancel_reads(self) -> None:
        for raw in self._shards.values():
            raw.cancel_reads()

    def _check(self) -> None:
        if self._closed:
            raise closed_file_error(self.name)

    def file_of(self, name: str) -> RawFile:
        """The shard (an open file) holding tensor ``name``."""
        self._check()
        raw = self._where.get(name)
        if raw is None:
            raise rule_error(
                "tensor-not-found",
                self.name,
                f'the checkpoint does not contain a tensor named "{name}"',
                name,
            )
        return raw

    def keys(self) -> List[str]:
        self._check()
        return sorted(self._where)

    def offset_keys(self) -> List[str]:
        self._check()
        out: List[str] = []
        for raw in self._shards.values():
            out.extend(raw.offset_keys())
        return out

    def metadata(self) -> Optional[Dict[str, str]]:
        """The first shard's ``__metadata__`` (shards written together share it)."""
        self._check()
        for raw in self._shards.values():
            return raw.metadata()
        return None

    def index_metadata(self) -> Dict[str, Any]:
        """The index's own ``metadata`` object (e.g. ``total_size``)."""
        return dict(self._index_metadata)

    def shard_of(self, name: str) -> str:
        """The path of the shard holding tensor ``name``."""
        return str(self.file_of(name).name)

    def __len__(self) -> int:
        self._check()
        return len(self._where)

    def __contains__(self, name: str) -> bool:
        self._check()
        return name in self._where

    def info(self, name: str) -> Tuple[str, Tuple[int, ...], int, int]:
        return self.file_of(name).info(name)

    def tensor(self, name: str) -> Any:
        return self.file_of(name).tensor(name)

    def read_into(self, name: str, out: Any) -> None:
        self.file_of(name).read_into(name, out)

    def read_range_into(self, name: str, offset: int, out: Any) -> None:
        self.file_of(name).read_range_into(name, offset, out)

    def read_slice_into(
        self, name: str, dims: List[Tuple[int, int, int]], out: Any, around_cache: bool = False
    ) -> None:
        self.file_of(name).read_slice_into(name, dims, out, around_cache)

    def convert_into(self, name: str, out: Any, to: str) -> None:
        self.file_of(name).convert_into(name, out, to)

    def advise_sequential(self) -> None:
        self._check()
        for raw in self._shards.values():
            raw.advise_sequential()

    @property
    def backend(self) -> str:
        for raw in self._shards.values():
            return str(raw.backend)
        return "mmap"

    @property
    def remote(self) -> bool:
        return any(raw.remote for raw in self._shards.values())
