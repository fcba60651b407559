"""Jobs on a pool of threads, the first error wins: the one helper every room uses.

:func:`run_all` runs ``work(job)`` for each job on several threads (reads,
hashes and copies release the GIL) and returns the results in the jobs'
order. The first error in that order is raised once the other jobs have
been dealt with: those not started are cancelled, those running are waited
for (a thread cannot be stopped from outside; ``stop`` lets them end at
their next check). The caller waits in ``Future.result``, which hears
Ctrl-C: a ``KeyboardInterrupt`` is handled as a job's error.
"""

from __future__ import annotations

from concurrent.futures import Executor, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from typing import Callable, Iterable, List, Optional, TypeVar

__all__ = ["run_all"]

J = TypeVar("J")
R = TypeVar("R")


def run_all(
    work: Callable[[J], R],
    jobs: Iterable[J],
    threads: int = 1,
    name: str = "fastst",
    *,
    pool: Optional[Executor] = None,
    stop: Optional[Callable[[], None]] = None,
) -> List[R]:
    """``[work(job) for job in jobs]``, on at most ``threads`` threads named
    ``name`` (on the calling thread when that is one thread or one job), or
    on ``pool`` instead, an executor the caller keeps (left running). On the first
    error (in the jobs' order) or an interrupt: ``stop()`` when given, the
    jobs not started cancelled, the running ones waited for, then the error
    raised."""
    jobs = list(jobs)
    if len(jobs) <= 1 or (pool is None and threads <= 1):
        return [work(job) for job in jobs]
    if pool is None:
        with ThreadPoolExecutor(min(threads, len(jobs)), thread_name_prefix=name) as own:
            return run_all(work, jobs, threads, name, pool=own, stop=stop)
    futures = [pool.submit(work, job) for job in jobs]
    try:
        return [future.result() for future in futures]
    except BaseException:
        if stop is not None:
            stop()
        for future in futures:
            future.cancel()
        wait_all(futures)
        raise
