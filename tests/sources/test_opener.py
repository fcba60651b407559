"""Every kind of input ``safe_open`` takes is read through the one core
opener: a path, a file object with a descriptor, a descriptor wrapper, an
``io.BytesIO``, an object with only ``seek``/``read``, a sharded index.
Each is a ``RawSource``; each names the file and the rule once closed;
file objects without a descriptor give the same tensors, conversions and
slices as the path, and their failures are the core's errors."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import fastst
import fastst.numpy
import numpy as np
import pytest
from fastst import _fastst
from fastst._sources.raw import RawSource
from helpers.raw_files import raw_file
from helpers.streams import SeekRead, as_bytes, hammer

FACTS = _fastst.catalogue.dtype_facts()
BIG = (1 << 20) + 5  # BF16 elements: large enough for threaded reads


def sample_bytes() -> bytes:
    """A file holding a (4, 6) tensor of every dtype plus a large BF16 one."""
    rng = np.random.default_rng(7)
    tensors = {}
    for name, fact in FACTS.items():
        nbytes = 24 * fact["bits"] // 8
        data = rng.integers(0, 256, nbytes, dtype=np.uint8)
        if name == "BOOL":
            data &= 1
        tensors[name] = (name, (4, 6), data.tobytes())
    big = rng.integers(0, 1 << 16, BIG, dtype=np.uint16)
    tensors["big"] = ("BF16", (BIG,), big.astype("<u2").tobytes())
    return raw_file(tensors, {"k": "v"})


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sources") / "model.safetensors"
    path.write_bytes(sample_bytes())
    return path


class Descriptor:
    """A bare wrapper of a file descriptor: ``fileno()`` and nothing else."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


Opened = Tuple[Any, str, Callable[[], None]]

#: Every kind of file object, beside paths and sharded indexes.
KINDS = ("path", "file object", "descriptor", "BytesIO", "seek/read")


def opened(kind: str, path: Path) -> Opened:
    """What ``safe_open`` takes for source kind ``kind`` reading ``path``,
    the file name its errors carry, and a cleanup."""
    if kind == "path":
        return path, str(path), lambda: None
    if kind == "file object":
        fh = open(path, "rb")
        return fh, str(path), fh.close
    if kind == "descriptor":
        fd = os.open(path, os.O_RDONLY)
        return Descriptor(fd), f"<file descriptor {fd}>", lambda: os.close(fd)
    if kind == "BytesIO":
        return io.BytesIO(path.read_bytes()), "<BytesIO>", lambda: None
    assert kind == "seek/read"
    return SeekRead(path.read_bytes()), "<SeekRead>", lambda: None


@pytest.mark.parametrize("kind", [*KINDS, "sharded index"])
def test_every_kind_of_source_names_file_and_rule_once_closed(kind, sample, tmp_path) -> None:
    if kind == "sharded index":
        tensors = {"BF16": np.zeros(3, np.float32), "U8": np.zeros(2, np.uint8)}
        index = fastst.numpy.save_sharded(tensors, tmp_path / "sharded", max_shard_size=8)
        source, name, cleanup = index, str(index), lambda: None
    else:
        source, name, cleanup = opened(kind, sample)
    try:
        f = fastst.safe_open(source, "np")
        assert isinstance(f._raw, RawSource)
        piece = f.get_slice("U8")
        f.close()
        uses: Dict[str, Callable[[], Any]] = {
            "get_tensor": lambda: f.get_tensor("U8"),
            "get_tensor(dtype)": lambda: f.get_tensor("BF16", dtype=np.float32),
            "get_slice": lambda: f.get_slice("U8"),
            "slice[...]": lambda: piece[1:],
            "keys": f.keys,
            "metadata": f.metadata,
        }
        for use, call in uses.items():
            with pytest.raises(fastst.ClosedFileError) as info:
                call()
            assert (info.value.filename, info.value.rule) == (name, "closed-file"), use
            assert str(info.value).startswith(f"{name}: file is closed"), use
    finally:
        cleanup()


