"""JAX/Flax backend: ``jax.Array`` from the zero-copy numpy view.

jax owns its copy; arrays are immutable. BF16, the F8 kinds, F8_E8M0 and F4
map to jax's own dtypes; 64-bit kinds follow jax's x64 setting, as jax
itself does."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _frameworks
from .._errors import Where

jax = _frameworks.require("flax")
jnp = jax.numpy

#: Header dtypes jax has no type for.
UNSUPPORTED = frozenset({"F6_E2M3", "F6_E3M2"})


def to_jax(array: np.ndarray, dtype: str, device: Any, where: Where) -> Any:
    if dtype in UNSUPPORTED:
        raise where.error("framework-dtype", f"dtype {dtype} has no jax equivalent")
    return jnp.asarray(array)


_frameworks.register(_frameworks.from_numpy("flax", to_jax, _frameworks.cpu_only("flax")))
