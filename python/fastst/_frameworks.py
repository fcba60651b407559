"""Framework names as ``safe_open`` accepts them, and the conversion of a
zero-copy numpy array into each framework's tensor type."""

from __future__ import annotations

from typing import Any, Callable, Dict

import numpy as np

from ._errors import SafetensorError

#: Accepted spellings -> canonical framework name (as the reference accepts).
ALIASES: Dict[str, str] = {
    "np": "numpy",
    "numpy": "numpy",
    "pt": "torch",
    "torch": "torch",
    "pytorch": "torch",
    "tf": "tensorflow",
    "tensorflow": "tensorflow",
    "flax": "flax",
    "jax": "flax",
    "mlx": "mlx",
    "paddle": "paddle",
    "pp": "paddle",
}


def resolve(framework: object) -> str:
    """Canonical name of a framework, or SafetensorError for an unknown one."""
    if not isinstance(framework, str):
        raise TypeError(f"framework must be a str, got {type(framework).__name__}")
    canonical = ALIASES.get(framework)
    if canonical is None:
        known = ", ".join(sorted(ALIASES))
        raise SafetensorError(f"framework {framework!r} is not supported (known: {known})")
    return canonical


def _numpy(array: np.ndarray, dtype: str, device: Any) -> np.ndarray:
    if device not in ("cpu", None):
        raise SafetensorError(f"numpy arrays live on the CPU; device {device!r} is not supported")
    return array


#: canonical name -> function(numpy array, header dtype name, device) -> tensor
CONVERTERS: Dict[str, Callable[[np.ndarray, str, Any], Any]] = {"numpy": _numpy}


def converter(framework: str) -> Callable[[np.ndarray, str, Any], Any]:
    """The converter of a canonical framework name."""
    conv = CONVERTERS.get(framework)
    if conv is None:
        # Framework modules register themselves on import.
        import importlib

        module = {
            "torch": "torch",
            "tensorflow": "tensorflow",
            "flax": "flax",
            "mlx": "mlx",
            "paddle": "paddle",
        }[framework]
        importlib.import_module(f"fastst._fw_{module}")
        conv = CONVERTERS[framework]
    return conv
