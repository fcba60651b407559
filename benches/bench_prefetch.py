"""Zero-copy loads with a cold page cache: fastst's prefetcher against the
disk limit and the reference, same run, interleaved rounds.

    python benches/bench_prefetch.py FILE [--rounds N] [--cases a,b,...]

Needs to evict FILE from the page cache: it does so with
``posix_fadvise(POSIX_FADV_DONTNEED)`` on FILE only (after ``os.sync()``),
so copy the file into a folder of your own first (another process reading
the same file would warm it). Each case runs in a fresh interpreter: imports
first, then the eviction, then the timed load + touch (one byte of every
4 KiB page). The disk limit is ``cat FILE > /dev/null`` timed the same way
right before each case (the machine's disk speed drifts while other work
runs: each case is compared with its own ``cat``). Prints medians, the
median of the paired shares of the disk limit, and the ratio to the
reference; ``--hot`` runs every case with the file cached instead.

Cases: ``cat``, ``np`` (fastst.numpy.load_file), ``np-noprefetch``
(the same with ``FASTST_READ_AHEAD=0``), ``pt`` (fastst.torch.load_file),
``pt-noprefetch``, ``pt-ref`` (safetensors.torch.load_file), ``np-ref``
(safetensors.numpy.load_file: copies).

Loader cases (``safe_open.prefetch(plan)``, owned tensors): ``np-plan`` (a
whole-file plan, every tensor taken as it lands) against ``np-copy``
(``load_file(copy=True)``: the same bytes into memory of their own);
``tp-plan`` (rank 1 of 4: the second quarter of the first dimension of
every 2-D tensor, the other tensors whole, as one plan) against
``tp-slice`` and ``tp-slice-ref`` (the same parts read by a ``get_slice``
loop, fastst's and the reference's, copied out). Each also reports the
bytes its process read from the disk (``/proc/self/io`` ``read_bytes``)
and, for the ``tp`` cases, the bytes the plan keeps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, os, sys, time
case, path, cold = sys.argv[1], sys.argv[2], sys.argv[3] == "cold"
def io_read():
    with open("/proc/self/io") as fh:
        return int(next(l for l in fh if l.startswith("read_bytes")).split()[1])
planned = None
loader_case = case in ("np-plan", "np-copy", "tp-plan", "tp-slice", "tp-slice-ref")
if loader_case:
    import numpy as np
    safe_open = __import__("safetensors" if case.endswith("-ref") else "fastst").safe_open
    def quarter(shape):
        n = shape[0]
        return slice(n // 4, n // 2) if len(shape) == 2 else None
    def load(path):
        global planned
        if case == "np-copy":
            import fastst.numpy
            return fastst.numpy.load_file(path, copy=True)
        with safe_open(path, "np") as f:
            if case == "np-plan":
                with f.prefetch() as loader:
                    return dict(loader)
            plan = {n: quarter(f.get_slice(n).get_shape()) for n in f.keys()}
            if case == "tp-plan":
                with f.prefetch(plan) as loader:
                    out = dict(loader)
            else:
                out = {n: np.array(f.get_slice(n)[rows if rows is not None else ...])
                       for n, rows in plan.items()}
            planned = sum(a.nbytes for a in out.values())
            return out
    def touch(ts):
        return sum(int(a.reshape(-1).view(np.uint8)[::4096].sum()) for a in ts.values())
elif case.startswith("pt"):
    import torch
    threads = int(os.environ.get("BENCH_TORCH_THREADS", "0"))
    torch.set_num_threads(threads or torch.get_num_threads())
    mod = __import__("safetensors.torch" if case == "pt-ref" else "fastst.torch", fromlist=["x"])
    def touch(ts):
        return sum(int(t.reshape(-1).view(torch.uint8)[::4096].sum()) for t in ts.values())
else:
    import numpy as np
    mod = __import__("safetensors.numpy" if case == "np-ref" else "fastst.numpy", fromlist=["x"])
    def touch(ts):
        return sum(int(a.reshape(-1).view(np.uint8)[::4096].sum()) for a in ts.values())
if not loader_case:
    load = lambda path: mod.load_file(path)
if cold:
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
before = io_read()
start = time.perf_counter()
tensors = load(path)
total = touch(tensors)
took = time.perf_counter() - start
print(json.dumps({"seconds": took, "checksum": total, "read": io_read() - before,
                  "planned": planned}))
"""

CAT = r"""
import os, subprocess, sys, time
path, cold = sys.argv[1], sys.argv[2] == "cold"
if cold:
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
start = time.perf_counter()
with open(os.devnull, "wb") as null:
    subprocess.run(["cat", path], stdout=null, check=True)
print('{"seconds": %f}' % (time.perf_counter() - start))
"""


READS: dict = {}


def run(case: str, path: str, cache: str) -> float:
    env = dict(os.environ)
    if case.endswith("-noprefetch"):
        env["FASTST_READ_AHEAD"] = "0"
        case = case[: -len("-noprefetch")]
    if case.endswith("-ref"):
        env.pop("PYTHONPATH", None)  # the reference package, not a checkout
    if case == "cat":
        command = [sys.executable, "-c", CAT, path, cache]
    else:
        command = [sys.executable, "-c", CHILD, case, path, cache]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if "read" in got:
        READS.setdefault(case, []).append((got["read"], got.get("planned")))
    return float(got["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", default="cat,np,np-noprefetch,pt,pt-noprefetch,pt-ref")
    parser.add_argument("--hot", action="store_true", help="hot rounds instead of cold")
    args = parser.parse_args()
    cases = args.cases.split(",")
    cache = "hot" if args.hot else "cold"
    times: dict = {c: [] for c in cases}
    shares: dict = {c: [] for c in cases}
    for r in range(args.rounds):
        order = cases if r % 2 == 0 else cases[::-1]
        for case in order:
            if case == "cat":
                continue
            # The disk limit right before each case: paired ratios stay
            # meaningful while other work on the machine shifts the disk's
            # speed from one minute to the next.
            limit = run("cat", args.file, cache)
            if cache == "hot":
                run("cat", args.file, "hot")
            took = run(case, args.file, cache)
            times[case].append(took)
            shares[case].append(limit / took)
            if "cat" in times:
                times["cat"].append(limit)
    size = os.path.getsize(args.file)
    print(f"{args.file}: {size / 1e9:.2f} GB, {cache}, {args.rounds} rounds (medians)")
    for case in cases:
        med = statistics.median(times[case])
        line = f"  {case:15} {med:7.3f} s  {size / med / 1e9:5.2f} GB/s"
        if case != "cat":
            line += f"  share of cat {statistics.median(shares[case]):4.2f} (paired)"
        if case.startswith("pt") and "pt-ref" in times and case != "pt-ref":
            line += f"  vs reference {statistics.median(times['pt-ref']) / med:4.2f}x"
        if case in READS:
            read = statistics.median(r for r, _p in READS[case])
            line += f"  read {read / 2**20:.0f} MiB"
            kept = [p for _r, p in READS[case] if p]
            if kept:
                line += f" for {kept[0] / 2**20:.0f} MiB planned ({read / kept[0]:.2f}x)"
        print(line + "  [" + " ".join(f"{t:.3f}" for t in times[case]) + "]")


if __name__ == "__main__":
    main()
