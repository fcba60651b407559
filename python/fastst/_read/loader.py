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
in the order their bytes land. A reader takes the whole tensors that follow
each other in the plan together (up to :data:`RUN` bytes) and reads them as
one streaming load (the core's ``load_into`` with ``stream=True``, as
``iter_tensors`` does), each tensor handed out as it is filled; a planned
slice is read alone. A loader starts no more readers than it has reads, and
until its first tensor lands, its reads go no further than that tensor (it
comes out as soon as a load of it alone would).

Two process-wide bounds, shared by every loader (:data:`_SHARED`):

- bytes: a tensor's bytes are read only once it is admitted: when the
  bytes of every loader's tensors admitted and not yet taken, plus its own,
  fit the process budget (``FASTST_PREFETCH_BUDGET``, 1 GiB by default) and
  the loader's own ``budget=``. A load of whole tensors reads up to the
  last one admitted (the bound its reporter answers, and at most one
  request past it), admits more as tensors are taken, and waits while the
  budget is full (backpressure). So that no consumer waits forever, a
  tensor is also admitted when nothing is held, or when a consumer of its
  loader is waiting for it (``take``) or for any of its tensors (iteration)
  and its loader holds nothing: then one tensor beyond the budget is in
  memory at most per waiting consumer; a load waiting on the budget while
  a consumer waits for a tensor it has not admitted stops, and what it has
  not read goes back, behind that tensor. A load lets go of each
  destination as it is filled, so a tensor taken and dropped is freed
  while the load goes on. Readers allocate the tensors' memory on their own
  threads; a reader gives the allocator's free memory back to the system
  (``malloc_trim``, where the C library has it) before each read, and before
  a load that waited on the budget goes on, once tensors were handed out
  since the last time: freed tensors would otherwise stay resident in the
  allocator's per-thread pools, and a loader's memory grow past its budget.
- readers: at most ``FASTST_PREFETCH_THREADS`` (8 by default) reads run at
  once in the process, whatever ``threads=`` each loader asks for (a load
  waiting on the budget does not count).

``close()`` (or leaving the ``with`` block) stops the loader: waiting readers
and consumers wake, loads in flight stop at their next report (the requests
being read end) and what they read is dropped, tensors not taken are
released; tensors handed out stay valid. A
failed read (a file truncated underneath: rule ``file-changed``) is raised
by the ``take`` of the tensor it failed in, or by the iteration when it
reaches it; the loader then reads the tensors left one at a time, so that
each failure is its own tensor's.

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
from itertools import accumulate
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

from .._errors import LoadStopped, closed_file_error, rule_error
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
#: this many bytes, as one streaming load: their destinations are allocated
#: when it starts (address space; each page is touched as it is read).
RUN = 4 << 30

