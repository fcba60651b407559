"""Owned loads in background threads: tensor by tensor, and several files side by side.

Tensors are handed out as their reads complete
(``safe_open.iter_tensors``); :func:`load_side_by_side` loads several files.

Background threads run the core's whole loads (``load_into`` with
``stream=True``, the GIL released while bytes move), two files (shards) at
a time as :func:`load_side_by_side` does, but each next one started only
once the one before has its last reads left (:class:`Turns`: the first
tensors come first), and put what they report on a
queue: ``(file, done, total, filled)``, every tensor of the ``file``-th
file ending at or before ``filled`` in its data section being read (a
failure: ``(file, exception)``). The iterating thread takes them off the
queue, keeps what is reported of files ahead of the one it is at, and
hands out the tensors below ``filled``, in file order, file after file; a
file's failure is raised once the tensors read before it are handed out.
The loaders stop at their next report once the iterator is finished with
(or the file closed), and the reads they have in flight on an object of a
store are cancelled (``cancel_reads``: a slow server does not hold the
loop's exit); the thread that iterated waits for them. A garbage
collection on another thread only stops them: that thread may be one the
reads wait on (a file object's ``readinto``).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from .._errors import LoadStopped, closed_file_error
from .._fastst.read import RawFile, load_into
from .._paths import progress_label
from .pool import run_all
from .progress import Report

if TYPE_CHECKING:
    from .._sources.raw import RawSource


@dataclass(frozen=True)
class Plan:
    """One file's part of an owned load."""

    #: The file the tensors are read from.
    file: RawFile
    #: Its tensors to load, in file order.
    names: List[str]
    #: Their destinations, as writable bytes.
    outs: List[np.ndarray]
    #: The dtype each is converted to (None: the file's own).
    targets: List[Optional[str]]
    #: The bytes of the file those tensors hold.
    nbytes: int


#: Source bytes between two calls of a caller's progress callback.
EVERY = 64 << 20


def stream(
    raw: RawSource,
    plans: List[Plan],
    callback: Optional[Report],
    bar: bool,
    finish: Callable[[str], Any],
) -> Iterator[Tuple[str, Any]]:
    """The iterator handing out ``(name, finish(name))`` for the tensors of
    ``plans`` (one per file, in order) as each is read; the reading starts
    at its first ``next()``."""
    ends = [[p.file.info(name)[3] for name in p.names] for p in plans]
    return _hand_out(raw, plans, ends, callback, bar, finish)


def _hand_out(
    raw: RawSource,
    plans: List[Plan],
    ends: List[List[int]],
    callback: Optional[Report],
    bar: bool,
    finish: Callable[[str], Any],
) -> Iterator[Tuple[str, Any]]:
    events: queue.SimpleQueue[Any] = queue.SimpleQueue()
    stop = threading.Event()
    main = threading.main_thread()

    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for at in range(len(plans)):
        todo.put(at)
    turns = Turns()

    def report(at: int, done: int, total: int, filled: int) -> None:
        # The interpreter exiting (the main thread is done) stops it too.
        if stop.is_set() or raw.closed or not main.is_alive():
            raise LoadStopped
        if done + TAIL >= total:
            turns.allow(at + 1)
        events.put((at, done, filled))

    def load() -> None:
        # The files in order, each taken by the first loader free, and
        # started once the one before has its last reads left.
        while not stop.is_set():
            try:
                at = todo.get_nowait()
            except queue.Empty:
                return
            if not turns.wait(at):
                return
            p = plans[at]
            if p.nbytes <= TAIL:
                turns.allow(at + 1)
            try:
                label = progress_label(p.file.name, bar)
                load_into(
                    p.file,
                    p.names,
                    p.outs,
                    p.targets,
                    partial(report, at),
                    label,
                    stream=True,
                    in_order=len(plans) > 1,
                )
            except BaseException as exc:  # handed to the iterating thread
                events.put((at, exc))
            else:
                turns.allow(at + 1)

    loaders = [
        threading.Thread(target=load, name="fastst-load")
        for _ in range(min(SIDE_BY_SIDE, len(plans)))
    ]
    for loader in loaders:
        loader.start()
    grand = sum(p.nbytes for p in plans)
    mark = 0
    done_of = [0] * len(plans)
    # What was reported of each file and not yet taken: its last
    # ``filled``, and its failure.
    filled_of = [-1] * len(plans)
    failed: Dict[int, BaseException] = {}
    consumer = threading.get_ident()
    complete = False
    try:
        for k, (plan, file_ends) in enumerate(zip(plans, ends, strict=True)):
            members = plan.names
            i = 0
            while i < len(members):
                while i < len(members) and file_ends[i] <= filled_of[k]:
                    if raw.closed:
                        raise closed_file_error(raw.name)
                    name = members[i]
                    i += 1
                    consumer = threading.get_ident()
                    yield name, finish(name)
                if i == len(members):
                    break
                if k in failed:
                    event = failed[k]
                    if raw.closed:  # stopped, or its reads cancelled, by close()
                        raise closed_file_error(raw.name) from event
                    raise event
                at, *rest = events.get()
                if len(rest) == 1:
                    failed[at] = rest[0]
                    continue
                done_of[at], filled_of[at] = rest
                now = sum(done_of)
                if callback is not None and mark + EVERY <= now < grand:
                    mark = now - now % EVERY
                    callback(now, grand)
        complete = True
        if callback is not None:
            callback(grand, grand)
    finally:
        stop.set()
        turns.end()
        if not complete and any(loader.is_alive() for loader in loaders):
            raw.cancel_reads()
        if threading.get_ident() == consumer:
            for loader in loaders:
                loader.join()


#: Files (shards) loaded at once by :func:`load_side_by_side` and
#: :func:`stream`: the next file's reads start while the last reads of the
#: one before are in flight.
SIDE_BY_SIDE = 2

#: The next file's load starts once at most this many source bytes of the
#: one before are left to read (about the reads a cold load keeps in
#: flight, plus one progress step): before that, the disk works on one
#: file. Two files read side by side from the start split the disk, and
#: its scheduler, serving requests by their place on the disk, keeps one
#: file's requests waiting while the other's keep coming (the first
#: tensors, in file order, came late).
TAIL = 192 << 20


class Turns:
    """When the load of each file (by its place) may start: the first at
    once, each next one once :meth:`allow` says so (the load before it has
    its last reads left, or has ended), and none once :meth:`end` is
    called."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._open = 1
        self._ended = False

    def allow(self, at: int) -> None:
        """The loads of files up to the ``at``-th may start."""
        with self._cond:
            if at >= self._open:
                self._open = at + 1
                self._cond.notify_all()

    def end(self) -> None:
        """No more loads start; the waiting ones give up."""
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def wait(self, at: int) -> bool:
        """Waits until the ``at``-th file's load may start (True) or no
        more loads start (False)."""
        with self._cond:
            self._cond.wait_for(lambda: self._ended or at < self._open)
            return not self._ended


def load_side_by_side(plans: List[Plan]) -> None:
    """The loads of several files (shards), two at a time, so that the next
    file's reads start while the last reads of the one before are in
    flight. The first error in file order is raised; an error or an
    interrupt of the calling thread stops the loads still running at their
    next report."""
    stop = threading.Event()

    def check(_done: int, _total: int) -> None:
        if stop.is_set():
            raise LoadStopped

    run_all(
        lambda p: load_into(p.file, p.names, p.outs, p.targets, check),
        plans,
        SIDE_BY_SIDE,
        "fastst-load",
        stop=stop.set,
    )
