"""Paddle backend: tensors sharing the buffer's memory, moved to the requested place.

``frombuffer``, or DLPack for the unsigned kinds paddle cannot reshape;
moved only when the place is not the CPU."""

from __future__ import annotations

import re
from typing import Any, Dict, Sequence

import numpy as np

from .. import _frameworks
from .._dtypes import to_numpy
from .._errors import Where, rule_error

paddle = _frameworks.require("paddle")


def _dtype(name: str) -> Any:
    return getattr(paddle, name, None)


#: Header dtype -> paddle dtype, for the kinds paddle has. (paddle.uint16 is
#: paddle's name for bfloat16, so U16 has no paddle equivalent.)
PADDLE_DTYPES: Dict[str, Any] = {
    "BOOL": paddle.bool,
    "U8": paddle.uint8,
    "I8": paddle.int8,
    "I16": paddle.int16,
    "F16": paddle.float16,
    "BF16": paddle.bfloat16,
    "I32": paddle.int32,
    "F32": paddle.float32,
    "C64": paddle.complex64,
    "I64": paddle.int64,
    "F64": paddle.float64,
    "F8_E4M3": _dtype("float8_e4m3fn"),
    "F8_E5M2": _dtype("float8_e5m2"),
}
PADDLE_DTYPES = {k: v for k, v in PADDLE_DTYPES.items() if v is not None}

#: Kinds paddle has but cannot reshape from a flat buffer: built via DLPack.
VIA_DLPACK = frozenset({"U32", "U64"})


_PLACE = re.compile(r"(cpu|gpu|cuda|xpu|npu|dcu)(?::(\d+))?")


def check_device(device: Any) -> str:
    """Normalises ``device`` to a paddle place string: "cpu", "gpu", "gpu:N"
    (also spelt "cuda", "cuda:N" or an int N), "xpu:N", "npu:N", "dcu:N"."""
    if device is None:
        return "cpu"
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return f"gpu:{device}"
    match = _PLACE.fullmatch(device) if isinstance(device, str) else None
    if match is None or (match.group(1) == "cpu" and match.group(2) is not None):
        raise rule_error("bad-device", "", f"device {device!r} is invalid for paddle")
    kind = "gpu" if match.group(1) == "cuda" else match.group(1)
    return kind if match.group(2) is None else f"{kind}:{match.group(2)}"


def to_paddle(array: np.ndarray, dtype: str, device: str, where: Where) -> Any:
    """A paddle tensor over ``array``'s memory (copied first only when the
    array is not contiguous), on ``device``."""
    if dtype in VIA_DLPACK:
        tensor = paddle.utils.dlpack.from_dlpack(np.require(array, requirements="C"))
    else:
        pdtype = PADDLE_DTYPES.get(dtype)
        if pdtype is None:
            raise where.error(
                "framework-dtype",
                f"dtype {dtype} has no paddle equivalent in paddle {paddle.__version__}",
            )
        shape = list(array.shape)
        if array.size == 0:
            tensor = paddle.empty(shape, dtype=pdtype)
        else:
            flat = np.require(array, requirements="C").reshape(-1).view(np.uint8)
            tensor = paddle.base.core.frombuffer(flat, pdtype).reshape(shape)
    if device != "cpu":
        tensor = tensor.to(device)
    return tensor


def tensor(buffer: Any, dtype: str, shape: Sequence[int], device: str, where: Where) -> Any:
    return to_paddle(to_numpy(buffer, dtype, shape), dtype, device, where)


def index(
    buffer: Any, dtype: str, shape: Sequence[int], key: Any, device: str, where: Where
) -> Any:
    part = _frameworks.numpy_index(buffer, dtype, shape, key, where)
    return to_paddle(part, dtype, device, where)


_frameworks.register(_frameworks.Backend("paddle", check_device, tensor, index))
