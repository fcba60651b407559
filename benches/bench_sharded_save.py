"""Sharded saves of a Llama-like BF16 state dict over an existing checkpoint, against the disk's
write limit and huggingface_hub, measured in one run, interleaved round by round.

Cases (each in a fresh interpreter with its imports done before the clock starts; every round
runs each case once, rotating the order; ``os.sync()`` before each case):

- ``dd``: ``dd bs=8M oflag=direct conv=fsync`` of the same number of bytes into as many files
  (the disk's durable write limit), over the files of the round before (``dd`` truncates them);
- ``fastst``: ``fastst.torch.save_sharded`` over the checkpoint of the round before (the
  whole-or-nothing commit: staged shards, the index switched, final names linked, the index
  switched again), every file flushed;
- ``fed``: the same save fed tensor by tensor (``save_sharded(pairs, layout=...)``, the
  streaming sharded writer: each tensor written at its offset in its shard), over the
  checkpoint of the round before;
- ``hub``: huggingface_hub's ``save_torch_state_dict`` (the reference package writing each
  shard) over its checkpoint of the round before, then an ``fsync`` of every file it wrote, so
  that both saves end with the data on the disk.

Every case writes over what it wrote the round before (a first round, not counted, writes
them): a save replaces a checkpoint, and the old one's blocks are freed (on a file system
mounted with ``discard``, trimmed too). ``dd`` and huggingface_hub truncate the old files before
writing, so their flushes wait for it; fastst lets the old shards go once the new checkpoint is
durable, in the background.

Reported: median and min-max seconds per case, GB/s, the seconds of an ``os.sync()`` run right
after the save, off the clock (what the save left for the system to finish), the peak resident
memory of the child (``ru_maxrss``) above the state dict it holds, and the ratios of the
medians (the worst round too). Run::

    python benches/bench_sharded_save.py --rounds 5 --dir /var/tmp/shard-bench

``--gb`` sets the state dict's size (default 1.1) and ``--shards`` the number of shards.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
from typing import Dict, List

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, time
    import torch
    case, folder, gb, shards = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    total = int(gb * 1e9)
    per = 64 << 20  # bytes per tensor
    count = max(1, total // per)
    state = {f"model.layers.{i}.w": torch.full((per // 2,), float(i % 7), dtype=torch.bfloat16)
             for i in range(count)}
    nbytes = sum(t.numel() * 2 for t in state.values())
    limit = -(-nbytes // shards)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if case == "fastst":
        import fastst.torch as ft
        start = time.perf_counter()
        ft.save_sharded(state, folder, max_shard_size=limit)
    elif case == "fed":
        import fastst.torch as ft
        layout = {n: (t.dtype, tuple(t.shape)) for n, t in state.items()}
        start = time.perf_counter()
        ft.save_sharded(iter(state.items()), folder, max_shard_size=limit, layout=layout)
    elif case == "hub":
        from huggingface_hub import save_torch_state_dict
        start = time.perf_counter()
        os.makedirs(folder, exist_ok=True)
        save_torch_state_dict(state, folder, max_shard_size=limit, safe_serialization=True)
        for name in os.listdir(folder):
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        fd = os.open(folder, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    else:
        import subprocess
        start = time.perf_counter()
        os.makedirs(folder, exist_ok=True)
        each = -(-nbytes // shards)
        blocks = -(-each // (8 << 20))
        for i in range(shards):
            subprocess.run(["dd", "if=/dev/zero", f"of={folder}/part{i}", "bs=8M",
                            f"count={blocks}", "oflag=direct", "conv=fsync", "status=none"],
                           check=True)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    after = time.perf_counter()
    os.sync()  # what the save left to the system (the old blocks' release), off the clock
    synced = time.perf_counter() - after
    print(json.dumps({"s": seconds, "sync_s": synced, "bytes": nbytes,
                      "rss_mb": (peak - base) / 1024}))
    """
)

CASES = ("dd", "fastst", "fed", "hub")


def run(case: str, folder: str, gb: float, shards: int) -> Dict[str, float]:
    os.sync()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, case, folder, str(gb), str(shards)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gb", type=float, default=1.1)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--dir", default="/var/tmp/fastst-shard-bench")
    parser.add_argument("--json", help="write the raw results here")
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    results: Dict[str, List[Dict[str, float]]] = {c: [] for c in CASES}
    for case in CASES:  # a round not counted: every case then saves over its own checkpoint
        run(case, os.path.join(args.dir, case), args.gb, args.shards)
    for r in range(args.rounds):
        order = CASES[r % len(CASES) :] + CASES[: r % len(CASES)]
        for case in order:
            folder = os.path.join(args.dir, case)
            results[case].append(run(case, folder, args.gb, args.shards))
        load = os.getloadavg()[0]
        line = "  ".join(f"{c} {results[c][-1]['s']:.2f}s" for c in CASES)
        print(f"round {r + 1}: {line}  (load {load:.1f})", flush=True)
    print(f"\n{args.gb} GB BF16 in {args.shards} shards, {args.rounds} rounds, interleaved")
    print("| case | median s (min-max) | GB/s | then `sync`, s | peak RSS above the tensors, MB |")
    print("|---|---|---|---|---|")
    med = {}
    for case in CASES:
        times = [x["s"] for x in results[case]]
        med[case] = statistics.median(times)
        gbps = results[case][0]["bytes"] / med[case] / 1e9
        rss = statistics.median(x["rss_mb"] for x in results[case])
        spread = f"{min(times):.2f}-{max(times):.2f}"
        synced = statistics.median(x.get("sync_s", 0.0) for x in results[case])
        print(f"| {case} | {med[case]:.2f} ({spread}) | {gbps:.2f} | {synced:.2f} | {rss:.0f} |")
    worst = max(f["s"] / d["s"] for f, d in zip(results["fastst"], results["dd"], strict=True))
    print(
        f"\nfastst vs dd (dd s / fastst s): {med['dd'] / med['fastst']:.2f}x "
        f"(worst round {1 / worst:.2f}x)"
    )
    print(f"fastst vs huggingface_hub (hub s / fastst s): {med['hub'] / med['fastst']:.2f}x")
    print(f"fed vs dd: {med['dd'] / med['fed']:.2f}x, vs hub: {med['hub'] / med['fed']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
