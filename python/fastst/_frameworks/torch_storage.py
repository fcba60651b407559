"""Shared-memory bookkeeping of torch tensors, and what ``save_file`` checks and writes of them.

Which tensors share storage, which names to drop when saving tied weights;
the tensors are turned into arrays by :func:`to_arrays` and
:func:`as_writable`. Used by :mod:`fastst.torch`, by the streaming writer
for torch tensors, and by the reference's private helpers in
:mod:`fastst._dropin.compat_torch`."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, List, Optional, Set, Tuple

import torch

from .. import _frameworks
from .._dtypes import NUMPY_DTYPES
from .._errors import rule_error
from . import torch as _fw_torch

_SHARED_DOCS = "https://huggingface.co/docs/safetensors/torch_shared_tensors"

#: Header dtype name -> torch dtype, and torch dtype -> bytes per element, for
#: the dtypes this torch has (names some loaders read from the reference).
_TYPES: Dict[str, Any] = {k: v for k, v in _fw_torch.TORCH_DTYPES.items() if v is not None}
_SIZE: Dict[Any, int] = dict(_fw_torch.ITEM_SIZES)


# storage helpers ----------------------------------------------------------


def storage_ptr(tensor: torch.Tensor) -> int:
    """Address of the start of ``tensor``'s storage (0 for meta tensors)."""
    try:
        return int(tensor.untyped_storage().data_ptr())
    except NotImplementedError:
        return 0


def storage_size(tensor: torch.Tensor) -> int:
    """Size in bytes of ``tensor``'s whole storage."""
    try:
        return int(tensor.untyped_storage().nbytes())
    except NotImplementedError:
        return tensor.nelement() * tensor.element_size()


def _extent(tensor: torch.Tensor) -> Tuple[int, int]:
    """[start, stop) byte addresses that ``tensor``'s elements span."""
    start = tensor.data_ptr()
    if tensor.nelement() == 0:
        return start, start
    last = sum(
        (size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True)
    )
    return start, start + (last + 1) * tensor.element_size()


def _split_disjoint(groups: List[Set[str]], state_dict: Dict[str, torch.Tensor]) -> List[Set[str]]:
    """Splits each group of tensors on one storage into runs whose byte
    ranges overlap: tensors on one storage but at disjoint places do not
    share memory."""
    result: List[Set[str]] = []
    for group in groups:
        if len(group) < 2:
            result.append(group)
            continue
        spans = sorted((*_extent(state_dict[name]), name) for name in group)
        previous_stop = None
        for start, stop, name in spans:
            if previous_stop is not None and start < previous_stop:
                result[-1].add(name)
            else:
                result.append({name})
            previous_stop = stop
    return result


def _find_shared_tensors(state_dict: Dict[str, torch.Tensor]) -> List[Set[str]]:
    """Groups the names of ``state_dict`` whose tensors overlap in memory
    (one set per group, singletons included; meta and empty storages are
    left out)."""
    by_storage: Dict[Tuple[Any, int, int], Set[str]] = defaultdict(set)
    for name, tensor in state_dict.items():
        if tensor.device.type == "meta":
            continue
        ptr = storage_ptr(tensor)
        size = storage_size(tensor)
        if ptr != 0 and size != 0:
            by_storage[(tensor.device, ptr, size)].add(name)
    return _split_disjoint(list(by_storage.values()), state_dict)


def _is_complete(tensor: torch.Tensor) -> bool:
    """True when ``tensor`` covers its whole storage, from its first byte."""
    return tensor.data_ptr() == storage_ptr(
        tensor
    ) and tensor.nelement() * tensor.element_size() == storage_size(tensor)


