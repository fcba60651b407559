"""The one way in: what ``safe_open`` is given becomes a :class:`fastst._sources.raw.RawSource`.

- A path (``str``, ``bytes``, ``os.PathLike``): a ``.safetensors`` file, a
  sharded checkpoint's index (or the folder holding it), or a model folder
  holding one checkpoint.
- An open file object with a working ``fileno()`` (``open(...)`` in any
  mode, fsspec local files...): the file it designates is opened again
  through ``/proc/self/fd/N`` (``/dev/fd/N`` elsewhere), so it is read
  exactly as a path would be, whatever the object's position, even if the
  file was renamed or deleted since. The reference package offers this as
  ``safetensors._safe_open_handle``.
- A binary file object without one (``io.BytesIO``, remote fsspec
  files...) with ``seek`` and ``readinto`` (or ``read``): the compiled core
  reads it with positioned reads (``RawFile.from_stream``), with the same
  validation, conversions and errors as a path. Such an object must not be
  read or moved by anyone else while open.
- A URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``): an object, a
  sharded checkpoint's index, or a prefix ending in ``/``, read with ranged
  GETs (``fastst._sources.remote``).
"""

from __future__ import annotations

import errno
import io
import os
import stat
import sys
from typing import Any, Mapping, Optional

from .._fastst.read import RawFile
from .._paths import os_path, shown
from . import remote as _remote
from .file import open_file
from .folders import checkpoint_in
from .raw import RawSource
from .sharded import ShardedFile, find_index


def open_source(
    source: Any,
    backend: str,
    header_cap: int,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> RawSource:
    """The :class:`RawSource` reading ``source``, a path, a URL (configured
    by ``storage_options``) or a file object: what it is is decided here,
    once."""
    if _remote.is_url(source):
        return _remote.open_url(source, header_cap, storage_options)
    _remote.refuse_local_options(storage_options, source)
    if is_file_object(source):
        return _open_file_object(source, backend, header_cap)
    path = os_path(source)
    try:
        return _open_path(path, backend, header_cap)
    except FileNotFoundError as exc:
        raise _not_found(path, exc) from None


def _open_path(path: str, backend: str, header_cap: int) -> RawSource:
    """A ``RawFile`` for a plain file, a ``ShardedFile`` for an index; a
    folder opens the one checkpoint it holds (see ``fastst._sources.folders``)."""
    if os.path.isdir(path):
        path = checkpoint_in(path)
    index = find_index(path)
    if index is not None:
        return ShardedFile(index, backend, header_cap)
    return open_file(path, backend, header_cap)


def _not_found(path: str, exc: FileNotFoundError) -> FileNotFoundError:
    """The reference's error for a missing file: ``FileNotFoundError("No such
    file or directory: <path>")`` (callers match on the text), with ``errno``
    set; other FileNotFoundErrors (a missing shard...) are kept. A name that
    might be a URL (a URL taken as a path under the drop-in switch) is shown
    by the one display rule (:func:`fastst._paths.shown`)."""
    if os.path.exists(path) or os.path.islink(path):
        return exc
    err = FileNotFoundError(f"No such file or directory: {shown(path)}")
    err.errno = errno.ENOENT
    return err


def is_file_object(obj: object) -> bool:
    """True for an open file object (as opposed to a path)."""
    if isinstance(obj, (str, bytes, os.PathLike)):
        return False
    return callable(getattr(obj, "fileno", None)) or (
        callable(getattr(obj, "seek", None))
        and (callable(getattr(obj, "readinto", None)) or callable(getattr(obj, "read", None)))
    )


def _open_file_object(obj: Any, backend: str, header_cap: int) -> RawFile:
    if getattr(obj, "closed", False) is True:
        raise ValueError("I/O operation on closed file")
    fd = _descriptor(obj)
    if fd is None:
        return RawFile.from_stream(obj, _display_name(obj, f"<{type(obj).__name__}>"), header_cap)
    name = _display_name(obj, f"<file descriptor {fd}>")
    # Pipes, sockets and devices are refused before anything is opened
    # (opening /proc/self/fd/N of a pipe could block).
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise OSError(
            errno.EINVAL, "not a regular file (a pipe, socket or device): refusing it", name
        )
    where = f"/proc/self/fd/{fd}" if sys.platform.startswith("linux") else f"/dev/fd/{fd}"
    return open_file(where, backend, header_cap, name)


def _display_name(obj: Any, fallback: str) -> str:
    name = getattr(obj, "name", None)
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    return name if isinstance(name, str) and name else fallback


def _descriptor(obj: Any) -> Optional[int]:
    fileno = getattr(obj, "fileno", None)
    if not callable(fileno):
        return None
    try:
        fd = fileno()
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None
