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
from fastst._dtypes import NUMPY_DTYPES, PACKED_BITS
from fastst._read import read_ahead as _read_ahead
from helpers.raw_files import raw_file
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

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
    with fastst.safe_open(path, "np", read_ahead=None) as f:
        start = f._raw.data_start
        _dtype, _shape, begin, end = f._raw.info(name)
    return slice(-(-(start + begin) // PAGE), (start + end) // PAGE)


def job_of(f: fastst.safe_open) -> Any:
    assert f._read_ahead is not None and f._read_ahead._job is not None
    return f._read_ahead._job


# planning ---------------------------------------------------------------


def _touched_bytes(shape: Tuple[int, ...], itemsize: int, index: Any) -> set:
    positions = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)[index]
    return {int(p) * itemsize + k for p in np.ravel(positions) for k in range(itemsize)}


def _packed_bytes(shape: Tuple[int, ...], bits: int, index: Any) -> set:
    """The bytes get_slice reads for ``index`` of a packed tensor: the whole
    rows (innermost dimension) holding a selected element, or the whole
    tensor when rows end inside a byte; nothing when nothing is selected."""
    rows = int(np.prod(shape[:-1]))
    row_of = np.broadcast_to(np.arange(rows).reshape(shape[:-1] + (1,)), shape)[index]
    if row_of.size == 0:
        return set()
    if shape[-1] * bits % 8:
        return set(range(int(np.prod(shape)) * bits // 8))
    width = shape[-1] * bits // 8
    return {int(r) * width + k for r in np.unique(row_of) for k in range(width)}


def _covered(ranges: List[Tuple[int, int]]) -> set:
    return set(itertools.chain.from_iterable(range(o, o + n) for o, n in ranges))


def _assert_joined(ranges: List[Tuple[int, int]]) -> None:
    """Ascending, none empty, no two touching (touching ones are one range)."""
    assert all(n > 0 for _, n in ranges)
    for (o1, n1), (o2, _) in zip(ranges, ranges[1:], strict=False):
        assert o1 + n1 < o2


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
        ((4, 3, 5), (np.int64(2), slice(0, 1, 7))),
        ((3, 1), (slice(None), slice(0, 1, 5))),
        ((7,), slice(2, 2)),
        ((7,), []),
        ((2, 3), Ellipsis),
        ((), ()),
        ((), None),
    ],
)
def test_slice_ranges_cover_exactly_the_bytes_the_index_reads(shape, index) -> None:
    got = _read_ahead.slice_ranges("F32", shape, 4 * int(np.prod(shape)), index)
    assert _covered(got) == _touched_bytes(shape, 4, index)
    _assert_joined(got)


# One tensor's shape and a basic index numpy takes on it (ints, slices of
# any step, ..., None), drawn by hypothesis's own generator of basic indexes.
_SHAPES = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6)
_INDEXED = _SHAPES.flatmap(
    lambda shape: st.tuples(
        st.just(shape),
        hnp.basic_indices(shape, min_dims=0, allow_newaxis=True, allow_ellipsis=True),
    )
)


@pytest.mark.slow  # 600 examples
@given(case=_INDEXED, dtype=st.sampled_from(["F32", "BF16", "F4", "F6_E2M3"]))
@settings(max_examples=600, deadline=None)
def test_the_cores_ranges_are_the_selected_bytes(case: Tuple[Any, Any], dtype: str) -> None:
    """Differential: the ranges planned for any basic index cover exactly
    the bytes of the elements numpy selects with it (packed dtypes: the rows
    holding them, as get_slice reads them)."""
    shape, index = case
    bits = PACKED_BITS.get(dtype, 0)
    if bits:
        # Only shapes a file can hold: whole bytes.
        assume(shape and int(np.prod(shape)) * bits % 8 == 0)
        want = _packed_bytes(shape, bits, index)
        nbytes = int(np.prod(shape)) * bits // 8
    else:
        itemsize = NUMPY_DTYPES[dtype].itemsize
        want = _touched_bytes(shape, itemsize, index)
        nbytes = int(np.prod(shape)) * itemsize
    got = _read_ahead.slice_ranges(dtype, shape, nbytes, index)
    assert _covered(got) == want
    if not bits or shape[-1] * bits % 8 == 0:
        _assert_joined(got)


