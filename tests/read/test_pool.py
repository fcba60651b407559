"""fastst._read.pool.run_all: jobs on a pool, results in order, the first error wins."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import List

import pytest
from fastst._read.pool import run_all


def test_results_come_in_the_jobs_order_from_several_threads() -> None:
    both = threading.Barrier(2, timeout=10)
    names: List[str] = []

    def work(job: int) -> int:
        names.append(threading.current_thread().name)
        if job < 2:
            both.wait()  # the first two run at once, or the barrier breaks
        return job * 10

    assert run_all(work, range(6), 2, "fastst-test") == [0, 10, 20, 30, 40, 50]
    assert names and all(n.startswith("fastst-test") for n in names)


def test_one_thread_or_one_job_runs_on_the_calling_thread() -> None:
    here = threading.current_thread().name
    seen: List[str] = []

    def work(job: int) -> int:
        seen.append(threading.current_thread().name)
        return job

    assert run_all(work, [1, 2, 3], 1, "x") == [1, 2, 3]
    assert run_all(work, [4], 8, "x") == [4]
    assert set(seen) == {here}


def test_the_first_error_wins_the_rest_is_cancelled_and_stop_is_called() -> None:
    release = threading.Event()
    ran: List[int] = []
    stopped: List[bool] = []

    def work(job: int) -> int:
        ran.append(job)
        if job == 0:
            raise ValueError("first")
        if job == 1:
            release.wait(10)  # running when the error is seen: waited for
            raise KeyError("second")
        return job

    def stop() -> None:
        stopped.append(True)
        release.set()

    with pytest.raises(ValueError, match="first"):
        run_all(work, range(50), 2, "t", stop=stop)
    assert stopped == [True]
    assert 0 in ran and 1 in ran and len(ran) < 50  # the jobs not started never ran


def test_an_interrupt_in_a_job_is_raised_after_the_others_end() -> None:
    done = threading.Event()

    def work(job: int) -> None:
        if job == 0:
            raise KeyboardInterrupt
        done.wait(10)

    with pytest.raises(KeyboardInterrupt):
        run_all(work, range(3), 3, "t", stop=done.set)


def test_a_pool_the_caller_keeps_stays_open() -> None:
    with ThreadPoolExecutor(2) as pool:
        assert run_all(lambda j: j + 1, [1, 2, 3], pool=pool) == [2, 3, 4]
        with pytest.raises(RuntimeError):
            run_all(lambda j: (_ for _ in ()).throw(RuntimeError("x")), [1, 2], pool=pool)
        assert pool.submit(lambda: 7).result() == 7
