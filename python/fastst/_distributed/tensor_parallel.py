"""The tensor-parallel load: each rank reads only its part of each tensor.

A part is a row or column split by rank, or an explicit index, expressed as
a ``safe_open.prefetch`` plan (the byte ranges of ``get_slice``, read once,
in the background); no tensor data moves between ranks."""

from __future__ import annotations

import fnmatch
import numbers
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import torch
import torch.distributed as dist

from .._errors import DistributedLoadError
from .._frameworks import torch as _fw_torch
from .._read.safe_open import safe_open
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


def _as_tuple(index: Any) -> Tuple[Any, ...]:
    return index if isinstance(index, tuple) else (index,)


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
        result: Dict[str, torch.Tensor] = {}
        if parts:
            # This rank's part as a prefetch plan: each tensor whole (...) or
            # the index get_slice takes (a bare slice too: a tuple keeps
            # get_slice's clamping), read once, only the byte ranges kept,
            # placed on the target as they land.
            plan = {e.name: index if index is Ellipsis else _as_tuple(index) for e, index in parts}
            with handle.prefetch(plan, device=target) as loader:
                landed = dict(loader)
            result = {e.name: landed[e.name] for e, _index in parts}
    finally:
        if handle is not None:
            handle.close()
    if target.type == "cuda":
        torch.cuda.current_stream(target).synchronize()
    return result
