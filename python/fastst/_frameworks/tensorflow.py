"""TensorFlow backend: ``tf.Tensor`` built from the zero-copy numpy view.

BF16, the F8 kinds and F4 map to TensorFlow's ml_dtypes-based types."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _frameworks
from .._errors import Where

tf = _frameworks.require("tensorflow")

#: Header dtypes TensorFlow has no type for.
UNSUPPORTED = frozenset({"F8_E8M0", "F6_E2M3", "F6_E3M2"})


def to_tf(array: np.ndarray, dtype: str, device: Any, where: Where) -> Any:
    if dtype in UNSUPPORTED:
        raise where.error("framework-dtype", f"dtype {dtype} has no TensorFlow equivalent")
    return tf.convert_to_tensor(array)


_frameworks.register(
    _frameworks.from_numpy("tensorflow", to_tf, _frameworks.cpu_only("tensorflow"))
)
