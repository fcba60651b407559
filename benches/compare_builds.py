"""Compare two builds of fastst on the same files, interleaved (A B A B ...).

    python benches/compare_builds.py OLD_PYTHONPATH NEW_PYTHONPATH [--rounds N]

Each PYTHONPATH must hold a ``fastst`` package with its compiled module
(e.g. a checkout's ``python/`` folder after building the extension into it).
Every round runs each operation in a fresh subprocess per build, alternating
the builds, so that both see the same state of this VM (its fresh-memory cost
swings between rounds); the report gives the median seconds per build and the
ratio old/new (above 1: the new build is faster). Inputs are the benchmark
files of ``benches/layouts.py`` (generated into $FASTST_BENCH_DIR).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layouts import BENCH_DIR, SCALE, llama_layout, write_file  # noqa: E402

# Each snippet gets `path`, `many`, `tmp` and must leave its timed seconds in `t`.
OPS = {
    "open+keys, 20,000 tensors": """
t0 = time.perf_counter()
with fastst.safe_open(many, "np") as f:
    keys = f.keys()
t = time.perf_counter() - t0
""",
    "get_tensor views of every tensor": """
t0 = time.perf_counter()
with fastst.safe_open(path, "np") as f:
    arrays = [f.get_tensor(k) for k in f.keys()]
t = time.perf_counter() - t0
""",
    "views + one byte per page": """
t0 = time.perf_counter()
with fastst.safe_open(path, "np") as f:
    total = sum(int(f.get_tensor(k).reshape(-1).view(np.uint8)[::4096].sum()) for k in f.keys())
t = time.perf_counter() - t0
""",
    "get_tensors(copy=True)": """
t0 = time.perf_counter()
with fastst.safe_open(path, "np") as f:
    arrays = f.get_tensors(copy=True)
t = time.perf_counter() - t0
""",
    "get_tensor(dtype=float32) of each tensor": """
t0 = time.perf_counter()
with fastst.safe_open(path, "np") as f:
    arrays = [f.get_tensor(k, dtype=np.float32) for k in f.keys()]
t = time.perf_counter() - t0
""",
    "torch load_file + touch": """
import torch, fastst.torch
t0 = time.perf_counter()
sd = fastst.torch.load_file(path)
total = sum(int(v.reshape(-1).view(torch.uint8)[::4096].sum()) for v in sd.values())
t = time.perf_counter() - t0
""",
    "numpy save_file 256 MiB": """
import fastst.numpy
arrays = {f"w{i}": np.full((1 << 22,), i, dtype=np.float32) for i in range(16)}
t0 = time.perf_counter()
fastst.numpy.save_file(arrays, tmp)
t = time.perf_counter() - t0
os.unlink(tmp)
""",
    "verify": """
from fastst import _fastst
t0 = time.perf_counter()
_fastst.inspect.verify_file(path)
t = time.perf_counter() - t0
""",
    "hash of each tensor, 1 thread": """
from fastst import _fastst
t0 = time.perf_counter()
_fastst.inspect.hash_file(path, tensors=True, threads=1)
t = time.perf_counter() - t0
""",
    "stats of each tensor, 1 thread": """
from fastst import _fastst
t0 = time.perf_counter()
_fastst.inspect.stats_file(path, threads=1)
t = time.perf_counter() - t0
""",
}

RUNNER = """
import os, sys, time, json
import numpy as np
import fastst
path, many, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
{body}
print(json.dumps(t))
"""


def inputs() -> tuple:
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    path = BENCH_DIR / f"llama-{SCALE:g}gb-bf16.safetensors"
    if not path.exists():
        write_file(path, llama_layout(SCALE), "BF16", 2)
    many = BENCH_DIR / "20000-tensors.safetensors"
    if not many.exists():
        layout = [(f"blocks.{i // 10}.sub.{i % 10}.weight", (4, 4)) for i in range(20_000)]
        write_file(many, layout, "F32", 4)
    return str(path), str(many), str(BENCH_DIR / "compare-builds-out.safetensors")


def run(pythonpath: str, body: str, args: tuple) -> float:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    out = subprocess.run(
        [sys.executable, "-c", RUNNER.format(body=body), *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="", help="run only ops whose name contains this")
    a = ap.parse_args()
    args = inputs()
    report = {}
    for name, body in OPS.items():
        if a.only not in name:
            continue
        old, new = [], []
        for _ in range(a.rounds):
            old.append(run(a.old, body, args))
            new.append(run(a.new, body, args))
        mo, mn = statistics.median(old), statistics.median(new)
        report[name] = {"old_s": mo, "new_s": mn, "old/new": mo / mn}
        print(f"{name:36s} old {mo:8.4f} s  new {mn:8.4f} s  old/new {mo / mn:5.2f}x", flush=True)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
