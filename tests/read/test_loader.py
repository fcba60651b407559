"""safe_open.prefetch(plan): the loader's plan forms, hand-out rules, bounds and failures."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import fastst
import numpy as np
import pytest
from fastst._read import loader as _loader
from fastst._read.safe_open import safe_open as fastst_safe_open
from helpers.raw_files import raw_file

#: Generous bound for a join: a hang fails the test, a slow host does not.
JOIN = 120.0

# dtype -> bytes of a (6, 8) tensor (F4: 4 bits, F6: 6 bits per value)
_DTYPES = {"F32": 192, "BF16": 96, "I8": 48, "U16": 96, "F4": 24, "F6_E2M3": 36, "F8_E4M3": 48}


def _patterned(nbytes: int, seed: int) -> bytes:
    return bytes((seed * 31 + i * 7) % 251 for i in range(nbytes))


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    tensors = {
        name.lower(): (name, (6, 8), _patterned(n, i))
        for i, (name, n) in enumerate(_DTYPES.items())
    }
    tensors["scalar"] = ("F32", (), _patterned(4, 99))
    path = tmp_path / "mixed.safetensors"
    path.write_bytes(raw_file(tensors))
    return path


def _same(got: Any, want: Any) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


_FORMS = [
    (None, ...),
    (slice(1, 4), (slice(1, 4),)),
    (slice(-2, None), (slice(4, 6),)),
    (slice(2, 2), (slice(2, 2),)),
    (slice(None), ...),
    # fastst's superset: any index get_slice takes (F6 columns 2:6 end inside a byte)
    ((slice(1, 5), slice(2, 6)), (slice(1, 5), slice(2, 6))),
    ((..., 3), (..., 3)),
]


@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize("value, index", _FORMS)
def test_every_plan_form_gives_what_get_slice_gives(
    mixed: Path, backend: str, value: Any, index: Any
) -> None:
    names = [n.lower() for n in _DTYPES]
    with fastst.safe_open(mixed, "np", backend=backend) as f:
        with f.prefetch({n: value for n in names}) as loader:
            assert loader.names() == [n for n in f.offset_keys() if n in names]
            got = dict(loader)
        assert set(got) == set(names)
        for name in names:
            _same(got[name], f.get_slice(name)[index])
        if value is None:
            # a list of names is the whole of each
            with f.prefetch(names) as loader:
                for name in names:
                    _same(loader.take(name), f.get_tensor(name))


def test_torch_plans_match_get_slice_including_packed_fp4(mixed: Path) -> None:
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("torch without float4_e2m1fn_x2")
    names = ["f32", "bf16", "f4", "i8"]
    with fastst.safe_open(mixed, "pt") as f:
        with f.prefetch({n: slice(1, 5) for n in names}) as loader:
            for name in names:
                got, want = loader.take(name), f.get_slice(name)[1:5]
                assert got.dtype == want.dtype and got.shape == want.shape
                assert got.view(torch.uint8).tolist() == want.view(torch.uint8).tolist()


def test_plan_without_any_entry_reads_the_whole_file(mixed: Path) -> None:
    with fastst.safe_open(mixed, "np") as f:
        with f.prefetch() as loader:
            assert loader.names() == f.offset_keys() and len(loader) == len(f)
            got = dict(loader)
        for name in f.keys():
            _same(got[name], f.get_tensor(name))


@pytest.mark.parametrize(
    "plan, text",
    [
        ({"f32": slice(0, 7)}, "out of range"),
        ({"f32": slice(-7, 2)}, "out of range"),
        ({"f32": slice(4, 2)}, "out of range"),
        ({"f32": slice(0, 3, 2)}, "step 1"),
        ({"f32": slice(0, 3, 0)}, "invalid prefetch plan slice"),
        ({"scalar": slice(0, 1)}, "0-d"),
        ({"f32": 3}, "None or a slice"),
        ({}, "selects no tensors"),
        ([], "selects no tensors"),
        ("all", "dict or a list"),
    ],
)
def test_bad_plans_are_refused_before_any_read(mixed: Path, plan: Any, text: str) -> None:
    with fastst.safe_open(mixed, "np") as f:
        with pytest.raises(fastst.SafetensorError, match=text) as info:
            f.prefetch(plan)
    assert info.value.rule == "plan-invalid"
    assert info.value.filename == str(mixed)


def test_a_missing_tensor_names_the_file_and_tensor(mixed: Path) -> None:
    with fastst.safe_open(mixed, "np") as f:
        for call in (lambda: f.prefetch({"nope": None}), lambda: f.get_tensor_meta("nope")):
            with pytest.raises(fastst.TensorNotFoundError, match="does not contain") as info:
                call()
            assert info.value.rule == "tensor-not-found" and info.value.tensor == "nope"
            assert str(mixed) in str(info.value)


def test_get_tensor_meta_is_the_header_entry(mixed: Path) -> None:
    with fastst.safe_open(mixed, "np") as f:
        meta = f.get_tensor_meta("bf16")
        dtype, shape, begin, end = f._raw.info("bf16")
    assert isinstance(meta, fastst.TensorMeta)
    assert (meta.dtype, meta.shape, meta.data_offsets) == (dtype, list(shape), (begin, end))
    assert meta.shape == [6, 8] and end - begin == 96


def test_each_tensor_is_handed_out_once(mixed: Path) -> None:
    with fastst.safe_open(mixed, "np") as f:
        with f.prefetch({"f32": None, "i8": None}) as loader:
            loader.take("f32")
            for name in ("f32", "bf16"):
                with pytest.raises(fastst.SafetensorError) as info:
                    loader.take(name)
                assert info.value.rule == "loader-take" and info.value.tensor == name
            assert [name for name, _ in loader] == ["i8"]
            assert list(loader) == []
        with pytest.raises(fastst.ClosedFileError, match="closed"):
            loader.take("i8")


def test_take_after_close_raises(mixed: Path) -> None:
    with fastst.safe_open(mixed, "np") as f:
        loader = f.prefetch()
        loader.close()
        with pytest.raises(fastst.ClosedFileError):
            loader.take("f32")
        with pytest.raises(fastst.ClosedFileError):
            list(loader)


def _big(tmp_path: Path, count: int, nbytes: int) -> Path:
    path = tmp_path / "big.safetensors"
    tensors = {f"t{i:02d}": ("U8", (nbytes,), bytes([i]) * nbytes) for i in range(count)}
    path.write_bytes(raw_file(tensors))
    return path


def test_close_with_tensors_in_flight_does_not_hang(tmp_path: Path) -> None:
    path = _big(tmp_path, 16, 1 << 20)
    with fastst.safe_open(path, "np") as f:
        loader = f.prefetch(budget=2 << 20, threads=4)
        assert loader.take("t00")[0] == 0
        stream = iter(loader)
        next(stream)
        loader.close()
        with pytest.raises(fastst.ClosedFileError):
            next(stream)
        for worker in loader._workers:
            worker.join(JOIN)
            assert not worker.is_alive()
    assert not loader._ready and not loader._held


def test_tensors_are_owned_writable_and_outlive_the_file(tmp_path: Path) -> None:
    path = _big(tmp_path, 4, 4096)
    with fastst.safe_open(path, "np") as f:
        with f.prefetch() as loader:
            got = dict(loader)
        again = f.get_tensor("t01")
    arrays = list(got.values())
    for i, array in enumerate(arrays):
        assert array.flags.writeable
        assert not any(np.shares_memory(array, other) for other in arrays[i + 1 :])
        array[:] = 200
    assert again[0] == 1  # the file and other loads are untouched
    with fastst.safe_open(path, "np") as f:
        assert f.get_tensor("t01")[0] == 1
    assert all((a == 200).all() for a in got.values())


def test_torch_tensors_are_owned(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    path = _big(tmp_path, 3, 4096)
    with fastst.safe_open(path, "pt") as f, f.prefetch(device="cpu") as loader:
        a = loader.take("t00")
        b = loader.take("t01")
    a += 1
    assert isinstance(a, torch.Tensor) and a.device.type == "cpu"
    assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
    assert int(a[0]) == 1 and int(b[0]) == 1
    os.remove(path)
    assert int(a.sum()) == 4096


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_a_file_truncated_under_a_running_loader_raises(tmp_path: Path, backend: str) -> None:
    size = 1 << 20
    path = _big(tmp_path, 8, size)
    with fastst.safe_open(path, "np", backend=backend, read_ahead=None) as f:
        with f.prefetch(budget=size, threads=1) as loader:
            first = loader.take("t00")
            data_start = f._raw.data_start
            with open(path, "r+b") as out:
                out.truncate(data_start + 3 * size)
            outcomes: Dict[str, str] = {}
            for name in loader.names()[1:]:
                try:
                    got = loader.take(name)
                except fastst.SafetensorError as exc:
                    outcomes[name] = exc.rule or "?"
                else:
                    # read before the truncation (at most the budget ahead): the right bytes
                    assert (got == int(name[1:])).all()
                    outcomes[name] = "ok"
    assert (first == 0).all()
    assert all(outcomes[f"t{i:02d}"] == "file-changed" for i in range(4, 8)), outcomes


class _Probe:
    """What loaders' reads do: the entries of each read (``runs``), the
    tensors each hands out (``landed``, in order), and the bytes all
    loaders hold (admitted, not taken) after each answer of a read's
    ``land`` (``held``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs: List[List[str]] = []
        self.landed: List[str] = []
        self.held: List[int] = []
        read, land = fastst_safe_open._read_entries, _loader._Run.land
        probe = self

        def reading(self: Any, run: Any, device: Any, whole: int, to: Any) -> None:
            probe.runs.append([e.name for e in run])
            read(self, run, device, whole, to)

        def landing(self: Any, values: List[Any]) -> int:
            before = self._landed
            try:
                return land(self, values)
            finally:
                probe.landed += [e.name for e in self._entries[before : self._landed]]
                probe.held.append(_loader._SHARED.held)

        monkeypatch.setattr(fastst_safe_open, "_read_entries", reading)
        monkeypatch.setattr(_loader._Run, "land", landing)


def _drain_slowly(loader: Any) -> Dict[str, Any]:
    got = {}
    for name in loader.names():
        # let the readers run as far ahead as they are allowed
        deadline = time.monotonic() + 0.05
        while time.monotonic() < deadline:
            time.sleep(0.005)
        got[name] = loader.take(name)
    return got


# Tensors of 1 MiB: not small (runs of small tensors are read with one
# request, which may end past a load's bound).
MIB = 1 << 20


def test_the_budget_bounds_bytes_landed_and_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _big(tmp_path, 16, MIB)
    probe = _Probe(monkeypatch)
    with fastst.safe_open(path, "np") as f, f.prefetch(budget=3 * MIB, threads=4) as loader:
        got = _drain_slowly(loader)
    assert sorted(probe.landed) == loader.names(), "every tensor read once"
    assert max(probe.held) <= 3 * MIB, probe.held
    assert all((got[f"t{i:02d}"] == i).all() for i in range(16))


def test_the_budget_is_shared_by_every_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _big(tmp_path, 8, MIB)
    monkeypatch.setenv("FASTST_PREFETCH_BUDGET", str(4 * MIB))
    probe = _Probe(monkeypatch)
    with fastst.safe_open(path, "np") as f:
        with f.prefetch(threads=4) as one, f.prefetch(threads=4) as two:
            a = _drain_slowly(one)
            b = _drain_slowly(two)
    # the two loaders together: the budget, plus the one tensor a waiting
    # consumer has read beyond it (the other loader's untaken tensors fill it)
    assert len(probe.landed) == 16 and max(probe.held) <= 5 * MIB, probe.held
    assert a.keys() == b.keys() and len(a) == 8


def test_threads_are_capped_across_loaders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _big(tmp_path, 12, 4096)
    monkeypatch.setenv("FASTST_PREFETCH_THREADS", "2")
    lock = threading.Lock()
    running = [0, 0]  # now, most
    original = fastst_safe_open._read_entries

    def read(self: Any, run: Any, device: Any, whole: int, land: Any) -> None:
        with lock:
            running[0] += 1
            running[1] = max(running)
        try:
            time.sleep(0.01)  # hold the slot, so that readers overlap if allowed
            original(self, run, device, whole, land)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(fastst_safe_open, "_read_entries", read)
    with fastst.safe_open(path, "np") as f:
        loaders = [f.prefetch(threads=8) for _ in range(3)]
        results = [dict(loader) for loader in loaders]
        for loader in loaders:
            assert len(loader._workers) <= 2
            loader.close()
    assert running[1] <= 2
    assert all(len(r) == 12 for r in results)


def test_bad_threads_and_budget_are_refused(mixed: Path) -> None:
    with fastst.safe_open(mixed, "np") as f:
        for kwargs in ({"threads": 0}, {"budget": 0}):
            with pytest.raises(ValueError):
                f.prefetch(**kwargs)


def test_ctrl_c_during_a_take_leaves_the_tensor_to_take_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import _thread
    import signal

    path = _big(tmp_path, 2, 4096)
    release = threading.Event()
    original = fastst_safe_open._read_entries

    def read(self: Any, run: Any, device: Any, whole: int, land: Any) -> None:
        release.wait(JOIN)
        original(self, run, device, whole, land)

    monkeypatch.setattr(fastst_safe_open, "_read_entries", read)
    # interrupt_main does nothing while SIGINT is ignored, as it may be in a
    # test worker: Python's own handler for the test's length.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.2, _thread.interrupt_main)
    try:
        with fastst.safe_open(path, "np") as f, f.prefetch() as loader:
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                loader.take("t01")
            release.set()
            assert (loader.take("t01") == 1).all()
            assert [name for name, _ in loader] == ["t00"]
    finally:
        release.set()
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGINT, previous)


