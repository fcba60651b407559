"""``safe_open``: lazy, zero-copy access to the tensors of one file, and whole loads of a path.

:class:`safe_open` and :class:`SafeSlice` (the reference's), and
:func:`load_path`, the ``load_file`` of every framework module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Dict, List, Mapping, Optional, Tuple, Union, cast

import numpy as np

from .._dtypes import NUMPY_DTYPES, PACKED_BITS, target_dtype, to_numpy
from .._errors import Where, closed_file_error, rule_error
from .._fastst.read import (
    DEFAULT_HEADER_CAP,
    RawFile,
    changing_mappings,
    load_into,
)
from .._frameworks import Backend, Placement, apply_index
from .._frameworks import backend as framework_backend
from .._frameworks import resolve as resolve_framework
from .._paths import progress_label
from .._settings import prefetch_threads, read_ahead_enabled, read_backend
from .._sources.opener import open_source
from .._sources.ranges import TensorRange
from .._sources.raw import RawSource
from .._sources.sharded import ShardedFile
from . import loader as _loader
from . import read_ahead as _read_ahead
from .index import check_index, read_plan
from .placement import placement
from .progress import Progress, resolve
from .stream import Plan, load_side_by_side, stream

PathLike = Union[str, "os.PathLike[str]"]


def _offset_report(
    callback: Callable[[int, int], Any], base: int, grand: int
) -> Callable[[int, int], Any]:
    """A shard's reports as reports on the whole checkpoint. The final call
    of each shard but the last is not a final call of the whole."""

    def report(done: int, _total: int) -> None:
        callback(base + done, grand)

    return report


def _aligned_empty(nbytes: int, place: Placement) -> np.ndarray:
    """``nbytes`` uninitialised bytes starting at ``place[1]`` modulo
    ``place[0]`` (:func:`fastst._read.placement.placement`)."""
    align, phase = place
    block = np.empty(nbytes + align, dtype=np.uint8)
    skip = (phase - block.ctypes.data) % align
    return block[skip : skip + nbytes]


def _batches(raw: RawSource, names: List[str]) -> List[Tuple[RawFile, List[str]]]:
    """``names`` grouped by the ``RawFile`` holding them, in order (one
    group for a single file, one per shard for a checkpoint)."""
    if not isinstance(raw, ShardedFile):
        return [(cast(RawFile, raw), list(names))]
    groups: Dict[int, Tuple[RawFile, List[str]]] = {}
    for name in names:
        shard = raw.file_of(name)
        groups.setdefault(id(shard), (shard, []))[1].append(name)
    return list(groups.values())


class safe_open:  # noqa: N801 - the reference package's name
    """Opens a ``.safetensors`` file and gives its tensors on demand.

    ``safe_open(filename, framework, device="cpu", *, backend="mmap")`` reads
    and validates the header at once (refusing a malformed file with a
    :class:`fastst.SafetensorError` subclass); tensor data is read only when
    asked for. Usable with or without ``with``. Arrays handed out are
    zero-copy views of the file's pages, yet writable and independent of
    each other, and they stay valid after the file is closed or deleted.

    ``filename`` may also be a sharded checkpoint's
    ``model.safetensors.index.json``: the shards are then read as one file
    (see :class:`fastst.ShardIndexError`); a model folder holding one
    checkpoint (a single ``.safetensors`` file or one index, see
    :class:`fastst.FolderError`); or an open binary file object (one with
    ``fileno()``, or with ``seek`` and ``readinto``), as the reference's
    ``_safe_open_handle`` takes.

    ``filename`` may also be a URL: ``s3://bucket/key``, ``gs://...``,
    ``az://container/key``, ``https://...`` (an object, an index, or a
    prefix ending in ``/`` holding one checkpoint). Opening fetches the
    header with ranged GETs and nothing else; each tensor or slice fetches
    its own byte ranges. ``storage_options`` (``{"endpoint_url": ...,
    "region": ..., "aws_access_key_id": ...}``: ``object_store``'s keys and
    their aliases) configure the store; without them the environment does
    (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``...). See ``docs/remote.md``.
    """

    #: The class of what :meth:`get_slice` returns (the drop-in switch's
    #: ``safe_open`` hands out slices with the reference's rules).
    _slice: Callable[[_Tensor], SafeSlice]

    def __init__(
        self,
        filename: Union[PathLike, BinaryIO],
        framework: str,
        device: Any = "cpu",
        *,
        backend: str = "mmap",
        header_cap: int = DEFAULT_HEADER_CAP,
        read_ahead: Any = "auto",
        read_ahead_budget: Optional[int] = None,
        storage_options: Optional[Mapping[str, str]] = None,
    ) -> None:
        self._framework = resolve_framework(framework)
        self._backend = framework_backend(self._framework)
        self._device = self._backend.device(device)
        self._read_ahead: Optional[_read_ahead.Driver] = None
        self._raw = open_source(filename, backend, header_cap, storage_options)
        try:
            self._read_ahead = _read_ahead.driver(self._raw, read_ahead, read_ahead_budget)
        except BaseException:
            self._raw.close()
            raise

    # context manager -------------------------------------------------
    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Releases the file (and stops its read-ahead). Arrays obtained
        before stay valid."""
        if self._read_ahead is not None:
            self._read_ahead.stop()
        self._raw.close()

    # prefetch ---------------------------------------------------------
    def prefetch(
        self,
        plan: _loader.Plan = None,
        *,
        device: Any = None,
        threads: Optional[int] = None,
        budget: Optional[int] = None,
    ) -> _loader.PrefetchLoader:
        """Starts loading the tensors of ``plan`` in the background and
        returns the :class:`fastst.PrefetchLoader` that hands each out once,
        by ``take(name)`` or by iterating ``(name, tensor)`` pairs as their
        bytes land, in memory of their own (as ``get_tensor(copy=True)``),
        on ``device`` (default: the handle's).

        ``plan``: None (every tensor), a list of names, or a dict mapping
        names to None (whole), a step-1 ``slice`` of the first dimension, or
        an index tuple ``get_slice`` takes (only the bytes it selects are
        read). ``threads`` caps this loader's readers (all loaders of the
        process together run at most ``FASTST_PREFETCH_THREADS``);
        ``budget`` caps the bytes it holds read and not taken (all loaders
        together hold at most ``FASTST_PREFETCH_BUDGET``, 1 GiB by default).
        A bad plan raises rule ``plan-invalid`` before anything is read.
        The loader holds the file open itself: it reads on after this handle
        is closed, and releases the file at its own close. A sharded
        checkpoint gets one loader made of a loader per shard (read side by
        side; ``budget`` counts them all, ``threads`` is split between them).
        See :mod:`fastst._read.loader` and docs/api.md."""
        if self.closed:
            raise closed_file_error(self._raw.name)
        target = self._device if device is None else self._backend.device(device)
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"prefetch threads must be a positive integer, got {threads!r}")
        if budget is not None and budget <= 0:
            raise ValueError(f"prefetch budget must be positive, got {budget}")
        entries = self._plan(plan)
        if self._read_ahead is not None:
            self._read_ahead.planned()
        whole = sum(e.nbytes for e in entries if e.index is None)
        # The loader reads through a handle of its own on the same open
        # file: it outlives this one, and releases the file at its close.
        own = self._shared()
        threads = threads or prefetch_threads()

        def read(run: List[_loader.Entry], land: Callable[[List[Any]], int]) -> None:
            own._read_entries(run, target, whole, land)

        if isinstance(own._raw, ShardedFile):
            groups = _batches(own._raw, [e.name for e in entries])
            by_name = {e.name: e for e in entries}
            shards: List[Tuple[List[_loader.Entry], _loader.Read]] = [
                ([by_name[n] for n in names], read) for _shard, names in groups
            ]
            return _loader.sharded(own._raw.name, shards, threads, budget, own.close)
        return _loader.PrefetchLoader(
            own._raw.name, entries, read, threads, budget, closing=own.close
        )

    def _shared(self) -> safe_open:
        """A second handle on this one's open file (its framework, device
        and slice rules; no read-ahead), closed on its own: the file stays
        open until both are closed."""
        own = cast(safe_open, object.__new__(type(self)))
        own.__dict__.update(self.__dict__)
        own._raw = self._raw.share()
        own._read_ahead = None
        return own

    def _plan(self, plan: _loader.Plan) -> List[_loader.Entry]:
        """The entries of ``plan`` in file order, each checked (nothing read)."""
        order = self.offset_keys()
        if plan is None:
            wanted: Dict[str, Any] = dict.fromkeys(order)
        elif isinstance(plan, (str, bytes)):
            raise _loader.plan_error(
                self._raw.name, f"a plan is a dict or a list of tensor names, not {plan!r}"
            )
        elif isinstance(plan, Mapping):
            wanted = dict(plan)
        else:
            wanted = dict.fromkeys(plan)
        if not wanted:
            raise _loader.plan_error(self._raw.name, "the prefetch plan selects no tensors")
        for name in wanted:
            self.get_tensor_meta(name)
        entries = []
        for name in (n for n in order if n in wanted):
            dtype, shape, begin, end = self._raw.info(name)
            index = self._plan_index(name, tuple(shape), wanted[name])
            nbytes = end - begin
            if index is not None:
                parts = _read_ahead.slice_ranges(dtype, shape, nbytes, index, self._where(name))
                nbytes = sum(n for _o, n in parts)
            self._backend.check_dtype(dtype, self._where(name))
            entries.append(_loader.Entry(name, index, nbytes))
        return entries

    def _plan_index(self, name: str, shape: Tuple[int, ...], value: Any) -> Any:
        """A plan's value for tensor ``name`` as an index (None: whole)."""
        if value is None or value is Ellipsis:
            return None
        if isinstance(value, slice):
            return _loader.first_rows(self._raw.name, name, shape, value)
        if isinstance(value, tuple):
            return check_index(value)
        raise _loader.plan_error(
            self._raw.name,
            f"tensor {name!r}: a plan's entry is None or a slice (or an index tuple), "
            f"not {value!r}",
            name,
        )

    def _read_entries(
        self,
        run: List[_loader.Entry],
        device: Any,
        whole: int,
        land: Callable[[List[Any]], int],
    ) -> None:
        """A loader's read (:data:`fastst._read.loader.Read`), in memory of
        its own on ``device``: one slice, reading no byte beyond it; or
        whole tensors of one file as one streaming load (every destination
        allocated first; around the page cache when cold, as
        :meth:`get_tensors`; part of the ``whole`` bytes of the plan's whole
        tensors, for the huge-page choice), each handed to ``land`` once
        filled (the load lets go of it then), whose answer bounds the
        reads."""
        if len(run) == 1 and run[0].index is not None:
            land([self._read_slice(run[0], device)])
            return
        names = [e.name for e in run]
        made, plans = changing_mappings(lambda: self._allocate(names, None))
        (plan,) = plans
        ends = [plan.file.info(name)[3] for name in names]
        # Only `outs` and `made` hold the destinations: each is let go of as
        # it is handed out (and so is the load's own hold on it).
        outs: List[Optional[np.ndarray]] = list(plan.outs)
        plan.outs.clear()
        at = 0

        def report(_done: int, _total: int, filled: int) -> int:
            nonlocal at
            values = []
            while at < len(names) and ends[at] <= filled:
                outs[at] = None
                try:
                    values.append(self._finish(names[at], made.pop(names[at]), device))
                except BaseException:
                    land(values)  # those before it; the load fails in this one
                    raise
                at += 1
            return land(values)

        load_into(plan.file, names, outs, plan.targets, report, None, stream=True, job=whole)

    def _read_slice(self, entry: _loader.Entry, device: Any) -> Any:
        """One planned slice in memory of its own on ``device``."""
        dtype, shape, _begin, _end = self._raw.info(entry.name)
        tensor = _Tensor(self._raw, entry.name, dtype, tuple(shape), self._backend, device)
        part = SafeSlice(tensor)._read_part(entry.index, around_cache=True)
        if part is None:
            # Packed rows ending inside a byte: the whole tensor, then the index.
            whole = _bytes(_end - _begin)
            self._raw.read_into(entry.name, whole)
            part = (whole, dtype, tuple(shape), entry.index)
        return self._backend.index(*part, device, tensor.where)

    def get_tensor_meta(self, name: str) -> _loader.TensorMeta:
        """Tensor ``name``'s header entry (dtype, shape, data offsets),
        reading no data."""
        dtype, shape, begin, end = self._raw.info(name)
        return _loader.TensorMeta(dtype, [int(d) for d in shape], (int(begin), int(end)))

    def read_ahead_status(self) -> Optional[Dict[str, Any]]:
        """Where the read-ahead (``safe_open(..., read_ahead=...)``) stands
        (bytes planned, issued, done, found resident, consumed; the budget;
        threads; the method), or None when nothing was declared."""
        return None if self._read_ahead is None else self._read_ahead.status()

    @property
    def closed(self) -> bool:
        return bool(self._raw.closed)

    # header ----------------------------------------------------------
    def keys(self) -> List[str]:
        """Tensor names, sorted."""
        return self._raw.keys()

    def offset_keys(self) -> List[str]:
        """Tensor names in the order of their data in the file."""
        return self._raw.offset_keys()

    def metadata(self) -> Optional[Dict[str, str]]:
        """The ``__metadata__`` map, or None when the file has none."""
        return self._raw.metadata()

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._raw

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.keys())

    # tensors ---------------------------------------------------------
    def _numpy(self, name: str) -> Tuple[np.ndarray, str]:
        buffer, dtype, shape = self._raw.tensor(name)
        return to_numpy(buffer, dtype, shape), dtype

    def _where(self, name: str) -> Where:
        return Where(self._raw.name, name)

    def get_tensor(self, name: str, *, copy: bool = False, dtype: Any = None) -> Any:
        """The whole tensor ``name`` in the framework the file was opened for:
        ``numpy.ndarray`` for ``"np"``/``"numpy"``, ``torch.Tensor`` for
        ``"pt"``/``"torch"``/``"pytorch"``, ``jax.Array`` for
        ``"flax"``/``"jax"``, ``tf.Tensor`` for ``"tf"``/``"tensorflow"``,
        ``paddle.Tensor`` for ``"paddle"``, ``mlx.core.array`` for ``"mlx"``
        (typed ``Any``: the framework is chosen at run time).

        By default a zero-copy view of the file's pages. ``copy=True`` gives
        memory of its own, filled by several threads with the GIL released;
        ``dtype`` (``np.float32``, ``"bfloat16"``, ``torch.float16``, a header
        name such as ``"F32"``...) converts while reading: between F64, F32,
        F16 and BF16 either way, and from the F8 kinds to any of those four;
        exact, rounded once to nearest even where narrowing, NaN and
        infinities preserved. Memory of its own (``copy``, ``dtype``) starts
        at a multiple of 64 bytes, except copies of 1 MiB or more (of
        element-aligned tensors), which sit at their file offset modulo 4096
        (modulo 64, where the reference's views sit).
        """
        if not copy and dtype is None:
            buffer, src, shape = self._raw.tensor(name)
            return self._backend.tensor(buffer, src, shape, self._device, self._where(name))
        return self._load_owned([name], dtype, None)[name]

    def _hand_out(
        self, name: str, array: np.ndarray, target: str, shape: Tuple[int, ...], device: Any
    ) -> Any:
        """A filled numpy destination as the framework's tensor on ``device``."""
        if self._framework == "numpy":
            return array
        return self._backend.tensor(
            array.reshape(-1).view(np.uint8), target, shape, device, self._where(name)
        )

    def _allocate(self, names: List[str], dtype: Any) -> Tuple[Dict[str, Any], List[Plan]]:
        """Every destination of tensors ``names`` (nothing read): what
        :meth:`_finish` takes per name, and one :data:`Plan` per file."""
        made: Dict[str, Any] = {}
        plans: List[Plan] = []
        for file, members in _batches(self._raw, names):
            outs, targets, size = [], [], 0
            start = file.data_start
            for name in members:
                result, out_bytes, target, src, nbytes = self._destination(file, name, dtype, start)
                made[name] = result
                outs.append(out_bytes)
                targets.append(None if target == src else target)
                size += nbytes
            plans.append(Plan(file, members, outs, targets, size))
        return made, plans

    def _load_owned(self, names: List[str], dtype: Any, progress: Progress) -> Dict[str, Any]:
        """Tensors ``names`` in memory of their own (converted to ``dtype``
        when given), on the handle's device: every destination allocated
        first, then one batch load per file (the core's ``load_into``)."""
        raw = self._raw
        callback, bar = resolve(progress, raw.name)
        # Mapped in one turn with the reads' fault-ins (other loads' readers).
        made, plans = changing_mappings(lambda: self._allocate(names, dtype))
        grand = sum(p.nbytes for p in plans)
        base = 0
        side_by_side = len(plans) > 1 and callback is None and not bar
        if side_by_side:
            load_side_by_side(plans)
        for p in [] if side_by_side else plans:
            if len(p.names) == 1 and callback is None and not bar:
                # One tensor: read (or converted while read) straight into
                # its destination, several threads when large.
                if p.targets[0] is None:
                    p.file.read_into(p.names[0], p.outs[0])
                else:
                    p.file.convert_into(p.names[0], p.outs[0], p.targets[0])
                continue
            report = callback
            if callback is not None and len(plans) > 1:
                report = _offset_report(callback, base, grand)
            label = progress_label(p.file.name, bar)
            load_into(p.file, p.names, p.outs, p.targets, report, label)
            base += p.nbytes
        if self._read_ahead is not None:
            self._read_ahead.consumed(grand)
        return {name: self._finish(name, made[name]) for name in names}

    def _destination(
        self, file: Any, name: str, dtype: Any, data_start: int
    ) -> Tuple[Any, np.ndarray, str, str, int]:
        """Allocates the destination of tensor ``name`` of ``file``, whose
        data section starts at ``data_start`` (nothing is read): ``(result,
        its bytes as a writable uint8 array, target dtype, file dtype, bytes
        to read)``. A failed allocation is rule ``out-of-memory`` naming the
        tensor."""
        src, shape, begin, end = file.info(name)
        target = src if dtype is None else target_dtype(dtype)
        where = self._where(name)
        copy = target == src
        item = 1 if src in PACKED_BITS else NUMPY_DTYPES[src].itemsize
        place = placement(end - begin, copy, data_start + begin, item)
        try:
            empty = self._backend.empty
            if empty is not None:
                result, out = empty(target, shape, where, place)
            elif target == src and src in PACKED_BITS:
                # Unpacked into an array once the bytes are read.
                out = _aligned_empty(end - begin, place)
                result = (out, target, shape, True)
            else:
                kind = NUMPY_DTYPES[target]
                count = 1
                for d in shape:
                    count *= d
                nbytes = count * kind.itemsize
                # No zero-fill pass.
                out = _aligned_empty(nbytes, place)
                result = (out.view(kind).reshape(shape), target, shape, False)
        except MemoryError:
            raise rule_error(
                "out-of-memory",
                self._raw.name,
                f"tensor {name!r}: cannot allocate memory for {list(shape)} of {target}",
                name,
            ) from None
        return result, out, target, src, end - begin

    def _finish(self, name: str, made: Any, device: Any = None) -> Any:
        """A filled destination as what ``get_tensor`` returns, on
        ``device`` (None: the handle's)."""
        device = self._device if device is None else device
        if isinstance(made, tuple):
            array, target, shape, packed = made
            if packed:
                array = to_numpy(array, target, shape)
            return self._hand_out(name, array, target, shape, device)
        return self._backend.place(made, device) if self._backend.place else made

    def get_tensors(
        self, *, copy: bool = False, dtype: Any = None, progress: Progress = None
    ) -> Dict[str, Any]:
        """Every tensor, keyed by name, in file order (``copy`` and ``dtype``
        as for :meth:`get_tensor`).

        With ``copy=True`` or ``dtype``, every destination is allocated
        first, then the whole file is read in file order by a few threads in
        large requests, with the GIL released (see docs/io.md, "Owned
        loads"). ``progress`` is off by default; a callable is called as
        ``progress(bytes_done, bytes_total)`` (bytes of the file read) from
        the calling thread, at most every 64 MiB and once at the end; an
        exception it raises stops the load and propagates, and no tensor is
        returned. ``progress=True`` shows a bar: on a terminal a line on
        stderr, elsewhere (a notebook) a ``tqdm`` bar when tqdm is installed,
        else a plain line on stderr every few seconds and at the end
        (``fastst._read.progress``). Zero-copy views read nothing here: the
        callback is then called once, at the end.

        A remote object has no pages to view: its tensors are always loaded
        as with ``copy=True`` (many ranged GETs in flight across tensors).
        """
        if not copy and dtype is None and not self._raw.remote:
            callback, _bar = resolve(progress, self._raw.name)
            out = {name: self.get_tensor(name) for name in self.offset_keys()}
            if callback is not None:
                total = sum(end - begin for _d, _s, begin, end in map(self._raw.info, out))
                callback(total, total)
            return out
        return self._load_owned(self.offset_keys(), dtype, progress)

    def iter_tensors(
        self, *, copy: bool = True, dtype: Any = None, progress: Progress = None
    ) -> Iterator[Tuple[str, Any]]:
        """``(name, tensor)`` for every tensor in file order, each handed out
        as soon as it is read (and converted), the rest being read in the
        background: the load of :meth:`get_tensors` (``copy``, ``dtype``,
        ``progress`` as there; ``progress`` is called from the iterating
        thread). A failed read (rule ``file-changed``) or a raising
        ``progress`` is raised by the ``next()`` after the tensors read
        before it. Leaving the loop early, or :meth:`close`, stops the
        reading; tensors handed out stay valid. ``copy=False`` without
        ``dtype``: zero-copy views (``progress`` unused). See docs/api.md.
        """
        names = self.offset_keys()
        if not copy and dtype is None and not self._raw.remote:
            return ((name, self.get_tensor(name)) for name in names)
        callback, bar = resolve(progress, self._raw.name)
        made, plans = self._allocate(names, dtype)
        if self._read_ahead is not None:
            self._read_ahead.consumed(sum(p.nbytes for p in plans))
        return stream(self._raw, plans, callback, bar, lambda n: self._finish(n, made.pop(n)))

    def _settle(self) -> None:
        """Returns once every tensor handed out has landed on its device
        (CUDA copies are asynchronous)."""
        self._backend.settle(self._device)

    def get_slice(self, name: str) -> SafeSlice:
        """A lazy handle on tensor ``name``: index it to read part of it."""
        dtype, shape, _begin, _end = self._raw.info(name)
        if self._read_ahead is not None:
            self._read_ahead.sliced(name)
        return self._slice(_Tensor(self._raw, name, dtype, shape, self._backend, self._device))

    def tensor_bytes(self, name: str, offset: int = 0, length: Optional[int] = None) -> TensorRange:
        """``length`` bytes (None: to its end) of tensor ``name``'s data from
        ``offset`` bytes into it, as a part for
        :meth:`fastst.TensorWriter.write_parts`, which reads them from this
        file in place (no buffer in Python). Nothing is read here. Checked at
        once and again when written (the handle must still be open then):
        rule ``closed-file``, ``tensor-not-found``, or
        ``range-outside-tensor`` (:class:`fastst.SerializeError`) for a
        range not within the tensor."""
        return TensorRange.of(self._raw, name, offset, length)


