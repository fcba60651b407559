"""Loading one checkpoint into many processes over ``torch.distributed``.

Two modes, both reached from :mod:`fastst.torch`:

* :func:`load_distributed` (replicated): every rank of a process group calls
  it; each byte of tensor data is read from storage by exactly one rank, and
  every rank ends with the whole state dict, the bytes travelling as tensors
  through collectives (broadcasts under gloo, ``all_gather_into_tensor``
  under NCCL, as the group's backend says) in rounds whose staging memory
  is bounded.
* :func:`load_tensor_parallel`: each rank reads only the part of each tensor
  it declares (a row or column split by rank, or an explicit index), with
  positioned reads of the minimal byte ranges; no tensor data moves between
  ranks.

Before any data moves, ranks agree: each one opens and validates the
checkpoint, then all exchange a fixed-size status record (a failure message,
or a digest of the tensor table and of the options) as a byte tensor. A rank
that failed, or ranks that see different checkpoints or options, make every
rank raise :class:`DistributedLoadError` naming the ranks and the causes.
Nothing but bytes and tensors travels between ranks (no pickled objects).

This file is one job, moving one checkpoint into a process group: both
modes share the table, the agreement and the error reporting, and the
replicated mode's plan and transfer only make sense together.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import json
import numbers
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
)

import torch
import torch.distributed as dist

from . import _frameworks, _fw_torch
from ._dtypes import PACKED_BITS
from ._errors import DistributedLoadError, SafetensorError, rule_error
from ._open import safe_open
from ._sharded import INDEX_SUFFIX

PathLike = Union[str, bytes, "os.PathLike[str]"]

#: Rule ids raised here, with their summaries.
RULES: Dict[str, str] = {
    "dist-no-group": "no torch.distributed process group, and no rank/world size given",
    "dist-rank-failed": "a rank could not open, validate, plan or read its part of the checkpoint",
    "dist-header-mismatch": "ranks opened checkpoints whose tensor tables differ",
    "dist-option-mismatch": "ranks called the loader with different options",
    "dist-bad-plan": "a tensor-parallel plan entry cannot be applied to its tensor",
}

UNITS = ("chunk", "tensor", "file")
DEFAULT_BUDGET = 256 << 20
DEFAULT_CHUNK = 1 << 20
_READ_PIECE = 16 << 20  # one positioned read, at most
_DIRECT_MIN = 1 << 20  # gloo: pieces this large skip the staging buffer
_STATUS = 1088  # bytes of one rank's agreement record
_MESSAGE = _STATUS - 67
_TRAILER = 512  # bytes after each rank's data in a transfer round
_ALIGN = 4096


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
    """The file ``path`` designates: itself, or for a folder its index
    (``*.safetensors.index.json``) or its only ``*.safetensors`` file."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not os.path.isdir(text):
        return text
    names = sorted(os.listdir(text))
    indexes = [n for n in names if n.endswith(INDEX_SUFFIX)]
    if indexes:
        return text  # safe_open opens a folder holding one index (and refuses several)
    weights = [n for n in names if n.endswith(".safetensors")]
    if len(weights) == 1:
        return os.path.join(text, weights[0])
    if not weights:
        raise FileNotFoundError(f"{text}: folder holds no .safetensors file and no index")
    listed = ", ".join(weights[:4]) + (", ..." if len(weights) > 4 else "")
    raise rule_error(
        "index-ambiguous",
        text,
        f"folder holds several .safetensors files ({listed}) and no index naming them",
    )


def open_table(path: PathLike) -> Tuple[safe_open, List[Entry], Optional[Dict[str, str]]]:
    """Opens the checkpoint with positioned reads (only the headers are read
    now) and lists its tensors in load order (the order of ``load_file``)."""
    handle = safe_open(resolve_path(path), framework="pt", backend="pread")
    try:
        raw = handle._raw
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
    where = _frameworks.Where(entry.file, entry.name)
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


def _encode_message(text: str, size: int) -> bytes:
    data = text.encode("utf-8", "replace")
    if len(data) > size - 2:
        data = data[: size - 5] + b"..."
    return len(data).to_bytes(2, "little") + data