def test_a_loader_dropped_without_close_gives_its_budget_back(tmp_path: Path) -> None:
    import gc

    path = _big(tmp_path, 8, 64 << 10)
    with fastst.safe_open(path, "np") as f:
        loader = f.prefetch(budget=2 * (64 << 10), threads=2)
        first = loader.take("t00")
        workers = loader._workers
        del loader
        gc.collect()
        for worker in workers:
            worker.join(JOIN)
            assert not worker.is_alive()
    assert (first == 0).all()
    assert _loader._SHARED.held == 0 and _loader._SHARED.readers == 0


@pytest.mark.parametrize("budget", [None, 3 * MIB])
def test_whole_tensors_are_read_as_one_load_each_once_within_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: Any
) -> None:
    path = _big(tmp_path, 12, MIB)
    probe = _Probe(monkeypatch)
    with fastst.safe_open(path, "np") as f, f.prefetch(budget=budget, threads=4) as loader:
        got = _drain_slowly(loader) if budget else dict(loader)
        names = loader.names()
    # one streaming load (taken in order, nothing gives way), each tensor
    # once; under the budget, handed out while the load reads the rest
    assert probe.runs == [names]
    assert probe.landed == names
    assert all((got[f"t{i:02d}"] == i).all() for i in range(12))
    if budget:
        assert max(probe.held) <= budget, probe.held