def every_read(f: Any) -> Dict[Tuple[str, str], Any]:
    """What every way of reading gives for each tensor of ``f``."""
    out: Dict[Tuple[str, str], Any] = {}
    for name in f.keys():
        out[name, "view"] = as_bytes(f.get_tensor(name))
        out[name, "copy"] = as_bytes(f.get_tensor(name, copy=True))
        if name != "big":
            for index in (np.s_[1:3], np.s_[:, ::2], np.s_[-1], np.s_[::-1, 1]):
                out[name, f"slice {index}"] = as_bytes(f.get_slice(name)[index])
    for src, to in _fastst.catalogue.conversions():
        out[src, f"as {to}"] = as_bytes(f.get_tensor(src, dtype=to))
    out["big", "as F32"] = as_bytes(f.get_tensor("big", dtype=np.float32))
    out["all", "copy"] = {k: as_bytes(v) for k, v in f.get_tensors(copy=True).items()}
    return out


@pytest.fixture(scope="module")
def from_path(sample) -> Dict[Tuple[str, str], Any]:
    with fastst.safe_open(sample, "np") as f:
        return every_read(f)


@pytest.mark.parametrize("kind", KINDS[1:])
def test_file_objects_read_like_the_path(kind, sample, from_path) -> None:
    source, _name, cleanup = opened(kind, sample)
    try:
        with fastst.safe_open(source, "np") as f:
            assert f.metadata() == {"k": "v"}
            got = every_read(f)
    finally:
        cleanup()
    assert got.keys() == from_path.keys()
    for key, value in from_path.items():
        assert got[key] == value, key


def test_conversions_are_the_cores_for_every_source(sample) -> None:
    for make in (lambda: sample, lambda: io.BytesIO(sample.read_bytes())):
        with fastst.safe_open(make(), "np") as f:
            with pytest.raises(ValueError, match="no conversion from U8 to F32") as info:
                f.get_tensor("U8", dtype=np.float32)
            assert info.value.rule == "conversion-not-allowed"


def test_a_read_that_raises_is_an_oserror_naming_the_file(sample) -> None:
    data = sample.read_bytes()

    class Failing(io.BytesIO):
        armed = False

        def readinto(self, buffer: Any) -> int:
            if self.armed:
                raise RuntimeError("the network went away")
            return super().readinto(buffer)

    stream = Failing(data)
    with fastst.safe_open(stream, "np") as f:
        stream.armed = True
        for read in (
            lambda: f.get_tensor("U8"),
            lambda: f.get_tensor("big", dtype=np.float32),
            lambda: f.get_slice("F32")[1:],
            lambda: f.get_tensors(copy=True),
        ):
            with pytest.raises(OSError) as info:
                read()
            message = str(info.value)
            # The file, then the tensor being read (any of the file's tensors, for a batch).
            assert re.match(r'<Failing>: tensor "[^"]+": cannot read ', message), message
            assert "RuntimeError: the network went away" in message
            assert isinstance(info.value.__cause__, RuntimeError)
    # Failing while the header is read: the same error, at open.
    stream = Failing(data)
    stream.armed = True
    with pytest.raises(OSError, match="^<Failing>: cannot read 8 bytes at offset 0: Runtime"):
        fastst.safe_open(stream, "np")


class Shrunk(SeekRead):
    """Claims the length of ``data`` but holds only its first ``cut`` bytes
    (a stream that shrank after it was measured)."""

    def __init__(self, data: bytes, cut: int) -> None:
        super().__init__(data[:cut])
        self._claimed = len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._claimed if whence == 2 else super().seek(offset, whence)