def _decode_message(record: bytes) -> str:
    length = int.from_bytes(record[:2], "little")
    return bytes(record[2 : 2 + length]).decode("utf-8", "replace")


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
    record = bytearray(_STATUS)
    if error is not None:
        record[0] = 1
        record[65:] = _encode_message(_describe(error), _MESSAGE + 2).ljust(_MESSAGE + 2, b"\0")
    else:
        record[1:33] = header
        record[33:65] = options
    mine = torch.frombuffer(record, dtype=torch.uint8).to(device)
    out = torch.empty(world * _STATUS, dtype=torch.uint8, device=device)
    _all_gather(out, mine, group)
    rows = out.cpu().numpy().reshape(world, _STATUS)
    failed = {r: _decode_message(rows[r, 65:].tobytes()) for r in range(world) if rows[r, 0]}
    if failed:
        listed = "; ".join(f"rank {r}: {m}" for r, m in sorted(failed.items()))
        which = "rank" if len(failed) == 1 else "ranks"
        raise _error(
            f"{path}: loading failed on {which} {', '.join(map(str, sorted(failed)))} of {world} "
            f"(this is rank {rank}): {listed}",
            "dist-rank-failed",
            path,
            failed,
        ) from error
    for lo, hi, what, rule in (
        (33, 65, "options", "dist-option-mismatch"),
        (1, 33, "checkpoint", "dist-header-mismatch"),
    ):
        seen: Dict[bytes, List[int]] = {}
        for r in range(world):
            seen.setdefault(rows[r, lo:hi].tobytes(), []).append(r)
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


# replicated load: the plan --------------------------------------------------------

Piece = Tuple[int, int, int]  # entry index, first byte, byte after the last (in the tensor)


def _lpt(sizes: Sequence[int], world: int) -> List[List[int]]:
    """Largest first, each to the least loaded rank (ties: lowest rank; equal
    sizes keep their order)."""
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    loads = [0] * world
    owned: List[List[int]] = [[] for _ in range(world)]
    for i in order:
        r = min(range(world), key=lambda k: (loads[k], k))
        owned[r].append(i)
        loads[r] += sizes[i]
    return owned


def plan_reads(
    entries: Sequence[Entry], world: int, unit: str = "chunk", chunk_size: int = DEFAULT_CHUNK
) -> List[List[Piece]]:
    """Which byte ranges each rank reads, every byte once.

    ``"file"`` and ``"tensor"``: whole files or whole tensors, largest first
    to the least loaded rank. ``"chunk"``: the data of all files, in file
    order, cut into ``world`` contiguous spans of equal size, with boundaries
    on multiples of ``chunk_size`` (of less, down to 4 KiB, when the
    checkpoint holds fewer than ``8 * world`` chunks): balanced within one
    chunk, and each rank reads one sequential run."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}, not {unit!r}")
    if world < 1:
        raise ValueError("world size must be at least 1")
    plan: List[List[Piece]] = [[] for _ in range(world)]
    data = [i for i, e in enumerate(entries) if e.nbytes]
    if unit == "tensor":
        for r, owned in enumerate(_lpt([entries[i].nbytes for i in data], world)):
            plan[r] = [(data[k], 0, entries[data[k]].nbytes) for k in sorted(owned)]
        return plan
    if unit == "file":
        files: Dict[str, List[int]] = {}
        for i in data:
            files.setdefault(entries[i].file, []).append(i)
        groups = list(files.values())
        owned_files = _lpt([sum(entries[i].nbytes for i in g) for g in groups], world)
        for r, owned in enumerate(owned_files):
            plan[r] = [(i, 0, entries[i].nbytes) for k in sorted(owned) for i in groups[k]]
        return plan
    if chunk_size <= 0:
        raise ValueError("chunk_size must be positive")
    total = sum(entries[i].nbytes for i in data)
    # Small checkpoints get finer boundaries, so that every rank has work.
    grain = max(1, min(chunk_size, max(_ALIGN, total // (8 * world))))
    chunks = -(-total // grain)
    bounds = [min(total, (chunks * r // world) * grain) for r in range(world + 1)]
    position = 0
    r = 0
    for i in data:
        size = entries[i].nbytes
        start = 0
        while start < size:
            while position + start >= bounds[r + 1]:
                r += 1
            stop = min(size, bounds[r + 1] - position)
            plan[r].append((i, start, stop))
            start = stop
        position += size
    return plan


def plan_bytes(plan: Sequence[Sequence[Piece]]) -> List[int]:
    """Bytes each rank reads under ``plan``."""
    return [sum(stop - start for _i, start, stop in pieces) for pieces in plan]


Segment = Tuple[int, int, int, int]  # entry index, offset in tensor, length, offset in slot


def _rounds(pieces: Sequence[Piece], capacity: int) -> List[List[Segment]]:
    """A rank's pieces cut into rounds of at most ``capacity`` bytes."""
    rounds: List[List[Segment]] = []
    current: List[Segment] = []
    used = 0
    for i, start, stop in pieces:
        while start < stop:
            if used == capacity:
                rounds.append(current)
                current, used = [], 0
            take = min(stop - start, capacity - used)
            current.append((i, start, take, used))
            used += take
            start += take
    if current:
        rounds.append(current)
    return rounds


