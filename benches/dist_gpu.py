"""The NCCL path of fastst's distributed loading, on the GPUs of one machine.

    torchrun --standalone --nproc_per_node=NGPU benches/dist_gpu.py [--gb 2] [--folder DIR]
    python benches/dist_gpu.py [--gb 2]          # one GPU: world size 1, no torchrun
    python benches/dist_gpu.py --cpu             # dry run of the script on the CPU (gloo)

Each rank uses ``cuda:LOCAL_RANK`` (``torch.cuda.set_device``) and an NCCL
process group. From a cold page cache (``posix_fadvise(DONTNEED)`` on the
checkpoint's files), it times and checks:

* ``load_distributed(index, device="cuda")``: every tensor on every GPU, each
  byte read once across the ranks, all-gathered by NCCL;
* ``load_tensor_parallel``: each rank's rows/columns of the projection
  weights on its GPU;
* the reference, ``safetensors.torch.load_file(shard, device="cuda:N")`` on
  every shard on every rank;

and prints the wall time (slowest rank) and GB/s (checkpoint bytes / wall).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dist_bench import make_checkpoint, make_cold, shard_files  # noqa: E402


def _standalone() -> None:
    """Environment of a one-process group when not started by torchrun."""
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(
    label: str,
    files: Any,
    total: int,
    device: torch.device,
    run: Callable[[], Dict[str, torch.Tensor]],
) -> Any:
    rank = dist.get_rank()
    if rank == 0:
        make_cold(files, False)
    dist.barrier()
    _sync(device)
    start = time.perf_counter()
    state = run()
    _sync(device)
    mine = time.perf_counter() - start
    slowest = torch.tensor([mine], device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    wall = float(slowest.item())
    held = sum(t.numel() * t.element_size() for t in state.values())
    if rank == 0:
        print(
            f"{label:34s} {wall:7.3f} s  {total / 1e9 / wall:7.2f} GB/s of checkpoint  "
            f"(rank 0 holds {held / 1e9:.3f} GB on {next(iter(state.values())).device})",
            flush=True,
        )
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0)
    parser.add_argument(
        "--folder", default=os.environ.get("FASTST_BENCH_DIR", "/tmp/fastst-bench") + "/dist"
    )
    parser.add_argument("--budget-mib", type=int, default=256)
    parser.add_argument(
        "--cpu", action="store_true", help="dry run of this script on the CPU (gloo), no GPU"
    )
    args = parser.parse_args()

    _standalone()
    local_rank = int(os.environ["LOCAL_RANK"])
    if args.cpu:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()

    import fastst
    import fastst.torch as ft
    from fastst import _distributed as D
    from safetensors.torch import load_file as ref_load_file

    if rank == 0:
        make_checkpoint(Path(args.folder), args.gb)
    dist.barrier()
    index = str(Path(args.folder) / "model.safetensors.index.json")
    files = shard_files(index)
    handle, entries, _meta = D.open_table(index)
    handle.close()
    total = sum(e.nbytes for e in entries)
    if rank == 0:
        if args.cpu:
            what = "CPU (gloo dry run)"
        else:
            nccl = torch.cuda.nccl.version()
            nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
            what = f"{torch.cuda.get_device_name()}, NCCL {nccl}"
        print(
            f"{what} x {world}, torch {torch.__version__}; "
            f"checkpoint {total / 1e9:.3f} GB in {len(files)} shards",
            flush=True,
        )

    state = _timed(
        f"fastst load_distributed ({dist.get_backend()})",
        files,
        total,
        device,
        lambda: ft.load_distributed(index, device=device, budget=args.budget_mib << 20),
    )
    if rank == 0:
        with fastst.safe_open(index, "pt") as f:
            bad = [n for n in f.keys() if not torch.equal(f.get_tensor(n), state[n].cpu())]
        print("  bit-identical to safe_open on the CPU:", "yes" if not bad else f"NO {bad[:5]}")
    del state
    if device.type == "cuda":
        torch.cuda.empty_cache()

    # the first matching pattern wins: down_proj by columns, the other projections by rows
    plan = {"*down_proj.weight": "column", "*proj.weight": "row", "*embed_tokens.weight": 0}
    part = _timed(
        "fastst load_tensor_parallel",
        files,
        total,
        device,
        lambda: ft.load_tensor_parallel(index, plan, device=device),
    )
    if rank == 0:
        with fastst.safe_open(index, "pt") as f:
            name = "model.layers.0.mlp.down_proj.weight"
            lo, hi = D.split_bounds(f.get_slice(name).get_shape()[1], rank, world)
            same = torch.equal(f.get_slice(name)[:, lo:hi], part[name].cpu())
        print("  its slice equals get_slice:", "yes" if same else "NO")
    del part
    if device.type == "cuda":
        torch.cuda.empty_cache()

    def reference() -> Dict[str, torch.Tensor]:
        out: Dict[str, torch.Tensor] = {}
        for path in files:
            out.update(ref_load_file(path, device=str(device)))
        return out

    _timed("reference load_file on every rank", files, total, device, reference)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