def _bytes(nbytes: int) -> np.ndarray:
    return np.empty(nbytes, dtype=np.uint8)


@dataclass(frozen=True)
class _Tensor:
    """What a :class:`SafeSlice` reads: one tensor of an open file, and the
    framework and device it is handed out to."""

    raw: RawSource
    name: str
    dtype: str
    shape: Tuple[int, ...]
    backend: Backend
    device: Any

    @property
    def where(self) -> Where:
        return Where(self.raw.name, self.name)


class SafeSlice:
    """A tensor not read yet; ``s[...]`` reads only the part asked for, with
    basic indexing (ints, slices, ``...``, ``None``; out-of-range slice bounds
    clamp; the empty list ``[]`` selects nothing along dimension 0). numpy
    and the frameworks fed from numpy follow numpy's rules, negative steps
    included; torch follows torch's (a negative step raises
    ValueError)."""

    def __init__(self, tensor: _Tensor) -> None:
        self._tensor = tensor
        self._dtype = tensor.dtype
        self._shape = tensor.shape

    def get_shape(self) -> List[int]:
        """The tensor's full shape."""
        return list(self._shape)

    def get_dtype(self) -> str:
        """The tensor's header dtype name, e.g. ``"F32"``."""
        return self._dtype

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self._shape)

    @property
    def dtype(self) -> str:
        return self._dtype

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __getitem__(self, index: Any) -> Any:
        index = check_index(index)
        t = self._tensor
        if t.raw.closed:
            raise closed_file_error(t.raw.name)
        if t.raw.backend == "pread":
            part = self._read_part(index)
            if part is not None:
                return t.backend.index(*part, t.device, t.where)
        try:
            buffer, dtype, shape = t.raw.tensor(t.name)
        except MemoryError:
            # The whole tensor could be neither mapped nor copied (an
            # address-space limit): read only the part the index selects.
            part = self._read_part(index)
            if part is None:
                raise
            buffer, dtype, shape, index = part
        return t.backend.index(buffer, dtype, shape, index, t.device, t.where)

    def _read_part(
        self,
        index: Any,
        empty: Callable[[int], np.ndarray] = _bytes,
        around_cache: bool = False,
    ) -> Optional[Tuple[np.ndarray, str, Tuple[int, ...], Any]]:
        """Reads only the byte ranges the index selects (the pread back
        end: remote objects, file objects; tensor-parallel loads) into
        ``empty(nbytes)``, a writable uint8 array: ``(it, dtype, its shape,
        the index that takes the result out of it)``, or None when the whole
        tensor must be read (an index only the framework plans). An index the
        framework refuses raises its error before any read. ``around_cache``
        (a prefetch plan's slices): a local file mostly not cached is read
        around the page cache, so that the kernel's read-ahead brings in no
        byte beyond the selection."""
        t = self._tensor
        self._refuse(index)
        bits = PACKED_BITS.get(t.dtype, 0)
        plan = read_plan(index, t.shape, bits)
        if plan is None:
            return None
        dims, shape, key = plan
        nbits = bits or 8 * NUMPY_DTYPES[t.dtype].itemsize
        for n in shape:
            nbits *= n
        out = empty(nbits // 8)
        if around_cache:
            t.raw.read_slice_into(t.name, dims, out, around_cache=True)
        elif shape == t.shape:
            # All of it: the whole-tensor read, several threads or GETs at once.
            t.raw.read_into(t.name, out)
        else:
            t.raw.read_slice_into(t.name, dims, out)
        return out, t.dtype, shape, key

    def _refuse(self, index: Any) -> None:
        """Raises what indexing the whole tensor would (the framework's rules and
        messages), reading nothing: the index is applied to the framework's
        stand-in of the tensor's shape (:attr:`fastst.Backend.stand_in`)."""
        t = self._tensor
        apply_index(t.backend.stand_in(t.shape), index, t.where)


def load_path(
    filename: Any,
    framework: str,
    *,
    device: Any = "cpu",
    backend: str = "mmap",
    copy: bool = False,
    dtype: Any = None,
    progress: Any = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """Every tensor of ``filename`` as tensors of ``framework``, in file
    order, on ``device``; ``backend`` is safe_open's, ``copy`` and ``dtype``
    are :meth:`fastst.safe_open.get_tensor`'s, ``progress`` is
    :meth:`fastst.safe_open.get_tensors`', ``storage_options`` safe_open's.
    Returns once every tensor has landed on its device. While the drop-in
    hook is on, ``FASTST_READ`` may turn ``backend="mmap"`` into ``"pread"``
    (:func:`fastst._settings.read_backend`)."""
    backend = read_backend(backend)
    # Views are touched after this returns: read the file ahead of that.
    views = not copy and dtype is None and backend == "mmap"
    with safe_open(
        filename,
        framework,
        device=device,
        backend=backend,
        read_ahead=None,
        storage_options=storage_options,
    ) as f:
        if views and f._read_ahead is not None and read_ahead_enabled():
            f._read_ahead.declare("all")
        tensors = f.get_tensors(copy=copy, dtype=dtype, progress=progress)
        f._settle()
        if f._read_ahead is not None:
            f._read_ahead.detach()
    return tensors


class _safe_open_handle:  # noqa: N801 - the reference package's name
    """``safe_open`` on an open file object, under the reference's name:
    ``_safe_open_handle(f, framework, device="cpu", *, backend="mmap")``."""

    def __new__(cls, f: Any, framework: str, device: Any = "cpu", *, backend: str = "mmap") -> Any:
        return safe_open(f, framework, device, backend=backend)


safe_open._slice = SafeSlice


def source_of(handle: safe_open) -> RawSource:
    """The source ``handle`` reads (a ``RawFile``, or a ``ShardedFile`` for a
    checkpoint): for loads that plan their reads from its tensors' places."""
    return handle._raw
