"""Owned loads (``copy=True``, ``dtype=``, ``backend="pread"``) against the
disk and memory limits measured the same way in the same run.

Cold (root: each run evicts the file with ``posix_fadvise(DONTNEED)`` after
its imports, in a fresh process; variants interleaved, medians):

    python benches/owned_loads.py cold ROUNDS VARIANT... [--bf16 F] [--f16 F]

Before each cold run the file is read once (``cat``), so that every run
starts from the same state: the file cached, then evicted by the run. The
variants: ``cat`` (the disk limit), ``np_copy``, ``np_pread``, ``np_f32``,
``pt_copy``, ``pt_pread``, ``pt_f32``, ``ref_pt_pread`` (the reference's
torch pread back end), ``fresh1x``/``fresh2x`` (touching as much fresh memory
as the destinations take), ``cat+fresh1x``/``cat+fresh2x`` (both, one after
the other), ``knob:<np|f32>:THREADS:PIECE_MIB:DIRECT`` (the core's batch
load with explicit settings).

Hot (one process, fastst and the reference interleaved, medians):

    python benches/owned_loads.py hot ROUNDS

Copy the inputs into a folder of your own first (another process reading
the same file would warm it): ``--bf16`` is the Llama-like BF16 checkpoint of
``benches/layouts.py``, ``--f16`` its F16 twin (the reference's numpy path
cannot read BF16).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CHILD = r"""
import os, sys, time, subprocess
variant, path, cold = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
import numpy as np
import fastst, fastst.numpy
if variant.startswith("pt") or variant.startswith("ref"):
    import torch, fastst.torch
import safetensors, safetensors.numpy, safetensors.torch
def evict(p):
    os.sync()
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
size = os.path.getsize(path)
def cat():
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
def fresh(n):
    a = np.empty(n, np.uint8)
    a.fill(1)
def run():
    if variant == "cat":
        cat()
    elif variant == "cat+fresh1x":
        cat(); fresh(size)
    elif variant == "cat+fresh2x":
        cat(); fresh(2 * size)
    elif variant == "fresh1x":
        fresh(size)
    elif variant == "fresh2x":
        fresh(2 * size)
    elif variant == "np_copy":
        fastst.numpy.load_file(path, copy=True)
    elif variant == "np_pread":
        fastst.numpy.load_file(path, backend="pread", copy=True)
    elif variant == "np_f32":
        fastst.numpy.load_file(path, dtype=np.float32)
    elif variant == "pt_copy":
        fastst.torch.load_file(path, copy=True)
    elif variant == "pt_pread":
        fastst.torch.load_file(path, backend="pread", copy=True)
    elif variant == "pt_f32":
        fastst.torch.load_file(path, dtype=torch.float32)
    elif variant == "ref_pt_pread":
        with safetensors.safe_open(path, "pt", backend="pread") as f:
            {k: f.get_tensor(k) for k in f.keys()}
    elif variant.startswith("knob"):
        _, kind, threads, piece, direct = variant.split(":")
        from fastst._dtypes import NUMPY_DTYPES
        from fastst._fastst.read import load_into
        f = fastst.safe_open(path, "np")
        names, outs, keep = f.offset_keys(), [], []
        for n in names:
            src, shape, _b, _e = f._raw.info(n)
            a = np.empty(shape, NUMPY_DTYPES["F32" if kind == "f32" else src])
            keep.append(a)
            outs.append(a.reshape(-1).view(np.uint8))
        targets = ["F32" if kind == "f32" else None] * len(names)
        load_into(f._raw, names, outs, targets, None, None, int(threads), int(piece) << 20, 0,
                  direct == "1")
    else:
        raise SystemExit("unknown variant " + variant)
if cold:
    evict(path)
t = time.perf_counter()
run()
print(time.perf_counter() - t)
"""


def cold_run(variant: str, path: str) -> float:
    # Same start for every run: the file cached, then evicted by the run (so
    # each run finds the same amount of recently freed memory).
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, variant, path, "1"], capture_output=True, text=True
    )
    if out.returncode:
        raise SystemExit(out.stderr)
    return float(out.stdout.split()[-1])


def cold(rounds: int, variants: list, bf16: str) -> None:
    times = {v: [] for v in variants}
    for _ in range(rounds):
        for v in variants:
            times[v].append(cold_run(v, bf16))
    report(times, "cat", "cat/this")


def hot(rounds: int, bf16: str, f16: str) -> None:
    import fastst.numpy
    import numpy as np
    import safetensors.numpy

    size = os.path.getsize(f16)
    cases = {
        "fastst copy=True (BF16)": lambda: fastst.numpy.load_file(bf16, copy=True),
        "fastst copy=True (F16)": lambda: fastst.numpy.load_file(f16, copy=True),
        "reference load_file (F16)": lambda: safetensors.numpy.load_file(f16),
        "fresh memory np.empty+fill": lambda: np.empty(size, np.uint8).fill(1),
    }
    for f in cases.values():
        f()
    times = {k: [] for k in cases}
    for _ in range(rounds):
        for k, f in cases.items():
            start = time.perf_counter()
            out = f()
            times[k].append(time.perf_counter() - start)
            del out
    report(times, "reference load_file (F16)", "ref/this")


def report(times: dict, base_name: str, label: str) -> None:
    base = statistics.median(times[base_name])
    for name, runs in times.items():
        med = statistics.median(runs)
        listed = " ".join(f"{x:.3f}" for x in runs)
        print(f"{name:28s} median {med:.3f}s  {label} {base / med:.2f}  runs {listed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["cold", "hot"])
    parser.add_argument("rounds", type=int)
    parser.add_argument("variants", nargs="*")
    parser.add_argument("--bf16", default="/tmp/cold-bench/llama-1gb-bf16.safetensors")
    parser.add_argument("--f16", default="/tmp/cold-bench/llama-1gb-f16.safetensors")
    args = parser.parse_args()
    if args.mode == "cold":
        cold(args.rounds, args.variants or ["cat", "np_copy"], args.bf16)
    else:
        hot(args.rounds, args.bf16, args.f16)


if __name__ == "__main__":
    main()
