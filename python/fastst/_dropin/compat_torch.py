"""The reference's private ``safetensors.torch`` helpers, with the same results.

Callers import them (its own tests, diffusers' ``_to_ndarray``...).
``fastst.torch`` re-exports them; they are not part of fastst's own API."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Tuple

import torch

from .._errors import Where
from .._frameworks import torch as _fw_torch
from .._frameworks.torch_storage import _SIZE, _TYPES, _check_saveable, _split_disjoint
from .._read.load import deserialize
from .._read.safe_open import safe_open
from .._write.tensors import TensorSpec, serialize, serialize_file


def _end_ptr(tensor: torch.Tensor) -> int:
    """Address just past the last element of ``tensor`` (its first
    element's address when it is empty)."""
    if not tensor.nelement():
        return int(tensor.data_ptr())
    offset = sum(
        (size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True)
    )
    return int(tensor.data_ptr()) + offset * tensor.element_size() + _SIZE[tensor.dtype]


#: The reference's name for splitting groups of names on one storage into
#: the groups whose memory actually overlaps (fastst's one implementation).
_filter_shared_not_shared = _split_disjoint


def _getdtype(dtype_str: str) -> Any:
    """The torch dtype of a header dtype name (KeyError for an unknown one)."""
    return _TYPES[dtype_str]


def _view2torch(safeview: Iterable[Tuple[str, Dict[str, Any]]]) -> Dict[str, torch.Tensor]:
    """Tensors from ``deserialize``'s ``(name, {"dtype", "shape", "data"})``
    pairs; each tensor gets memory of its own."""
    result: Dict[str, torch.Tensor] = {}
    for name, view in safeview:
        data = view["data"]
        buffer = data if isinstance(data, bytearray) else bytearray(data)
        where = Where("", name)
        result[name] = _fw_torch.cpu_tensor(buffer, view["dtype"], view["shape"], where)
    return result


def _to_ndarray(tensor: torch.Tensor) -> Tuple[Any, torch.Tensor]:
    """``(bytes, kept)``: a uint8 numpy array over the row-major bytes of
    ``tensor`` (moved to the CPU and made contiguous first if needed) and
    the tensor that owns that memory, which must stay alive while the
    array is used."""
    if tensor.device.type != "cpu":
        tensor = tensor.to("cpu")
    tensor = tensor.detach().contiguous()
    if tensor.nelement() == 0:
        import numpy as np

        return np.empty(0, dtype=np.uint8), tensor
    data = tensor.reshape(-1).view(torch.uint8).numpy()
    return data, tensor


def _evaluate_tensors_for_save(tensors: Dict[str, torch.Tensor]) -> None:
    """Raises the reference's errors for what ``save_file`` refuses: not a
    dict, not tensors, sparse tensors, tensors sharing memory."""
    _check_saveable(tensors)


def _flatten_as_ptr(
    tensors: Dict[str, torch.Tensor], keep_alive_buffer: List[Any]
) -> Dict[str, TensorSpec]:
    """``TensorSpec``s pointing into the tensors' memory, for ``serialize``;
    what must stay alive while they are used is appended to
    ``keep_alive_buffer``."""
    _check_saveable(tensors)
    specs: Dict[str, TensorSpec] = {}
    for name, tensor in tensors.items():
        if not tensor.is_contiguous():
            raise ValueError(
                f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. "
                "It either means you are trying to save tensors which are reference of each other "
                "in which case it's recommended to save only the full tensors, and reslice at "
                "load time, or simply call `.contiguous()` on your tensor to pack it before saving."
            )
        data, kept = _to_ndarray(tensor)
        keep_alive_buffer.append((data, kept))
        specs[name] = TensorSpec(
            dtype=str(tensor.dtype).split(".")[-1],
            shape=list(tensor.shape),
            data_ptr=int(data.ctypes.data) if data.size else 0,
            data_len=int(data.nbytes),
        )
    return specs


__all__ = [
    # names the reference's module imports from its package
    "TensorSpec",
    "deserialize",
    "safe_open",
    "serialize",
    "serialize_file",
    # its private helpers
    "_end_ptr",
    "_filter_shared_not_shared",
    "_getdtype",
    "_view2torch",
    "_to_ndarray",
    "_evaluate_tensors_for_save",
    "_flatten_as_ptr",
]
