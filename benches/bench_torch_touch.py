"""Hot torch ``load_file`` + touching every page: fastst (with and without
its read-ahead) vs the reference, interleaved rounds in one process.

    python benches/bench_torch_touch.py FILE [ROUNDS]

Each round loads FILE with each library (order alternating between rounds),
reads one byte of every 4 KiB page, then frees the tensors. Prints medians
of wall time and of this thread's CPU time, for load + touch and for load +
touch + free, the minor page faults, and the reference's time over fastst's
(above 1: fastst faster). Read FILE once before (``cat FILE > /dev/null``):
the rounds assume its pages are cached.
"""

from __future__ import annotations

import gc
import os
import resource
import statistics
import sys
import time

import fastst.torch as ft
import safetensors.torch as ref
import torch

LIBS = {"fastst": ft, "fastst-no-read-ahead": ft, "reference": ref}
COLUMNS = ["load+touch wall", "load+touch cpu", "+free wall", "+free cpu"]


def touch(tensors) -> int:
    return sum(int(t.reshape(-1).view(torch.uint8)[::4096].sum()) for t in tensors.values())


def main() -> None:
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 21
    torch.set_num_threads(1)
    res: dict = {who: [] for who in LIBS}
    for r in range(rounds):
        order = list(LIBS) if r % 2 == 0 else list(LIBS)[::-1]
        for who in order:
            gc.collect()
            os.environ["FASTST_READ_AHEAD"] = "0" if who == "fastst-no-read-ahead" else "1"
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            w0, c0 = time.perf_counter(), time.thread_time()
            tensors = LIBS[who].load_file(path)
            touch(tensors)
            w1, c1 = time.perf_counter(), time.thread_time()
            del tensors
            w2, c2 = time.perf_counter(), time.thread_time()
            f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            res[who].append((w1 - w0, c1 - c0, w2 - w0, c2 - c0, f1 - f0))
    print(f"{path}: {rounds} interleaved rounds, medians (ms)")
    for who, rows in res.items():
        cols = list(zip(*rows, strict=True))
        values = "  ".join(
            f"{name} {statistics.median(col) * 1e3:7.1f}"
            for name, col in zip(COLUMNS, cols, strict=True)
        )
        print(f"  {who:18} {values}  faults {statistics.median(cols[4]):.0f}")

    def median(who: str, i: int) -> float:
        return statistics.median(row[i] for row in res[who])

    for who in ("fastst", "fastst-no-read-ahead"):
        ratios = ", ".join(
            f"{name} {median('reference', i) / median(who, i):.3f}"
            for i, name in enumerate(COLUMNS)
        )
        print(f"  reference / {who}: {ratios}")


if __name__ == "__main__":
    main()
