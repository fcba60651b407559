"""The module served as ``safetensors`` while the drop-in hook is on, backed by fastst.

It holds the reference package's top-level names (the hook is
:func:`fastst.install`). The framework modules (``safetensors.torch``,
``.numpy``, ...) are fastst's own (``fastst.torch``, ...). ``safe_open`` here
slices with the reference's rules and errors (see ``fastst._dropin.slicing``).

``__version__`` is the reference release whose API fastst follows (callers
compare it with the versions they need); fastst's own version is
``__fastst_version__``.
"""

from __future__ import annotations

from typing import Any

from .._errors import SafetensorError
from .._fastst import __version__ as __fastst_version__  # noqa: F401
from .._read.load import deserialize
from .._read.loader import PrefetchLoader, PrefetchPlan, TensorMeta
from .._write.tensors import TensorSpec, serialize, serialize_file
from .slicing import reference_safe_open as safe_open

#: The safetensors release whose Python API fastst reproduces.
REFERENCE_VERSION = "0.9.0rc1"
__version__ = REFERENCE_VERSION


def _safe_open_handle(f: Any, framework: str, device: Any = "cpu", *, backend: str = "mmap") -> Any:
    """``safe_open`` on an open file object (the reference's private name)."""
    return safe_open(f, framework, device, backend=backend)


__all__ = [
    "PrefetchLoader",
    "PrefetchPlan",
    "SafetensorError",
    "TensorMeta",
    "TensorSpec",
    "__version__",
    "deserialize",
    "safe_open",
    "_safe_open_handle",
    "serialize",
    "serialize_file",
]