def test_slice_ranges_stay_few_for_a_scattered_index(monkeypatch: pytest.MonkeyPatch) -> None:
    shape = (300, 300, 2)
    got = _read_ahead.slice_ranges("F32", shape, 4 * 300 * 300 * 2, (slice(None), slice(None), 0))
    # 90,000 scattered pieces are read as the one span covering them.
    assert got == [(0, 4 * (300 * 300 * 2 - 1))]
    # The cap counts ranges: at it, each is listed; above it, the span.
    index = (slice(1, 5), slice(2, 4), 1)
    monkeypatch.setattr(_read_ahead, "_MAX_RANGES", 8)
    listed = _read_ahead.slice_ranges("F32", shape, 4 * 300 * 300 * 2, index)
    assert len(listed) == 8 and _covered(listed) == _touched_bytes(shape, 4, index)
    monkeypatch.setattr(_read_ahead, "_MAX_RANGES", 7)
    (span,) = _read_ahead.slice_ranges("F32", shape, 4 * 300 * 300 * 2, index)
    assert span == (listed[0][0], listed[-1][0] + listed[-1][1] - listed[0][0])


def test_packed_rows_are_read_whole() -> None:
    # F4, two per byte: rows of 6 are 3 bytes; rows of 3 end inside a byte.
    assert _read_ahead.slice_ranges("F4", (4, 6), 12, (slice(1, None, 2), 2)) == [(3, 3), (9, 3)]
    assert _read_ahead.slice_ranges("F4", (4, 6), 12, (..., slice(0, 0))) == []
    assert _read_ahead.slice_ranges("F4", (4, 3), 6, (1, 1)) == [(0, 6)]
    assert _read_ahead.slice_ranges("F6_E3M2", (2, 4), 6, (1,)) == [(3, 3)]


# What get_slice refuses (its error, word for word) and the index it is
# refused for.
_REFUSED = [
    (0, 0, 0),
    (5,),
    (-6, slice(None)),
    (slice(None), 4),
    (Ellipsis, 1, Ellipsis),
    (slice(None, None, 0),),
    ([0, 1],),
    (np.array([0, 1]),),
    True,
    1.5,
    "a",
]


@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize("index", _REFUSED)
def test_declared_slices_refuse_what_get_slice_refuses(
    tmp_path: Path, backend: str, index: Any
) -> None:
    path = tmp_path / "t.safetensors"
    path.write_bytes(raw_file({"t": ("F32", (5, 4), bytes(80))}))
    with fastst.safe_open(path, "np", backend=backend, read_ahead=None) as f:
        with pytest.raises(Exception) as sliced:
            f.get_slice("t")[index]
    with pytest.raises(Exception) as declared:
        fastst.safe_open(path, "np", backend=backend, read_ahead={"t": index})
    assert type(declared.value) is type(sliced.value)
    assert str(declared.value) == str(sliced.value)


def test_plan_of_names_slices_and_all(tmp_path: Path) -> None:
    path, arrays = three_tensors(tmp_path, mib=1)
    with fastst.safe_open(path, "np", read_ahead=None) as f:
        start = f._raw.data_start
        size = 1 * MIB
        assert _read_ahead.plan(f._raw, ["c", "a"]) == [(start + 2 * size, size), (start, size)]
        rows = _read_ahead.plan(f._raw, {"b": slice(10, 20)})
        assert rows == [(start + size + 40, 40)]
        (whole,) = _read_ahead.plan(f._raw, "all")
        assert whole[0] == start and whole[0] + whole[1] >= path.stat().st_size
        with pytest.raises(fastst.SafetensorError, match="nope"):
            _read_ahead.plan(f._raw, ["nope"])
        for bad in ("some", False, None, b"all"):
            with pytest.raises(ValueError):
                _read_ahead.plan(f._raw, bad)


# what is read -----------------------------------------------------------


def test_declared_tensors_become_resident_and_the_others_do_not(tmp_path: Path) -> None:
    path, _ = three_tensors(tmp_path)
    evict(path)
    with fastst.safe_open(path, "np", read_ahead=["a", "c"]) as f:
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
    with fastst.safe_open(path, "np", read_ahead={"b": slice(0, rows)}) as f:
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
    with fastst.safe_open(path, "np", read_ahead="all", read_ahead_budget=budget) as f:
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
    with fastst.safe_open(path, "np", read_ahead="all") as f:
        status = job_of(f).status()
        assert status["workers"] == 0 and status["resident"] == status["planned"] > 0


