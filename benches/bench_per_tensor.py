"""Per-tensor owned paths with a warm cache: one call per tensor, fastst and
the reference interleaved in one process (A B A B ...), medians.

    python benches/bench_per_tensor.py ROUNDS [--bf16 F] [--f16 F] [--only SUBSTR]

Cases, for every tensor of the file and for its largest tensor alone:
``get_tensor(k, dtype=np.float32)`` (fastst, BF16 file), fastst's view plus
``astype`` (the baseline a user would write), the reference's
``get_tensor(k).astype(np.float32)`` (its numpy path cannot read BF16: the
F16 twin of the same layout) and ``get_tensor(k).float()`` (torch, BF16);
and the pread back ends' plain ``get_tensor(k)`` (both on the F16 twin).
Inputs: ``--bf16`` is the Llama-like checkpoint of ``benches/layouts.py``
(``FASTST_BENCH_GB=1``), ``--f16`` its F16 twin; every page of each result
is touched.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Dict, List

import numpy as np


def touch(a: object) -> None:
    flat = np.asarray(a).reshape(-1).view(np.uint8)
    int(flat[::4096].sum())


def cases(bf16: str, f16: str) -> Dict[str, Callable[[], None]]:
    import fastst
    import safetensors

    def every(opener: Callable[[], object], get: Callable[[object, str], object], one: bool):
        def run() -> None:
            with opener() as f:  # type: ignore[attr-defined]
                keys = f.keys()  # type: ignore[attr-defined]
                if one:
                    keys = [max(keys, key=lambda k: f.get_slice(k).get_shape()[0])]  # type: ignore[attr-defined]
                for k in keys:
                    touch(get(f, k))

        return run

    out: Dict[str, Callable[[], None]] = {}
    for one, tag in ((False, "all"), (True, "131MB")):
        out[f"{tag} fastst get_tensor(dtype=f32) BF16"] = every(
            lambda: fastst.safe_open(bf16, "np"),
            lambda f, k: f.get_tensor(k, dtype=np.float32),  # type: ignore[attr-defined]
            one,
        )
        out[f"{tag} fastst view.astype(f32) BF16"] = every(
            lambda: fastst.safe_open(bf16, "np"),
            lambda f, k: f.get_tensor(k).astype(np.float32),  # type: ignore[attr-defined]
            one,
        )
        out[f"{tag} ref get_tensor.astype(f32) F16"] = every(
            lambda: safetensors.safe_open(f16, "np"),
            lambda f, k: f.get_tensor(k).astype(np.float32),  # type: ignore[attr-defined]
            one,
        )
        out[f"{tag} ref pt get_tensor.float() BF16"] = every(
            lambda: safetensors.safe_open(bf16, "pt"),
            lambda f, k: f.get_tensor(k).float().numpy(),  # type: ignore[attr-defined]
            one,
        )
        out[f"{tag} fastst pread get_tensor F16"] = every(
            lambda: fastst.safe_open(f16, "np", backend="pread"),
            lambda f, k: f.get_tensor(k),  # type: ignore[attr-defined]
            one,
        )
        out[f"{tag} ref pread get_tensor F16"] = every(
            lambda: safetensors.safe_open(f16, "np", backend="pread"),
            lambda f, k: f.get_tensor(k),  # type: ignore[attr-defined]
            one,
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int)
    parser.add_argument("--bf16", default="/tmp/fastst-bench/llama-1gb-bf16.safetensors")
    parser.add_argument("--f16", default="/tmp/fastst-bench/llama-1gb-f16.safetensors")
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    todo = {k: f for k, f in cases(args.bf16, args.f16).items() if args.only in k}
    for f in todo.values():
        f()  # warm the cache and the allocator
    times: Dict[str, List[float]] = {k: [] for k in todo}
    for _ in range(args.rounds):
        for k, f in todo.items():
            start = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - start)
    for k, runs in times.items():
        med = statistics.median(runs)
        spread = f"{min(runs):.3f}-{max(runs):.3f}"
        print(f"{k:40s} median {med:.3f}s  min-max {spread}")
    pairs = [
        ("fastst get_tensor(dtype=f32) BF16", "ref get_tensor.astype(f32) F16"),
        ("fastst get_tensor(dtype=f32) BF16", "ref pt get_tensor.float() BF16"),
        ("fastst pread get_tensor F16", "ref pread get_tensor F16"),
    ]
    for tag in ("all", "131MB"):
        for a, b in pairs:
            ka, kb = f"{tag} {a}", f"{tag} {b}"
            if ka in times and kb in times:
                ratio = statistics.median(times[kb]) / statistics.median(times[ka])
                print(f"{tag}: {b} / {a} = {ratio:.2f}x")


if __name__ == "__main__":
    main()
