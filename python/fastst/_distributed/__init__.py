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

``agreement`` holds what both modes share (the tensor table, the agreement,
the errors); ``replicated`` and ``tensor_parallel`` one mode each.
"""

from __future__ import annotations

from .._errors import DistributedLoadError
from .agreement import Entry, Status, open_table, resolve_path
from .replicated import DEFAULT_CHUNK, UNITS, load_distributed, plan_bytes, plan_reads
from .tensor_parallel import load_tensor_parallel, split_bounds, tp_index

__all__ = [
    "DistributedLoadError",
    "Entry",
    "Status",
    "DEFAULT_CHUNK",
    "UNITS",
    "load_distributed",
    "load_tensor_parallel",
    "open_table",
    "plan_bytes",
    "plan_reads",
    "resolve_path",
    "split_bounds",
    "tp_index",
]
