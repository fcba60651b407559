"""Speed of `fastst diff` and `fastst convert` against their yardsticks, same run.

    python benches/bench_cli_speed.py [--rounds N]

- diff: ``fastst.tools.inspect``'s diff of two ~1 GB checkpoints (the benchmark's
  Llama-like BF16 file and a copy with one tensor changed) against hashing
  both files (``fastst.tools.inspect.hash_file`` on each: SHA-256 and the other
  hashes in one pass). Target: diff throughput at least 0.8 of hashing's.
- convert: ``fastst convert``'s function (PyTorch pickle -> safetensors,
  ``torch.load(weights_only=True)``, shared tensors once, read-back check)
  against the reference's path, ``torch.load(weights_only=True)`` +
  ``safetensors.torch.save_file``, on a ~1 GB ``torch.save`` checkpoint.

Rounds alternate the two sides (A B A B ...) in one process, page cache hot;
medians are reported with their ratio. Inputs go to $FASTST_BENCH_DIR.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layouts import BENCH_DIR, SCALE, llama_layout, write_file  # noqa: E402


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _inputs() -> tuple:
    import fastst
    import fastst.numpy
    import numpy as np

    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    a = BENCH_DIR / f"llama-{SCALE:g}gb-bf16.safetensors"
    if not a.exists():
        write_file(a, llama_layout(SCALE), "BF16", 2)
    b = BENCH_DIR / f"llama-{SCALE:g}gb-bf16-tuned.safetensors"
    if not b.exists():
        with fastst.safe_open(a, "np") as f:
            arrays = {k: f.get_tensor(k) for k in f.keys()}
            metadata = f.metadata()
        name = "model.norm.weight"
        changed = arrays[name].copy()
        changed.view(np.uint16)[:7] ^= 1
        arrays[name] = changed
        fastst.numpy.save_file(arrays, b, metadata=metadata)
    pt = BENCH_DIR / f"llama-{SCALE:g}gb-bf16.bin"
    if not pt.exists():
        import fastst.torch
        import torch

        torch.save(fastst.torch.load_file(a), pt)
    return a, b, pt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    a, b, pt = _inputs()

    import safetensors.torch
    import torch
    from fastst import inspect as fi
    from fastst.tools.convert import convert_pickle
    from fastst.tools.diff import diff

    out_fastst = BENCH_DIR / "bench-convert-fastst.safetensors"
    out_ref = BENCH_DIR / "bench-convert-reference.safetensors"

    def reference_convert() -> None:
        state = torch.load(pt, weights_only=True)
        safetensors.torch.save_file(state, out_ref)

    sides = {
        "diff": (lambda: diff(a, b), lambda: (fi.hash_file(a), fi.hash_file(b))),
        "convert": (lambda: convert_pickle(pt, out_fastst), reference_convert),
    }
    gb = (os.path.getsize(a) + os.path.getsize(b)) / 1e9
    for name, (ours, yardstick) in sides.items():
        ours()
        yardstick()  # warm-up: page cache, imports, thread pools
        mine, theirs = [], []
        for _ in range(args.rounds):
            mine.append(_timed(ours))
            theirs.append(_timed(yardstick))
        m, t = statistics.median(mine), statistics.median(theirs)
        if name == "diff":
            print(
                f"diff of two files ({gb:.2f} GB): {m:.3f} s ({gb / m:.2f} GB/s); hashing both "
                f"{t:.3f} s ({gb / t:.2f} GB/s); diff / hash throughput {t / m:.2f} (target >= 0.8)"
            )
        else:
            print(
                f"convert {os.path.getsize(pt) / 1e9:.2f} GB pickle: fastst {m:.3f} s, "
                f"torch.load + reference save_file {t:.3f} s; reference / fastst {t / m:.2f}x "
                "(target >= 1.0)"
            )
    for path in (out_fastst, out_ref):
        path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
