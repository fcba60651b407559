"""``safe_open`` on open file objects.

Two kinds of objects are accepted:

- anything with a working ``fileno()`` (``open(...)`` in any mode, fsspec
  local files, ...): the file it designates is opened again through
  ``/proc/self/fd/N`` (``/dev/fd/N`` elsewhere), so it is read exactly as a
  path would be (memory-mapped or with ``pread``), independently of the
  object's position, and even if the file was renamed or deleted since;
- binary file-like objects without a file descriptor (``io.BytesIO``,
  remote fsspec files, ...) that have ``seek`` and ``readinto`` (or
  ``read``): the header is read and validated at once, tensor bytes are
  read on demand with positioned reads (seek + read under a lock), like the
  ``pread`` back end. Such objects must not be read or moved by someone
  else while open.

The reference package offers the first kind as ``safetensors._safe_open_handle``.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import sys
import threading
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ._errors import ClosedFileError, TensorNotFoundError, rule_error
from ._fastst import RawFile, parse_header

#: The dtype conversions ``get_tensor(dtype=...)`` performs (fastst-core's
#: ``convert::supported``); all are exact in numpy/ml_dtypes (widening) or
#: round to nearest even (narrowing F32).
CONVERSIONS = {
    *((src, "F32") for src in ("BF16", "F16", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ")),
    *((src, "F32") for src in ("F8_E5M2FNUZ", "F8_E8M0")),
    ("F32", "BF16"),
    ("F32", "F16"),
}


def is_handle(obj: object) -> bool:
    """True for an open file object (as opposed to a path)."""
    if isinstance(obj, (str, bytes, os.PathLike)):
        return False
    return callable(getattr(obj, "fileno", None)) or (
        callable(getattr(obj, "seek", None))
        and (callable(getattr(obj, "readinto", None)) or callable(getattr(obj, "read", None)))
    )


def _display_name(handle: Any, fallback: str) -> str:
    name = getattr(handle, "name", None)
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    return name if isinstance(name, str) and name else fallback


def _descriptor(handle: Any) -> Optional[int]:
    fileno = getattr(handle, "fileno", None)
    if not callable(fileno):
        return None
    try:
        fd = fileno()
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None
    return fd if isinstance(fd, int) and fd >= 0 else None


def _fd_path(fd: int) -> str:
    if sys.platform.startswith("linux"):
        return f"/proc/self/fd/{fd}"
    return f"/dev/fd/{fd}"


def open_handle(handle: Any, backend: str, header_cap: int) -> Any:
    """A ``RawFile`` (or the same interface) reading the file ``handle`` is
    open on."""
    if getattr(handle, "closed", False) is True:
        raise ValueError("I/O operation on closed file")
    fd = _descriptor(handle)
    if fd is not None:
        name = _display_name(handle, f"<file descriptor {fd}>")
        # Pipes, sockets and devices are refused before anything is opened
        # (opening /proc/self/fd/N of a pipe could block).
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(
                errno.EINVAL, "not a regular file (a pipe, socket or device): refusing it", name
            )
        return RawFile(_fd_path(fd), name, backend, header_cap)
    return StreamFile(handle, _display_name(handle, f"<{type(handle).__name__}>"), header_cap)


class StreamFile:
    """The ``RawFile`` interface over a seekable binary file-like object:
    every read is a positioned read (seek, then read) under a lock."""

    def __init__(self, stream: Any, name: str, header_cap: int) -> None:
        self.name = name
        self._stream = stream
        self._lock = threading.Lock()
        self._closed = False
        size = stream.seek(0, io.SEEK_END)
        if not isinstance(size, int):
            size = stream.tell()
        self._size = int(size)
        prefix = self._read_at(0, min(8, self._size))
        # parse_header checks the prefix (file too short, length zero or
        # past the end, above the cap) before anything else is read.
        head = prefix
        if len(prefix) == 8:
            n = int.from_bytes(prefix, "little")
            if 0 < n <= min(header_cap, self._size - 8):
                head = prefix + self._read_at(8, n)
        start, entries, metadata = parse_header(head, self._size, name, header_cap)
        self._start = int(start)
        self._entries: Dict[str, Tuple[str, Tuple[int, ...], int, int]] = {}
        self._order: List[str] = []
        for tensor, dtype, shape, begin, end in entries:
            self._entries[tensor] = (dtype, tuple(shape), int(begin), int(end))
            self._order.append(tensor)
        self._metadata = dict(metadata) if metadata is not None else None

    def _read_at(self, offset: int, length: int) -> bytes:
        out = bytearray(length)
        self._fill(offset, memoryview(out))
        return bytes(out)

    def _fill(self, offset: int, out: memoryview) -> None:
        with self._lock:
            self._stream.seek(offset)
            done = 0
            total = len(out)
            readinto = getattr(self._stream, "readinto", None)
            while done < total:
                if callable(readinto):
                    got = readinto(out[done:])
                else:
                    chunk = self._stream.read(total - done)
                    got = len(chunk) if chunk else 0
                    out[done : done + got] = chunk
                if not got:
                    raise OSError(
                        f"{self.name}: file ended at byte {offset + done} while reading "
                        f"{total} bytes at {offset} (the file shrank)"
                    )
                done += got

    # the RawFile interface ----------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True

    @property
    def backend(self) -> str:
        return "pread"

    def _entry(self, name: str) -> Tuple[str, Tuple[int, ...], int, int]:
        if self._closed:
            raise ClosedFileError(f"{self.name}: file is closed")
        found = self._entries.get(name)
        if found is None:
            err = TensorNotFoundError(f'{self.name}: no tensor named "{name}" in the file')
            err.filename, err.tensor, err.rule = self.name, name, "tensor-not-found"
            raise err
        return found

    def keys(self) -> List[str]:
        self._entry_check()
        return sorted(self._entries)

    def offset_keys(self) -> List[str]:
        self._entry_check()
        return list(self._order)

    def _entry_check(self) -> None:
        if self._closed:
            raise ClosedFileError(f"{self.name}: file is closed")

    def metadata(self) -> Optional[Dict[str, str]]:
        self._entry_check()
        return dict(self._metadata) if self._metadata is not None else None

    def __len__(self) -> int:
        self._entry_check()
        return len(self._entries)

    def __contains__(self, name: str) -> bool:
        self._entry_check()
        return name in self._entries

    def info(self, name: str) -> Tuple[str, Tuple[int, ...], int, int]:
        return self._entry(name)

    def tensor(self, name: str) -> Tuple[bytearray, str, Tuple[int, ...]]:
        dtype, shape, begin, end = self._entry(name)
        out = bytearray(end - begin)
        if out:
            self._fill(self._start + begin, memoryview(out))
        return out, dtype, shape

    def read_into(self, name: str, out: Any) -> None:
        self.read_range_into(name, 0, out)

    def read_range_into(self, name: str, offset: int, out: Any) -> None:
        _dtype, _shape, begin, end = self._entry(name)
        view = memoryview(out).cast("B")
        if offset < 0 or offset + len(view) > end - begin:
            raise rule_error(
                "read-past-end",
                self.name,
                f"tensor {name!r}: bytes [{offset}, {offset + len(view)}) are "
                f"outside its {end - begin} bytes",
                name,
            )
        if len(view):
            self._fill(self._start + begin + offset, view)

    def convert_into(self, name: str, out: Any, to: str) -> None:
        from ._dtypes import NUMPY_DTYPES

        dtype, shape, _begin, _end = self._entry(name)
        if (dtype, to) not in CONVERSIONS and dtype != to:
            raise rule_error(
                "conversion-not-allowed",
                self.name,
                f'tensor "{name}": no conversion from {dtype} to {to}',
                name,
            )
        raw, _, _ = self.tensor(name)
        source = np.frombuffer(raw, dtype=NUMPY_DTYPES[dtype]).reshape(shape)
        target = np.frombuffer(memoryview(out).cast("B"), dtype=NUMPY_DTYPES[to])
        target[...] = source.reshape(-1).astype(NUMPY_DTYPES[to])

    def advise_sequential(self) -> None:
        self._entry_check()
