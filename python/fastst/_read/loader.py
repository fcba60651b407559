"""``safe_open.prefetch(plan)``: planned tensors read in the background, each handed out once.

A plan names the tensors to load and what of each (safetensors 0.9's
contract, fastst's a superset):

- ``None``: every tensor, whole;
- a list (any iterable) of names: those tensors, whole;
- a mapping from name to ``None`` (the whole tensor), a ``slice`` of its
  first dimension (step 1; negative bounds count from the end; a stop past
  the end is refused, not clamped: a plan is explicit), or, in fastst's own
  API, any index ``get_slice`` takes as a tuple (``(slice(0, 128), ...)``,
  ``(..., slice(64, 128))``): the rows and columns ``get_slice(name)[index]``
  gives, reading only their bytes.

:class:`PrefetchLoader` reads the planned tensors on background threads into
memory of their own (the owned loads of ``get_tensor(copy=True)``, or the
byte ranges of a slice), then places them on the loader's device. Each is
handed out once, by :meth:`~PrefetchLoader.take` (which waits for it, and
moves it to the front of the reads) or by iterating ``(name, tensor)`` pairs
in the order their bytes land.

Two process-wide bounds, shared by every loader (:data:`_SHARED`):

- bytes: a read starts only when the bytes of every loader's tensors read
  (or being read) and not yet taken, plus its own, fit the process budget
  (``FASTST_PREFETCH_BUDGET``, 1 GiB by default) and the loader's own
  ``budget=``. Readers wait while the budget is full (backpressure). So that
  no consumer waits forever, a tensor is also read when nothing is held, or
  when a consumer of its loader is waiting for it (``take``) or for any of
  its tensors (iteration) and its loader holds nothing, read or in flight:
  then one read beyond the budget is in memory at most per waiting
  consumer. Readers allocate the tensors' memory on their own threads; a
  reader gives the allocator's free memory back to the system
  (``malloc_trim``, where the C library has it) before each read once
  tensors were handed out since the last time: freed tensors would
  otherwise stay resident in the allocator's per-thread pools, and a
  loader's memory grow past its budget by a batch per reader.
- readers: at most ``FASTST_PREFETCH_THREADS`` (8 by default) reads run at
  once in the process, whatever ``threads=`` each loader asks for.

``close()`` (or leaving the ``with`` block) stops the loader: waiting readers
and consumers wake, reads in flight finish their current tensor and are
dropped, tensors not taken are released; tensors handed out stay valid. A
failed read (a file truncated underneath: rule ``file-changed``) is raised
by the ``take`` of that tensor, or by the iteration when it reaches it.

A loader holds its file open itself (a share of the handle's, as
safetensors 0.9's loader holds its own reference to the file): closing the
``safe_open`` handle leaves it reading, and the file is released once the
handle and the loader are both closed (or collected).

A sharded checkpoint (an index, or a folder holding one) gives one loader
made of a loader per shard (:func:`sharded`): each shard's tensors are read
by readers of their own, side by side; the loader's ``budget=`` bounds the
bytes of all its shards together, ``threads=`` is split between the shards
(one reader each at least), and the process bounds hold as for any loader.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Set,
    Tuple,
    Union,
    cast,
)

from .._errors import closed_file_error, rule_error
from .._settings import prefetch_budget, prefetch_threads

#: safetensors 0.9's plan: tensor name -> None (whole) or a step-1 slice of
#: the first dimension.
PrefetchPlan = Dict[str, Optional[slice]]

#: What ``prefetch`` takes as a plan in fastst's own API.
Plan = Union[None, Iterable[str], Mapping[str, Any]]

#: The process budget when ``FASTST_PREFETCH_BUDGET`` is unset.
DEFAULT_BUDGET = 1 << 30

#: How long a wait lasts before it looks again (Ctrl-C is heard between).
_TICK = 0.25

#: A reader takes consecutive whole tensors of the plan together, up to
#: this many bytes (one batch load: few large requests, read around the
#: page cache when cold), and hands each out when the batch has landed...
BATCH = 64 << 20
#: ... up to this many where most of the plan's pages are cached when it
#: starts (warm, each batch's fixed cost (its allocation's turn with the
#: reads, its threads) is a larger share of its time; cold, larger batches
#: took longer: benches/README.md, "Warm whole-file plans and the mapping
#: gate")...
WARM_BATCH = 256 << 20
#: ... except the loader's first read, up to this many bytes, which runs
#: alone: the first tensor comes out as soon as a whole load's would.
FIRST_BATCH = 8 << 20


@dataclass(frozen=True)
class TensorMeta:
    """A tensor's header entry, as written in the file; no data is read to
    build it (``safe_open.get_tensor_meta``)."""

    #: The header's dtype name, e.g. ``"F32"``.
    dtype: str
    #: The tensor's shape.
    shape: List[int]
    #: ``(start, end)`` of its bytes within the data section.
    data_offsets: Tuple[int, int]


@dataclass(frozen=True)
class Entry:
    """One planned tensor: its name, what of it (None: all of it, else an
    index ``get_slice`` takes) and the bytes it holds once read."""

    name: str
    index: Any
    nbytes: int


class _Shared:
    """What every loader of the process shares: one lock (with its
    condition), the bytes held (read or being read, not taken) and the
    readers running."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.held = 0
        self.readers = 0
        #: Tensors handed out since a reader last gave free memory back.
        self.handed = 0
        #: Bumped by every notify: a reader that saw no admission at one
        #: value waits only while it is unchanged.
        self.epoch = 0

    def notify(self) -> None:
        """Wakes every waiter (the lock held)."""
        self.epoch += 1
        self.cond.notify_all()

    def budget(self) -> int:
        budget = prefetch_budget()
        return DEFAULT_BUDGET if budget is None else budget


