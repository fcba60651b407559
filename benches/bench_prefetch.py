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
``np-plan-allocated`` (the whole-file plan with every destination
allocated before the loader starts, as ``copy=True`` allocates them: the
limit of a loader that allocates as it reads, its memory not bounded);
``tp-plan`` (rank 1 of 4: the second quarter of the first dimension of
every 2-D tensor, the other tensors whole, as one plan) against
``tp-slice`` and ``tp-slice-ref`` (the same parts read by a ``get_slice``
loop, fastst's and the reference's, copied out). Each also reports the
bytes its process read from the disk (``/proc/self/io`` ``read_bytes``)
and, for the ``tp`` cases, the bytes the plan keeps.

Peers of the whole-file plan (torch tensors of their own in CPU memory,
every page touched; each is left out with a line saying so when it is not
importable): ``runai`` (Run:ai's ``runai-model-streamer``,
``SafetensorsStreamer().stream_file(FILE)``, every tensor taken from
``get_tensors()`` as it arrives, at its defaults) and ``fastsafetensors``
(``fastsafe_open([FILE], "pt", device="cpu", nogds=True)``, every tensor
by ``get_tensor``: its CPU path, preads into one host buffer). Neither can
read only a tensor-parallel rank's rows of a file (Run:ai streams whole
tensors; fastsafetensors' ``get_sharded`` reads whole files on some rank
and scatters over a process group): they have no ``tp`` case. Install them
for the bench only (``requirements-bench.txt``) and put them on
``PYTHONPATH``.

``--builds NAME=PYTHONPATH,...`` (other builds of fastst: a checkout's
``python/`` folder with its extension built) adds every fastst loader case
once more per build as ``CASE@NAME``, run with that build first on the
path: both sides of a change in the same interleaved rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

#: Peers of the whole-file plan; the cases of the loader's child.
PEERS = ("runai", "fastsafetensors")
LOADER_CASES = (
    "np-plan",
    "np-plan-allocated",
    "np-copy",
    "np-iter",
    "tp-plan",
    "tp-slice",
    "tp-slice-ref",
) + PEERS

CHILD = r"""
import json, os, sys, time
case, path, cold = sys.argv[1], sys.argv[2], sys.argv[3] == "cold"
def io_read():
    with open("/proc/self/io") as fh:
        return int(next(l for l in fh if l.startswith("read_bytes")).split()[1])
planned = None
first = None
PEERS, LOADER_CASES = CASE_KINDS
loader_case = case in LOADER_CASES
if loader_case:
    import numpy as np
    if case not in PEERS:
        safe_open = __import__("safetensors" if case.endswith("-ref") else "fastst").safe_open
    def quarter(shape):
        n = shape[0]
        return slice(n // 4, n // 2) if len(shape) == 2 else None
    def shape_of(f, name):
        # 0.9's get_tensor_meta reads no data; the reference 0.8 lacks it
        if case.endswith("-ref"):
            return f.get_slice(name).get_shape()
        return f.get_tensor_meta(name).shape
    # The tensor-parallel cases in torch: the reference's numpy has no BF16.
    fw = "pt" if case.startswith("tp") or case in PEERS else "np"
    def load(path):
        global planned, first
        if case == "runai":
            from runai_model_streamer import SafetensorsStreamer
            out = {}
            with SafetensorsStreamer() as streamer:
                streamer.stream_file(path)
                for name, t in streamer.get_tensors():
                    if first is None:
                        first = time.perf_counter() - start
                    out[name] = t
            return out
        if case == "fastsafetensors":
            from fastsafetensors import fastsafe_open
            f = fastsafe_open([path], "pt", device="cpu", nogds=True)
            out = {}
            for name in f.keys():
                out[name] = f.get_tensor(name)
                if first is None:
                    first = time.perf_counter() - start
            return out
        with safe_open(path, fw) as f:
            if case == "np-copy":
                return f.get_tensors(copy=True)
            if case == "np-plan-allocated":
                # The limit of a loader that allocates as it reads: every
                # destination allocated first (as copy=True's are), then
                # the same plan (its budget no longer bounds the memory).
                made = {n: f._destination(f._raw, n, None, f._raw.data_start) for n in f.keys()}
                type(f)._destination = lambda self, file, name, dtype, start: made.pop(name)
            if case in ("np-plan", "np-plan-allocated", "np-iter"):
                plan_case = case != "np-iter"
                out = {}
                with f.prefetch() if plan_case else nullcontext(f) as src:
                    pairs = src if plan_case else src.iter_tensors()
                    for name, a in pairs:
                        if first is None:
                            first = time.perf_counter() - start
                        out[name] = a
                return out
            plan = {n: quarter(shape_of(f, n)) for n in f.keys()}
            if case == "tp-plan":
                with f.prefetch(plan) as loader:
                    out = dict(loader)
            else:
                out = {n: f.get_slice(n)[rows if rows is not None else ...]
                       for n, rows in plan.items()}
            planned = sum(a.numel() * a.element_size() for a in out.values())
            return out
    from contextlib import nullcontext
    def touch(ts):
        if fw == "pt":
            import torch
            return sum(int(t.reshape(-1).view(torch.uint8)[::4096].sum()) for t in ts.values())
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
if loader_case and os.environ.get("BENCH_WARM_UP", "1") == "1":
    # The case runs once before the timed load (cold: FILE's pages evicted
    # first, then every page dropped): the frameworks' first-call set-up
    # is not timed, and library code first run in the timed load (the cold
    # paths' too) would be read from the disk (drop_caches keeps only the
    # pages a process has mapped) and counted in its bytes.
    if cold:
        os.sync()
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    start = time.perf_counter()
    touch(load(path))
    planned = first = None
EVICT
import resource
def cpu():
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime
before = io_read()
cpu_before = cpu()
start = time.perf_counter()
tensors = load(path)
total = touch(tensors)
took = time.perf_counter() - start
print(json.dumps({"seconds": took, "checksum": total, "read": io_read() - before,
                  "planned": planned, "first": first, "cpu": cpu() - cpu_before}))
"""