# replicated load: moving the bytes --------------------------------------------------


Job = Tuple[int, int, Any]  # entry index, offset in the tensor, destination (a byte view)


class _Reader:
    """Positioned reads of byte ranges of tensors into host memory, several
    at a time (the reads release the GIL)."""

    def __init__(self, handle: safe_open, entries: Sequence[Entry], threads: int) -> None:
        self._raw = handle._raw
        self._entries = entries
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, threads), thread_name_prefix="fastst-dist"
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def read(self, jobs: Sequence[Job]) -> None:
        calls = []
        for i, offset, out in jobs:
            name = self._entries[i].name
            for done in range(0, len(out), _READ_PIECE):
                calls.append((name, offset + done, out[done : done + _READ_PIECE]))
        if len(calls) == 1:
            self._raw.read_range_into(*calls[0])
            return
        futures = [
            self._pool.submit(self._raw.read_range_into, name, offset, out)
            for name, offset, out in calls
        ]
        for future in futures:
            future.result()


def _allocate(
    entries: Sequence[Entry], device: torch.device
) -> Tuple[List[torch.Tensor], Dict[str, torch.Tensor]]:
    """Each tensor's destination: flat bytes, and the typed view handed out."""
    flats: List[torch.Tensor] = []
    result: Dict[str, torch.Tensor] = {}
    for e in entries:
        dtype, shape = _torch_layout(e)
        flat = torch.empty(e.nbytes, dtype=torch.uint8, device=device)
        flats.append(flat)
        result[e.name] = flat.view(dtype).view(shape)
    return flats, result