_SHARED = _Shared()


def _malloc_trim() -> Optional[Callable[[int], int]]:
    """The C library's ``malloc_trim`` (glibc), or None."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return cast(Callable[[int], int], trim)


_TRIM = _malloc_trim()


def plan_error(filename: str, message: str, tensor: Optional[str] = None) -> BaseException:
    return rule_error("plan-invalid", filename, message, tensor)


def first_rows(filename: str, name: str, shape: Tuple[int, ...], rows: slice) -> Any:
    """The index of a plan's first-dimension slice ``rows`` of a tensor of
    ``shape``: safetensors 0.9's rules (step 1, bounds from the end when
    negative, none past the end, no 0-d tensor)."""
    if not shape:
        raise plan_error(filename, f"tensor {name!r} is 0-d: a plan cannot slice its rows", name)
    if rows.step is not None and rows.step != 1:
        if rows.step == 0:
            raise plan_error(
                filename, f"invalid prefetch plan slice for tensor {name!r}: step 0", name
            )
        raise plan_error(
            filename,
            f"tensor {name!r}: a plan's slice takes rows with step 1, not {rows.step}",
            name,
        )
    n = shape[0]
    bounds = []
    for value, default in ((rows.start, 0), (rows.stop, n)):
        if value is None:
            bounds.append(default)
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise plan_error(
                filename, f"invalid prefetch plan slice for tensor {name!r}: {rows!r}", name
            )
        bounds.append(value + n if value < 0 else value)
    start, stop = bounds
    if not 0 <= start <= stop <= n:
        raise plan_error(
            filename,
            f"tensor {name!r}: rows {rows.start}:{rows.stop} are out of range for its {n} rows",
            name,
        )
    return (slice(start, stop),)


class PrefetchLoader:
    """The planned tensors of one file, read in the background and handed
    out once each (``safe_open.prefetch``; see :mod:`fastst._read.loader`)."""

    def __init__(
        self,
        filename: str,
        entries: List[Entry],
        read: Callable[[List[Entry]], List[Any]],
        threads: int,
        budget: Optional[int],
        *,
        held: Optional[Dict[str, int]] = None,
        parts: Tuple[PrefetchLoader, ...] = (),
        closing: Optional[Callable[[], None]] = None,
        batch: int = BATCH,
    ) -> None:
        """``held``: the bytes held per name, shared by the loaders of one
        checkpoint's shards (their ``budget`` counts them all); ``parts``:
        those loaders, when this one hands out theirs (``entries`` then
        lists them all, and no reader of its own starts); ``closing``
        releases what the loader holds open, at its close; ``batch``: the
        most bytes of whole tensors one read takes (:data:`BATCH` or
        :data:`WARM_BATCH`)."""
        self._filename = filename
        self._batch = batch
        self._parts = parts
        self._part_of: Dict[str, PrefetchLoader] = {
            name: part for part in parts for name in part.names()
        }
        self._closing = closing
        self._entries: Dict[str, Entry] = {e.name: e for e in entries}
        self._place = {e.name: i for i, e in enumerate(entries)}
        #: True until the first read starts, then while it is in flight.
        self._leading = True
        self._started = False
        self._names = [e.name for e in entries]
        self._read = read
        self._budget = budget
        self._todo: Deque[Entry] = deque([] if parts else entries)
        self._ready: OrderedDict[str, Any] = OrderedDict()
        self._failed: Dict[str, BaseException] = {}
        self._held: Dict[str, int] = {} if held is None else held
        self._taken: Set[str] = set()
        self._wanted: Set[str] = set()
        self._hungry = 0
        self._closed = False
        count = max(1, min(threads, prefetch_threads(), len(entries)))
        # The workers hold the loader weakly between reads: a loader dropped
        # without close() is collected, and closed (its bytes released).
        me = weakref.ref(self)
        self._workers = [
            threading.Thread(target=_work, args=(me,), name="fastst-prefetch", daemon=True)
            for _ in range(count if self._todo else 0)
        ]
        for worker in self._workers:
            worker.start()

    # reading ---------------------------------------------------------
    def _admits(self, entry: Entry) -> bool:
        """Whether ``entry``'s read may start now (the lock held)."""
        if _SHARED.readers >= prefetch_threads():
            return False
        if entry.name in self._wanted or _SHARED.held == 0:
            return True
        if self._hungry and not self._held:
            # A consumer waits with nothing of this loader's in flight or
            # landed (the process's budget held by other loaders).
            return True
        return self._fits(sum(self._held.values()), entry.nbytes)

    def _fits(self, mine: int, nbytes: int) -> bool:
        """Whether ``nbytes`` more fit this loader's budget (``mine`` held)
        and the process's (the lock held)."""
        if self._budget is not None and mine + nbytes > self._budget:
            return False
        return _SHARED.held + nbytes <= _SHARED.budget()

    def _next(self) -> Union[List[Entry], int, None]:
        """The next entries to read, as one batch, once admitted (the
        reader and their bytes counted): the first in line, and the whole
        tensors that follow it in the plan while they fit :data:`BATCH`
        (:data:`FIRST_BATCH` for the loader's first read) and the budgets;
        when none may start yet, the epoch at which that was seen (the
        reader waits for a later one, without holding the loader); None
        once closed or nothing is left."""
        with _SHARED.cond:
            if self._closed or not self._todo:
                return None
            entry = self._todo[0]
            if self._started and self._leading and entry.name not in self._wanted:
                return _SHARED.epoch
            if not self._admits(entry):
                return _SHARED.epoch
            self._todo.popleft()
            batch = [entry]
            total = entry.nbytes
            cap = self._batch if self._started else FIRST_BATCH
            mine = sum(self._held.values())
            while (
                entry.index is None
                and entry.name not in self._wanted
                and self._todo
                and self._todo[0].index is None
                and self._place[self._todo[0].name] == self._place[batch[-1].name] + 1
                and total + self._todo[0].nbytes <= cap
                and self._fits(mine, total + self._todo[0].nbytes)
            ):
                more = self._todo.popleft()
                batch.append(more)
                total += more.nbytes
            self._started = True
            _SHARED.readers += 1
            _SHARED.held += total
            for e in batch:
                self._held[e.name] = e.nbytes
            return batch

    def _landed(
        self, batch: List[Entry], values: List[Any], errors: List[Optional[BaseException]]
    ) -> None:
        """Records what reading ``batch`` gave, per entry (the reader is
        free again)."""
        with _SHARED.cond:
            _SHARED.readers -= 1
            self._leading = False
            for entry, value, error in zip(batch, values, errors, strict=True):
                if self._closed:
                    self._release(entry.name)
                elif error is not None:
                    self._release(entry.name)
                    self._failed[entry.name] = error
                else:
                    self._ready[entry.name] = value
            _SHARED.notify()

    def _release(self, name: str) -> None:
        """Returns ``name``'s bytes to the budget (the lock held)."""
        _SHARED.held -= self._held.pop(name, 0)
        _SHARED.notify()

    # handing out -----------------------------------------------------
    def _closed_error(self) -> BaseException:
        return closed_file_error(self._filename)

    def _deliver(self, name: str) -> Any:
        """``name``'s tensor or its failure, once landed (the lock held;
        ``name`` already marked taken)."""
        if name in self._failed:
            raise self._failed.pop(name)
        value = self._ready.pop(name)
        self._release(name)
        _SHARED.handed += 1
        return value

    def names(self) -> List[str]:
        """The names this loader hands out, in file order."""
        return list(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def take(self, name: str) -> Any:
        """``name``'s tensor, waiting until its bytes have landed (its read
        is moved to the front). Each tensor is handed out once, by ``take``
        or by iterating; asking again, or for a tensor outside the plan,
        raises (rule ``loader-take``); after ``close``, rule ``closed-file``."""
        cond = _SHARED.cond
        with cond:
            if self._closed:
                raise self._closed_error()
            if name not in self._entries:
                raise rule_error(
                    "loader-take",
                    self._filename,
                    f"tensor {name!r} is not in the prefetch plan",
                    name,
                )
            part = self._part_of.get(name)
        if part is not None:
            return part.take(name)
        with cond:
            if self._closed:
                raise self._closed_error()
            if name in self._taken:
                raise rule_error(
                    "loader-take",
                    self._filename,
                    f"tensor {name!r} was already delivered by this loader",
                    name,
                )
            self._taken.add(name)
            if name not in self._ready and name not in self._failed:
                entry = self._entries[name]
                if entry in self._todo:
                    self._todo.remove(entry)
                    self._todo.appendleft(entry)
                self._wanted.add(name)
                _SHARED.notify()
                try:
                    while name not in self._ready and name not in self._failed:
                        if self._closed:
                            raise self._closed_error()
                        cond.wait(_TICK)
                except BaseException:
                    # closed, or Ctrl-C: not handed out; a later take may ask again
                    self._taken.discard(name)
                    raise
                finally:
                    self._wanted.discard(name)
            return self._deliver(name)

    def __iter__(self) -> Iterator[Tuple[str, Any]]:
        """``(name, tensor)`` pairs as their bytes land; tensors already
        taken are skipped. Raises rule ``closed-file`` once the loader is
        closed with tensors left."""
        cond = _SHARED.cond
        queues = list(self._parts) or [self]
        turn = 0
        while True:
            with cond:
                while True:
                    if self._left() == 0:
                        return
                    if self._closed:
                        raise self._closed_error()
                    # The shards in turn, so that none waits behind another.
                    found = _landed_in(queues[turn:] + queues[:turn])
                    if found is not None:
                        queue, landed = found
                        turn = (queues.index(queue) + 1) % len(queues)
                        queue._taken.add(landed)
                        value = queue._deliver(landed)
                        break
                    for queue in queues:
                        queue._hungry += 1
                    _SHARED.notify()
                    try:
                        cond.wait(_TICK)
                    finally:
                        for queue in queues:
                            queue._hungry -= 1
            yield landed, value
            del value

    def _left(self) -> int:
        """How many tensors are still to hand out (the lock held)."""
        if self._parts:
            return sum(part._left() for part in self._parts)
        return len(self._names) - len(self._taken)

    # closing ---------------------------------------------------------
    def close(self) -> None:
        """Stops the loader: no read starts any more, waiting consumers
        raise, tensors not taken are released (reads in flight end with
        their tensor); tensors handed out stay valid."""
        for part in self._parts:
            part.close()
        with _SHARED.cond:
            self._closed = True
            self._todo.clear()
            for name in list(self._ready):
                self._ready.pop(name)
                self._release(name)
            self._failed.clear()
            _SHARED.notify()
        closing, self._closing = self._closing, None
        if closing is not None:
            closing()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> PrefetchLoader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._left()} left"
        return f"<PrefetchLoader {self._filename}: {len(self._names)} tensors, {state}>"


