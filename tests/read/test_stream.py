"""``safe_open.iter_tensors``: a whole owned load handed out tensor by tensor
as the reads complete. The same tensors as ``get_tensors(copy=True)``, in
file order; tensors handed out before the rest is read; a failure or a
raising callback raised after the tensors read before it, never a partial
tensor; abandoning the iterator or closing the file stops the reading."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path
from typing import Any, Dict, List, Tuple

import fastst
import fastst._read.stream
import fastst.numpy
import numpy as np
import pytest
from helpers.raw_files import raw_file
from helpers.streams import gated

MIB = 1 << 20


def _tensors() -> Dict[str, Any]:
    """Large tensors (several reads each), runs of small ones, empty and 0-d."""
    rng = np.random.default_rng(3)
    out: Dict[str, Any] = {}
    for i in range(6):
        n = (3 * MIB + 7 * i) // 2
        out[f"big.{i}"] = ("BF16", (n,), rng.integers(0, 256, 2 * n, dtype=np.uint8).tobytes())
        for j in range(4):
            out[f"small.{i}.{j}"] = ("F32", (j,), rng.integers(0, 256, 4 * j, np.uint8).tobytes())
    out["scalar"] = ("F16", (), b"\x00\x3c")
    out["empty"] = ("BF16", (0, 3), b"")
    return out


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("iter") / "model.safetensors"
    p.write_bytes(raw_file(_tensors()))
    return p


def _bytes(t: Any) -> bytes:
    if hasattr(t, "numpy"):
        import torch

        return bytes(t.reshape(-1).view(torch.uint8).numpy())
    return bytes(t.tobytes())


def _loaders() -> List[str]:
    return [t.name for t in threading.enumerate() if t.name == "fastst-load"]


@pytest.mark.parametrize("framework", ["np", "pt"])
@pytest.mark.parametrize("dtype", [None, "F32"])
def test_the_tensors_of_get_tensors_in_file_order(path: Path, framework: str, dtype: Any) -> None:
    if framework == "pt":
        pytest.importorskip("torch")
    with fastst.safe_open(path, framework) as f:
        want = f.get_tensors(copy=True, dtype=dtype)
        got = list(f.iter_tensors(dtype=dtype))
        assert [n for n, _ in got] == list(want) == f.offset_keys()
    for name, tensor in got:
        assert tensor.dtype == want[name].dtype and tensor.shape == want[name].shape, name
        assert _bytes(tensor) == _bytes(want[name]), name
    assert not _loaders()


def test_views_and_checkpoints(path: Path, tmp_path: Path) -> None:
    views = fastst.numpy.load_file(path)
    with fastst.safe_open(path, "np") as f:
        got = dict(f.iter_tensors(copy=False))
    assert list(got) == list(views)
    assert all(got[k].tobytes() == v.tobytes() for k, v in views.items())
    # A sharded checkpoint streams its shards in file order.
    fastst.numpy.save_sharded(views, tmp_path, max_shard_size=4 * MIB)
    index = tmp_path / "model.safetensors.index.json"
    with fastst.safe_open(index, "np") as f:
        assert len({f._raw.file_of(k).name for k in f.keys()}) >= 3
        want = f.get_tensors(copy=True)
        got = dict(f.iter_tensors(dtype=np.float32))
        order = [n for n, _ in f.iter_tensors()]
    assert order == list(want)
    assert list(got) == list(want)
    for k, v in want.items():
        assert got[k].tobytes() == v.astype(np.float32).tobytes(), k


def test_the_shards_of_a_checkpoint_load_side_by_side(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    views = fastst.numpy.load_file(path)
    fastst.numpy.save_sharded(views, tmp_path, max_shard_size=4 * MIB)
    index = tmp_path / "model.safetensors.index.json"
    real = fastst._read.stream.load_into
    second = threading.Event()
    started: List[str] = []
    overlapped: List[bool] = []

    def load_into(file: Any, *args: Any, **kwargs: Any) -> None:
        started.append(file.name)
        if len(started) == 1:
            # The first shard's load waits for the second one to start
            # (bounded, so that one after the other fails instead of hanging).
            overlapped.append(second.wait(10))
        else:
            second.set()
        real(file, *args, **kwargs)

    monkeypatch.setattr(fastst._read.stream, "load_into", load_into)
    with fastst.safe_open(index, "np") as f:
        got = dict(f.iter_tensors())
        assert len({f._raw.file_of(k).name for k in f.keys()}) >= 3
        assert list(got) == f.offset_keys()
    assert overlapped == [True] and len(started) >= 3
    assert sorted(got) == sorted(views)
    assert all(got[k].tobytes() == v.tobytes() for k, v in views.items())
    assert not _loaders()


def _watch_turns(monkeypatch: pytest.MonkeyPatch) -> List[Any]:
    """Records, in order, each background load's start ``("start", file)`` and
    reports ``("report", file, done, total)``, with the next file's turn
    coming once 1 MiB of a file is left to read."""
    seen: List[Any] = []
    real = fastst._read.stream.load_into
    monkeypatch.setattr(fastst._read.stream, "TAIL", MIB)

    def load_into(file: Any, names: Any, outs: Any, targets: Any, progress: Any, *a: Any, **k: Any):
        seen.append(("start", file.name))

        def watched(done: int, total: int, *rest: Any) -> None:
            seen.append(("report", file.name, done, total))
            progress(done, total, *rest)

        return real(file, names, outs, targets, watched, *a, **k)

    monkeypatch.setattr(fastst._read.stream, "load_into", load_into)
    return seen


def _started_in_turn(seen: List[Any]) -> List[str]:
    """The files of ``seen`` in the order their loads started, checking that
    each started once the one before had at most 1 MiB left to read."""
    order: List[str] = []
    for event in seen:
        if event[0] == "start":
            if order:
                before = [e for e in seen[: seen.index(event)] if e[1] == order[-1]]
                assert any(e[0] == "report" and e[2] + MIB >= e[3] for e in before), seen
            order.append(event[1])
    return order


def _shards_of(path: Path, folder: Path) -> Tuple[Dict[str, Any], Path]:
    """The tensors of ``path``, and the index of them saved in ``folder`` in shards of 4 MiB."""
    views = fastst.numpy.load_file(path)
    fastst.numpy.save_sharded(views, folder, max_shard_size=4 * MIB)
    return views, folder / "model.safetensors.index.json"


def test_the_next_shard_starts_once_the_one_before_has_its_last_reads_left(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two shards read side by side from the start split the disk, and the first
    # tensors came late: the next shard waits for the last MiB of the one before
    # (`get_tensors`, which returns at the end, still reads two at once).
    views, index = _shards_of(path, tmp_path)
    seen = _watch_turns(monkeypatch)
    with fastst.safe_open(index, "np") as f:
        shards = list(dict.fromkeys(f._raw.file_of(k).name for k in f.offset_keys()))
        assert len(shards) >= 3
        got = dict(f.iter_tensors())
        assert list(got) == f.offset_keys()
    assert _started_in_turn(seen) == shards
    assert sorted(got) == sorted(views)
    assert all(got[k].tobytes() == v.tobytes() for k, v in views.items())
    assert not _loaders()


def test_a_failed_shard_ends_the_loads_waiting_for_their_turn(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    views, index = _shards_of(path, tmp_path)
    seen = _watch_turns(monkeypatch)
    got: List[str] = []
    with fastst.safe_open(index, "np") as f:
        names = f.offset_keys()
        first = Path(f._raw.file_of(names[0]).name)
        first.write_bytes(first.read_bytes()[:1000])  # changed underneath: its load fails
        with pytest.raises(fastst.SafetensorError) as info:
            got.extend(name for name, _ in f.iter_tensors())
    assert info.value.rule == "file-changed" and got == []
    # The shards after it never started: their loaders gave up waiting.
    assert [e[1] for e in seen if e[0] == "start"] == [str(first)]
    assert not _loaders()


@pytest.fixture
def outcomes(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """How each background load of the iterators ended: "done" or the
    exception's class name."""
    seen: List[str] = []
    real = fastst._read.stream.load_into

    def load_into(*args: Any, **kwargs: Any) -> None:
        try:
            real(*args, **kwargs)
        except BaseException as exc:
            seen.append(type(exc).__name__)
            raise
        seen.append("done")

    monkeypatch.setattr(fastst._read.stream, "load_into", load_into)
    return seen


