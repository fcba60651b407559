"""One local file opened and validated as a ``RawFile``: the one place a path becomes one.

Every local ``.safetensors`` file fastst reads (a file given by path, a shard
of a checkpoint, a file given as an open descriptor, the file a metadata edit
rewrites) is opened here, so the checks of opening (regular files only, never
blocking, the strict header) and the error for a file that is not safetensors
at all (:func:`fastst._sources.identify.explain`) are the same for all of
them. Objects in object stores are opened by :mod:`fastst._sources.remote`,
file objects without a descriptor by :mod:`fastst._sources.opener`.
"""

from __future__ import annotations

from typing import Optional

from .._errors import SafetensorError
from .._fastst.read import RawFile
from .._paths import readable
from .identify import explain


def open_file(path: str, backend: str, header_cap: int, name: Optional[str] = None) -> RawFile:
    """The validated file at ``path`` (a ``str`` as :func:`fastst._paths.os_path`
    makes it), read with ``backend``; messages call it ``name`` (default: its
    readable path). A file that is not safetensors gets an error saying
    what it is."""
    shown = readable(path) if name is None else name
    try:
        return RawFile(path, shown, backend, header_cap)
    except SafetensorError as exc:
        raise explain(exc, path) from None
