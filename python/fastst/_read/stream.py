"""Owned loads in background threads: tensor by tensor, and several files side by side.

Owned loads in background threads: handed out tensor by tensor as
their reads complete (``safe_open.iter_tensors``), and the loads of
several files side by side (:func:`load_side_by_side`).

Background threads run the core's whole loads (``load_into`` with
``stream=True``, the GIL released while bytes move), two files (shards) at
a time as :func:`load_side_by_side` does, and put what they report on a
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from .._errors import LoadStopped, closed_file_error
from .._fastst import RawFile, load_into
from .._paths import progress_label
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

    def report(at: int, done: int, total: int, filled: int) -> None:
        # The interpreter exiting (the main thread is done) stops it too.
        if stop.is_set() or raw.closed or not main.is_alive():
            raise LoadStopped
        events.put((at, done, filled))

    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for at in range(len(plans)):
        todo.put(at)

    def load() -> None:
        # The files in order, each taken by the first loader free.
        while not stop.is_set():
            try:
                at = todo.get_nowait()
            except queue.Empty:
                return
            p = plans[at]
            try:
                label = progress_label(p.file.name, bar)
                load_into(
                    p.file, p.names, p.outs, p.targets, partial(report, at), label, stream=True
                )
            except BaseException as exc:  # handed to the iterating thread
                events.put((at, exc))

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
        if not complete and any(loader.is_alive() for loader in loaders):
            raw.cancel_reads()
        if threading.get_ident() == consumer:
            for loader in loaders:
                loader.join()


#: Files (shards) loaded at once by :func:`load_side_by_side` and
#: :func:`stream`: the next file's reads start while the last reads of the
#: one before are in flight.
SIDE_BY_SIDE = 2


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

    with ThreadPoolExecutor(SIDE_BY_SIDE, thread_name_prefix="fastst-load") as pool:
        loads = [pool.submit(load_into, p.file, p.names, p.outs, p.targets, check) for p in plans]
        try:
            for load in loads:
                load.result()
        finally:
            stop.set()
            for load in loads:
                load.cancel()
