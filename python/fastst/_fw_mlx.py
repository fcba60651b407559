"""MLX backend: ``mx.array`` built from the zero-copy numpy view (MLX copies
into its own memory). BF16 is supported; MLX has no F8/F6/F4 types."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _frameworks
from ._errors import UnsupportedDtypeError

mx = _frameworks.require("mlx")

#: Header dtypes MLX has no type for.
UNSUPPORTED = frozenset(
    {
        "F8_E4M3",
        "F8_E5M2",
        "F8_E4M3FNUZ",
        "F8_E5M2FNUZ",
        "F8_E8M0",
        "F4",
        "F6_E2M3",
        "F6_E3M2",
    }
)


def to_mlx(array: np.ndarray, dtype: str, device: Any, where: str) -> Any:
    if dtype in UNSUPPORTED:
        raise UnsupportedDtypeError(f"{where}: dtype {dtype} has no MLX equivalent")
    if not array.flags.c_contiguous:
        # MLX refuses negative strides; it copies the data anyway.
        array = array.copy(order="C")
    return mx.array(array)


_frameworks.register(_frameworks.from_numpy("mlx", to_mlx, _frameworks.cpu_only("mlx")))