def _within(work: Any) -> Any:
    """What ``work()`` returns, run on a thread that must end within
    :data:`JOIN` (a hang fails the test instead of stalling the run)."""
    done: List[Any] = []
    thread = threading.Thread(target=lambda: done.append(work()), daemon=True)
    thread.start()
    thread.join(JOIN)
    assert done, "hung"
    return done[0]


def test_a_take_the_budget_keeps_from_the_load_goes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Taken last to first under a budget of two tensors: each take waits
    # for a tensor the running load has not admitted, and the load gives way.
    path = _big(tmp_path, 8, MIB)
    probe = _Probe(monkeypatch)
    with fastst.safe_open(path, "np", read_ahead=None) as f:
        with f.prefetch(budget=2 * MIB, threads=2) as loader:
            names = loader.names()
            got = _within(lambda: {name: loader.take(name) for name in reversed(names)})
    assert all((got[f"t{i:02d}"] == i).all() for i in range(8))
    assert max(probe.held) <= 3 * MIB, probe.held  # the budget and one wanted tensor
    assert sorted(set(probe.landed)) == names
    for worker in loader._workers:
        worker.join(JOIN)
    assert _loader._SHARED.held == 0 and _loader._SHARED.readers == 0


def test_a_tensor_taken_and_dropped_is_freed_while_its_load_goes_on(tmp_path: Path) -> None:
    import gc
    import weakref

    path = _big(tmp_path, 8, MIB)
    with fastst.safe_open(path, "np") as f, f.prefetch(budget=2 * MIB) as loader:
        first = loader.take("t00")
        while first.base is not None:  # the memory's owner
            first = first.base
        owner = weakref.ref(first)
        del first
        gc.collect()
        freed = owner() is None
        left = [name for name in loader.names() if name not in loader._ready]
        rest = dict(loader)
    assert freed, "the load still holds the tensor's memory"
    assert len(left) >= 5 and sorted(rest) == loader.names()[1:]


