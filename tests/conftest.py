"""Shared helpers: build .safetensors files byte by byte (independently of
fastst's own writer), so reader tests do not depend on the code under test."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple, Union

import pytest

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


@pytest.fixture
def write(tmp_path: Path):
    """write(bytes, name="x.safetensors") -> path of a new file holding them."""

    def _write(content: bytes, name: str = "x.safetensors") -> Path:
        path = tmp_path / name
        path.write_bytes(content)
        return path

    return _write


# Real servers for the remote-source tests (tests/remote_servers.py).
from remote_servers import (  # noqa: E402, F401
    http_dir,
    make_site,
    proxy_factory,
    published,
    remote,
    s3_server,
    site,
)
