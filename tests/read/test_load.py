"""Owned loads in one batch (``copy=True``, ``dtype=``, ``backend="pread"``):
every destination allocated first, then the core's ``load_into`` reads the
whole file. Results must be bit-identical to the zero-copy views, to the
one-tensor conversion path and to the reference package, for every dtype,
many tensors, empty and 0-d tensors and sizes that are no multiple of the
read size; progress callbacks, stopping a load, a file changed underneath
and direct-I/O fallbacks are checked too."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import fastst
import fastst.numpy
import ml_dtypes  # noqa: F401  (numpy dtypes for BF16 and the F8 kinds)
import numpy as np
import pytest
from fastst._fastst.read import load_into
from fastst._frameworks import OWNED_ALIGN, placement
from fastst._read.safe_open import _aligned_empty
from helpers.raw_files import raw_file

ITEM = {
    "BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2, "U32": 4,
    "I32": 4, "F32": 4, "C64": 8, "U64": 8, "I64": 8, "F64": 8, "F8_E4M3": 1,
    "F8_E5M2": 1, "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1, "F8_E8M0": 1,
}  # fmt: skip
SHAPES = [(), (0,), (3, 5), (1001,), (7, 0, 3), (65_537,)]
PACKED = ("F4", "F6_E2M3", "F6_E3M2")  # unpacked by numpy: compared as file bytes elsewhere


def _bytes(rng: np.random.Generator, dtype: str, n: int) -> bytes:
    if dtype == "BOOL":
        return rng.integers(0, 2, n, dtype=np.uint8).tobytes()
    return rng.integers(0, 256, n * ITEM[dtype], dtype=np.uint8).tobytes()


def sample(
    dtypes=ITEM, big: int = 0, packed: bool = True
) -> Tuple[bytes, Dict[str, Tuple[str, Tuple[int, ...]]]]:
    """A file with every dtype in several shapes, packed kinds, a run of
    tiny tensors and (``big`` bytes) one tensor spanning several reads."""
    rng = np.random.default_rng(12)
    tensors = {}
    for dtype in dtypes:
        for i, shape in enumerate(SHAPES):
            n = int(np.prod(shape))
            tensors[f"{dtype}.{i}"] = (dtype, shape, _bytes(rng, dtype, n))
    for i in range(300):
        tensors[f"tiny.{i}"] = ("F32", (i % 5,), _bytes(rng, "F32", i % 5))
    if big:
        tensors["big"] = ("U8", (big,), _bytes(rng, "U8", big))
    kinds = {"F4": (6, 10), "F6_E2M3": (4, 8), "F6_E3M2": (12,)} if packed else {}
    for dtype, shape in kinds.items():
        bits = 4 if dtype == "F4" else 6
        tensors[dtype] = (dtype, shape, _bytes(rng, "U8", int(np.prod(shape)) * bits // 8))
    return raw_file(tensors), {k: (v[0], tuple(v[1])) for k, v in tensors.items()}


def as_bytes(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).tobytes()


@pytest.fixture(scope="module")
def every_dtype(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("batch") / "all.safetensors"
    path.write_bytes(sample(big=(17 << 20) + 3)[0])
    return path


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_owned_numpy_loads_equal_the_views(every_dtype, backend):
    views = fastst.numpy.load_file(every_dtype)
    owned = fastst.numpy.load_file(every_dtype, copy=True, backend=backend)
    assert list(owned) == list(views)
    for name, array in owned.items():
        assert array.dtype == views[name].dtype and array.shape == views[name].shape, name
        assert as_bytes(array) == as_bytes(views[name]), name
        assert array.flags.writeable
    with fastst.safe_open(every_dtype, "np", backend=backend) as f:
        got = f.get_tensors(copy=True)
        for name in ("big", "F4", "BF16.3", "tiny.7", "U8.1"):
            assert as_bytes(f.get_tensor(name, copy=True)) == as_bytes(views[name])
    assert all(as_bytes(got[k]) == as_bytes(v) for k, v in views.items())


def test_owned_arrays_are_independent_of_each_other_and_the_file(every_dtype):
    before = every_dtype.read_bytes()
    a = fastst.numpy.load_file(every_dtype, copy=True)
    b = fastst.numpy.load_file(every_dtype, copy=True)
    a["big"][:] = 0
    a["U8.3"][...] = 7
    assert b["big"].any() and not a["big"].any()
    assert every_dtype.read_bytes() == before
    # Arrays stay valid once the file is gone.
    c = fastst.numpy.load_file(every_dtype, copy=True)
    expect = as_bytes(c["big"])
    os.unlink(every_dtype)
    try:
        assert as_bytes(c["big"]) == expect
    finally:
        every_dtype.write_bytes(before)


def test_owned_numpy_loads_equal_the_reference(tmp_path):
    from safetensors.numpy import load_file as ref_load_file

    plain = [d for d in ITEM if d != "BF16" and not d.startswith("F8")]
    path = tmp_path / "plain.safetensors"
    path.write_bytes(sample(plain, packed=False)[0])
    ref = ref_load_file(path)
    ours = fastst.numpy.load_file(path, copy=True)
    assert set(ours) == set(ref)
    for name, array in ref.items():
        assert ours[name].dtype == array.dtype and ours[name].shape == array.shape, name
        assert as_bytes(ours[name]) == as_bytes(array), name


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_owned_torch_loads_equal_the_reference(tmp_path, backend):
    torch = pytest.importorskip("torch")
    import fastst.torch
    from safetensors.torch import load_file as ref_load_file

    kinds = [d for d in ITEM if d not in ("F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0")]
    path = tmp_path / "pt.safetensors"
    data, _ = sample(kinds, big=(9 << 20) + 5, packed=False)
    path.write_bytes(data)
    ref = ref_load_file(path)
    ours = fastst.torch.load_file(path, copy=True, backend=backend)
    assert set(ours) == set(ref)
    for name, tensor in ref.items():
        got = ours[name]
        assert got.dtype == tensor.dtype and got.shape == tensor.shape, name
        if tensor.numel():
            flat = got.reshape(-1).view(torch.uint8)
            assert torch.equal(flat, tensor.reshape(-1).view(torch.uint8)), name
            # torch's own memory, exactly the tensor's bytes, not shared
            storage = got.untyped_storage()
            assert storage.nbytes() == got.numel() * got.element_size(), name
            assert got.storage_offset() == 0
    a, b = ours["big"], fastst.torch.load_file(path, copy=True)["big"]
    a.zero_()
    assert b.any()


def _f32_bits(values: List[int]) -> np.ndarray:
    return np.array(values, dtype=np.uint32).view(np.float32)


def conversions_file(tmp_path: Path) -> Path:
    """Every BF16/F16/F8 bit pattern (NaNs with payloads, infinities,
    subnormals, both zeros) and F32 values around every rounding case."""
    rng = np.random.default_rng(5)
    every16 = np.arange(1 << 16, dtype=np.uint16).tobytes()
    every8 = np.arange(256, dtype=np.uint8).tobytes()
    special = [0x7FC00001, 0xFFC12345, 0x7F800001, 0x7F800000, 0xFF800000, 0x00000001,
               0x80000000, 0x3F808000, 0x3F818000, 0x477FF000, 0x477FE000, 0x33000001]  # fmt: skip
    f32 = np.concatenate(
        [_f32_bits(special), rng.integers(0, 1 << 32, 100_003, dtype=np.uint32).view(np.float32)]
    )
    big = rng.integers(0, 1 << 16, (3 << 20) + 1, dtype=np.uint16).tobytes()
    tensors = {
        "bf16": ("BF16", (1 << 16,), every16),
        "f16": ("F16", (256, 256), every16),
        "bf16.big": ("BF16", ((3 << 20) + 1,), big),
        "f32": ("F32", (f32.size,), f32.tobytes()),
        "empty": ("BF16", (0, 4), b""),
        "scalar": ("F16", (), b"\x00\x7e"),
    }
    for kind in ("F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0"):
        tensors[kind] = (kind, (16, 16), every8)
    path = tmp_path / "conv.safetensors"
    path.write_bytes(raw_file(tensors))
    return path


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_conversions_are_bit_identical_to_the_one_tensor_path(tmp_path, backend):
    path = conversions_file(tmp_path)
    raw = fastst._fastst.read.RawFile(str(path), "conv", backend)
    with fastst.safe_open(path, "np", backend=backend) as f:
        names = f.offset_keys()
        # One batch converting every tensor to F32 (the F32 one is copied).
        batch = f.get_tensors(dtype=np.float32)
        for to, dtype in (("F32", np.float32), ("BF16", "bfloat16"), ("F16", np.float16)):
            wide = to == "F32"
            wanted = [n for n in names if (f.get_slice(n).get_dtype() == "F32") != wide]
            got = {n: f.get_tensor(n, dtype=dtype) for n in wanted}
            for n in wanted:
                _src, shape, _begin, _end = raw.info(n)
                size = int(np.prod(shape)) * {"F32": 4, "BF16": 2, "F16": 2}[to]
                one = np.empty(size, np.uint8)
                raw.convert_into(n, one, to)
                assert as_bytes(got[n]) == one.tobytes(), (n, to)
                assert got[n].shape == tuple(shape)
                if wide:
                    assert as_bytes(batch[n]) == one.tobytes(), n
        assert as_bytes(batch["f32"]) == as_bytes(f.get_tensor("f32"))
    # numpy's own conversions agree where they are exact (BF16 -> F32,
    # NaN payloads included).
    out = fastst.numpy.load_file(path, dtype=np.float32, backend=backend)
    views = fastst.numpy.load_file(path)
    for name in ("bf16", "bf16.big", "f16"):
        want = (views[name].view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        if name == "f16":
            want = views[name].astype(np.float32)
            nan = np.isnan(want)
            assert np.array_equal(np.isnan(out[name]), nan)
            assert np.array_equal(out[name][~nan], want[~nan])
        else:
            assert np.array_equal(out[name].view(np.uint32), want.view(np.uint32))
    with pytest.raises(ValueError) as info:
        fastst.numpy.load_file(path, dtype=np.int8)
    assert info.value.rule == "conversion-not-allowed"


def test_torch_conversions_equal_the_numpy_ones(tmp_path):
    torch = pytest.importorskip("torch")
    import fastst.torch

    path = conversions_file(tmp_path)
    for backend in ("mmap", "pread"):
        pt = fastst.torch.load_file(path, dtype=torch.float32, backend=backend)
        np32 = fastst.numpy.load_file(path, dtype=np.float32)
        for name in ("bf16", "bf16.big", "f16", "F8_E4M3", "empty", "scalar"):
            assert pt[name].dtype == torch.float32
            assert as_bytes(pt[name].numpy()) == as_bytes(np32[name]), name


def test_progress_reports_bytes_from_the_calling_thread(every_dtype):
    import threading

    calls = []
    me = threading.get_ident()

    def progress(done, total):
        calls.append((done, total, threading.get_ident()))

    fastst.numpy.load_file(every_dtype, copy=True, progress=progress)
    with fastst.safe_open(every_dtype, "np") as f:
        total = sum(end - begin for _d, _s, begin, end in map(f._raw.info, f.keys()))
    assert calls[-1][:2] == (total, total)
    assert all(t == me for *_x, t in calls)
    # 17 MiB: no report before 64 MiB, only the final one.
    assert len(calls) == 1
    # Smaller steps through the glue: at most one call per step, growing.
    with fastst.safe_open(every_dtype, "np") as f:
        names = f.offset_keys()
        start = f._raw.data_start
        arrays = [np.empty(end - begin, np.uint8) for _d, _s, begin, end in map(f._raw.info, names)]
        steps = []
        load_into(
            f._raw, names, arrays, [None] * len(names),
            lambda d, t: steps.append((d, t)), None, 2, 1 << 20, 4 << 20,
        )  # fmt: skip
    assert steps[-1] == (total, total)
    # The reading threads never run more than two steps (plus one request)
    # ahead of the last report: with 21 MB to read, at least two reports
    # come before the final one, however late this thread is scheduled.
    assert 3 <= len(steps) <= 6, steps
    dones = [0] + [d for d, _t in steps]
    assert all(
        0 < b - a <= (8 << 20) + (1 << 20) for a, b in zip(dones, dones[1:], strict=False)
    ), steps
    dones = dones[1:]
    # One report per 4 MiB step crossed, at most.
    steps_crossed = [d // (4 << 20) for d in dones[:-1]]
    assert steps_crossed == sorted(set(steps_crossed)) and steps_crossed[0] >= 1
    assert b"".join(a.tobytes() for a in arrays) == every_dtype.read_bytes()[start:]


def test_an_exception_in_the_callback_stops_the_load(every_dtype):
    class Stop(Exception):
        pass

    seen = []

    def progress(done, total):
        seen.append(done)
        raise Stop("enough")

    with pytest.raises(Stop, match="enough"):
        fastst.numpy.load_file(every_dtype, copy=True, progress=progress)
    assert len(seen) == 1
    with fastst.safe_open(every_dtype, "np", backend="pread") as f:
        with pytest.raises(Stop):
            f.get_tensors(dtype=np.float32 if False else None, copy=True, progress=progress)
        # The file is still usable after a stopped load.
        assert f.get_tensor("big", copy=True).shape == ((17 << 20) + 3,)
    # Stopped part way: after the first of many steps, nothing more is read.
    with fastst.safe_open(every_dtype, "np") as f:
        names = f.offset_keys()
        arrays = [np.zeros(end - begin, np.uint8) for _d, _s, begin, end in map(f._raw.info, names)]
        with pytest.raises(Stop):
            load_into(
                f._raw, names, arrays, [None] * len(names), progress, None, 1, 256 << 10, 256 << 10
            )
    assert not arrays[names.index("big")][-(8 << 20) :].any()


def test_progress_arguments(every_dtype, capfd):
    out = fastst.numpy.load_file(every_dtype, copy=True, progress=True)
    assert len(out) > 300
    capfd.readouterr()  # off a terminal, a tqdm bar or plain lines: tests/read/test_progress.py
    with pytest.raises(TypeError, match="progress"):
        fastst.numpy.load_file(every_dtype, copy=True, progress="yes")
    calls = []
    fastst.numpy.load_file(every_dtype, progress=lambda d, t: calls.append((d, t)))
    assert len(calls) == 1 and calls[0][0] == calls[0][1] > 17 << 20


def test_the_progress_line_escapes_a_hostile_file_name(tmp_path, capfd, monkeypatch):
    # The line is drawn only on a terminal: pretend stderr is one.
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    path = tmp_path / "evil\x1b]0;owned\x07\u202e.safetensors"
    data, names = sample(["U8", "F32"], big=3 << 20)
    path.write_bytes(data)
    monkeypatch.setattr(sys, "stderr", Tty())
    out = fastst.numpy.load_file(path, copy=True, progress=True)
    assert sorted(out) == sorted(names)
    err = capfd.readouterr().err  # the core writes to file descriptor 2
    assert "100.0%" in err
    assert "evil\\u{1b}]0;owned\\u{7}\\u{202e}.safetensors" in err
    # Only the line's own control sequences reach the terminal.
    assert "\x07" not in err and "\u202e" not in err
    assert err.endswith("\n") and err.replace("\r\x1b[K", "")[:-1].isprintable()


def evict(path: Path) -> None:
    """Drops the file's pages from the page cache."""
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def test_a_file_truncated_during_a_batch_load_is_file_changed(tmp_path):
    path = tmp_path / "shrinks.safetensors"
    data, _ = sample(["U8"], big=6 << 20)
    path.write_bytes(data)
    # Cached, and cold into destinations placed at their file offsets
    # (direct reads straight into them, where the file system allows).
    for backend, cold in (("mmap", False), ("pread", False), ("pread", True)):
        path.write_bytes(data)
        if cold:
            evict(path)
        with fastst.safe_open(path, "np", backend=backend) as f:
            names = f.offset_keys()
            arrays = [
                _aligned_empty(e - b, placement(e - b, True, f._raw.data_start + b))
                for _d, _s, b, e in map(f._raw.info, names)
            ]

            def shrink(_done, _total):
                os.truncate(path, 1000)

            with pytest.raises(fastst.SafetensorError) as info:
                load_into(
                    f._raw,
                    names,
                    arrays,
                    [None] * len(names),
                    shrink,
                    None,
                    2,
                    64 << 10,
                    256 << 10,
                )
            assert info.value.rule == "file-changed"
            assert str(path.name) in str(info.value) or "shrinks" in str(info.value)
    # Truncated between open and load: the batch refuses before reading.
    path.write_bytes(data)
    with fastst.safe_open(path, "np") as f:
        os.truncate(path, 1000)
        with pytest.raises(fastst.SafetensorError) as info:
            f.get_tensors(copy=True)
        assert info.value.rule == "file-changed"