def test_tensors_come_out_before_the_rest_is_read(path: Path, outcomes: List[str]) -> None:
    src = gated(path)
    with fastst.safe_open(src, "np") as f:
        it = f.iter_tensors()
        name, first = next(it)  # the rest of the file is held back
        assert name == f.offset_keys()[0] and first.shape == f.get_slice(name).shape
        assert _loaders() and not outcomes
        src.gate.set()
        rest = dict(it)
    assert len(rest) + 1 == len(_tensors()) and outcomes == ["done"]


def _open_when_stopped(src: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opens ``src``'s gate once a load of the stream module is asked to stop (its stop
    event set), not before: the reads held at the gate then end only after the stop."""
    made: List[threading.Event] = []

    class Recorded(threading.Event):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    names = {k: getattr(threading, k) for k in dir(threading) if not k.startswith("__")}
    fake = type(sys)("threading")
    fake.__dict__.update(names, Event=Recorded)
    monkeypatch.setattr(fastst._read.stream, "threading", fake)

    def opener() -> None:
        while not any(e.is_set() for e in made):
            if src.gate.wait(0.01):
                return
        src.gate.set()

    threading.Thread(target=opener, daemon=True).start()


@pytest.mark.parametrize("how", ["break", "del", "gc"])
def test_abandoning_the_iterator_stops_the_load(
    path: Path, outcomes: List[str], how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = gated(path)
    _open_when_stopped(src, monkeypatch)
    with fastst.safe_open(src, "np") as f:
        want = f.get_tensor(f.offset_keys()[0])
        it = f.iter_tensors()
        kept = []
        for _name, tensor in it:
            kept.append(tensor)
            break
        # The reads held at the gate end once the stop is asked for (the opener), then
        # the load stops at its next report.
        if how == "del":
            del it
        elif how == "gc":
            gc.disable()  # this thread's collection, not one on another thread
            try:
                cycle: List[Any] = [it]
                cycle.append(cycle)
                del it, cycle
                gc.collect()
            finally:
                gc.enable()
        else:
            it.close()  # what the loop's end does once nothing refers to it
        assert not _loaders()
        assert outcomes == ["LoadStopped"]
        # What was handed out is the user's, and whole.
        assert kept[0].tobytes() == want.tobytes()


def test_a_never_started_iterator_reads_nothing(path: Path, outcomes: List[str]) -> None:
    with fastst.safe_open(path, "np") as f:
        it = f.iter_tensors()
        del it
    assert not _loaders() and outcomes == []


def test_closing_the_file_stops_the_load(path: Path, outcomes: List[str]) -> None:
    src = gated(path)
    f = fastst.safe_open(src, "np")
    it = f.iter_tensors()
    name, first = next(it)
    f.close()
    src.gate.set()
    for loader in threading.enumerate():
        if loader.name == "fastst-load":
            loader.join()  # it stops on its own, before the end
    assert outcomes == ["LoadStopped"]
    with pytest.raises(fastst.ClosedFileError):
        next(it)
    assert first.tobytes() == fastst.numpy.load_file(path)[name].tobytes()


def test_a_file_changed_underneath_is_raised_after_what_was_read(path: Path) -> None:
    views = fastst.numpy.load_file(path)
    src = gated(path)
    got = []
    with fastst.safe_open(src, "np") as f:
        with pytest.raises(fastst.SafetensorError) as info:
            for name, tensor in f.iter_tensors():
                got.append((name, tensor))
                if len(got) == 1:  # the rest of the file is held back: shrink it
                    src.data = src.data[:1000]
                    src.gate.set()
    assert info.value.rule == "file-changed"
    # The tensors read before the failure, whole, and nothing after it.
    assert [n for n, _ in got] == list(views)[: len(got)] and 1 <= len(got) < len(views)
    assert all(t.tobytes() == views[n].tobytes() for n, t in got)
    assert not _loaders()


def test_every_tensor_read_before_a_failure_is_handed_out(path: Path) -> None:
    # The file ends early (a read there fails) after the third large tensor:
    # the reads of the first three, in flight beside the failing one, end,
    # and all three are handed out before the error.
    src = gated(path)
    with fastst.safe_open(src, "np") as f:
        names = f.offset_keys()
        cut = names.index("big.3")
        src.data = src.data[: f._raw.data_start + f._raw.info(names[cut])[2] + 100]
        src.gate.set()
        got = []
        with pytest.raises(fastst.SafetensorError) as info:
            for name, _tensor in f.iter_tensors():
                got.append(name)
    assert info.value.rule == "file-changed"
    assert got == names[:cut]


def test_a_raising_progress_callback_comes_after_the_tensors(path: Path) -> None:
    calls = []

    def progress(done: int, total: int) -> None:
        calls.append((done, total))
        raise KeyError("enough")

    got = []
    with fastst.safe_open(path, "np") as f:
        with pytest.raises(KeyError, match="enough"):
            for name, _tensor in f.iter_tensors(progress=progress):
                got.append(name)
        assert got == f.offset_keys()  # under 64 MiB: one call, at the end
    assert len(calls) == 1 and calls[0][0] == calls[0][1]
    assert not _loaders()


def test_no_more_memory_than_get_tensors(path: Path) -> None:
    peaks = []
    for way in ("get_tensors", "iter_tensors"):
        with fastst.safe_open(path, "np") as f:
            tracemalloc.start()
            out = f.get_tensors(copy=True) if way == "get_tensors" else dict(f.iter_tensors())
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
            assert len(out) == len(_tensors())
    assert peaks[1] <= peaks[0] + (256 << 10), peaks


def _run_watched(path: Path, body: str) -> str:
    """Runs ``body`` in a fresh interpreter where ``src`` is the gated file
    at ``path`` and every background load prints how it ended; its
    output."""
    script = f"""
