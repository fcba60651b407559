"""`fastst stats` against `fastst hash` over the same bytes, warm page cache.

    python benches/bench_stats.py [--dir DIR] [--rounds N] [--mb SIZE] [--threads N]

Writes a Llama-like BF16 file, the same tensors in F32, an F8_E4M3 file and a
file of 20 000 small tensors into DIR, reads each once (warm cache), then
times the core's `stats_file` and `hash_file` on each file, interleaved
(round-robin, each round starting one place further), and prints medians and
the speed of stats relative to hash (hash time / stats time: 1.0 is as fast,
the target is at least 0.5). Both run in this process through the extension,
with the same thread count.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import ml_dtypes
import numpy as np
from fastst import _fastst
from fastst.numpy import save_file


def _files(folder: Path, mb: int) -> Dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rows = max(1, mb * (1 << 20) // (8 * 4096 * 2))  # 8 tensors of rows x 4096 BF16
    weights = {
        f"model.layers.{i}.mlp.{p}.weight": (rng.standard_normal((rows, 4096)) * 0.02).astype(
            np.float32
        )
        for i in range(4)
        for p in ("up_proj", "down_proj")
    }
    files = {
        "bf16": (
            folder / "bf16.safetensors",
            {k: v.astype(ml_dtypes.bfloat16) for k, v in weights.items()},
        ),
        "f32": (folder / "f32.safetensors", weights),
        "f8_e4m3": (
            folder / "f8.safetensors",
            {k: v.astype(ml_dtypes.float8_e4m3fn) for k, v in weights.items()},
        ),
        "20k-small": (
            folder / "small.safetensors",
            {f"t.{i}": rng.standard_normal(64).astype(np.float16) for i in range(20_000)},
        ),
    }
    out = {}
    for name, (path, tensors) in files.items():
        if not path.exists():
            save_file(tensors, path)
        out[name] = path
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/fastst-bench-stats")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--mb", type=int, default=256, help="size of the BF16 file (MB)")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    files = _files(Path(args.dir), args.mb)
    for path in files.values():  # warm the page cache
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    cases: List[Tuple[str, str, Callable[[], object]]] = []
    for name, path in files.items():
        p = str(path)
        cases.append((name, "hash", lambda p=p: _fastst.inspect.hash_file(p, threads=args.threads)))
        cases.append(
            (name, "stats", lambda p=p: _fastst.inspect.stats_file(p, threads=args.threads))
        )
    times: Dict[Tuple[str, str], List[float]] = {(n, k): [] for n, k, _ in cases}
    for r in range(args.rounds):
        for i in range(len(cases)):
            name, kind, run = cases[(i + r) % len(cases)]
            start = time.perf_counter()
            run()
            times[(name, kind)].append(time.perf_counter() - start)
    print(f"cores {os.cpu_count()}, threads {args.threads or 'all'}, {args.rounds} rounds, medians")
    print(f"{'file':<10} {'MB':>7} {'hash s':>8} {'stats s':>8} {'stats GB/s':>10} {'vs hash':>8}")
    for name, path in files.items():
        size = path.stat().st_size
        h = statistics.median(times[(name, "hash")])
        s = statistics.median(times[(name, "stats")])
        rate = size / s / 1e9
        print(f"{name:<10} {size / 1e6:>7.0f} {h:>8.3f} {s:>8.3f} {rate:>10.2f} {h / s:>8.2f}")


if __name__ == "__main__":
    main()