def test_loads_from_tmpfs_fall_back_without_error(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    data, _ = sample(["F16", "U8"], big=(9 << 20) + 1)
    path = shm / f"fastst-batch-{os.getpid()}.safetensors"
    path.write_bytes(data)
    try:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        views = fastst.numpy.load_file(path)
        for backend in ("mmap", "pread"):
            owned = fastst.numpy.load_file(path, copy=True, backend=backend)
            assert all(as_bytes(owned[k]) == as_bytes(v) for k, v in views.items())
            with fastst.safe_open(path, "np", backend=backend) as f:
                names = f.offset_keys()
                outs = [np.empty(e - b, np.uint8) for _d, _s, b, e in map(f._raw.info, names)]
                load_into(f._raw, names, outs, [None] * len(names), direct=True)
                assert all(
                    o.tobytes() == as_bytes(views[n])
                    for n, o in zip(names, outs, strict=True)
                    if n not in PACKED
                )
    finally:
        path.unlink()


def test_cold_loads_read_around_the_page_cache_exactly(every_dtype):
    """Evicted files are read with direct I/O where the file system allows
    it: the bytes must be the same."""
    views = {k: as_bytes(v) for k, v in fastst.numpy.load_file(every_dtype).items()}
    for backend in ("mmap", "pread"):
        os.sync()
        fd = os.open(every_dtype, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        owned = fastst.numpy.load_file(every_dtype, copy=True, backend=backend)
        assert all(as_bytes(owned[k]) == v for k, v in views.items())
        # Direct reads forced (by default only files larger than half the
        # memory available are read around the cache).
        os.sync()
        fd = os.open(every_dtype, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        with fastst.safe_open(every_dtype, "np", backend=backend) as f:
            names = f.offset_keys()
            outs = [np.empty(e - b, np.uint8) for _d, _s, b, e in map(f._raw.info, names)]
            load_into(f._raw, names, outs, [None] * len(names), direct=True, threads=3)
            assert all(
                o.tobytes() == views[n] for n, o in zip(names, outs, strict=True) if n not in PACKED
            )


def test_overlapping_destinations_are_refused(every_dtype):
    with fastst.safe_open(every_dtype, "np") as f:
        buf = np.empty(1001, np.uint8)
        with pytest.raises(ValueError, match="overlap"):
            load_into(f._raw, ["U8.3", "I8.3"], [buf, buf], [None, None])
        with pytest.raises(ValueError, match="same length"):
            load_into(f._raw, ["U8.3"], [buf, buf], [None])


def test_a_failed_allocation_names_the_tensor(every_dtype, monkeypatch):
    import fastst._read.safe_open as opened

    real = np.empty

    class Numpy:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def empty(shape, dtype=float):
            # A destination of 65 537 four-byte values (plus room to start
            # at a multiple of 64 bytes).
            if shape == 65_537 * 4 + OWNED_ALIGN and np.dtype(dtype) == np.uint8:
                raise MemoryError("no")
            return real(shape, dtype=dtype)

    with fastst.safe_open(every_dtype, "np") as f:  # the first of that size, in file order
        first = next(
            k for k in f.offset_keys() if f._raw.info(k)[3] - f._raw.info(k)[2] == 65_537 * 4
        )
    monkeypatch.setattr(opened, "np", Numpy())
    with pytest.raises(MemoryError) as info:
        fastst.numpy.load_file(every_dtype, copy=True)
    assert info.value.rule == "out-of-memory"
    assert info.value.tensor == first
    assert first in str(info.value)


def test_checkpoints_and_file_objects_load_owned(tmp_path, every_dtype):
    views = fastst.numpy.load_file(every_dtype)
    small = {k: v for k, v in views.items() if k != "big" and v.dtype != np.uint8 or k == "U8.3"}
    index = fastst.numpy.save_sharded(
        {k: v for k, v in small.items() if v.dtype.kind in "fiu" and v.dtype.itemsize > 1},
        tmp_path / "ckpt",
        max_shard_size=200_000,
    )
    calls = []
    with fastst.safe_open(index, "np") as f:
        got = f.get_tensors(copy=True, progress=lambda d, t: calls.append((d, t)))
    assert len({t for _d, t in calls}) == 1
    assert calls[-1][0] == calls[-1][1] == sum(a.nbytes for a in got.values())
    assert [d for d, _t in calls] == sorted(d for d, _t in calls)
    for name, array in got.items():
        assert as_bytes(array) == as_bytes(views[name]), name
    # A file object without a descriptor: the same loader, the same bytes.
    stream = io.BytesIO(every_dtype.read_bytes())
    calls.clear()
    with fastst.safe_open(stream, "np") as f:
        owned = f.get_tensors(copy=True, progress=lambda d, t: calls.append((d, t)))
    assert all(as_bytes(owned[k]) == as_bytes(v) for k, v in views.items())
    assert len(calls) == 1


def test_other_frameworks_get_owned_loads(every_dtype):
    pytest.importorskip("jax")
    views = fastst.numpy.load_file(every_dtype)
    with fastst.safe_open(every_dtype, "flax") as f:
        for name in ("F32.3", "BF16.5", "U8.1"):
            owned = f.get_tensor(name, copy=True)
            assert as_bytes(np.asarray(owned)) == as_bytes(views[name]), name
        f32 = np.asarray(f.get_tensor("BF16.5", dtype="float32"))
        want = views["BF16.5"].view(np.uint16).astype(np.uint32) << 16
        assert np.array_equal(f32.view(np.uint32), want)


if sys.platform != "linux":  # pragma: no cover - direct I/O and /dev/shm are Linux's
    pytestmark = pytest.mark.skip("Linux only")


def test_the_fault_probe_measures_both_page_sizes() -> None:
    from fastst._fastst.read import fault_probe

    got = fault_probe()
    assert got is not None, "anonymous memory for the probe"
    huge, small, wins = got
    assert small > 0 and (huge is None or huge > 0)
    # Huge pages win only where they measured at least a quarter cheaper.
    assert wins == (huge is not None and huge * 4 < small * 3)