def _slot_size(budget: int, world: int) -> int:
    """Bytes of one rank's slot in one of the two gather buffers."""
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise TypeError("budget must be an int (bytes)")
    size = (budget // (2 * world)) // _ALIGN * _ALIGN
    if size - _TRAILER < _ALIGN:
        raise ValueError(
            f"budget of {budget} bytes is too small for {world} ranks: "
            f"give at least {2 * world * (_ALIGN + _TRAILER)}"
        )
    return size


def _check_trailers(
    buffer: torch.Tensor, world: int, slot: int, path: str, rank: int, own: Optional[BaseException]
) -> None:
    """Raises on every rank when a rank's status says its reads failed."""
    trailers = buffer.view(world, slot)[:, :_TRAILER]
    if trailers.device.type != "cpu":
        trailers = trailers.cpu()
    rows = trailers.numpy()
    failed = {r: _decode_message(rows[r, 1:].tobytes()) for r in range(world) if rows[r, 0]}
    if failed:
        listed = "; ".join(f"rank {r}: {m}" for r, m in sorted(failed.items()))
        which = "rank" if len(failed) == 1 else "ranks"
        raise _error(
            f"{path}: reading failed on {which} {', '.join(map(str, sorted(failed)))} of {world} "
            f"(this is rank {rank}): {listed}",
            "dist-rank-failed",
            path,
            failed,
        ) from own


def load_distributed(
    path: PathLike,
    *,
    group: Any = None,
    device: Any = None,
    unit: str = "chunk",
    budget: int = DEFAULT_BUDGET,
    chunk_size: int = DEFAULT_CHUNK,
    threads: int = 4,
) -> Dict[str, torch.Tensor]:
    """Loads the whole checkpoint on every rank of ``group`` (default: the
    world), each byte read from storage by one rank only.

    Every rank of the group must call it with the same options. ``path`` is
    a ``.safetensors`` file, a sharded checkpoint's ``*.safetensors.index.json``,
    or a folder holding one of them. ``device``: where the tensors go
    (default: the current CUDA device under NCCL, else the CPU). ``unit``:
    how reads are shared out (``"chunk"``, ``"tensor"`` or ``"file"``, see
    :func:`plan_reads`). ``budget``: bytes of staging memory per rank (two
    buffers on the collective's device; plus ``budget / world`` of pinned
    host memory under NCCL). ``threads``: concurrent reads per rank.

    Returns ``{name: tensor}`` in file order, bit-identical to
    :func:`fastst.torch.load_file`. Raises :class:`DistributedLoadError` on
    every rank when any rank fails (opening, validating, reading) or when
    ranks see different checkpoints.
    """
    where = (
        os.fsdecode(os.fspath(path)) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    )
    _require_group(group, where)
    world = dist.get_world_size(group)
    comm = comm_device(group)
    handle: Optional[safe_open] = None
    transfer: Optional[_Transfer] = None
    error: Optional[BaseException] = None
    header = options = b""
    target = comm
    try:
        target = comm if device is None else _fw_torch.check_device(device).device
        if target.type == "cuda" and target.index is None:
            target = torch.device("cuda", torch.cuda.current_device())
        slot = _slot_size(budget, world)
        handle, entries, metadata = open_table(path)
        plan = plan_reads(entries, world, unit, chunk_size)
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive int, not {threads!r}")
        flats, result = _allocate(entries, target)
        transfer = _Transfer(handle, entries, plan, flats, group, comm, slot, threads)
        header = table_digest(entries, metadata)
        options = _options_digest(
            {
                "mode": "replicate",
                "unit": unit,
                "chunk": chunk_size,
                "slot": slot,
                "comm": comm.type,
            }
        )
    except Exception as exc:  # reported to every rank by agree()
        error = exc
    try:
        agree(group, comm, where, error, header, options)
        assert transfer is not None
        transfer.run(where)
    finally:
        if transfer is not None:
            transfer.close()
        if handle is not None:
            handle.close()
    if target.type == "cuda":
        torch.cuda.current_stream(target).synchronize()
    return result


class _Round:
    """What one rank sends in one round: small pieces packed into its slot
    (after the status), large ones sent straight from/into the destination
    tensors (gloo with CPU destinations only)."""

    def __init__(self, segments: Sequence[Segment], direct_min: Optional[int]) -> None:
        self.packed: List[Segment] = []
        self.direct: List[Segment] = []
        used = 0
        for i, offset, length, at in segments:
            if direct_min is not None and length >= direct_min:
                self.direct.append((i, offset, length, 0))
            else:
                self.packed.append((i, offset, length, used if direct_min is not None else at))
                used = used + length if direct_min is not None else max(used, at + length)
        self.used = used


_EMPTY = _Round([], None)


class _Transfer:
    """Rounds of exchanges over two staging buffers: while one round's bytes
    travel, this rank reads its part of the next.

    Each rank's slot starts with a status (``_TRAILER`` bytes: a failure
    flag and message) followed by its packed bytes. NCCL: the slots travel
    by one ``all_gather_into_tensor`` per round (its ring is bandwidth
    optimal). gloo: by one broadcast per rank of the used part of its slot,
    which gloo runs several times faster than its all-gather (4-6x measured
    with 4 ranks on one machine); pieces of at least ``_DIRECT_MIN`` bytes
    are read by their owner straight into its destination tensor and
    broadcast from there into the others' (no staging copy). Everything that
    can fail for want of memory is allocated here, before the ranks agree.
    """

    def __init__(
        self,
        handle: safe_open,
        entries: Sequence[Entry],
        plan: Sequence[Sequence[Piece]],
        flats: Sequence[torch.Tensor],
        group: Any,
        comm: torch.device,
        slot: int,
        threads: int,
    ) -> None:
        self.group = group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.roots = [
            r if group is None else dist.get_global_rank(group, r) for r in range(self.world)
        ]
        self.slot = slot
        self.flats = flats
        self.on_cuda = comm.type == "cuda"
        direct = not self.on_cuda and all(f.device.type == "cpu" for f in flats)
        self.direct_min = _DIRECT_MIN if direct else None
        self.rounds = [
            [_Round(segs, self.direct_min) for segs in _rounds(pieces, slot - _TRAILER)]
            for pieces in plan
        ]
        self.count = max((len(r) for r in self.rounds), default=0)
        self.buffers: List[torch.Tensor] = []
        self.hosts: List[torch.Tensor] = []
        if self.count:
            size = self.world * slot
            self.buffers = [torch.empty(size, dtype=torch.uint8, device=comm) for _ in range(2)]
            mine = slice(self.rank * slot, (self.rank + 1) * slot)
            if self.on_cuda:
                self.hosts = [
                    torch.empty(slot, dtype=torch.uint8, pin_memory=True) for _ in range(2)
                ]
                self.copied = [torch.cuda.Event(), torch.cuda.Event()]
                self.used = [False, False]
            else:
                self.hosts = [b[mine] for b in self.buffers]
        self.arrays = [f.numpy() if direct else None for f in flats]
        self.reader = _Reader(handle, entries, threads)
        self.failure: Optional[BaseException] = None

    def close(self) -> None:
        self.reader.close()

    def _round(self, src: int, k: int) -> _Round:
        rounds = self.rounds[src]
        return rounds[k] if k < len(rounds) else _EMPTY

    def fill(self, k: int) -> None:
        """Reads this rank's part of round ``k``, or records why it could
        not (every rank then raises after the round)."""
        b = k % 2
        if self.on_cuda and self.used[b]:
            self.copied[b].synchronize()
        host = self.hosts[b].numpy()
        host[:_TRAILER] = 0
        if self.failure is None:
            part = self._round(self.rank, k)
            data = host[_TRAILER:]
            jobs: List[Job] = [(i, off, data[at : at + n]) for i, off, n, at in part.packed]
            for i, off, n, _at in part.direct:
                # Rounds have direct pieces only when every destination is a
                # CPU tensor, and then each has its numpy view in arrays.
                array = self.arrays[i]
                assert array is not None
                jobs.append((i, off, array[off : off + n]))
            try:
                self.reader.read(jobs)
            except Exception as exc:
                self.failure = exc
        if self.failure is not None:
            host[0] = 1
            message = _encode_message(_describe(self.failure), _TRAILER - 1)
            host[1 : 1 + len(message)] = list(message)
        if self.on_cuda:
            mine_slot = self.buffers[b][self.rank * self.slot : (self.rank + 1) * self.slot]
            mine_slot.copy_(self.hosts[b], non_blocking=True)
            self.copied[b].record()
            self.used[b] = True

    def start(self, k: int) -> List[Any]:
        """Launches round ``k``'s collectives (the same sequence on every rank)."""
        buffer = self.buffers[k % 2]
        slot, group = self.slot, self.group
        if self.on_cuda:
            mine = buffer[self.rank * slot : (self.rank + 1) * slot]
            return [_all_gather(buffer, mine, group, async_op=True)]
        works = []
        for src in range(self.world):
            part = self._round(src, k)
            root = self.roots[src]
            head = buffer[src * slot : src * slot + _TRAILER + part.used]
            works.append(dist.broadcast(head, root, group=group, async_op=True))
            for i, off, n, _at in part.direct:
                target = self.flats[i][off : off + n]
                works.append(dist.broadcast(target, root, group=group, async_op=True))
        return works

    def finish(self, k: int, works: List[Any], where: str) -> None:
        """Waits for round ``k``, raises everywhere if a rank failed in it,
        and copies the packed pieces into their tensors."""
        for work in works:
            work.wait()
        buffer = self.buffers[k % 2]
        _check_trailers(buffer, self.world, self.slot, where, self.rank, self.failure)
        for src in range(self.world):
            base = src * self.slot + _TRAILER
            for i, off, n, at in self._round(src, k).packed:
                self.flats[i][off : off + n].copy_(buffer[base + at : base + at + n])

    def run(self, where: str) -> None:
        if not self.count:
            return
        self.fill(0)
        works = self.start(0)
        for k in range(1, self.count):
            self.fill(k)
            self.finish(k - 1, works, where)
            works = self.start(k)
        self.finish(self.count - 1, works, where)


# tensor-parallel load ----------------------------------------------------------------

Spec = Any  # "row" | "column" | "replicate" | "skip" | int dim | explicit index
Plan = Union[None, Mapping[str, Spec], Callable[[str, Tuple[int, ...]], Spec]]


def _spec_for(plan: Plan, name: str, shape: Tuple[int, ...], default: Spec) -> Spec:
    if plan is None:
        return default
    if callable(plan) and not isinstance(plan, Mapping):
        spec = plan(name, shape)
        return default if spec is None else spec
    if name in plan:
        return plan[name]
    for pattern, spec in plan.items():
        if any(ch in pattern for ch in "*?[") and fnmatch.fnmatchcase(name, pattern):
            return spec
    return default


def split_bounds(n: int, rank: int, world: int) -> Tuple[int, int]:
    """``[start, stop)`` of part ``rank`` of ``n`` items cut into ``world``
    parts (``torch.tensor_split``'s rule: the first ``n % world`` parts hold
    one more)."""
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def tp_index(entry: Entry, spec: Spec, rank: int, world: int) -> Any:
    """The index rank ``rank`` reads of ``entry`` under ``spec``: ``None`` to
    skip the tensor, ``...`` for all of it, else a ``get_slice`` index."""
    given = spec
    if isinstance(spec, str):
        if spec == "skip":
            return None
        if spec == "replicate":
            return Ellipsis
        if spec not in ("row", "column"):
            raise _bad_plan(
                entry, spec, 'use "row", "column", "replicate", "skip", a dim or an index'
            )
        spec = 0 if spec == "row" else 1
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
        ndim = len(entry.shape)
        dim = int(spec) + ndim if spec < 0 else int(spec)
        if not 0 <= dim < ndim:
            raise _bad_plan(entry, given, f"cannot split dimension {spec} of a {ndim}-d tensor")
        start, stop = split_bounds(entry.shape[dim], rank, world)
        return (slice(None),) * dim + (slice(start, stop),)
    if spec is Ellipsis or isinstance(spec, (slice, tuple)):
        return spec
    raise _bad_plan(entry, spec, "not a plan entry")


def _bad_plan(entry: Entry, spec: Spec, why: str) -> DistributedLoadError:
    return _error(
        f"tensor {entry.name!r} of shape {list(entry.shape)}: plan entry {spec!r}: {why}",
        "dist-bad-plan",
        None,
    )


def _box(
    index: Any, shape: Tuple[int, ...]
) -> Optional[Tuple[List[int], List[int], Tuple[Any, ...]]]:
    """The smallest box ``[lo, hi)`` per dimension holding what ``index``
    selects, and the index that takes the selection out of that box; None
    when the index is not plain (negative steps, out-of-range ints, ...):
    ``get_slice`` then does the work, errors included."""
    items = index if isinstance(index, tuple) else (index,)
    ellipses = sum(1 for it in items if it is Ellipsis)
    real = sum(1 for it in items if it is not None and it is not Ellipsis)
    if ellipses > 1 or real > len(shape):
        return None
    expanded: List[Any] = []
    for it in items:
        if it is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - real))
        else:
            expanded.append(it)
    if not ellipses:
        expanded.extend([slice(None)] * (len(shape) - real))
    lo: List[int] = []
    hi: List[int] = []
    rest: List[Any] = []
    d = 0
    for it in expanded:
        if it is None:
            rest.append(None)
            continue
        n = shape[d]
        if isinstance(it, slice):
            start, stop, step = it.indices(n)
            if step <= 0:
                return None
            count = len(range(start, stop, step))
            last = start + (count - 1) * step + 1 if count else start
            lo.append(start)
            hi.append(last)
            rest.append(slice(None) if step == 1 else slice(None, None, step))
        elif not isinstance(it, bool) and hasattr(it, "__index__"):
            i = it.__index__()
            if i < 0:
                i += n
            if not 0 <= i < n:
                return None
            lo.append(i)
            hi.append(i + 1)
            rest.append(0)
        else:
            return None
        d += 1
    return lo, hi, tuple(rest)


