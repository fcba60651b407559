"""fastst: a fast, strict, zero-copy reader and writer of ``.safetensors`` files.

``from fastst import safe_open`` works as the reference package's does.
"""

from __future__ import annotations

from ._dropin.hook import install, installed, uninstall
from ._errors import (
    ClosedFileError,
    DropinWarning,
    FileAccessError,
    FolderError,
    HeaderFramingError,
    HeaderJsonError,
    HookError,
    InsecureTransportWarning,
    LayoutError,
    MetadataError,
    MissingExtraError,
    ProvenanceError,
    SafetensorError,
    SerializeError,
    ShardIndexError,
    StorageOptionsError,
    TensorNotFoundError,
    TensorTableError,
    UnsupportedDtypeError,
)
from ._fastst import __version__
from ._read.load import deserialize
from ._read.loader import PrefetchLoader, PrefetchPlan, TensorMeta
from ._read.safe_open import SafeSlice, _safe_open_handle, safe_open
from ._sources.ranges import TensorRange
from ._write.metadata import update_metadata
from ._write.sharded import ShardedWriter, open_sharded_writer
from ._write.streaming import TensorWriter, open_writer
from ._write.tensors import TensorSpec, serialize, serialize_file

__all__ = [
    "__version__",
    "safe_open",
    "SafeSlice",
    "PrefetchLoader",
    "PrefetchPlan",
    "TensorMeta",
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
    "open_writer",
    "TensorWriter",
    "TensorRange",
    "open_sharded_writer",
    "ShardedWriter",
    "deserialize",
    "update_metadata",
    "ShardIndexError",
    "FileAccessError",
    "ProvenanceError",
    "MissingExtraError",
    "FolderError",
    "HookError",
    "StorageOptionsError",
    "DropinWarning",
    "InsecureTransportWarning",
    "install",
    "uninstall",
    "installed",
    "_safe_open_handle",
]