def test_a_tensor_that_fails_to_land_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _big(tmp_path, 6, MIB)
    finish = fastst_safe_open._finish

    def failing(self: Any, name: str, made: Any, device: Any = None) -> Any:
        if name == "t02":
            raise RuntimeError("cannot place t02")
        return finish(self, name, made, device)

    monkeypatch.setattr(fastst_safe_open, "_finish", failing)
    with fastst.safe_open(path, "np") as f, f.prefetch() as loader:
        with pytest.raises(RuntimeError, match="t02"):
            loader.take("t02")
        got = dict(loader)
    assert sorted(got) == ["t00", "t01", "t03", "t04", "t05"]
    assert all((got[name] == int(name[1:])).all() for name in got)


def test_a_load_waiting_on_the_budget_is_not_a_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One reader in the process: a loader whose load waits for its consumer
    # leaves it to another loader.
    monkeypatch.setenv("FASTST_PREFETCH_THREADS", "1")
    path = _big(tmp_path, 6, MIB)
    with fastst.safe_open(path, "np") as f:
        with f.prefetch(budget=MIB) as one, f.prefetch(budget=MIB) as two:
            assert (one.take("t00") == 0).all()
            got = _within(lambda: dict(two))
            rest = dict(one)
    assert sorted(got) == two.names() and sorted(rest) == one.names()[1:]