def box_runs(
    shape: Sequence[int], itemsize: int, lo: Sequence[int], hi: Sequence[int]
) -> Iterator[Tuple[int, int]]:
    """``(offset, length)`` of the contiguous byte runs of the box, in order."""
    if any(h <= low for low, h in zip(lo, hi)):
        return
    ndim = len(shape)
    k = ndim - 1
    while k >= 0 and lo[k] == 0 and hi[k] == shape[k]:
        k -= 1
    strides = [itemsize] * ndim
    for d in range(ndim - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    if k < 0:
        total = itemsize
        for n in shape:
            total *= n
        yield 0, total
        return
    run = (hi[k] - lo[k]) * strides[k]
    inner = lo[k] * strides[k]
    for outer in itertools.product(*(range(lo[d], hi[d]) for d in range(k))):
        yield sum(i * strides[d] for d, i in enumerate(outer)) + inner, run


def _read_part(handle: safe_open, entry: Entry, index: Any, pinned: bool) -> torch.Tensor:
    dtype, tshape = _torch_layout(entry)
    box = None if entry.dtype in PACKED_BITS else _box(index, entry.shape)
    if box is None:
        return handle.get_slice(entry.name)[index]
    lo, hi, rest = box
    raw = handle._raw
    itemsize = torch.empty((), dtype=dtype).element_size()
    dims = [h - low for low, h in zip(lo, hi)]
    nbytes = itemsize
    for n in dims:
        nbytes *= n
    flat = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    out = flat.numpy()
    at = 0
    for offset, length in box_runs(entry.shape, itemsize, lo, hi):
        if length == entry.nbytes:
            raw.read_into(entry.name, out)  # the whole tensor: several threads
        else:
            raw.read_range_into(entry.name, offset, out[at : at + length])
        at += length
    part = flat.view(dtype).view(dims)
    if all(isinstance(r, slice) and r == slice(None) for r in rest):
        return part
    return part[rest]


def load_tensor_parallel(
    path: PathLike,
    plan: Plan = None,
    *,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    group: Any = None,
    device: Any = "cpu",
    default: Spec = "replicate",
    check: bool = True,
) -> Dict[str, torch.Tensor]:
    """Each rank reads only its part of each tensor; no data moves between
    ranks.

    ``plan`` maps tensor names (exact, or glob patterns such as
    ``"*.q_proj.weight"``; an exact name wins, then the first matching
    pattern) to what this rank takes, or is a callable ``(name, shape) ->
    entry``. An entry is ``"row"`` (split dimension 0 across ranks),
    ``"column"`` (dimension 1), an int ``d`` (dimension ``d``), ``"replicate"``
    (the whole tensor), ``"skip"`` (left out), or an explicit index (a tuple
    or slice, as ``get_slice(name)[index]`` takes it). A split gives rank
    ``r`` the ``r``-th of ``world_size`` parts, as ``torch.tensor_split``
    cuts them. Tensors the plan does not name get ``default``.

    ``rank`` and ``world_size`` default to the group's. When a process group
    exists and ``check`` is true, ranks first agree (as
    :func:`load_distributed` does), so that a rank that cannot open the
    checkpoint or apply its plan makes every rank raise
    :class:`DistributedLoadError`.

    Returns ``{name: tensor}`` in file order; each equals
    ``safe_open(path, "pt").get_slice(name)[index]``.
    """
    where = (
        os.fsdecode(os.fspath(path)) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    )
    grouped = dist.is_available() and dist.is_initialized()
    if rank is None or world_size is None:
        if not grouped:
            raise _error(
                "load_tensor_parallel needs rank and world_size, or an initialised "
                "torch.distributed process group",
                "dist-no-group",
                where,
            )
        rank = dist.get_rank(group) if rank is None else rank
        world_size = dist.get_world_size(group) if world_size is None else world_size
    handle: Optional[safe_open] = None
    error: Optional[BaseException] = None
    parts: List[Tuple[Entry, Any]] = []
    header = b""
    target = torch.device("cpu")
    try:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        target = _fw_torch.check_device(device).device
        handle, entries, metadata = open_table(path)
        for e in entries:
            index = tp_index(e, _spec_for(plan, e.name, e.shape, default), rank, world_size)
            if index is not None:
                _torch_layout(e)
                parts.append((e, index))
        header = table_digest(entries, metadata)
    except Exception as exc:
        error = exc
    try:
        if grouped and check:
            agree(group, comm_device(group), where, error, header, _options_digest({"mode": "tp"}))
        elif error is not None:
            raise error
        assert handle is not None
        pinned = target.type == "cuda"
        result: Dict[str, torch.Tensor] = {}
        for e, index in parts:
            part = _read_part(handle, e, index, pinned)
            result[e.name] = part if target.type == "cpu" else part.to(target, non_blocking=True)
    finally:
        if handle is not None:
            handle.close()
    if target.type == "cuda":
        torch.cuda.current_stream(target).synchronize()
    return result


__all__ = [
    "DistributedLoadError",
    "RULES",
    "load_distributed",
    "load_tensor_parallel",
    "plan_reads",
    "plan_bytes",
    "split_bounds",
]
