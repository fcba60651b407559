"""The tensor-parallel load: each rank reads only its part of each tensor
(a row or column split by rank, or an explicit index), with positioned reads
of the minimal byte ranges; no tensor data moves between ranks."""

from __future__ import annotations

import fnmatch
import itertools
import numbers
import os
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from .. import _fw_torch
from .._dtypes import PACKED_BITS
from .._errors import DistributedLoadError
from .._open import safe_open
from .agreement import (
    Entry,
    PathLike,
    _error,
    _options_digest,
    _torch_layout,
    agree,
    comm_device,
    open_table,
    table_digest,
)

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
