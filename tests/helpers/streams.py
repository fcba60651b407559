"""File objects without a descriptor for the reader tests: a seek/read-only stream, a gated
one, and eight threads hammering one stream (also run in a child interpreter by the tests)."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path
from typing import Any, Tuple

import fastst
import numpy as np


class SeekRead:
    """A file object with ``seek`` and ``read`` only (no ``readinto``)."""

    def __init__(self, data: bytes, read_gap: float = 0.0) -> None:
        self._inner = io.BytesIO(data)
        self._gap = read_gap

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._inner.seek(offset, whence)

    def read(self, n: int = -1) -> bytes:
        if self._gap:
            time.sleep(self._gap)  # lets other threads run between seek and read
        return self._inner.read(n)


def as_bytes(array: np.ndarray) -> Tuple[str, Tuple[int, ...], bytes]:
    return str(array.dtype), array.shape, np.ascontiguousarray(array).tobytes()


def hammer(path: Path | str, slow_reads: bool) -> list:
    """Eight threads reading one stream-backed file of ``path``'s bytes;
    the mismatches and errors they met."""
    path = Path(path)
    with fastst.safe_open(path, "np") as f:
        want = {name: as_bytes(f.get_tensor(name)) for name in f.keys() if name != "big"}
        big = as_bytes(f.get_tensor("big", dtype=np.float32))
    names = sorted(want)
    errors: list = []
    barrier = threading.Barrier(8)
    data = path.read_bytes()
    stream = SeekRead(data, 1e-4) if slow_reads else io.BytesIO(data)
    with fastst.safe_open(stream, "np") as f:

        def worker(tid: int) -> None:
            try:
                barrier.wait()
                for rep in range(30):
                    name = names[(tid * 7 + rep) % len(names)]
                    if as_bytes(f.get_tensor(name)) != want[name]:
                        errors.append((tid, name))
                    if rep % 10 == tid % 10:
                        if as_bytes(f.get_tensor("big", dtype=np.float32)) != big:
                            errors.append((tid, "big"))
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return errors


class Gated(io.RawIOBase):
    """A file object whose reads at or past ``gate_at`` wait for ``gate``."""

    def __init__(self, data: bytes, gate_at: int) -> None:
        self.data, self.gate_at, self.pos, self.size = data, gate_at, 0, len(data)
        self.gate = threading.Event()
        self.lock = threading.Lock()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = {0: pos, 1: self.pos + pos, 2: self.size + pos}[whence]
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, b: Any) -> int:
        if self.pos + len(b) > self.gate_at:
            assert self.gate.wait(30), "never let through"
        chunk = self.data[self.pos : self.pos + len(b)]
        b[: len(chunk)] = chunk
        self.pos += len(chunk)
        return len(chunk)


def gated(path: Path) -> Gated:
    """The file behind a gate that holds back every read past its first
    large tensor."""
    data = path.read_bytes()
    with fastst.safe_open(path, "np") as f:
        first = f.offset_keys()[0]
        start, end = f._raw.data_start, f._raw.info(first)[3]
    return Gated(data, start + end)
