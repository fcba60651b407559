"""One safe_open handle shared by 8 threads reading different and the same
tensors returns correct data."""

from __future__ import annotations

import threading

import fastst
import numpy as np
import pytest
from helpers.raw_files import raw_file


def test_eight_threads_share_one_handle(write) -> None:
    rng = np.random.default_rng(1)
    tensors = {
        f"t{i}": rng.standard_normal((64, 64 * (i + 1))).astype(np.float32) for i in range(16)
    }
    path = write(raw_file({k: ("F32", v.shape, v.tobytes()) for k, v in tensors.items()}))
    errors: list = []
    barrier = threading.Barrier(8)

    with fastst.safe_open(path, "np") as f:

        def worker(tid: int) -> None:
            try:
                barrier.wait()
                for rep in range(40):
                    name = "t0" if rep % 2 else f"t{(tid + rep) % 16}"
                    a = f.get_tensor(name)
                    if not np.array_equal(a, tensors[name]):
                        errors.append((tid, name))
                    a[...] = 0  # private: must not disturb other threads
                    part = f.get_slice(name)[1:3, ::2]
                    if not np.array_equal(part, tensors[name][1:3, ::2]):
                        errors.append((tid, name, "slice"))
                    assert f.keys() == sorted(tensors)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_close_while_threads_read_is_safe(write) -> None:
    data = np.arange(1 << 18, dtype=np.float32)
    path = write(raw_file({"x": ("F32", data.shape, data.tobytes())}))
    f = fastst.safe_open(path, "np")
    outcomes: list = []

    def reader() -> None:
        for _ in range(200):
            try:
                a = f.get_tensor("x")
                outcomes.append(bool(a[-1] == data[-1]))
            except fastst.ClosedFileError:
                outcomes.append("closed")

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    f.close()
    for t in threads:
        t.join()
    assert all(o is True or o == "closed" for o in outcomes)


@pytest.mark.slow
def test_open_releases_the_gil(write) -> None:
    """A Python thread keeps running while another opens (parses and
    validates) a large header: the parse runs with the GIL released."""
    import json
    import struct
    import time

    n = 200_000
    header = {f"t.{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(n)}
    hb = json.dumps(header).encode()
    path = write(struct.pack("<Q", len(hb)) + hb)

    def open_once() -> float:
        start = time.perf_counter()
        fastst.safe_open(path, "np").close()
        return time.perf_counter() - start

    open_once()  # warm the page cache
    ticks = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            ticks[0] += 1

    # rate of the spinning thread alone
    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.2)
    before = ticks[0]
    time.sleep(0.2)
    rate = (ticks[0] - before) / 0.2
    # ticks gained while the main thread is inside the open call
    start_ticks = ticks[0]
    elapsed = open_once()
    gained = ticks[0] - start_ticks
    stop.set()
    t.join()
    # With the GIL held for the whole parse the spinner would gain (almost)
    # nothing; released, it runs about as fast as alone.
    assert elapsed > 0.02, "header too small to measure"
    assert gained > 0.2 * rate * elapsed, (gained, rate, elapsed)


def _big_file(write) -> tuple:
    """A file of three tensors over the 256 KiB read pieces, and its data."""
    rng = np.random.default_rng(7)
    tensors = {f"w{i}": rng.standard_normal(150_000 + i).astype(np.float32) for i in range(3)}
    path = write(raw_file({k: ("F32", v.shape, v.tobytes()) for k, v in tensors.items()}))
    return path, tensors


def test_reads_do_not_wait_long_on_a_thread_holding_the_mapping_gate(write) -> None:
    # Owned loads map their destinations holding the process's mapping gate,
    # and reads fault their pieces in, in turn with such changes. A holder
    # that waits on something else (here an event; in life, the GIL) must
    # not stop another thread's reads: their pieces wait a little, then read.
    from fastst._fastst.read import changing_mappings

    path, tensors = _big_file(write)
    entered, release = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=changing_mappings, args=(lambda: (entered.set(), release.wait(60)),)
    )
    holder.start()
    try:
        assert entered.wait(30)
        with fastst.safe_open(path, "np") as f:
            outs = {name: np.empty(v.nbytes, dtype=np.uint8) for name, v in tensors.items()}
            reader = threading.Thread(
                target=lambda: [f._raw.read_into(name, out) for name, out in outs.items()]
            )
            reader.start()
            reader.join(30)
            assert not reader.is_alive(), "a read waited on the mapping gate's holder"
        for name, value in tensors.items():
            np.testing.assert_array_equal(outs[name].view(np.float32), value)
    finally:
        release.set()
        holder.join(30)


def test_the_mapping_gates_holder_may_load_inside_its_changes(write) -> None:
    # Reentry: the thread holding the gate allocates and reads (a load run
    # from inside the changes, as a finalizer or a signal handler may) at once.
    from fastst._fastst.read import changing_mappings

    path, tensors = _big_file(write)
    done: dict = {}

    def nested() -> None:
        done.update(changing_mappings(lambda: fastst.safe_open(path, "np").get_tensors(copy=True)))

    t = threading.Thread(target=nested)
    t.start()
    t.join(30)
    assert not t.is_alive(), "a load inside the gate's changes waited on itself"
    for name, value in tensors.items():
        np.testing.assert_array_equal(done[name], value)


def test_owned_loads_in_many_threads_give_the_files_bytes(write) -> None:
    path, tensors = _big_file(write)
    errors: list = []

    def worker() -> None:
        try:
            with fastst.safe_open(path, "np") as f:
                for _ in range(10):
                    got = f.get_tensors(copy=True)
                    for name, value in tensors.items():
                        if not np.array_equal(got[name], value):
                            errors.append(name)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
