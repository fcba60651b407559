"""Durable and plain saves of a ~1 GB Llama-like BF16 state dict against
the raw write limits, measured in one run, interleaved round by round
(A B C ... B C A ...), medians and ratios (the ratio of the medians, and the
median of the ratios within each round).

Cases (each round runs every case once, after ``os.sync()`` so that no case
pays for another's dirty pages; each round starts one case further down the
list, so that no case always follows the same one):

- ``write_fsync``: the reference limit of a durable save: the same bytes
  written to a fresh file with ``ndarray.tofile`` then ``os.fsync``.
- ``fastst_replace``: ``fastst.numpy.save_file`` over an existing file of
  the same size, default policy (durable because it replaces a file: the
  data and the rename are on disk when it returns).
- ``fastst_durable_new``: ``fastst.serialize_file(..., durable=True)`` to a
  fresh file (the durable write alone, without replacing a file).
- ``tofile``: the same bytes written to a fresh file with ``ndarray.tofile``
  (no fsync): the limit of a non-durable save.
- ``fastst_nosync``: ``fastst.serialize_file(..., durable=False)`` to a
  fresh file.
- ``reference``: the reference package's ``safetensors.numpy.save_file`` to
  a fresh file.
- ``fastst_torch`` / ``reference_torch`` (with ``--torch``): the same state
  dict as torch bfloat16 tensors saved to a fresh file by
  ``fastst.torch.save_file`` and ``safetensors.torch.save_file``.

Run (as root or not; nothing is dropped from the page cache)::

    python benches/bench_write_durable.py --rounds 5 --dir /tmp/wdur-bench

``FASTST_BENCH_GB`` (or ``--gb``) scales the state dict as for the other
benchmarks. The files live in ``--dir`` (the same filesystem for every case;
it must not be tmpfs for the durable figures to mean anything).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from layouts import llama_like, tofile  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=float(os.environ.get("FASTST_BENCH_GB", "1")))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default="/tmp/fastst-write-bench")
    parser.add_argument("--torch", action="store_true", help="add the torch save_file cases")
    parser.add_argument(
        "--settle", type=float, default=0.5, help="seconds of rest before each case (untimed)"
    )
    parser.add_argument(
        "--only", default="", help="comma-separated case names to run (default: all)"
    )
    args = parser.parse_args()

    import fastst
    import fastst.numpy as fnp
    import safetensors.numpy as ref_numpy

    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    sd = llama_like(args.gb)
    arrays = list(sd.values())
    payload = sum(a.nbytes for a in arrays)
    replaced = folder / "replace.safetensors"
    fresh = folder / "fresh.bin"

    cases: Dict[str, Callable[[], None]] = {
        "write_fsync": lambda: tofile(arrays, fresh, True),
        "fastst_replace": lambda: fnp.save_file(sd, replaced),
        "fastst_durable_new": lambda: fastst.serialize_file(sd, fresh, durable=True),
        "tofile": lambda: tofile(arrays, fresh, False),
        "fastst_nosync": lambda: fastst.serialize_file(sd, fresh, durable=False),
        "reference": lambda: ref_numpy.save_file(sd, fresh),
    }
    if args.torch:
        import fastst.torch as ftorch
        import safetensors.torch as ref_torch
        import torch

        td = {k: torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) for k, v in sd.items()}
        cases["fastst_torch"] = lambda: ftorch.save_file(td, fresh)
        cases["reference_torch"] = lambda: ref_torch.save_file(td, fresh)
    if args.only:
        wanted = set(args.only.split(","))
        cases = {k: v for k, v in cases.items() if k in wanted}

    # The file replaced by the durable case exists before its first round.
    fnp.save_file(sd, replaced)
    times: Dict[str, List[float]] = {k: [] for k in cases}
    names = list(cases)
    for r in range(args.rounds):
        # Each round starts one case later, so that no case always runs
        # right after the same other one.
        for name in names[r % len(names) :] + names[: r % len(names)]:
            fresh.unlink(missing_ok=True)
            os.sync()  # no backlog of dirty pages from the previous case
            # fastst lets go of a replaced file on a background thread (the
            # old file's pages and blocks are freed there): let that finish
            # rather than charge it to the next case.
            time.sleep(args.settle)
            t0 = time.perf_counter()
            cases[name]()
            times[name].append(time.perf_counter() - t0)
        print(
            f"round {r + 1}: " + "  ".join(f"{k} {v[-1]:.3f}s" for k, v in times.items()),
            flush=True,
        )
    fresh.unlink(missing_ok=True)
    replaced.unlink(missing_ok=True)

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n{payload / 2**30:.2f} GiB, {args.rounds} rounds, medians (s) and throughput:")
    for k, v in med.items():
        print(f"  {k:16s} {v:.3f} s  {payload / v / 2**20:7.0f} MiB/s")

    def ratio(label: str, num: str, den: str) -> None:
        if num in med and den in med:
            paired = statistics.median(a / b for a, b in zip(times[num], times[den], strict=True))
            print(f"  {label}: {med[num] / med[den]:.2f} (median of round ratios {paired:.2f})")

    print("ratios (time of the limit / time of fastst; 1.0 = as fast as the limit):")
    ratio("durable replace vs write+fsync (target >= 0.83)", "write_fsync", "fastst_replace")
    ratio("durable new file vs write+fsync", "write_fsync", "fastst_durable_new")
    ratio("durable=False vs reference save_file (target >= 1.0)", "reference", "fastst_nosync")
    ratio("durable=False vs ndarray.tofile (target >= 0.8)", "tofile", "fastst_nosync")
    ratio("torch save_file vs reference torch save_file", "reference_torch", "fastst_torch")
    ratio("torch save_file vs ndarray.tofile", "tofile", "fastst_torch")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
