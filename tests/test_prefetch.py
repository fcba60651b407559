"""The read-ahead of zero-copy loads: what is declared is read (and only
that), within the budget, stopping on close, surviving a truncated file,
doing nothing harmful on tmpfs, and changing no byte of what is loaded.

Residency is observed with ``mincore`` (through ctypes) after evicting the
file with ``posix_fadvise(POSIX_FADV_DONTNEED)``; no assertion depends on
timing (the prefetcher is waited for with ``wait_idle``, whose timeout only
guards against a hang)."""

from __future__ import annotations

import ctypes
import gc
import itertools
import mmap
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import fastst
import fastst.numpy
import numpy as np
import pytest
from conftest import raw_file
from fastst import _prefetch

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="mincore and fadvise are Linux's")

PAGE = mmap.PAGESIZE
MIB = 1 << 20
WAIT = 120.0  # seconds; only a guard against a hang


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return libc


def residency(path: Path) -> np.ndarray:
    """One bool per page of ``path``: in the page cache or not."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_COPY)
    try:
        anchor = ctypes.c_char.from_buffer(mm)
        pages = (size + PAGE - 1) // PAGE
        vec = ctypes.create_string_buffer(pages)
        if _libc().mincore(ctypes.addressof(anchor), size, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        del anchor
        return np.frombuffer(vec.raw, dtype=np.uint8)[:pages] & 1 == 1
    finally:
        mm.close()


def evict(path: Path) -> None:
    """Drops ``path``'s pages from the page cache; skips the test where the
    filesystem keeps them (tmpfs: nothing there can be observed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if residency(path).mean() > 0.05:
        pytest.skip(f"the filesystem of {path.parent} keeps pages cached (tmpfs?)")


def three_tensors(tmp_path: Path, mib: int = 4) -> Tuple[Path, Dict[str, np.ndarray]]:
    """A file of three F32 tensors of ``mib`` MiB each, a, b, c in file order."""
    rng = np.random.default_rng(7)
    n = mib * MIB // 4
    arrays = {name: rng.standard_normal(n).astype(np.float32) for name in "abc"}
    path = tmp_path / "three.safetensors"
    path.write_bytes(raw_file({k: ("F32", v.shape, v.tobytes()) for k, v in arrays.items()}))
    return path, arrays


def pages_of(path: Path, name: str) -> slice:
    """The pages lying wholly inside tensor ``name``."""
    with fastst.safe_open(path, "np", prefetch=None) as f:
        start = f._raw.data_start
        _dtype, _shape, begin, end = f._raw.info(name)
    return slice(-(-(start + begin) // PAGE), (start + end) // PAGE)


def job_of(f: fastst.safe_open) -> Any:
    assert f._prefetch is not None and f._prefetch._job is not None
    return f._prefetch._job


# planning ---------------------------------------------------------------


def _touched_bytes(shape: Tuple[int, ...], itemsize: int, index: Any) -> set:
    positions = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)[index]
    return {int(p) * itemsize + k for p in np.ravel(positions) for k in range(itemsize)}


@pytest.mark.parametrize(
    "shape,index",
    [
        ((6, 5), (slice(1, 4), ...)),
        ((6, 5), (slice(None), slice(1, 3))),
        ((6, 5), (2,)),
        ((6, 5), (-1, slice(None, None, 2))),
        ((4, 3, 5), (slice(None, None, -2), 1)),
        ((4, 3, 5), (Ellipsis, slice(2, 4))),
        ((4, 3, 5), (None, 1, None, slice(0, 2), 4)),
        ((4, 3, 5), (slice(1, 3), slice(None), slice(None))),
        ((4, 3, 5), slice(10, 20)),
        ((7,), slice(2, 2)),
        ((7,), []),
        ((2, 3), Ellipsis),
    ],
)
def test_slice_ranges_cover_exactly_the_bytes_the_index_reads(shape, index) -> None:
    got = _prefetch.slice_ranges("F32", shape, 4 * int(np.prod(shape)), index)
    covered = set(itertools.chain.from_iterable(range(o, o + n) for o, n in got))
    assert covered == _touched_bytes(shape, 4, index)
    assert got == sorted(got)
    for (o1, n1), (o2, _) in zip(got, got[1:], strict=False):
        assert o1 + n1 < o2  # merged: no two ranges touch


def test_slice_ranges_stay_few_for_a_scattered_index() -> None:
    shape = (300, 300, 2)
    got = _prefetch.slice_ranges("F32", shape, 4 * 300 * 300 * 2, (slice(None), slice(None), 0))
    # 90,000 scattered pieces are read as the one span covering them.
    assert got == [(0, 4 * (300 * 300 * 2 - 1))]


def test_slice_ranges_refuse_what_indexing_refuses() -> None:
    with pytest.raises(IndexError):
        _prefetch.slice_ranges("F32", (3, 4), 48, (0, 0, 0))
    with pytest.raises(IndexError):
        _prefetch.slice_ranges("F32", (3, 4), 48, (5,))
    with pytest.raises(TypeError):
        _prefetch.slice_ranges("F32", (3, 4), 48, ([0, 1],))


def test_parse_size() -> None:
    assert _prefetch.parse_size("4096") == 4096
    assert _prefetch.parse_size("512M") == 512 * MIB
    assert _prefetch.parse_size("1.5g") == 3 << 29
    assert _prefetch.parse_size("2KiB") == 2048
    for bad in ("", "lots", "-1M", "nanG"):
        with pytest.raises(ValueError):
            _prefetch.parse_size(bad)


def test_plan_of_names_slices_and_all(tmp_path: Path) -> None:
    path, arrays = three_tensors(tmp_path, mib=1)
    with fastst.safe_open(path, "np", prefetch=None) as f:
        start = f._raw.data_start
        size = 1 * MIB
        assert _prefetch.plan(f._raw, ["c", "a"]) == [(start + 2 * size, size), (start, size)]
        rows = _prefetch.plan(f._raw, {"b": slice(10, 20)})
        assert rows == [(start + size + 40, 40)]
        (whole,) = _prefetch.plan(f._raw, "all")
        assert whole[0] == start and whole[0] + whole[1] >= path.stat().st_size
        with pytest.raises(fastst.SafetensorError, match="nope"):
            _prefetch.plan(f._raw, ["nope"])
        for bad in ("some", False, None, b"all"):
            with pytest.raises(ValueError):
                _prefetch.plan(f._raw, bad)


# what is read -----------------------------------------------------------


def test_declared_tensors_become_resident_and_the_others_do_not(tmp_path: Path) -> None:
    path, _ = three_tensors(tmp_path)
    evict(path)
    with fastst.safe_open(path, "np", prefetch=["a", "c"]) as f:
        status = job_of(f).wait_idle(WAIT)
        assert status["done"] == status["planned"] == 8 * MIB and not status["failed"]
        cached = residency(path)
        assert cached[pages_of(path, "a")].all()
        assert cached[pages_of(path, "c")].all()
        assert not cached[pages_of(path, "b")].any()


def test_a_declared_slice_reads_only_its_rows(tmp_path: Path) -> None:
    path, arrays = three_tensors(tmp_path)
    evict(path)
    rows = MIB // 4  # the first MiB of b, as a (1M x 1) block of rows
    with fastst.safe_open(path, "np", prefetch=None) as f:
        f.prefetch({"b": slice(0, rows)})
        job_of(f).wait_idle(WAIT)
        cached = residency(path)
        b = pages_of(path, "b")
        first_mib = slice(b.start, b.start + MIB // PAGE)
        assert cached[first_mib].all()
        assert not cached[first_mib.stop + 1 : b.stop].any()
        # (opening the file reads its header, and the kernel may read a little
        # past it: a's first MiB is left out)
        a = pages_of(path, "a")
        assert not cached[a.start + MIB // PAGE : a.stop].any()
        assert not cached[pages_of(path, "c")].any()
        assert np.array_equal(f.get_slice("b")[:rows], arrays["b"][:rows])


def test_the_budget_bounds_what_is_read_ahead_of_the_consumer(tmp_path: Path) -> None:
    path, arrays = three_tensors(tmp_path)
    evict(path)
    budget = 1 * MIB
    with fastst.safe_open(path, "np", prefetch="all", prefetch_budget=budget) as f:
        job = job_of(f)
        status = job.wait_idle(WAIT)
        assert 0 < status["issued"] <= budget and status["budget"] == budget
        assert residency(path).sum() * PAGE <= budget + 2 * PAGE
        # A copy counts as taken: the prefetcher may go that much further.
        a = f.get_tensor("a", copy=True)
        status = job.wait_idle(WAIT)
        assert status["consumed"] == 4 * MIB
        assert 4 * MIB < status["issued"] <= 4 * MIB + budget
        # (the copy's own reads may make the kernel read ahead of them: the
        # page cache no longer tells what the prefetcher did)
        assert np.array_equal(a, arrays["a"])


def test_pages_already_cached_start_no_reader(tmp_path: Path) -> None:
    path, _ = three_tensors(tmp_path, mib=1)
    path.read_bytes()
    with fastst.safe_open(path, "np", prefetch="all") as f:
        status = job_of(f).status()
        assert status["workers"] == 0 and status["resident"] == status["planned"] > 0


def test_close_stops_the_reader(tmp_path: Path) -> None:
    path, _ = three_tensors(tmp_path)
    evict(path)
    f = fastst.safe_open(path, "np", prefetch="all", prefetch_budget=MIB)
    job = job_of(f)
    job.wait_idle(WAIT)
    f.close()
    status = job.wait_idle(WAIT)
    assert status["stopped"] and status["workers"] == 0
    assert f.prefetch_status() is None
    with pytest.raises(fastst.SafetensorError):
        f.prefetch("all")


@pytest.mark.parametrize("backend, method", [("mmap", "populate"), ("pread", "read")])
def test_a_file_truncated_underneath_stops_the_reader_without_a_crash(
    tmp_path: Path, backend: str, method: str
) -> None:
    path, _ = three_tensors(tmp_path)
    evict(path)
    with fastst.safe_open(path, "np", backend=backend, prefetch="all", prefetch_budget=MIB) as f:
        job = job_of(f)
        assert job.method == method
        job.wait_idle(WAIT)
        os.truncate(path, 4096)
        job.consumed(1 << 40)
        status = job.wait_idle(WAIT)
        assert status["workers"] == 0
        assert status["failed"] and status["stopped"]
        with pytest.raises(fastst.SafetensorError, match="changed"):
            f.get_tensor("b")


def test_tmpfs_is_served_without_error(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.skip("no writable /dev/shm")
    src, arrays = three_tensors(tmp_path, mib=1)
    path = shm / f"fastst-prefetch-{os.getpid()}.safetensors"
    path.write_bytes(src.read_bytes())
    try:
        with fastst.safe_open(path, "np", prefetch="all") as f:
            status = job_of(f).wait_idle(WAIT)
            assert status["workers"] == 0 and not status["failed"]
            for name, want in arrays.items():
                assert np.array_equal(f.get_tensor(name), want)
    finally:
        path.unlink()


# what is loaded ---------------------------------------------------------


def test_loads_are_bit_identical_with_and_without_prefetch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, arrays = three_tensors(tmp_path)
    for setting in ("1", "0"):
        monkeypatch.setenv("FASTST_PREFETCH", setting)
        evict(path)
        loaded = fastst.numpy.load_file(path)
        assert list(loaded) == ["a", "b", "c"]
        for name, want in arrays.items():
            assert loaded[name].tobytes() == want.tobytes()
        del loaded  # mapped pages cannot be evicted
    evict(path)
    with fastst.safe_open(path, "np", prefetch={"c": (slice(5, 9),), "a": ...}) as f:
        job_of(f).wait_idle(WAIT)
        assert np.array_equal(f.get_slice("c")[5:9], arrays["c"][5:9])
        assert np.array_equal(f.get_tensor("a"), arrays["a"])


def test_load_file_reads_ahead_and_keeps_reading_after_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, arrays = three_tensors(tmp_path)
    evict(path)
    jobs: List[Any] = []
    detach = _prefetch.Driver.detach

    def spy(self: _prefetch.Driver) -> None:
        jobs.append(self._job)
        detach(self)

    monkeypatch.setattr(_prefetch.Driver, "detach", spy)
    loaded = fastst.numpy.load_file(path)
    (job,) = jobs
    # The file is closed by now; the reader goes on to the end of the plan.
    status = job.wait_idle(WAIT)
    assert status["done"] == status["planned"] == 12 * MIB and status["workers"] == 0
    assert not status["stopped"]
    assert residency(path)[pages_of(path, "a").start :].all()
    assert all(np.array_equal(loaded[k], v) for k, v in arrays.items())


def test_load_files_read_ahead_outlives_every_handle(tmp_path: Path) -> None:
    path, arrays = three_tensors(tmp_path)
    evict(path)
    loaded = fastst.numpy.load_file(path)  # nothing else holds the reader
    gc.collect()
    data = slice(pages_of(path, "a").start, pages_of(path, "c").stop)
    deadline = time.monotonic() + WAIT  # only a guard against a hang
    while not residency(path)[data].all() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert residency(path)[data].all()
    assert all(np.array_equal(loaded[k], v) for k, v in arrays.items())


def test_load_file_reads_no_more_than_its_budget_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = three_tensors(tmp_path)
    evict(path)
    monkeypatch.setenv("FASTST_PREFETCH_BUDGET", "2M")
    jobs: List[Any] = []
    detach = _prefetch.Driver.detach
    monkeypatch.setattr(_prefetch.Driver, "detach", lambda d: (jobs.append(d._job), detach(d)))
    loaded = fastst.numpy.load_file(path)
    status = jobs[0].wait_idle(WAIT)
    # Views count as taken only when touched, which the reader cannot see:
    # it stops at the budget.
    assert status["issued"] <= 2 * MIB and status["workers"] == 0
    assert not residency(path)[pages_of(path, "c")].any()
    del loaded


def test_auto_mode_starts_once_every_tensor_was_sliced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = three_tensors(tmp_path, mib=1)
    with fastst.safe_open(path, "np") as f:
        f.get_slice("a")
        f.get_slice("b")
        f.get_slice("a")
        assert f.prefetch_status() is None
        f.get_slice("c")
        status = f.prefetch_status()
        assert status is not None and status["planned"] == 3 * MIB
    monkeypatch.setenv("FASTST_PREFETCH", "0")
    with fastst.safe_open(path, "np") as f:
        for name in f.keys():
            f.get_slice(name)
        assert f.prefetch_status() is None


def test_bad_declarations_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = three_tensors(tmp_path, mib=1)
    with pytest.raises(ValueError, match="prefetch"):
        fastst.safe_open(path, "np", prefetch="everything")
    with fastst.safe_open(path, "np") as f:
        with pytest.raises(ValueError, match="budget"):
            f.prefetch("all", budget=0)
        with pytest.raises(fastst.SafetensorError):
            f.prefetch(["missing"])
        monkeypatch.setenv("FASTST_PREFETCH_BUDGET", "lots")
        with pytest.raises(ValueError, match="FASTST_PREFETCH_BUDGET"):
            f.prefetch("all")


# the one whole-file mapping ---------------------------------------------


def test_tensors_sharing_a_page_stay_independent(tmp_path: Path) -> None:
    # Sizes not multiples of a page: a's last page is b's first.
    a = np.arange(70_001, dtype=np.float32)
    b = -np.arange(90_003, dtype=np.float32)
    path = tmp_path / "odd.safetensors"
    path.write_bytes(
        raw_file({"a": ("F32", a.shape, a.tobytes()), "b": ("F32", b.shape, b.tobytes())})
    )
    before = path.read_bytes()
    with fastst.safe_open(path, "np") as f:
        ta, tb = f.get_tensor("a"), f.get_tensor("b")
        again = f.get_tensor("a")
        assert f._raw.tensor("a")[0].mapped
    ta[-1] = 1e9
    tb[0] = -1e9
    assert again[-1] == a[-1] and ta[0] == a[0] and tb[-1] == b[-1]
    again[:] = 5
    assert np.array_equal(ta[:-1], a[:-1])
    del ta
    # b survives a's release, including the page they shared.
    assert tb[0] == -1e9 and np.array_equal(tb[1:], b[1:])
    assert path.read_bytes() == before
