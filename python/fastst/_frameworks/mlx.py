"""MLX backend: ``mx.array`` built from the zero-copy numpy view.

MLX copies into its own memory. BF16 is supported; MLX has no
floating-point types narrower than 16 bits (the F8/F6/F4 kinds)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _frameworks
from .._dtypes import FACTS
from .._errors import Where

mx = _frameworks.require("mlx")

#: Header dtypes MLX has no type for: floats narrower than 16 bits.
UNSUPPORTED = frozenset(n for n, f in FACTS.items() if f["float"] and f["bits"] < 16)


def to_mlx(array: np.ndarray, dtype: str, device: Any, where: Where) -> Any:
    if dtype in UNSUPPORTED:
        raise where.error("framework-dtype", f"dtype {dtype} has no MLX equivalent")
    if not array.flags.c_contiguous:
        # MLX refuses negative strides; it copies the data anyway.
        array = array.copy(order="C")
    return mx.array(array)


_frameworks.register(_frameworks.from_numpy("mlx", to_mlx, _frameworks.cpu_only("mlx")))
