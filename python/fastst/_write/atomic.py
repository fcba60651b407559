"""The one atomic replacement of a file by new bytes, through the core's commit.

Used for indexes, signatures, SBOMs and HTML reports."""

from __future__ import annotations

from typing import Any

from .._fastst.write import replace_file
from .._paths import os_path, readable


def replace_bytes(path: Any, data: bytes, *, durable: bool = True) -> None:
    """Replaces ``path`` (str, bytes or PathLike) with a file holding
    ``data``, whole or not at all: the bytes go to an exclusive temporary
    file in the same folder (``.<16 hex>.fastst-tmp``, which ``fastst
    verify``'s stale-temp rule finds), which is flushed to disk, renamed
    over ``path`` and the folder flushed (``durable=False`` skips the two
    flushes). A symbolic link at ``path`` is replaced, never written
    through. On any error ``path`` keeps its old contents and the temporary
    file is removed. The new file gets the usual permissions (the umask)."""
    target = os_path(path)
    replace_file(target, readable(target), bytes(data), durable)
