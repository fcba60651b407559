"""The replicated load: every rank ends with the whole checkpoint, each byte read once.

Each byte is read from storage by exactly one rank of the process group.

:func:`plan_reads` shares the bytes out; :class:`_Transfer` moves them in
rounds over two staging buffers (broadcasts under gloo,
``all_gather_into_tensor`` under NCCL, as the group's backend says), while
each rank reads its part of the next round.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from .._frameworks import torch as _fw_torch
from .._read.pool import run_all
from .._read.safe_open import safe_open
from .agreement import (
    Entry,
    PathLike,
    _all_gather,
    _describe,
    _options_digest,
    _require_group,
    _torch_layout,
    agree,
    comm_device,
    failure_bytes,
    failure_text,
    open_table,
    ranks_failed,
    table_digest,
)

UNITS = ("chunk", "tensor", "file")
DEFAULT_BUDGET = 256 << 20
DEFAULT_CHUNK = 1 << 20
_READ_PIECE = 16 << 20  # one positioned read, at most
_DIRECT_MIN = 1 << 20  # gloo: pieces this large skip the staging buffer
_TRAILER = 512  # bytes of a rank's status before its data in a transfer round
_ALIGN = 4096

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
        run_all(lambda c: self._raw.read_range_into(*c), calls, pool=self._pool)


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
    texts = {r: failure_text(rows[r].tobytes()) for r in range(world)}
    failed = {r: text for r, text in texts.items() if text is not None}
    if failed:
        raise ranks_failed("reading", path, failed, world, rank) from own


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
    which gloo runs faster than its all-gather (see benches/README.md);
    pieces of at least ``_DIRECT_MIN`` bytes
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
            host[:_TRAILER] = list(failure_bytes(_describe(self.failure), _TRAILER))
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