import gc, sys, threading
sys.path.insert(0, {str(Path(__file__).parents[1])!r})
import fastst, fastst._read.stream
from helpers.streams import Gated, gated
real = fastst._read.stream.load_into
def load_into(*a, **k):
    try:
        real(*a, **k)
    except BaseException as exc:
        print("ended:", type(exc).__name__, flush=True)
        raise
    print("ended: done", flush=True)
fastst._read.stream.load_into = load_into
src = gated(__import__("pathlib").Path({str(path)!r}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script + body], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_the_interpreter_exits_without_finishing_an_abandoned_load(path: Path) -> None:
    out = _run_watched(
        path,
        """
f = fastst.safe_open(src, "np")
it = f.iter_tensors()
next(it)
threading.Timer(0.2, src.gate.set).start()
""",
    )
    assert "ended: LoadStopped" in out, out


def test_a_collection_on_a_thread_the_reads_wait_on_does_not_deadlock(path: Path) -> None:
    # The abandoned iterator is collected inside the file object's readinto,
    # on a reading thread: waiting there for the load would wait for itself.
    out = _run_watched(
        path,
        """
class Collecting(Gated):
    def readinto(self, b):
        if self.gate.is_set() and not hasattr(self, "by"):
            self.by = threading.current_thread().name
            gc.collect()
        return super().readinto(b)
src.__class__ = Collecting
f = fastst.safe_open(src, "np")
it = f.iter_tensors()
next(it)
gc.disable()
cycle = [it]
cycle.append(cycle)
del it, cycle
src.gate.set()
for t in threading.enumerate():
    if t.name == "fastst-load":
        t.join()
print("collected on:", src.by, flush=True)
""",
    )
    assert "ended: LoadStopped" in out, out
    by = out.split("collected on: ")[1].split()[0]
    assert by not in ("MainThread", "fastst-load"), by


@pytest.mark.slow
def test_a_file_object_reading_its_own_file_is_refused_not_deadlocked(path: Path) -> None:
    # readinto calls back into the safe_open it is being read for, from the loading thread:
    # that read would wait for the lock its own caller holds. It is refused (rule
    # reentrant-read) and the iteration raises; a regression hangs, which the time limit of
    # the child interpreter turns into a failure.
    script = f"""
import io, fastst
class Reentrant(io.RawIOBase):
    def __init__(self, data):
        self.inner, self.f = io.BytesIO(data), None
    def readable(self):
        return True
    def seekable(self):
        return True
    def seek(self, *a):
        return self.inner.seek(*a)
    def readinto(self, b):
        if self.f is not None:
            self.f.get_tensor("scalar")
        return self.inner.readinto(b)
src = Reentrant(open({str(path)!r}, "rb").read())
f = fastst.safe_open(src, "np")
src.f = f
try:
    for name, t in f.iter_tensors():
        pass
except OSError as e:
    chain = [e, e.__cause__]
    print(type(e).__name__, [getattr(c, "rule", None) for c in chain])
src.f = None
print(f.get_tensor("scalar"))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.splitlines() == ["OSError [None, 'reentrant-read']", "1.0"], done.stderr