def test_close_stops_the_reader(tmp_path: Path) -> None:
    path, _ = three_tensors(tmp_path)
    evict(path)
    f = fastst.safe_open(path, "np", read_ahead="all", read_ahead_budget=MIB)
    job = job_of(f)
    job.wait_idle(WAIT)
    f.close()
    status = job.wait_idle(WAIT)
    assert status["stopped"] and status["workers"] == 0
    assert f.read_ahead_status() is None
    with pytest.raises(fastst.ClosedFileError):
        f.prefetch()


@pytest.mark.parametrize("backend, method", [("mmap", "populate"), ("pread", "read")])
def test_a_file_truncated_underneath_stops_the_reader_without_a_crash(
    tmp_path: Path, backend: str, method: str
) -> None:
    path, _ = three_tensors(tmp_path)
    evict(path)
    with fastst.safe_open(
        path, "np", backend=backend, read_ahead="all", read_ahead_budget=MIB
    ) as f:
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
        with fastst.safe_open(path, "np", read_ahead="all") as f:
            status = job_of(f).wait_idle(WAIT)
            assert status["workers"] == 0 and not status["failed"]
            for name, want in arrays.items():
                assert np.array_equal(f.get_tensor(name), want)
    finally:
        path.unlink()


# what is loaded ---------------------------------------------------------


def test_loads_are_bit_identical_with_and_without_read_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, arrays = three_tensors(tmp_path)
    for setting in ("1", "0"):
        monkeypatch.setenv("FASTST_READ_AHEAD", setting)
        evict(path)
        loaded = fastst.numpy.load_file(path)
        assert list(loaded) == ["a", "b", "c"]
        for name, want in arrays.items():
            assert loaded[name].tobytes() == want.tobytes()
        del loaded  # mapped pages cannot be evicted
    evict(path)
    with fastst.safe_open(path, "np", read_ahead={"c": (slice(5, 9),), "a": ...}) as f:
        job_of(f).wait_idle(WAIT)
        assert np.array_equal(f.get_slice("c")[5:9], arrays["c"][5:9])
        assert np.array_equal(f.get_tensor("a"), arrays["a"])


def test_load_file_reads_ahead_and_keeps_reading_after_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, arrays = three_tensors(tmp_path)
    evict(path)
    jobs: List[Any] = []
    detach = _read_ahead.Driver.detach

    def spy(self: _read_ahead.Driver) -> None:
        jobs.append(self._job)
        detach(self)

    monkeypatch.setattr(_read_ahead.Driver, "detach", spy)
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
    monkeypatch.setenv("FASTST_READ_AHEAD_BUDGET", "2M")
    jobs: List[Any] = []
    detach = _read_ahead.Driver.detach
    monkeypatch.setattr(_read_ahead.Driver, "detach", lambda d: (jobs.append(d._job), detach(d)))
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
        assert f.read_ahead_status() is None
        f.get_slice("c")
        status = f.read_ahead_status()
        assert status is not None and status["planned"] == 3 * MIB
    monkeypatch.setenv("FASTST_READ_AHEAD", "0")
    with fastst.safe_open(path, "np") as f:
        for name in f.keys():
            f.get_slice(name)
        assert f.read_ahead_status() is None


def test_bad_declarations_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = three_tensors(tmp_path, mib=1)
    with pytest.raises(ValueError, match="read_ahead"):
        fastst.safe_open(path, "np", read_ahead="everything")
    with pytest.raises(ValueError, match="budget"):
        fastst.safe_open(path, "np", read_ahead="all", read_ahead_budget=0)
    with pytest.raises(fastst.SafetensorError):
        fastst.safe_open(path, "np", read_ahead=["missing"])
    # one name per idea: the loader's names are not the read-ahead's
    for old in ({"prefetch": "all"}, {"prefetch_budget": MIB}):
        with pytest.raises(TypeError):
            fastst.safe_open(path, "np", **old)
    with fastst.safe_open(path, "np") as f:
        assert not hasattr(f, "prefetch_status")
    # one knob, one meaning: the loaders' budget is not the read-ahead's
    monkeypatch.setenv("FASTST_PREFETCH_BUDGET", "lots")
    with fastst.safe_open(path, "np", read_ahead="all") as f:
        assert f.read_ahead_status() is not None
    monkeypatch.setenv("FASTST_READ_AHEAD_BUDGET", "lots")
    with pytest.raises(ValueError, match="FASTST_READ_AHEAD_BUDGET"):
        fastst.safe_open(path, "np", read_ahead="all")


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