def remove_duplicate_names(
    state_dict: Dict[str, torch.Tensor],
    *,
    preferred_names: Optional[List[str]] = None,
    discard_names: Optional[List[str]] = None,
) -> Dict[str, List[str]]:
    """For each group of tensors sharing memory, picks the name to keep (one
    covering the whole storage: first a preferred name, else one not to
    discard, else the smallest) and maps it to the sorted names to drop."""
    preferred = set(preferred_names or [])
    discard = set(discard_names or [])
    to_remove: Dict[str, List[str]] = defaultdict(list)
    for shared in _find_shared_tensors(state_dict):
        complete = {name for name in shared if _is_complete(state_dict[name])}
        if not complete:
            raise RuntimeError(
                "Error while trying to find names to remove to save state dict, but found no "
                f"suitable name to keep for saving amongst: {shared}. None is covering the entire "
                "storage.Refusing to save/load the model since you could be storing much more "
                f"memory than needed. Please refer to {_SHARED_DOCS} for more information. "
                "Or open an issue."
            )
        keep = min(complete)
        kept_candidates = complete - discard
        if kept_candidates:
            keep = min(kept_candidates)
        if preferred & complete:
            keep = min(preferred & complete)
        for name in sorted(shared):
            if name != keep:
                to_remove[keep].append(name)
    return to_remove


# saving -------------------------------------------------------------------


def _check_saveable(tensors: Dict[str, torch.Tensor]) -> None:
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    sparse = []
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(
                f"Key `{name}` is invalid, expected torch.Tensor but received {type(tensor)}"
            )
        if tensor.layout != torch.strided:
            sparse.append(name)
    if sparse:
        raise ValueError(
            f"You are trying to save a sparse tensors: `{sparse}` which this library does not "
            "support. You can make it a dense tensor before saving with `.to_dense()` but be "
            "aware this might make a much larger file than needed."
        )
    shared = [group for group in _find_shared_tensors(tensors) if len(group) > 1]
    if shared:
        raise RuntimeError(
            "Some tensors share memory, this will lead to duplicate memory on disk and potential "
            f"differences when loading them again: {shared}.\n"
            "A potential way to correctly save your model is to use `save_model`.\n"
            f"More information at {_SHARED_DOCS}"
        )


def as_writable(name: str, tensor: torch.Tensor, keep_alive: List[Any]) -> Any:
    """What fastst's writer takes for ``tensor``, over its memory (no copy for
    a contiguous CPU tensor): a numpy array with the numpy/ml_dtypes dtype of
    the same header name, or for packed FP4 the writer's dict input over its
    bytes (the tensor it points into is appended to ``keep_alive``)."""
    if not tensor.is_contiguous():
        raise ValueError(
            f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. It "
            "either means you are trying to save tensors which are reference of each other in "
            "which case it's recommended to save only the full tensors, and reslice at load "
            "time, or simply call `.contiguous()` on your tensor to pack it before saving."
        )
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.to("cpu")
    header = _fw_torch.HEADER_NAMES.get(tensor.dtype)
    if header is None:
        raise rule_error(
            "framework-dtype",
            "",
            f"tensor {name!r}: torch dtype {tensor.dtype} has no safetensors equivalent",
            name,
        )
    tensor = tensor.resolve_conj().resolve_neg()
    if header == "F4":
        keep_alive.append(tensor)
        return {
            "dtype": "float4_e2m1fn_x2",
            "shape": list(tensor.shape),
            "data": tensor.view(torch.uint8).numpy(),
        }
    size = tensor.element_size()
    if tensor.dtype in _NUMPY_NATIVE:
        return tensor.numpy()
    carrier = {1: torch.uint8, 2: torch.int16}[size]
    return tensor.view(carrier).numpy().view(NUMPY_DTYPES[header])


_NUMPY_NATIVE = {
    dt
    for dt in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.complex64,
        getattr(torch, "uint16", None),
        getattr(torch, "uint32", None),
        getattr(torch, "uint64", None),
    )
    if dt is not None
}


def to_arrays(tensors: Dict[str, torch.Tensor], keep_alive: List[Any]) -> Dict[str, Any]:
    """``tensors`` checked as ``save_file`` checks them (dense, not sharing
    memory) and turned into what the writer takes (:func:`as_writable`)."""
    _check_saveable(tensors)
    return {name: as_writable(name, tensor, keep_alive) for name, tensor in tensors.items()}


_frameworks.register_writable(
    _frameworks.Writable("torch", lambda value: isinstance(value, torch.Tensor), to_arrays)
)
