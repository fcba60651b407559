"""Reading a file's pages ahead of a load, as byte ranges for the core's background reader.

What a loader declares it will read (the whole file, some tensors, parts of
tensors) becomes those ranges; the reader is ``_fastst.read.ReadAhead``.

The reader is bounded: it never reads more than a budget (by default half
of the memory the kernel reports as available; ``read_ahead_budget=`` or
``FASTST_READ_AHEAD_BUDGET``) ahead of what the consumer has taken. Copies
(``copy=True``, ``dtype=``) count as taken once made; zero-copy views are
touched later, when the caller uses them, so for them the budget bounds the
whole read-ahead. It skips pages already in memory (and starts no thread
when they all are), stops when the file is closed, and ends at the first
failed read (a file truncated underneath: an error it swallows, never a
signal).

Pages are mapped where the tensors will be handed out
(``MADV_POPULATE_READ`` on the whole-file mapping) with the mmap back end,
and read with positioned reads otherwise.

Environment: ``FASTST_READ_AHEAD=0`` turns off the automatic read-ahead
(``load_file``, and ``safe_open``'s ``"auto"``); explicit declarations
still work. ``FASTST_READ_AHEAD_BUDGET`` (a size, :func:`fastst._settings.parse_size`)
sets the budget.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union

import numpy as np

from .._dtypes import PACKED_BITS
from .._errors import Where
from .._fastst import read as _fastst_read
from .._frameworks import apply_index, numpy_stand_in
from .._settings import read_ahead_budget, read_ahead_enabled
from .._sources.raw import RawSource
from .index import check_index, read_plan

#: What a loader may declare: ``"all"`` (or True), tensor names, or a map
#: from tensor name to the index it will read (``...`` for all of it).
Declaration = Union[str, bool, Iterable[str], Mapping[str, Any]]

#: More byte ranges than this for one slice are read as the span covering them.
_MAX_RANGES = 1 << 16


def _selected(index: Any, shape: Tuple[int, ...], where: object) -> Tuple[int, ...]:
    """The shape of what ``index`` selects of a tensor of ``shape``, or the
    error ``get_slice`` raises for it (numpy's rules, worded as the numpy
    backend words them after ``where``), reading nothing."""
    return tuple(np.shape(apply_index(numpy_stand_in(shape), index, where)))


def slice_ranges(
    dtype: str, shape: Sequence[int], nbytes: int, index: Any, where: object = "the tensor"
) -> List[Tuple[int, int]]:
    """Byte ranges ``(offset, length)`` inside a tensor of ``dtype`` and
    ``shape`` (``nbytes`` long) that ``get_slice(...)[index]`` reads, in
    ascending order: the index planned as ``get_slice`` plans it
    (:func:`~fastst._read.index.read_plan`), its byte ranges listed by the
    core's reader of slices (more than ``_MAX_RANGES`` are the one range
    spanning them). An index ``get_slice`` refuses raises its error
    (``where`` names the file and tensor)."""
    shape = tuple(int(d) for d in shape)
    index = check_index(index)
    if 0 in _selected(index, shape, where):
        return []
    packed = PACKED_BITS.get(dtype, 0)
    planned = read_plan(index, shape, packed)
    if planned is None:
        # Packed rows that end inside a byte: get_slice reads the whole tensor.
        return [(0, nbytes)] if nbytes else []
    return _fastst_read.slice_ranges(dtype, list(shape), planned[0], _MAX_RANGES)


def plan(raw: _fastst_read.RawFile, what: Declaration) -> List[Tuple[int, int]]:
    """Absolute byte ranges ``(offset, length)`` of ``raw`` (a
    ``_fastst.read.RawFile``) that the declaration ``what`` covers, in the order
    declared (``"all"``: file order). Unknown tensor names raise the
    reader's error for them."""
    start = int(raw.data_start)

    def tensor(name: str) -> Tuple[str, Tuple[int, ...], int, int]:
        dtype, shape, begin, end = raw.info(name)
        return dtype, shape, int(begin), int(end)

    if what is True or (isinstance(what, str) and what == "all"):
        # Every tensor's bytes: the whole data buffer (the core cuts the
        # range at the file's end).
        return [(start, (1 << 63) - 1 - start)]
    if isinstance(what, (str, bytes)) or what is False or what is None:
        raise ValueError(
            f'read_ahead takes "all", a list of tensor names or a dict name -> index; got {what!r}'
        )
    ranges: List[Tuple[int, int]] = []
    if isinstance(what, Mapping):
        for name, index in what.items():
            dtype, shape, b, e = tensor(name)
            where = Where(raw.name, name)
            parts = slice_ranges(dtype, shape, e - b, index, where)
            ranges += [(start + b + o, n) for o, n in parts]
        return ranges
    for name in what:
        _dtype, _shape, b, e = tensor(name)
        if e > b:
            ranges.append((start + b, e - b))
    return ranges