def test_a_plan_ends_the_read_ahead_guessed_from_slices(tmp_path: Path) -> None:
    path = _big(tmp_path, 4, 64 << 10)
    with fastst.safe_open(path, "np") as f:
        shapes = {name: f.get_slice(name).get_shape() for name in f.keys()}
        # every tensor sliced: "auto" mode reads the whole file ahead
        assert f.read_ahead_status() is not None
        with f.prefetch({name: slice(0, n[0] // 4) for name, n in shapes.items()}) as loader:
            assert f.read_ahead_status() is None
            got = dict(loader)
    assert all(len(a) == (64 << 10) // 4 for a in got.values())


def _read_bytes() -> int:
    with open("/proc/self/io") as fh:
        return int(next(line for line in fh if line.startswith("read_bytes")).split()[1])


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="Linux I/O accounting")
def test_a_cold_plan_slice_reads_only_its_bytes_from_the_disk(tmp_path: Path) -> None:
    rows, row = 64, 64 << 10
    path = tmp_path / "rows.safetensors"
    path.write_bytes(raw_file({"w": ("U8", (rows, row), _patterned(rows * row, 3))}))
    with fastst.safe_open(path, "np") as f:
        want = f.get_slice("w")[0:16].copy()
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        before = _read_bytes()
        with f.prefetch({"w": slice(0, 16)}) as loader:
            got = loader.take("w")
        read = _read_bytes() - before
    _same(got, want)
    planned = 16 * row
    if read < planned:
        pytest.skip("this file system keeps the file cached, or does not count reads")
    # whole disk blocks at either end at most, not the kernel's read-ahead
    # (the rows follow the header just read: a buffered read looks
    # sequential and would bring in the rest of the tensor)
    assert read <= planned + 8192, read


def test_loads_make_the_huge_page_choice_for_the_whole_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastst._read import safe_open as safe_open_module

    size = 64 << 10
    path = _big(tmp_path, 12, size)
    jobs: List[int] = []
    original = safe_open_module.load_into

    def load_into(*args: Any, job: int = 0, **kwargs: Any) -> Any:
        jobs.append(job)
        return original(*args, job=job, **kwargs)

    monkeypatch.setattr(safe_open_module, "load_into", load_into)
    plan: Dict[str, Any] = {f"t{i:02d}": None for i in range(12)}
    plan["t05"] = slice(0, 16)  # a slice: read alone, not part of the job
    with fastst.safe_open(path, "np") as f, f.prefetch(plan) as loader:
        got = dict(loader)
    assert len(got) == 12 and jobs and set(jobs) == {11 * size}
    with fastst.safe_open(path, "np") as f:
        jobs.clear()
        f.get_tensors(copy=True)
    assert jobs == [0]  # a load of its own
