"""Distributed loading benchmark: N local processes (gloo on loopback) load a
sharded checkpoint of about 2 GB from a cold page cache.

Compared: ``fastst.torch.load_distributed`` (each byte read by one rank, the
rest over torch.distributed; for each ``unit``) against every rank calling the
reference's ``safetensors.torch.load_file`` on every shard, and every rank
calling ``fastst.torch.load_file(copy=True)`` (tensors with memory of their
own, as ``load_distributed`` gives). Reported per
method: wall time of the load (slowest rank, from a barrier), bytes read by
read calls (``rchar``) and from storage (``read_bytes``) summed over ranks,
and the bytes each rank requested.

    python benches/dist_bench.py [--world 4] [--gb 2] [--folder DIR]

The page cache is made cold before each method with
``posix_fadvise(POSIX_FADV_DONTNEED)`` on the checkpoint's files (or, with
``--drop-caches`` as root, by writing 1 to ``/proc/sys/vm/drop_caches``);
when neither works the run says so and the figures are warm-cache ones.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, List, Tuple

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layouts import HIDDEN, INTER, VOCAB, llama_layout  # noqa: E402


def layout(gb: float) -> List[Tuple[str, Tuple[int, ...]]]:
    """A Llama-like BF16 layout of about ``gb`` GB."""
    hidden, inter, vocab = HIDDEN, INTER, VOCAB
    per_layer = 2 * (4 * hidden * hidden + 3 * hidden * inter + 2 * hidden)
    layers = max(1, round((gb * 1e9 - 4 * vocab * hidden) / per_layer))
    return llama_layout(gb, layers)


def make_checkpoint(folder: Path, gb: float) -> str:
    """Writes (once) a sharded BF16 checkpoint; returns its index's path."""
    from fastst.torch import save_sharded

    index = folder / "model.safetensors.index.json"
    stamp = folder / f"made-{gb}"
    if index.exists() and stamp.exists():
        return str(index)
    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    tensors = {n: torch.randn(s, generator=g).to(torch.bfloat16) for n, s in layout(gb)}
    save_sharded(tensors, folder, max_shard_size="500MB")
    stamp.write_text("")
    return str(index)


def shard_files(index: str) -> List[str]:
    with open(index) as fh:
        weight_map = json.load(fh)["weight_map"]
    folder = os.path.dirname(index)
    return [os.path.join(folder, s) for s in sorted(set(weight_map.values()))]


def make_cold(files: List[str], drop_caches: bool) -> str:
    """Evicts the files' pages from the page cache; says how."""
    if drop_caches:
        try:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as fh:
                fh.write("1\n")
            return "drop_caches"
        except OSError as exc:
            print(f"cannot drop caches ({exc}); evicting the files instead", file=sys.stderr)
    if not hasattr(os, "posix_fadvise"):
        return "warm (no posix_fadvise on this system: figures are warm-cache ones)"
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return "posix_fadvise(DONTNEED) on each file"


def _io() -> Dict[str, int]:
    with open("/proc/self/io") as fh:
        return {k: int(v) for k, v in (line.split(": ") for line in fh.read().splitlines())}


