"""Before any data moves, the ranks of a distributed load agree.

Each rank opens and validates the checkpoint (:func:`open_table`), then all
exchange a :class:`Status` (a failure message, or a digest of the tensor
table and of the options) as a byte tensor. A rank that failed, or ranks
that see different checkpoints or options, make every rank raise
:class:`DistributedLoadError` naming the ranks and the causes.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple, Union, cast

import torch
import torch.distributed as dist

from .._errors import DistributedLoadError, SafetensorError, Where, rule_error
from .._frameworks import torch as _fw_torch
from .._read.safe_open import safe_open, source_of
from .._sources.folders import checkpoint_in

PathLike = Union[str, bytes, "os.PathLike[str]"]


def _error(
    message: str, rule: str, filename: Optional[str], causes: Optional[Dict[int, str]] = None
) -> DistributedLoadError:
    err = cast(DistributedLoadError, rule_error(rule, "", f"{message} [{rule}]"))
    err.filename = filename
    err.causes = dict(causes or {})
    return err


# the checkpoint's tensor table ------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One tensor: where its bytes are, and what they hold."""

    name: str
    dtype: str
    shape: Tuple[int, ...]
    file: str  # the shard's file name ("" for a single file)
    begin: int  # offsets inside that file's byte buffer
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


def resolve_path(path: PathLike) -> str:
    """The file ``path`` designates: itself, or for a folder the one
    checkpoint it holds (:func:`fastst._sources.folders.checkpoint_in`)."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    return checkpoint_in(text) if os.path.isdir(text) else text


def open_table(path: PathLike) -> Tuple[safe_open, List[Entry], Optional[Dict[str, str]]]:
    """Opens the checkpoint with positioned reads (only the headers are read
    now, and nothing is read ahead: each rank reads only its share) and lists
    its tensors in load order (the order of ``load_file``)."""
    handle = safe_open(resolve_path(path), framework="pt", backend="pread", read_ahead=None)
    try:
        raw: Any = source_of(handle)  # a ShardedFile has shard_of, a RawFile not
        sharded = hasattr(raw, "shard_of")
        entries = []
        for name in handle.offset_keys():
            dtype, shape, begin, end = raw.info(name)
            shard = os.path.basename(raw.shard_of(name)) if sharded else ""
            entries.append(Entry(name, dtype, tuple(int(d) for d in shape), shard, begin, end))
        return handle, entries, handle.metadata()
    except BaseException:
        handle.close()
        raise


def table_digest(entries: Sequence[Entry], metadata: Optional[Dict[str, str]]) -> bytes:
    """SHA-256 of the tensor table and metadata (not of paths: ranks may
    mount one checkpoint at different places)."""
    doc = {
        "tensors": [[e.name, e.dtype, list(e.shape), e.file, e.begin, e.end] for e in entries],
        "metadata": metadata,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("ascii")).digest()


def _options_digest(options: Dict[str, Any]) -> bytes:
    return hashlib.sha256(json.dumps(options, sort_keys=True).encode("ascii")).digest()


def _torch_layout(entry: Entry) -> Tuple[Any, Tuple[int, ...]]:
    where = Where(entry.file, entry.name)
    return _fw_torch.torch_dtype(entry.dtype, where), _fw_torch.torch_shape(
        entry.dtype, entry.shape, where
    )


# process group helpers ----------------------------------------------------------


def _require_group(group: Any, path: Optional[str]) -> None:
    if not (dist.is_available() and dist.is_initialized()):
        raise _error(
            "torch.distributed is not initialised: call torch.distributed.init_process_group first",
            "dist-no-group",
            path,
        )


def comm_device(group: Any) -> torch.device:
    """Where collective buffers live: the current CUDA device for NCCL,
    the CPU otherwise (gloo)."""
    backend = str(dist.get_backend(group)).lower()
    if "nccl" in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _all_gather(out: torch.Tensor, mine: torch.Tensor, group: Any, async_op: bool = False) -> Any:
    return dist.all_gather_into_tensor(out, mine, group=group, async_op=async_op)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, KeyError) and not isinstance(exc, SafetensorError):
        text = repr(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def failure_bytes(text: str, size: int) -> bytes:
    """A failure as ``size`` bytes: a set flag byte, the length of the
    message (2 bytes, little-endian) and the message in UTF-8, cut to fit."""
    data = text.encode("utf-8", "replace")
    if len(data) > size - 3:
        data = data[: size - 6] + b"..."
    return (b"\x01" + len(data).to_bytes(2, "little") + data).ljust(size, b"\0")


def failure_text(record: bytes) -> Optional[str]:
    """The message of a record :func:`failure_bytes` made, or None when its
    flag is clear."""
    if not record[0]:
        return None
    length = int.from_bytes(record[1:3], "little")
    return bytes(record[3 : 3 + length]).decode("utf-8", "replace")


@dataclass(frozen=True)
class Status:
    """One rank's record in the agreement before data moves: why it failed,
    or the digests of the tensor table it opened and of its options. It
    travels as :attr:`SIZE` bytes in a tensor (collectives move tensors;
    nothing is pickled)."""

    failure: Optional[str] = None
    table: bytes = bytes(32)
    options: bytes = bytes(32)

    SIZE: ClassVar[int] = 1088

    def to_bytes(self) -> bytes:
        if self.failure is not None:
            return failure_bytes(self.failure, self.SIZE)
        return (b"\0" + self.table + self.options).ljust(self.SIZE, b"\0")

    @classmethod
    def from_bytes(cls, record: bytes) -> Status:
        failure = failure_text(record)
        if failure is not None:
            return cls(failure)
        return cls(None, bytes(record[1:33]), bytes(record[33:65]))


def ranks_failed(
    what: str, path: str, failed: Dict[int, str], world: int, rank: int
) -> DistributedLoadError:
    """The error every rank raises when ``failed`` ranks could not do ``what``
    (rule ``dist-rank-failed``), naming each with its cause."""
    listed = "; ".join(f"rank {r}: {m}" for r, m in sorted(failed.items()))
    which = "rank" if len(failed) == 1 else "ranks"
    return _error(
        f"{path}: {what} failed on {which} {', '.join(map(str, sorted(failed)))} of {world} "
        f"(this is rank {rank}): {listed}",
        "dist-rank-failed",
        path,
        failed,
    )


def agree(
    group: Any,
    device: torch.device,
    path: str,
    error: Optional[BaseException],
    header: bytes,
    options: bytes,
) -> None:
    """Every rank exchanges its status record; raises the same
    :class:`DistributedLoadError` on every rank when one failed or when
    ranks disagree about the checkpoint or the options."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    status = Status(_describe(error)) if error is not None else Status(None, header, options)
    mine = torch.frombuffer(bytearray(status.to_bytes()), dtype=torch.uint8).to(device)
    out = torch.empty(world * Status.SIZE, dtype=torch.uint8, device=device)
    _all_gather(out, mine, group)
    rows = out.cpu().numpy().reshape(world, Status.SIZE)
    statuses = [Status.from_bytes(rows[r].tobytes()) for r in range(world)]
    failed = {r: s.failure for r, s in enumerate(statuses) if s.failure is not None}
    if failed:
        raise ranks_failed("loading", path, failed, world, rank) from error
    for what, rule in (("options", "dist-option-mismatch"), ("table", "dist-header-mismatch")):
        seen: Dict[bytes, List[int]] = {}
        for r, s in enumerate(statuses):
            seen.setdefault(getattr(s, what), []).append(r)
        if len(seen) > 1:
            described = " vs ".join(
                f"rank{'s' if len(g) > 1 else ''} {','.join(map(str, g))} ({k.hex()[:12]})"
                for k, g in sorted(seen.items(), key=lambda kg: kg[1])
            )
            if what == "options":
                message = f"{path}: ranks called the loader with different options: {described}"
            else:
                message = (
                    f"{path}: ranks see different checkpoints (tensor tables differ): {described}"
                )
            raise _error(message, rule, path)
