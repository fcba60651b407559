"""The files of a DCP checkpoint in the Hugging Face layout: their names, metadata and chunk table.

``torch.distributed.checkpoint``'s Hugging Face storage writes one
``.safetensors`` file per rank and output index:
``shard-00001-model-00001-of-00002.safetensors`` when every rank saves its
own shards (``save_distributed``), ``model-00001-of-00002.safetensors``
otherwise. Each file's ``__metadata__`` holds ``DCP_SHARDING_INFO``, a JSON
object giving each tensor's ``saved_offsets``: where the chunk the file
holds sits in the whole tensor. A file without it holds whole tensors (a
plain Hugging Face checkpoint).

:func:`chunk_table` reads the headers of a checkpoint's files (nothing
else) and checks what they declare, as hostile input: the sharding
information must be a JSON object naming each tensor of its file with
non-negative integer offsets of the tensor's rank (rule
``dcp-sharding-info``), and the chunks of one tensor must agree on its
dtype and tile it exactly, without overlap or hole (rule ``dcp-chunks``;
the same chunk saved twice, as a replicated tensor may be, counts once).
"""

from __future__ import annotations

import bisect
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple
from typing import Mapping as MappingType

import numpy as np

from .._dtypes import FACTS
from .._errors import rule_error
from .._fastst.read import RawFile
from .._read import pool

__all__ = [
    "SHARDING_KEY",
    "VERSION_KEY",
    "DCP_VERSION",
    "Chunk",
    "Tensor",
    "check_mapping",
    "chunk_table",
    "threads",
    "file_metadata",
]

#: The ``__metadata__`` key of the chunks' offsets (torch's ``DCP_SHARDING_INFO``).
SHARDING_KEY = "DCP_SHARDING_INFO"
#: The ``__metadata__`` key of the format's version, and the version torch writes.
VERSION_KEY = "DCP_VERSION"
DCP_VERSION = "1.0"
_OFFSETS = "saved_offsets"


def file_metadata(offsets: MappingType[str, Sequence[int]]) -> Dict[str, str]:
    """The ``__metadata__`` of a file holding chunks at ``offsets`` (tensor
    name -> offsets of the chunk in the whole tensor), as torch writes it."""
    info = {name: {_OFFSETS: [int(o) for o in off]} for name, off in offsets.items()}
    return {SHARDING_KEY: json.dumps(info), VERSION_KEY: DCP_VERSION, "format": "pt"}


@dataclass(frozen=True)
class Chunk:
    """One stored chunk of a tensor."""

    #: The file holding it (a path or URL, as the table was given it).
    file: str
    #: Where it starts in the whole tensor, and its shape.
    offsets: Tuple[int, ...]
    shape: Tuple[int, ...]


@dataclass
class Tensor:
    """A tensor of the checkpoint: its header dtype, whole shape and chunks."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    chunks: List[Chunk] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * FACTS[self.dtype]["bits"] // 8


def _offsets(where: str, info: Any, name: str, rank: int) -> Tuple[int, ...]:
    entry = info.get(name) if isinstance(info, dict) else None
    offsets = entry.get(_OFFSETS) if isinstance(entry, dict) else None
    if (
        not isinstance(offsets, list)
        or len(offsets) != rank
        or not all(type(o) is int and o >= 0 for o in offsets)
    ):
        raise rule_error(
            "dcp-sharding-info",
            where,
            f"tensor {name!r}: {SHARDING_KEY} gives it no {_OFFSETS} of {rank} "
            f"non-negative integers (got {entry!r:.200})",
            name,
        )
    return tuple(offsets)


def file_chunks(raw: RawFile, file: str) -> List[Tuple[str, str, Chunk]]:
    """``(name, header dtype, chunk)`` of each tensor of the open file
    ``raw`` (known to the table as ``file``), in the file's order."""
    where = raw.name
    meta = raw.metadata() or {}
    info: Any = None
    text = meta.get(SHARDING_KEY)
    if text is not None:
        try:
            info = json.loads(text)
        except ValueError as exc:
            raise rule_error(
                "dcp-sharding-info", where, f"{SHARDING_KEY} is not JSON: {exc}"
            ) from None
        if not isinstance(info, dict):
            raise rule_error("dcp-sharding-info", where, f"{SHARDING_KEY} is not a JSON object")
    out = []
    for name in raw.offset_keys():
        dtype, shape, _begin, _end = raw.info(name)
        offsets = (0,) * len(shape) if info is None else _offsets(where, info, name, len(shape))
        out.append((name, dtype, Chunk(file, offsets, tuple(shape))))
    return out


#: The most cells the tiling check lays out for one tensor (the grid its
#: chunks' edges cut it into: about one per chunk for DTensor layouts).
MAX_CELLS = 1 << 22


def _chunk_error(t: Tensor, file: str, why: str) -> BaseException:
    return rule_error(
        "dcp-chunks", file, f"tensor {t.name!r} of shape {list(t.shape)}: {why}", t.name
    )


