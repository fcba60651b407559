"""What a page fault of fresh memory costs here, huge pages against 4 KiB pages, fault by fault.

    python benches/bench_page_faults.py [--mib 2200] [--settle 0,5] [--rounds 2]

Each measurement is a fresh interpreter that (as root) empties the page cache, waits
``--settle`` seconds, maps ``--mib`` MiB of anonymous memory advised ``MADV_HUGEPAGE`` or
``MADV_NOHUGEPAGE`` and writes one byte in every 4 KiB of it, in order, timing every 2 MiB
with the thread's CPU clock (time given to other processes does not count; time the host of a
virtual machine spends backing the memory does). Printed: the CPU seconds in all, and per
64 MiB in order, so that a change of cost part-way through shows (on a virtual machine whose
host takes back free memory, the cheap huge pages come first and run out). This is what the
probe of a cold owned load measures on its first 8 MiB (``fastst._fastst.read.fault_probe``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import List, Optional

WORKER = r"""
import mmap, os, sys, time
mib, huge, settle = int(sys.argv[1]), sys.argv[2] == "huge", float(sys.argv[3])
os.sync()
with open("/proc/sys/vm/drop_caches", "w") as fh:
    fh.write("3\n")
time.sleep(settle)
step = 2 << 20
mem = mmap.mmap(-1, mib << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
mem.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
costs = []
for at in range(0, mib << 20, step):
    t = time.thread_time_ns()
    for page in range(at, at + step, 4096):
        mem[page] = 1
    costs.append(time.thread_time_ns() - t)
per64 = [sum(costs[i : i + 32]) / 1e6 for i in range(0, len(costs), 32)]
print(f"{sum(costs) / 1e9:.3f}", " ".join(f"{c:.0f}" for c in per64))
"""


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=2200)
    parser.add_argument("--settle", default="0,5")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if os.geteuid() != 0 or not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        print("bench_page_faults: skipped, cannot write /proc/sys/vm/drop_caches (needs root)")
        return 0
    for r in range(args.rounds):
        for settle in args.settle.split(","):
            for kind in ("huge", "4k"):
                cmd = [sys.executable, "-c", WORKER, str(args.mib), kind, settle]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                total, _, per64 = out.strip().partition(" ")
                print(f"round {r + 1} settle {settle}s {kind:4s} CPU {total} s; ms per 64 MiB:")
                print(f"  {per64}  (load {os.getloadavg()[0]:.1f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