#: How a cold case empties the page cache, after its imports: every
#: cached page of the machine (``drop``, root only), or FILE's alone.
EVICTIONS = {
    "drop": """
if cold:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3")
""",
    "fadvise": """
if cold:
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
""",
}

CAT = r"""
import os, subprocess, sys, time
path, cold = sys.argv[1], sys.argv[2] == "cold"
EVICT
start = time.perf_counter()
with open(os.devnull, "wb") as null:
    subprocess.run(["cat", path], stdout=null, check=True)
print('{"seconds": %f}' % (time.perf_counter() - start))
"""


READS: dict = {}
FIRST: dict = {}
CPU: dict = {}
EVICT = {"how": "fadvise"}


#: ``--builds``: build name -> the PYTHONPATH that puts it first.
BUILDS: dict = {}


def run(label: str, path: str, cache: str) -> float:
    """Runs case ``label`` (``CASE`` or ``CASE@BUILD``) once; its seconds."""
    env = dict(os.environ)
    case, _at, build = label.partition("@")
    if build:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (BUILDS[build], env.get("PYTHONPATH")) if p)
    if case.endswith("-noprefetch"):
        env["FASTST_READ_AHEAD"] = "0"
        case = case[: -len("-noprefetch")]
    if case.endswith("-ref"):
        env.pop("PYTHONPATH", None)  # the reference package, not a checkout
    if case == "cat":
        command = [sys.executable, "-c", CAT.replace("EVICT", EVICTIONS[EVICT["how"]]), path, cache]
    else:
        child = CHILD.replace("EVICT", EVICTIONS[EVICT["how"]])
        child = child.replace("CASE_KINDS", repr((PEERS, LOADER_CASES)))
        command = [sys.executable, "-c", child, case, path, cache]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if "read" in got:
        READS.setdefault(label, []).append((got["read"], got.get("planned")))
    if got.get("cpu") is not None:
        CPU.setdefault(label, []).append(got["cpu"])
    if got.get("first") is not None:
        FIRST.setdefault(label, []).append(got["first"])
    return float(got["seconds"])


#: The module each peer needs.
NEEDS = {"runai": "runai_model_streamer", "fastsafetensors": "fastsafetensors"}


def _importable(peer: str) -> bool:
    """Whether ``peer``'s module imports here (else a line says it is left out)."""
    import importlib.util

    if importlib.util.find_spec(NEEDS[peer]) is None:
        print(f"{peer}: {NEEDS[peer]} is not installed, left out")
        return False
    return True