def test_a_stream_that_ends_early_breaks_the_file_changed_rule(sample) -> None:
    data = sample.read_bytes()
    with pytest.raises(fastst.FileAccessError) as at_open:
        fastst.safe_open(Shrunk(data, 4), "np")
    with fastst.safe_open(Shrunk(data, len(data) - 100), "np") as f:
        with pytest.raises(fastst.FileAccessError) as later:
            f.get_tensor("big")
    for info in (at_open, later):
        assert (info.value.filename, info.value.rule) == ("<Shrunk>", "file-changed")
        assert str(info.value).startswith("<Shrunk>: the file changed since it was opened")
        assert "it shrank" in str(info.value)


def test_short_reads_are_completed(sample) -> None:
    class Trickle(io.BytesIO):
        def readinto(self, buffer: Any) -> int:
            return super().readinto(memoryview(buffer)[:7])

    with fastst.safe_open(sample, "np") as f:
        want = as_bytes(f.get_tensor("F64"))
    with fastst.safe_open(Trickle(sample.read_bytes()), "np") as f:
        assert as_bytes(f.get_tensor("F64")) == want


def test_threads_hammering_one_stream_get_right_bytes(sample) -> None:
    assert hammer(sample, slow_reads=False) == []


def test_threads_on_a_stream_that_releases_the_gil_never_deadlock(sample) -> None:
    # Slow reads let other threads run between a seek and its read: the
    # lock held across them must never be waited for with the GIL held. A
    # deadlock would hang the interpreter, so the threads run in a child.
    code = f"from helpers.streams import hammer; assert hammer({str(sample)!r}, True) == []"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).parents[1],  # tests/: the helpers package
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def _refusals(tmp_path: Path) -> Dict[str, Tuple[Callable[[], Any], str]]:
    """Every entry point taking ``storage_options``, called with a local
    target, and the name its refusal must show."""
    data = tmp_path / "model.safetensors"
    fastst.numpy.save_file({"x": np.zeros(2, np.float32)}, str(data))
    out = tmp_path / "out.safetensors"
    layout = {"x": ("F32", [2])}
    opts = {"region": "us-east-1"}
    calls: Dict[str, Tuple[Callable[[], Any], str]] = {
        "safe_open path": (
            lambda: fastst.safe_open(str(data), "np", storage_options=opts),
            str(data),
        ),
        "safe_open file object": (
            lambda: fastst.safe_open(io.BytesIO(data.read_bytes()), "np", storage_options=opts),
            "<BytesIO>",
        ),
        "load_file": (lambda: fastst.numpy.load_file(str(data), storage_options=opts), str(data)),
        "save_file": (
            lambda: fastst.numpy.save_file({"x": np.zeros(2)}, str(out), storage_options=opts),
            str(out),
        ),
        "save_sharded": (
            lambda: fastst.numpy.save_sharded(
                {"x": np.zeros(2)}, str(tmp_path / "sh"), storage_options=opts
            ),
            str(tmp_path / "sh"),
        ),
        "open_writer": (lambda: fastst.open_writer(out, layout, storage_options=opts), str(out)),
        "open_sharded_writer": (
            lambda: fastst.open_sharded_writer(tmp_path / "w", layout, storage_options=opts),
            str(tmp_path / "w"),
        ),
    }
    return calls


def test_storage_options_for_a_local_target_are_one_rule_naming_the_target(tmp_path) -> None:
    # One refusal for every entry point: a StorageOptionsError (a
    # SafetensorError and, as before, a ValueError) naming the path or
    # file object and rule storage-options-local; nothing is written.
    calls = _refusals(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    for what, (call, name) in calls.items():
        with pytest.raises(fastst.StorageOptionsError) as refused:
            call()
        err = refused.value
        assert isinstance(err, fastst.SafetensorError) and isinstance(err, ValueError), what
        assert err.rule == "storage-options-local", what
        assert err.filename == name, what
        assert str(err).startswith(f"{name}: storage_options apply to URLs"), what
        assert "storage-options-local" in str(err), what
    assert sorted(p.name for p in tmp_path.iterdir()) == before