def _split_along_one_dim(shape: Tuple[int, ...], full: List[Chunk]) -> bool:
    """Whether ``full`` cuts ``shape`` into consecutive slabs along one
    dimension (``Shard(d)`` on a 1-D mesh): the common case, checked in
    linear time."""
    if not shape:
        return len(full) == 1
    for d in range(len(shape)):
        slabs = sorted(full, key=lambda c: c.offsets[d])
        end = 0
        for c in slabs:
            if c.offsets[d] != end or any(
                k != d and (c.offsets[k] != 0 or c.shape[k] != n) for k, n in enumerate(shape)
            ):
                break
            end += c.shape[d]
        else:
            if end == shape[d]:
                return True
    return False


def _check(t: Tensor) -> None:
    """Drops repeated copies of a chunk, then checks the chunks tile ``t``
    exactly: they hold as many elements as it has, and laid on the grid of
    their edges, each cell of the grid is covered once (the work is bounded
    by :data:`MAX_CELLS`, whatever the number of chunks)."""
    unique: Dict[Tuple[Tuple[int, ...], Tuple[int, ...]], Chunk] = {}
    for c in t.chunks:
        unique.setdefault((c.offsets, c.shape), c)
    t.chunks = list(unique.values())
    total = math.prod(t.shape)
    if total == 0:
        t.chunks = t.chunks[:1]
        return
    full = [c for c in t.chunks if math.prod(c.shape)]
    covered = sum(math.prod(c.shape) for c in full)
    if covered != total:
        where = full[0].file if full else t.chunks[0].file
        raise _chunk_error(t, where, f"its chunks hold {covered} of its {total} elements")
    if _split_along_one_dim(t.shape, full):
        return
    edges = [
        sorted({0, n} | {c.offsets[k] for c in full} | {c.offsets[k] + c.shape[k] for c in full})
        for k, n in enumerate(t.shape)
    ]
    cells = math.prod(len(e) - 1 for e in edges)
    if cells > MAX_CELLS:
        raise _chunk_error(t, full[0].file, f"its {len(full)} chunks cut it into too many pieces")
    grid = np.zeros([len(e) - 1 for e in edges], dtype=np.uint8)
    touched = 0
    for c in full:
        box = tuple(
            slice(bisect.bisect_left(e, o), bisect.bisect_left(e, o + n))
            for e, o, n in zip(edges, c.offsets, c.shape, strict=True)
        )
        touched += math.prod(b.stop - b.start for b in box)
        if touched > cells or grid[box].any():
            raise _chunk_error(
                t,
                c.file,
                f"the chunk at {list(c.offsets)} of shape {list(c.shape)} overlaps another",
            )
        grid[box] = 1


def chunk_table(files: Dict[str, RawFile]) -> Dict[str, Tensor]:
    """The tensors stored in ``files`` (name as the chunks will record it ->
    open file), each with its whole shape and chunks, checked (see the
    module's documentation); in the order of first appearance."""
    table: Dict[str, Tensor] = {}
    for file, raw in files.items():
        for name, dtype, chunk in file_chunks(raw, file):
            end = tuple(o + s for o, s in zip(chunk.offsets, chunk.shape, strict=True))
            t = table.get(name)
            if t is None:
                table[name] = Tensor(name, dtype, end, [chunk])
                continue
            if t.dtype != dtype or len(t.shape) != len(end):
                raise rule_error(
                    "dcp-chunks",
                    raw.name,
                    f"tensor {name!r}: this chunk is {dtype} of rank {len(end)}, another "
                    f"({t.chunks[0].file}) {t.dtype} of rank {len(t.shape)}",
                    name,
                )
            t.shape = tuple(max(a, b) for a, b in zip(t.shape, end, strict=True))
            t.chunks.append(chunk)
    for t in table.values():
        _check(t)
    return table


def check_mapping(mapping: Optional[MappingType[str, int]]) -> Optional[Dict[str, int]]:
    """``fqn_to_index_mapping`` checked: tensor names to file indexes from 1."""
    if mapping is None:
        return None
    if not isinstance(mapping, Mapping):
        raise TypeError(
            f"fqn_to_index_mapping must be a dict of tensor name -> file index, "
            f"got {type(mapping).__name__}"
        )
    out: Dict[str, int] = {}
    for name, index in mapping.items():
        if not isinstance(name, str):
            raise TypeError(f"fqn_to_index_mapping: names must be str, got {name!r}")
        if isinstance(index, bool) or not isinstance(index, int) or not 1 <= index <= 99999:
            raise ValueError(
                f"fqn_to_index_mapping: {name!r} -> {index!r}: "
                "file indexes are ints from 1 to 99999"
            )
        out[name] = index
    return out


def threads(count: Optional[int], jobs: int) -> int:
    """How many threads serve ``jobs`` jobs: ``count`` (None: up to 8, by
    the cores), never more than the jobs."""
    if count is None:
        count = min(8, os.cpu_count() or 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"thread counts are positive ints, got {count!r}")
    return max(1, min(count, jobs))


def run_all(
    work: Callable[[Any], None], jobs: Sequence[Any], count: Optional[int], name: str
) -> None:
    """``work(job)`` for every job, on :func:`threads` ``(count, len(jobs))`` threads named
    ``name`` (:func:`fastst._read.pool.run_all`: the first error wins)."""
    pool.run_all(work, jobs, threads(count, len(jobs)), name)
