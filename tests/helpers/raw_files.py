"""Files built byte by byte, independently of fastst's own writer, so that reader tests do not
depend on the code under test."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import ml_dtypes
import numpy as np

RawTensor = Tuple[str, Sequence[int], bytes]


def raw_file(
    tensors: Dict[str, RawTensor],
    metadata: Optional[Dict[str, str]] = None,
    *,
    pad_to: int = 8,
) -> bytes:
    """A valid file holding ``tensors`` ({name: (dtype, shape, data)}) in
    insertion order, with optional metadata."""
    header: Dict[str, object] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    chunks = []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        chunks.append(data)
    return framed(json.dumps(header, separators=(",", ":")), b"".join(chunks), pad_to=pad_to)


def framed(header: Union[str, bytes], data: bytes = b"", *, pad_to: int = 8) -> bytes:
    """Length prefix + header (padded with spaces) + data."""
    hb = header.encode("utf-8") if isinstance(header, str) else header
    if pad_to > 1:
        hb += b" " * ((-len(hb)) % pad_to)
    return struct.pack("<Q", len(hb)) + hb + data


def save_with_metadata(path: Path, metadata: Dict[str, str]) -> Path:
    """Three tensors (F32, BF16, I64) and ``metadata`` saved at ``path`` by the reference
    package."""
    import safetensors.numpy

    tensors = {
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "b": np.array([1, 2, 3], ml_dtypes.bfloat16),
        "ids": np.arange(5, dtype=np.int64),
    }
    safetensors.numpy.save_file(tensors, str(path), metadata=metadata)
    return path


def header_of(path: Path) -> Dict[str, Any]:
    """The parsed JSON header of the file at ``path``."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n])


def data_of(path: Path) -> bytes:
    """The bytes after the header of the file at ``path``."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return raw[8 + n :]