#: How a loader reads: ``read(entries, land)`` reads one planned slice, or
#: consecutive whole tensors as one streaming load, calling ``land`` with
#: the tensors (in order) each time more of them are filled; ``land``
#: answers how many bytes of the entries, from the first, may be read.
Read = Callable[[List["Entry"], Callable[[List[Any]], int]], None]


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
        read: Read,
        threads: int,
        budget: Optional[int],
        *,
        held: Optional[Dict[str, int]] = None,
        parts: Tuple[PrefetchLoader, ...] = (),
        closing: Optional[Callable[[], None]] = None,
    ) -> None:
        """``held``: the bytes held per name, shared by the loaders of one
        checkpoint's shards (their ``budget`` counts them all); ``parts``:
        those loaders, when this one hands out theirs (``entries`` then
        lists them all, and no reader of its own starts); ``closing``
        releases what the loader holds open, at its close."""
        self._filename = filename
        self._parts = parts
        self._part_of: Dict[str, PrefetchLoader] = {
            name: part for part in parts for name in part.names()
        }
        self._closing = closing
        self._entries: Dict[str, Entry] = {e.name: e for e in entries}
        self._place = {e.name: i for i, e in enumerate(entries)}
        #: Set once a read failed: each later read takes one tensor.
        self._single = False
        #: True until the first tensor lands (see the module's documentation).
        self._leading = True
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
        # No more readers than reads: a run of whole tensors is one.
        reads = sum(i == 0 or not self._joins(entries[i - 1], e) for i, e in enumerate(entries))
        count = max(1, min(threads, prefetch_threads(), reads))
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
    def _admits(self, entry: Entry, reading: bool = False, mine: Optional[int] = None) -> bool:
        """Whether ``entry``'s bytes may be read now (the lock held);
        ``reading``: by a read already running (its reader counted);
        ``mine``: the bytes this loader holds, when the caller keeps count."""
        if not reading and _SHARED.readers >= prefetch_threads():
            return False
        if entry.name in self._wanted or _SHARED.held == 0:
            return True
        if self._hungry and not self._held:
            # A consumer waits with nothing of this loader's admitted (the
            # process's budget held by other loaders).
            return True
        return self._fits(sum(self._held.values()) if mine is None else mine, entry.nbytes)

    def _fits(self, mine: int, nbytes: int) -> bool:
        """Whether ``nbytes`` more fit this loader's budget (``mine`` held)
        and the process's (the lock held)."""
        if self._budget is not None and mine + nbytes > self._budget:
            return False
        return _SHARED.held + nbytes <= _SHARED.budget()

    def _next(self) -> Union[List[Entry], int, None]:
        """The next entries to read, once the first is admitted (the reader
        and its bytes counted): a slice alone, or the whole tensors that
        follow each other in the plan from it, up to :data:`RUN` bytes (the
        read admits the others as it goes: :class:`_Run`); when none may
        start yet, the epoch at which that was seen (the reader waits for a
        later one, without holding the loader); None once closed or nothing
        is left."""
        with _SHARED.cond:
            if self._closed or not self._todo:
                return None
            entry = self._todo[0]
            if not self._admits(entry):
                return _SHARED.epoch
            self._todo.popleft()
            run = [entry]
            total = entry.nbytes
            while (
                not self._single
                and entry.name not in self._wanted
                and self._todo
                and self._joins(run[-1], self._todo[0], total)
            ):
                more = self._todo.popleft()
                run.append(more)
                total += more.nbytes
            _SHARED.readers += 1
            self._hold(entry)
            return run

    def _joins(self, last: Entry, entry: Entry, total: int = 0) -> bool:
        """Whether ``entry`` is read with the run ending with ``last``
        (``total`` bytes so far): both whole tensors, next to each other in
        the plan, within :data:`RUN`."""
        return (
            last.index is None
            and entry.index is None
            and self._place[entry.name] == self._place[last.name] + 1
            and total + entry.nbytes <= RUN
        )

    def _hold(self, entry: Entry) -> None:
        """Counts ``entry``'s bytes as held (the lock held)."""
        self._held[entry.name] = entry.nbytes
        _SHARED.held += entry.nbytes

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
            self._ready.clear()
            # Landed or being read: loads in flight stop at their next report.
            for name in [n for n in self._held if n in self._entries]:
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
    shards: List[Tuple[List[Entry], Read]],
    threads: int,
    budget: Optional[int],
    closing: Optional[Callable[[], None]] = None,
) -> PrefetchLoader:
    """The loader of a sharded checkpoint ``filename`` (its index): one
    loader per shard (its entries, and how they are read), reading side by
    side, their ``budget`` counting the bytes of all of them; ``threads``
    split between them, one reader per shard at least."""
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
        )
        for i, (entries, read) in enumerate(shards)
    )
    entries = [e for part in parts for e in part._entries.values()]
    return PrefetchLoader(
        filename, entries, lambda run, land: None, threads, budget, parts=parts, closing=closing
    )


def _work(ref: weakref.ReferenceType[PrefetchLoader]) -> None:
    """A reader thread of the loader ``ref`` points to, until it is closed,
    collected or has nothing left to read."""
    while True:
        loader = ref()
        if loader is None:
            return
        entries = loader._next()
        if entries is None:
            return
        if isinstance(entries, int):
            del loader
            with _SHARED.cond:
                if _SHARED.epoch == entries:
                    _SHARED.cond.wait(_TICK)
            continue
        # Not held while reading: a loader dropped without close() is collected.
        read = loader._read
        del loader
        _give_back()
        run = _Run(ref, entries)
        try:
            read(entries, run.land)
        except LoadStopped:
            run.end(None)
        except BaseException as exc:  # handed to the consumer
            run.end(exc)
        else:
            run.end(None)
        del read, run, entries


