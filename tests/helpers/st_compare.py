"""Comparison of two serialised files, shared by the framework tests."""

from __future__ import annotations

import json
import struct


def same_file_bytes(ours: bytes, theirs: bytes) -> None:
    """Byte-identical files, except that the reference orders the keys of
    ``__metadata__`` as its hash map does while fastst sorts them: with
    several metadata keys the headers must then be equal as JSON, of the
    same length, and the data identical."""
    if ours == theirs:
        return
    (n,) = struct.unpack("<Q", ours[:8])
    assert ours[:8] == theirs[:8]
    header = json.loads(ours[8 : 8 + n])
    assert header == json.loads(theirs[8 : 8 + n])
    assert len(header.get("__metadata__", {})) > 1
    assert ours[8 + n :] == theirs[8 + n :]