def load_average() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


#: Pairs compared round by round when both cases run: (case, baseline).
PAIRS = [
    ("np-plan", "np-copy"),
    ("np-plan-allocated", "np-copy"),
    ("np-plan", "np-plan-allocated"),
    ("tp-plan", "tp-slice-ref"),
    ("tp-plan", "tp-slice"),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", default="cat,np,np-noprefetch,pt,pt-noprefetch,pt-ref")
    parser.add_argument("--hot", action="store_true", help="hot rounds instead of cold")
    parser.add_argument(
        "--no-warm-up",
        action="store_true",
        help="loader cases: no untimed first run (a fresh process's memory; library"
        " code first run in the timed load is read from the disk and counted)",
    )
    parser.add_argument(
        "--evict",
        choices=sorted(EVICTIONS),
        default="drop" if os.geteuid() == 0 else "fadvise",
        help="cold: drop every cached page (root), or FILE's alone",
    )
    parser.add_argument(
        "--builds",
        default="",
        help="NAME=PYTHONPATH,...: every fastst loader case once more per build, as CASE@NAME",
    )
    args = parser.parse_args()
    EVICT["how"] = args.evict
    for spec in filter(None, args.builds.split(",")):
        name, _eq, where = spec.partition("=")
        BUILDS[name] = where
    if args.no_warm_up:
        os.environ["BENCH_WARM_UP"] = "0"
    cases = args.cases.split(",")
    cases = [c for c in cases if c not in PEERS or _importable(c)]
    cases += [
        f"{c}@{b}"
        for b in BUILDS
        for c in list(cases)
        if c in LOADER_CASES and c not in PEERS and not c.endswith("-ref")
    ]
    cache = "hot" if args.hot else "cold"
    times: dict = {c: [] for c in cases}
    shares: dict = {c: [] for c in cases}
    loads = [load_average()]
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
        loads.append(load_average())
    size = os.path.getsize(args.file)
    print(
        f"{args.file}: {size / 1e9:.2f} GB, {cache} ({args.evict}), {args.rounds} rounds"
        f" (medians, [every round]); load average per round: {' | '.join(loads)}"
    )
    for case in cases:
        med = statistics.median(times[case])
        line = f"  {case:15} {med:7.3f} s  worst {max(times[case]):6.3f} s"
        line += f"  {size / med / 1e9:5.2f} GB/s"
        if case != "cat":
            line += f"  share of cat {statistics.median(shares[case]):4.2f} (paired)"
        if case.startswith("pt") and "pt-ref" in times and case != "pt-ref":
            line += f"  vs reference {statistics.median(times['pt-ref']) / med:4.2f}x"
        if case in CPU:
            line += f"  CPU {statistics.median(CPU[case]):.2f} s"
        if case in READS:
            read = statistics.median(r for r, _p in READS[case])
            line += f"  read {read / 2**20:.0f} MiB"
            kept = [p for _r, p in READS[case] if p]
            if kept:
                line += f" for {kept[0] / 2**20:.0f} MiB planned ({read / kept[0]:.3f}x)"
        if case in FIRST:
            line += f"  first tensor {statistics.median(FIRST[case]):.3f} s"
            line += f" (worst {max(FIRST[case]):.3f})"
        print(line + "  [" + " ".join(f"{t:.3f}" for t in times[case]) + "]")
    pairs = PAIRS + [(f"{c}@{b}", f"{base}@{b}") for b in BUILDS for c, base in PAIRS]
    pairs += [(f"{c}@{b}", c) for b in BUILDS for c in cases if "@" not in c]
    pairs += [("np-plan", peer) for peer in PEERS]
    for case, base in pairs:
        if case in times and base in times:
            paired = [b / c for c, b in zip(times[case], times[base], strict=True)]
            print(
                f"  {base} / {case}: {statistics.median(paired):.3f} median of paired rounds,"
                f" {min(paired):.3f} worst round"
            )
    if "np-plan" in FIRST and "np-iter" in FIRST:
        paired = [b / c for c, b in zip(FIRST["np-plan"], FIRST["np-iter"], strict=True)]
        print(
            f"  first tensor, np-iter / np-plan: {statistics.median(paired):.3f} median of"
            f" paired rounds, {min(paired):.3f} worst round"
        )


if __name__ == "__main__":
    main()
