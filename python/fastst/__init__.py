"""fastst: a fast, strict, zero-copy reader and writer of ``.safetensors`` files.

``from fastst import safe_open`` works as the reference package's does.
"""

from __future__ import annotations

from ._errors import (
    ClosedFileError,
    HeaderFramingError,
    HeaderJsonError,
    LayoutError,
    MetadataError,
    SafetensorError,
    SerializeError,
    ShardIndexError,
    TensorNotFoundError,
    TensorTableError,
    UnsupportedDtypeError,
)
from ._fastst import __version__
from ._load import deserialize, serialize, serialize_file
from ._open import SafeSlice, safe_open
from ._update import update_metadata
from ._write import TensorSpec

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
    "update_metadata",
    "ShardIndexError",
]
