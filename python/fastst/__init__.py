"""fastst: a fast, strict, zero-copy reader and writer of ``.safetensors`` files.

``from fastst import safe_open`` works as the reference package's does.
"""

from __future__ import annotations

from ._errors import (
    ClosedFileError,
    DropinWarning,
    FolderError,
    HeaderFramingError,
    HeaderJsonError,
    HookError,
    LayoutError,
    MetadataError,
    SafetensorError,
    SerializeError,
    TensorNotFoundError,
    TensorTableError,
    UnsupportedDtypeError,
)
from ._fastst import __version__
from ._handle import _safe_open_handle
from ._hook import install, installed, uninstall
from ._open import SafeSlice, safe_open
from ._sharded import ShardIndexError
from ._write import TensorSpec, deserialize, serialize, serialize_file

__all__ = [
    "__version__",
    "safe_open",
    "SafeSlice",
    "SafetensorError",
    "HeaderFramingError",
    "HeaderJsonError",
    "MetadataError",
    "TensorTableError",
    "LayoutError",
    "TensorNotFoundError",
    "ClosedFileError",
    "SerializeError",
    "UnsupportedDtypeError",
    "TensorSpec",
    "serialize",
    "serialize_file",
    "deserialize",
    "ShardIndexError",
    "FolderError",
    "HookError",
    "DropinWarning",
    "install",
    "uninstall",
    "installed",
    "_safe_open_handle",
]