class Driver:
    """The read-ahead of one open file: what was declared, the running
    ``_fastst.read.ReadAhead``, and ``"auto"`` mode (the whole file once the
    caller has asked for a slice of every tensor, as ``transformers`` does
    before loading a checkpoint)."""

    def __init__(self, raw: _fastst_read.RawFile, mode: Any, budget: Optional[int]) -> None:
        self._raw = raw
        self._budget = budget
        self._job: Optional[Any] = None
        self._detached = False
        self._auto = isinstance(mode, str) and mode == "auto" and read_ahead_enabled()
        self._sliced: Set[str] = set()
        #: Whether the running read-ahead is "auto" mode's guess.
        self._guessed = False
        if mode not in (None, False) and not (isinstance(mode, str) and mode == "auto"):
            self.declare(mode)

    def declare(self, what: Declaration, budget: Optional[int] = None) -> None:
        """Reads what ``what`` declares from now on (replacing any earlier
        declaration)."""
        ranges = plan(self._raw, what)
        self.stop()
        self._auto = False
        if budget is None:
            budget = self._budget
        if budget is None:
            budget = read_ahead_budget()
        if budget is not None and budget <= 0:
            raise ValueError(f"read-ahead budget must be positive, got {budget}")
        self._job = _fastst_read.ReadAhead(self._raw, ranges, budget)
        self._detached = False
        self._guessed = False

    def sliced(self, name: str) -> None:
        """The caller asked for a slice of ``name`` (``"auto"`` mode)."""
        if not self._auto:
            return
        self._sliced.add(name)
        if len(self._sliced) == len(self._raw):
            self.declare("all")
            self._guessed = True

    def planned(self) -> None:
        """A loader's plan now says what is read: ``"auto"`` mode ends, and
        the whole-file read-ahead it guessed (every tensor sliced, as when
        a plan is built from ``get_slice`` shapes) stops, so that a plan's
        slices do not bring in the rows they leave out."""
        self._auto = False
        if self._guessed:
            self.stop()
            self._guessed = False

    def consumed(self, nbytes: int) -> None:
        """The caller copied ``nbytes`` planned bytes out."""
        if self._job is not None:
            self._job.consumed(nbytes)

    def detach(self) -> None:
        """Keeps reading after the file is closed, up to the budget (for
        ``load_file``: its views are touched after it returns)."""
        if self._job is not None:
            self._job.detach()
            self._detached = True

    def stop(self) -> None:
        if self._job is not None and not self._detached:
            self._job.stop()
        self._job = None

    def status(self) -> Optional[Dict[str, Any]]:
        return None if self._job is None else dict(self._job.status())

    def wait(self, timeout: float) -> Optional[Dict[str, Any]]:
        return None if self._job is None else dict(self._job.wait_idle(timeout))


def driver(raw: RawSource, mode: Any, budget: Optional[int]) -> Optional[Driver]:
    """A :class:`Driver` for ``raw`` when it is a single file (checkpoints
    read through an index get none; the core plans nothing for a file
    object without a descriptor), else None."""
    if not isinstance(raw, _fastst_read.RawFile):
        return None
    return Driver(raw, mode, budget)