def _give_back() -> None:
    """Gives the allocator's free memory back to the system when tensors
    were handed out since the last time (see the module's documentation)."""
    with _SHARED.cond:
        trim, _SHARED.handed = _SHARED.handed > 0, 0
    if trim and _TRIM is not None:
        _TRIM(0)


class _Run:
    """One read of a loader (its first entry admitted, its reader counted),
    seen from the reader's thread: hands out what lands, admits the next
    entries as the budgets let it, and puts back what it did not read."""

    def __init__(self, ref: weakref.ReferenceType[PrefetchLoader], entries: List[Entry]) -> None:
        self._ref = ref
        self._entries = entries
        #: Bytes of the entries up to each one, from the first.
        self._ends = list(accumulate(e.nbytes for e in entries))
        self._landed = 0
        self._admitted = 1
        #: Whether the read counts as one of the process's readers.
        self._reading = True

    def land(self, values: List[Any]) -> int:
        """Hands out the next ``values`` (the read's tensors, in order), then
        answers how many bytes of the entries, from the first, are admitted
        (the read's bound). While every admitted entry has landed and the
        next may not start, it waits (its reader not counted). Raises
        ``LoadStopped`` once the loader is closed or collected, or when it
        waits while a consumer waits for a tensor of its loader not yet
        landed (the run gives way: :meth:`end` puts that tensor first)."""
        cond = _SHARED.cond
        waited = False
        with cond:
            loader = self._ref()
            if loader is None:
                raise LoadStopped
            for value in values:
                entry = self._entries[self._landed]
                self._landed += 1
                self._admitted = max(self._admitted, self._landed)
                if loader._closed:
                    continue
                if entry.name not in loader._held:
                    # Read with the request before it, past the bound.
                    loader._hold(entry)
                loader._ready[entry.name] = value
            if values:
                loader._leading = False
                _SHARED.notify()
            while True:
                if loader._closed:
                    raise LoadStopped
                if loader._leading:
                    bound = self._ends[0]
                    break
                mine = sum(loader._held.values())
                while self._admitted < len(self._entries) and loader._admits(
                    self._entries[self._admitted], self._reading, mine
                ):
                    if not self._reading:
                        _SHARED.readers += 1
                        self._reading = True
                    entry = self._entries[self._admitted]
                    loader._hold(entry)
                    mine += entry.nbytes
                    self._admitted += 1
                if self._admitted > self._landed or self._admitted == len(self._entries):
                    bound = self._ends[self._admitted - 1]
                    break
                if any(name not in loader._ready for name in loader._wanted):
                    raise LoadStopped
                if self._reading:
                    _SHARED.readers -= 1
                    self._reading = False
                    _SHARED.notify()
                waited = True
                del loader
                cond.wait(_TICK)
                loader = self._ref()
                if loader is None:
                    raise LoadStopped
        if waited:
            _give_back()
        return bound

    def end(self, error: Optional[BaseException]) -> None:
        """The read is over (``error``: how it failed): its reader is free,
        and the entries it did not hand out are released and, unless the
        loader is closed, put back to read (the one it failed in gets
        ``error``; a tensor a consumer waits for goes first)."""
        with _SHARED.cond:
            if self._reading:
                _SHARED.readers -= 1
            loader = self._ref()
            rest = self._entries[self._landed :]
            if loader is not None:
                for entry in rest:
                    loader._release(entry.name)
                if not loader._closed:
                    if error is not None and rest:
                        loader._failed[rest[0].name] = error
                        loader._single = True
                        rest = rest[1:]
                    loader._todo.extendleft(reversed(rest))
                    for entry in [e for e in loader._todo if e.name in loader._wanted]:
                        loader._todo.remove(entry)
                        loader._todo.appendleft(entry)
            _SHARED.notify()
