"""Groups of spawned processes for the distributed tests: started, waited for, results read."""

from __future__ import annotations

import atexit
import json
import multiprocessing
import multiprocessing.forkserver
import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
from helpers.remote_servers import free_port

#: What the fork server of the ranks imports once per pytest process: each rank started
#: with ``spawn`` paid these imports again (3 to 4 CPU-seconds a rank).
PRELOAD = ["torch", "torch.distributed", "torch.distributed.checkpoint"]


_server_reaped = False


def rank_context() -> Any:
    """The ranks' start method: ``forkserver``, whose server imports PRELOAD once; each rank
    is a fork of that server, a fresh interpreter as with ``spawn`` that finds torch imported.
    Start the ranks through ``as_spawned`` / ``as_spawned_rank``: a rank forked from the
    server has the server's environment and folder, not the test's."""
    global _server_reaped
    multiprocessing.set_forkserver_preload(PRELOAD)
    if not _server_reaped:
        # The pytest process waits for the server as it ends (it would otherwise leave it
        # to quit on its own, orphaned, its ranks' CPU time unaccounted for).
        atexit.register(multiprocessing.forkserver._forkserver._stop)
        _server_reaped = True
    return multiprocessing.get_context("forkserver")


def spawned_state() -> Tuple[Dict[str, str], str]:
    """What a spawned rank inherits from the test: its environment and current folder."""
    return dict(os.environ), os.getcwd()


def as_spawned(env: Dict[str, str], cwd: str, worker: Callable[..., None], *args: Any) -> None:
    """In a rank: takes the test's environment and folder (``spawned_state``), then runs
    ``worker(*args)``."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    worker(*args)


def as_spawned_rank(
    rank: int, env: Dict[str, str], cwd: str, worker: Callable[..., None], *args: Any
) -> None:
    """``as_spawned`` for torch.multiprocessing.start_processes, which passes the rank first."""
    as_spawned(env, cwd, worker, rank, *args)


def start_ranks(worker: Callable[..., None], args: Tuple[Any, ...], nprocs: int) -> Any:
    """torch.multiprocessing.start_processes(worker, args, nprocs, join=False) on the ranks'
    fork server (``rank_context``): its ProcessContext."""
    import torch.multiprocessing as mp

    rank_context()
    return mp.start_processes(
        as_spawned_rank,
        args=(*spawned_state(), worker, *args),
        nprocs=nprocs,
        join=False,
        start_method="forkserver",
    )


def run_ranks(
    worker: Callable[..., None],
    world: int,
    args: Tuple[Any, ...],
    results: Path,
    which: str,
    time_limit: float,
    on_start: Optional[Callable[[List[Any]], None]] = None,
) -> List[Any]:
    """Runs ``worker(rank, world, port, *args)`` in ``world`` spawned processes (``port``: a
    free one for the group's rendezvous) and waits at most ``time_limit`` seconds for all of
    them (a hang fails the test). ``on_start`` gets the started processes. Returns [the JSON
    each rank wrote to ``results/{which}-rank{r}.json`` (None for a rank that wrote none),
    the exit codes]."""
    ctx = rank_context()
    port = free_port()
    state = spawned_state()
    procs = [
        ctx.Process(target=as_spawned, args=(*state, worker, r, world, port, *args))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    if on_start is not None:
        on_start(procs)
    deadline = time.monotonic() + time_limit
    for p in procs:
        p.join(max(1.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            pytest.fail(f"{world} ranks did not finish within {time_limit} s (a hang)")
    out = []
    for r in range(world):
        path = results / f"{which}-rank{r}.json"
        out.append(json.loads(path.read_text()) if path.exists() else None)
    return [out, [p.exitcode for p in procs]]