def _landed_in(queues: List[PrefetchLoader]) -> Optional[Tuple[PrefetchLoader, str]]:
    """The first of ``queues`` with a tensor landed (or failed), and its
    name; None when none has one (the lock held)."""
    for queue in queues:
        landed = next(iter(queue._failed), None) or next(iter(queue._ready), None)
        if landed is not None:
            return queue, landed
    return None


def sharded(
    filename: str,
    shards: List[Tuple[List[Entry], Callable[[List[Entry]], List[Any]], int]],
    threads: int,
    budget: Optional[int],
    closing: Optional[Callable[[], None]] = None,
) -> PrefetchLoader:
    """The loader of a sharded checkpoint ``filename`` (its index): one
    loader per shard (its entries, how they are read and its batch size),
    reading side by side, their ``budget`` counting the bytes of all of
    them; ``threads`` split between them, one reader per shard at least."""
    held: Dict[str, int] = {}
    share, extra = divmod(threads, len(shards))
    parts = tuple(
        PrefetchLoader(
            filename,
            entries,
            read,
            max(1, share + (i < extra)),
            budget,
            held=held,
            batch=batch,
        )
        for i, (entries, read, batch) in enumerate(shards)
    )
    entries = [e for part in parts for e in part._entries.values()]
    return PrefetchLoader(
        filename, entries, lambda batch: [], threads, budget, parts=parts, closing=closing
    )


