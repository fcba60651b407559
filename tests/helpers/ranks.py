"""Groups of spawned processes for the distributed tests: started, waited for, results read."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

import pytest
from helpers.remote_servers import free_port


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
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, world, port, *args)) for r in range(world)]
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