def _worker(rank: int, world: int, port: int, index: str, method: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(minutes=10))
    import fastst
    import fastst.torch as ft
    from safetensors.torch import load_file as ref_load_file

    files = shard_files(index)
    dist.barrier()
    before = _io()
    start = time.perf_counter()
    if method == "reference":
        state: Dict[str, Any] = {}
        for path in files:
            state.update(ref_load_file(path))
        # load_file maps the files lazily: touch one byte per page so that
        # the data has really been read, as fastst's result has been
        for t in state.values():
            if t.numel():
                t.reshape(-1).view(torch.uint8)[::4096].sum()
        requested = sum(os.path.getsize(p) for p in files)
    elif method == "owned":
        state = ft.load_file(index, copy=True)
        requested = sum(os.path.getsize(p) for p in files)
    else:
        state = ft.load_distributed(index, unit=method)
        requested = -1
    loaded = time.perf_counter() - start
    after = _io()
    dist.barrier()
    everyone = time.perf_counter() - start
    check = ""
    if rank == 0:
        # spot check against a plain load of the same tensors
        names = list(state)[:: max(1, len(state) // 5)]
        with fastst.safe_open(index, "pt") as f:
            bad = [n for n in names if not torch.equal(f.get_tensor(n), state[n])]
        check = "ok" if not bad else f"MISMATCH {bad}"
    result = {
        "loaded": loaded,
        "everyone": everyone,
        "rchar": after["rchar"] - before["rchar"],
        "read_bytes": after["read_bytes"] - before["read_bytes"],
        "requested": requested,
        "bytes": sum(t.numel() * t.element_size() for t in state.values()),
        "check": check,
    }
    Path(out, f"{method}-{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--gb", type=float, default=2.0)
    parser.add_argument(
        "--folder", default=os.environ.get("FASTST_BENCH_DIR", "/tmp/fastst-bench") + "/dist"
    )
    parser.add_argument("--methods", default="chunk,tensor,file,reference,owned")
    parser.add_argument("--drop-caches", action="store_true")
    parser.add_argument("--warmup", type=int, choices=(0, 1), default=1)
    args = parser.parse_args()

    from fastst import _distributed as D

    index = make_checkpoint(Path(args.folder), args.gb)
    files = shard_files(index)
    handle, entries, _meta = D.open_table(index)
    handle.close()
    total = sum(e.nbytes for e in entries)
    on_disk = sum(os.path.getsize(p) for p in files)
    print(
        f"checkpoint: {index}, {len(files)} shards, {len(entries)} tensors, "
        f"{total / 1e9:.3f} GB of tensor data; world {args.world}; torch {torch.__version__}"
    )
    print("\nbalance (bytes the busiest rank reads / an equal share):")
    for unit in D.UNITS:
        loads = D.plan_bytes(D.plan_reads(entries, args.world, unit))
        print(f"  {unit:7s} {max(loads) / (total / args.world):.4f}  per rank {loads}")

    rows = []
    methods = args.methods.split(",")
    with tempfile.TemporaryDirectory() as out:
        # The first run on a machine also pays for the kernel reclaiming page cache to
        # give the ranks fresh memory: a warm-up run, not reported, takes that cost.
        for number, method in enumerate(methods[:1] * args.warmup + methods):
            how = make_cold(files, args.drop_caches)
            ctx = mp.start_processes(
                _worker,
                args=(args.world, _free_port(), index, method, out),
                nprocs=args.world,
                join=False,
                start_method="spawn",
            )
            while not ctx.join():
                pass
            ranks = [
                json.loads(Path(out, f"{method}-{r}.json").read_text()) for r in range(args.world)
            ]
            wall = max(r["loaded"] for r in ranks)
            if number >= args.warmup:
                rows.append((method, wall, ranks, how))
    print(f"\ncold cache by: {rows[0][3] if rows else '-'}")
    print(
        f"{'method':22s} {'wall s':>7s} {'GB/s':>6s} {'rchar GB':>9s} {'storage GB':>10s}  "
        "per-rank requested GB / check"
    )
    for method, wall, ranks, _how in rows:
        name = {"reference": "reference load_file*", "owned": "fastst load_file(copy)**"}.get(
            method, f"fastst dist ({method})"
        )
        rchar = sum(r["rchar"] for r in ranks) / 1e9
        storage = sum(r["read_bytes"] for r in ranks) / 1e9
        if method in ("reference", "owned"):
            per_rank = [on_disk / 1e9] * len(ranks)  # every rank reads every shard
        else:
            per_rank = [r["rchar"] / 1e9 for r in ranks]
        print(
            f"{name:22s} {wall:7.2f} {total / 1e9 / wall:6.2f} {rchar:9.3f} {storage:10.3f}  "
            f"{[round(x, 3) for x in per_rank]} {ranks[0]['check']}"
        )
    print("\n* every rank: load_file on each shard, then one byte of each page touched")
    print(
        "** every rank: fastst.torch.load_file(index, copy=True), tensors with memory of their "
        "own as load_distributed gives (the cost of materialising them)"
    )
    print(
        "rchar: bytes returned by read calls (the reference maps the files, so its reads "
        "are page faults, counted only in storage); storage: read_bytes summed over ranks "
        "(one node shares its page cache, so pages one rank faulted in are free to the others)."
    )


if __name__ == "__main__":
    main()