def _work(ref: weakref.ReferenceType[PrefetchLoader]) -> None:
    """A reader thread of the loader ``ref`` points to, until it is closed,
    collected or has nothing left to read."""
    while True:
        loader = ref()
        if loader is None:
            return
        entry = loader._next()
        if entry is None:
            return
        if isinstance(entry, int):
            del loader
            with _SHARED.cond:
                if _SHARED.epoch == entry:
                    _SHARED.cond.wait(_TICK)
            continue
        assert isinstance(entry, list)
        with _SHARED.cond:
            trim, _SHARED.handed = _SHARED.handed > 0, 0
        if trim and _TRIM is not None:
            _TRIM(0)
        values, errors = _read_batch(loader, entry)
        loader._landed(entry, values, errors)
        del loader, values, errors


def _read_batch(
    loader: PrefetchLoader, batch: List[Entry]
) -> Tuple[List[Any], List[Optional[BaseException]]]:
    """What reading ``batch`` gives, per entry: its tensor or its failure.
    A batch that fails is read again one entry at a time, so that each
    failure is its own tensor's (those read before it are handed out)."""
    try:
        return list(loader._read(batch)), [None] * len(batch)
    except BaseException as exc:  # handed to the consumer
        if len(batch) == 1:
            return [None], [exc]
    values: List[Any] = []
    errors: List[Optional[BaseException]] = []
    for one in batch:
        value, error = _read_batch(loader, [one])
        values += value
        errors += error
    return values, errors
