"""The memory a prefetch loader holds: a whole-file plan under a budget,
its tensors taken slowly.

    python benches/bench_prefetch_memory.py FILE [--budget MIB] [--pause S] [--threads N] [--cold]

In a fresh interpreter (imports done first), opens FILE, starts
``prefetch(budget=...)`` over every tensor and takes them in the loader's
order, sleeping ``--pause`` seconds after each take and dropping the tensor
(a consumer slower than the disk, so the readers run into the budget).
Prints the peak resident memory above the start (``VmHWM`` minus the
``VmRSS`` before the loader), the file's size, the budget and the loader's
read threads. ``--cold`` drops the page cache first (root). The target: peak
growth within the budget plus one read buffer per thread.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys, time
import numpy as np
import fastst

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0

path, budget, pause, threads = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
base = status("VmRSS")
started = time.perf_counter()
taken = 0
with fastst.safe_open(path, "np") as f:
    with f.prefetch(budget=budget, threads=threads or None) as loader:
        for name, array in loader:
            taken += array.nbytes
            del array
            time.sleep(pause)
print(json.dumps({"peak_growth": status("VmHWM") - base, "taken": taken,
                  "seconds": time.perf_counter() - started}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--budget", type=int, default=256, help="MiB (default 256)")
    ap.add_argument("--pause", type=float, default=0.02, help="seconds after each take")
    ap.add_argument("--threads", type=int, default=0, help="read threads (default: fastst's)")
    ap.add_argument("--cold", action="store_true", help="drop the page cache first")
    a = ap.parse_args()
    if a.cold:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as drop:
            drop.write("3\n")
    budget = a.budget << 20
    out = subprocess.run(
        [sys.executable, "-c", CHILD, a.file, str(budget), str(a.pause), str(a.threads)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    mib = 1 << 20
    print(
        f"{os.path.getsize(a.file) / mib:.0f} MiB file, budget {a.budget} MiB: peak RSS growth "
        f"{result['peak_growth'] / mib:.0f} MiB, {result['taken'] / mib:.0f} MiB taken in "
        f"{result['seconds']:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
