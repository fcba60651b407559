"""torch.distributed.checkpoint on fastst against torch's Hugging Face storage and the disk.

Two parts, each measured in one run, interleaved round by round (every round runs each case
once, rotating the order), every case in fresh processes with its imports done and its state
dict built before the clock starts, ``os.sync()`` before each case:

``save``: 2 gloo ranks on the CPU save a Llama-like BF16 state dict (``--layers`` decoder
layers, about 0.67 GB with 4), every tensor a ``Shard(0)`` DTensor, with
``save_distributed=True, enable_consolidation=True`` and 4 output files (the ranks' files,
then the consolidated checkpoint, both flushed to disk by the writers):

- ``fastst``: ``fastst.torch.dcp.StorageWriter`` (default threads);
- ``torch``: torch's ``HuggingFaceStorageWriter`` with the reference ``safetensors``
  (``thread_count=2, thread_count_consolidation=4``);
- ``torch+switch``: the same with fastst serving ``import safetensors`` (the drop-in hook,
  as ``FASTST_AS_SAFETENSORS=1`` installs it).

torch's writer flushes the ranks' files but its consolidation flushes none of the files it
writes: rank 0 then ``fsync``s them inside the timed part, so that every case ends with the
whole checkpoint on the disk (fastst's writer and consolidation flush their files).

Reported per case: seconds from the barrier before ``dcp.save`` to its end (consolidation
included) and the peak resident memory each rank gained during the save (``ru_maxrss``
above what it held with its state dict built), the larger rank's.

``consolidate``: the ranks' files of one save (8 files) become 4 output files and the index,
from a cold page cache (each input file flushed and dropped from the cache before each
case, ``posix_fadvise(DONTNEED)``):

- ``fastst``: ``fastst.torch.dcp.consolidate`` (every output file flushed, whole or nothing);
- ``torch-tN``: torch's ``consolidate_safetensors_files(num_threads=N)`` for N in 1, 2, 4,
  then an ``fsync`` of every file it wrote (it flushes none), so that all end on the disk;
- ``copy``: ``cat`` of the input files to ``/dev/null``, then ``dd bs=8M conv=fsync`` of as
  many bytes into one file: the disk's copy limit, reading and writing one after the other;
- ``copy-pipe``: ``cat`` of the input files into ``dd bs=8M conv=fsync``: the same, overlapped
  through one pipe;
- ``copy-parK`` for K in 2, 4: the disk's limit for this job, reads and durable writes
  overlapped and parallel: K threads share the input files out, and each copies its files
  into files of its own through an 8 MiB page-aligned buffer, reading through the page cache
  (with its read-ahead) and writing around it (``O_DIRECT``, the last partial block padded
  then cut off), then ``fsync``s each file it wrote. Reads and writes overlap across the
  threads and with each thread's read-ahead. ``O_DIRECT`` reads and page-cache writes (or
  ``dd iflag=direct | dd oflag=direct`` pipelines) measured slower on the development disk.

Options: ``--gb N`` sizes the state dict instead of ``--layers`` (decoder layers only below
about 0.5 GB, with the embeddings and the head above); ``--warm`` consolidates from a warm page
cache (each input file read once before the clock) instead of a cold one; ``--cases`` picks
consolidation cases, ``fastst-tN`` among them (``consolidate(thread_count=N)``).

Run::

    python benches/bench_dcp.py --rounds 5 --dir /var/tmp/fastst-dcp-bench
    python benches/bench_dcp.py --part consolidate --gb 2 --warm --rounds 3 \
        --cases fastst,torch-t1,torch-t2,torch-t4,copy-par2,copy-par4
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SAVE_CASES = ("fastst", "torch", "torch+switch")
TORCH_THREADS = (1, 2, 4)
COPY_THREADS = (2, 4)
CONSOLIDATE_CASES = (
    "fastst",
    *(f"torch-t{n}" for n in TORCH_THREADS),
    "copy",
    "copy-pipe",
    *(f"copy-par{k}" for k in COPY_THREADS),
)
FILES = 4


def _layout(layers: int, embed: bool = True) -> List[Tuple[str, Tuple[int, ...]]]:
    """``layers`` decoder layers, with the embeddings and the head unless ``embed`` is False
    (about 0.1 GB a layer, 0.26 GB the embeddings and the head)."""
    from layouts import llama_layout

    out = llama_layout(1.0, layers=layers)
    return out if embed else [(n, s) for n, s in out if ".layers." in n]


def _size(gb: float) -> Tuple[int, bool]:
    """The layers (and whether the embeddings come too) of a state dict of about ``gb`` GB."""
    from layouts import HIDDEN, INTER, VOCAB

    layer = 2 * (4 * HIDDEN * HIDDEN + 3 * INTER * HIDDEN + 2 * HIDDEN)
    embed = 2 * 2 * VOCAB * HIDDEN
    if gb * 1e9 < 2 * embed:
        return max(1, round(gb * 1e9 / layer)), False
    return max(1, round((gb * 1e9 - embed) / layer)), True


def _mapping(layout: List[Tuple[str, Tuple[int, ...]]]) -> Dict[str, int]:
    """Tensor name -> one of :data:`FILES` output files, cut by size in layout order."""
    sizes = [(name, 2 * _numel(shape)) for name, shape in layout]
    total = sum(s for _, s in sizes)
    out, used = {}, 0
    for name, size in sizes:
        out[name] = min(FILES, 1 + used * FILES // total)
        used += size
    return out


def _numel(shape: Tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# one rank of a save ------------------------------------------------------------------


def _rank(
    rank: int, world: int, port: int, case: str, folder: str, size: Tuple[int, bool], out: str
) -> None:
    if case == "torch+switch":
        os.environ["FASTST_AS_SAFETENSORS"] = "1"
        from fastst._dropin import hook

        hook.install()
        # imported here, once: the hook's first import races when torch's writer threads
        # import safetensors.torch at the same time
        import safetensors.torch  # noqa: F401
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    layout = _layout(*size)
    state = {}
    for i, (name, shape) in enumerate(layout):
        rows = shape[0] // world
        local = torch.full((rows, *shape[1:]), float(i % 7 + rank), dtype=torch.bfloat16)
        stride = tuple(_numel(shape[d + 1 :]) for d in range(len(shape)))
        state[name] = DTensor.from_local(
            local, mesh, [Shard(0)], run_check=False, shape=torch.Size(shape), stride=stride
        )
    mapping = _mapping(layout)
    if case == "fastst":
        from fastst.torch import dcp as fdcp

        writer: Any = fdcp.StorageWriter(
            folder,
            fqn_to_index_mapping=mapping,
            save_distributed=True,
            enable_consolidation=True,
        )
    else:
        from torch.distributed.checkpoint import HuggingFaceStorageWriter

        writer = HuggingFaceStorageWriter(
            folder,
            fqn_to_index_mapping=mapping,
            thread_count=2,
            save_distributed=True,
            enable_consolidation=True,
            thread_count_consolidation=4,
        )
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    dist.barrier()
    start = time.perf_counter()
    dcp.save(state, storage_writer=writer)
    if case != "fastst" and rank == 0:
        _fsync_tree(folder)  # torch's consolidation flushes none of its files
    dist.barrier()
    seconds = time.perf_counter() - start
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    nbytes = sum(t.to_local().numel() * 2 for t in state.values())
    largest = max(t.to_local().numel() * 2 for t in state.values())
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"s": seconds, "rss_mb": grown, "bytes": nbytes, "largest": largest}, f)
    dist.destroy_process_group()


def _save_child(case: str, folder: str, size: Tuple[int, bool]) -> Dict[str, Any]:
    import multiprocessing
    import socket
    import tempfile

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tempfile.mkdtemp()
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_rank, args=(r, 2, port, case, folder, size, out)) for r in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode for p in procs):
        raise SystemExit(f"{case}: a rank failed")
    ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(2)]
    shutil.rmtree(out)
    return {
        "s": max(r["s"] for r in ranks),
        "rss_mb": max(r["rss_mb"] for r in ranks),
        "bytes": sum(r["bytes"] for r in ranks),
        "largest_mb": max(r["largest"] for r in ranks) / 2**20,
    }


# consolidation ---------------------------------------------------------------------------


def _drop_cache(paths: List[str]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _fsync_tree(folder: str) -> None:
    for name in os.listdir(folder):
        if not os.path.isfile(os.path.join(folder, name)):
            continue
        fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    fd = os.open(folder, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def _copy_share(files: List[str], dst: str, tag: int) -> None:
    """Copies ``files`` into files of their own in ``dst``: page-cache reads, direct writes."""
    import mmap

    block = 8 << 20
    buf = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT wants
    view = memoryview(buf)
    for n, path in enumerate(files):
        src = os.open(path, os.O_RDONLY)
        os.posix_fadvise(src, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        target = os.path.join(dst, f"copy-{tag}-{n}")
        try:
            out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
            direct = True
        except OSError:  # a file system without O_DIRECT
            out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            direct = False
        size = os.fstat(src).st_size
        offset = 0
        while offset < size:
            got = os.preadv(src, [buf], offset)
            if got <= 0:
                break
            length = -(-got // 4096) * 4096 if direct else got
            os.pwritev(out, [view[:length]], offset)
            offset += got
        os.ftruncate(out, size)
        os.fsync(out)
        os.close(out)
        os.close(src)
    view.release()
    buf.close()


def _warm(paths: List[str]) -> None:
    for path in paths:
        with open(path, "rb") as f:
            while f.read(8 << 20):
                pass


def _consolidate_child(
    case: str, src: str, dst: str, size: Tuple[int, bool], warm: bool
) -> Dict[str, Any]:
    inputs = sorted(glob.glob(os.path.join(src, "*.safetensors")))
    mapping = _mapping(_layout(*size))
    if case.startswith("fastst"):
        from fastst.torch import dcp as fdcp

        fdcp.consolidate  # noqa: B018 - the import done before the clock
    elif case.startswith("torch"):
        from torch.distributed.checkpoint._consolidate_hf_safetensors import (
            consolidate_safetensors_files,
        )
    os.makedirs(dst, exist_ok=True)
    if warm:
        _warm(inputs)
    else:
        _drop_cache(inputs)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    if case == "fastst":
        fdcp.consolidate(src, dst, mapping)
    elif case.startswith("fastst-t"):
        fdcp.consolidate(src, dst, mapping, thread_count=int(case[len("fastst-t") :]))
    elif case.startswith("torch"):
        consolidate_safetensors_files(src, dst, mapping, num_threads=int(case[len("torch-t") :]))
        _fsync_tree(dst)
    elif case == "copy":
        nbytes = sum(os.path.getsize(p) for p in inputs)
        subprocess.run(["cat", *inputs], stdout=subprocess.DEVNULL, check=True)
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={dst}/copy", "bs=8M", f"count={-(-nbytes // (8 << 20))}"]
            + ["conv=fsync", "status=none"],
            check=True,
        )
    elif case.startswith("copy-par"):
        from concurrent.futures import ThreadPoolExecutor

        k = int(case[len("copy-par") :])
        with ThreadPoolExecutor(k) as pool:
            list(pool.map(_copy_share, [inputs[i::k] for i in range(k)], [dst] * k, range(k)))
        _fsync_tree(dst)
    else:
        cat = subprocess.Popen(["cat", *inputs], stdout=subprocess.PIPE)
        subprocess.run(
            ["dd", f"of={dst}/copy", "bs=8M", "iflag=fullblock", "conv=fsync", "status=none"],
            stdin=cat.stdout,
            check=True,
        )
        cat.wait()
    seconds = time.perf_counter() - start
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    return {"s": seconds, "rss_mb": grown, "bytes": sum(os.path.getsize(p) for p in inputs)}


# the parent --------------------------------------------------------------------------------


def _run(argv: List[str]) -> Dict[str, Any]:
    os.sync()
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *argv],
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise SystemExit(f"{argv}: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _table(results: Dict[str, List[Dict[str, Any]]], cases: Tuple[str, ...]) -> Dict[str, float]:
    print("| case | median s (min-max) | GB/s | peak RSS growth MB, median (min-max) |")
    print("|---|---|---|---|")
    med = {}
    for case in cases:
        times = [x["s"] for x in results[case]]
        rss = [x["rss_mb"] for x in results[case]]
        med[case] = statistics.median(times)
        gbps = results[case][0]["bytes"] / med[case] / 1e9
        print(
            f"| {case} | {med[case]:.2f} ({min(times):.2f}-{max(times):.2f}) | {gbps:.2f} "
            f"| {statistics.median(rss):.0f} ({min(rss):.0f}-{max(rss):.0f}) |"
        )
    return med


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--no-embed", action="store_true", help="decoder layers only")
    parser.add_argument("--gb", type=float, help="about this many GB (instead of --layers)")
    parser.add_argument("--warm", action="store_true", help="inputs in the page cache")
    parser.add_argument(
        "--cases", help="comma-separated consolidation cases (default: all; fastst-tN too)"
    )
    parser.add_argument("--dir", default="/var/tmp/fastst-dcp-bench")
    parser.add_argument("--part", choices=("save", "consolidate", "both"), default="both")
    parser.add_argument("--json", help="write the raw results here")
    parser.add_argument("--child-save", nargs=2, metavar=("CASE", "FOLDER"))
    parser.add_argument("--child-consolidate", nargs=3, metavar=("CASE", "IN", "OUT"))
    args = parser.parse_args()
    size = _size(args.gb) if args.gb else (args.layers, not args.no_embed)
    sized = ["--layers", str(size[0])] + ([] if size[1] else ["--no-embed"])
    if args.child_save:
        print(json.dumps(_save_child(*args.child_save, size)))
        return 0
    if args.child_consolidate:
        print(json.dumps(_consolidate_child(*args.child_consolidate, size, args.warm)))
        return 0
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    raw: Dict[str, Any] = {}
    loads: List[float] = []
    if args.part in ("save", "both"):
        results: Dict[str, List[Dict[str, Any]]] = {c: [] for c in SAVE_CASES}
        for r in range(args.rounds):
            order = SAVE_CASES[r % 3 :] + SAVE_CASES[: r % 3]
            for case in order:
                folder = os.path.join(args.dir, "save-" + case.replace("+", "-"))
                shutil.rmtree(folder, ignore_errors=True)
                results[case].append(_run([*sized, "--child-save", case, folder]))
            loads.append(os.getloadavg()[0])
            line = "  ".join(f"{c} {results[c][-1]['s']:.2f}s" for c in SAVE_CASES)
            print(f"save round {r + 1}: {line}  (load {loads[-1]:.1f})", flush=True)
        first = results["fastst"][0]
        print(
            f"\nsave: 2 ranks, {first['bytes'] / 1e9:.2f} GB BF16 Shard(0), consolidated into "
            f"{FILES} files; largest local tensor {first['largest_mb']:.0f} MiB; "
            f"{args.rounds} rounds"
        )
        med = _table(results, SAVE_CASES)
        for other in ("torch", "torch+switch"):
            print(f"fastst vs {other}: {med[other] / med['fastst']:.2f}x")
        raw["save"] = results
    if args.part in ("consolidate", "both"):
        cases = tuple(args.cases.split(",")) if args.cases else CONSOLIDATE_CASES
        src = os.path.join(args.dir, "save-fastst", "sharded")
        if not os.path.isdir(src):
            _run([*sized, "--child-save", "fastst", os.path.dirname(src)])
        warm = ["--warm"] if args.warm else []
        results = {c: [] for c in cases}
        for r in range(args.rounds):
            k = r % len(cases)
            order = cases[k:] + cases[:k]
            for case in order:
                dst = os.path.join(args.dir, "out-" + case)
                shutil.rmtree(dst, ignore_errors=True)
                results[case].append(_run([*sized, *warm, "--child-consolidate", case, src, dst]))
                shutil.rmtree(dst, ignore_errors=True)
            loads.append(os.getloadavg()[0])
            line = "  ".join(f"{c} {results[c][-1]['s']:.2f}s" for c in cases)
            print(f"consolidate round {r + 1}: {line}  (load {loads[-1]:.1f})", flush=True)
        nbytes = results[cases[0]][0]["bytes"]
        state = "warm" if args.warm else "cold"
        print(f"\nconsolidate: 8 rank files, {nbytes / 1e9:.2f} GB, {state}; {args.rounds} rounds")
        med = _table(results, cases)
        ours = [c for c in cases if c.startswith("fastst")]
        torch_cases = [c for c in cases if c.startswith("torch")]
        limits = [c for c in cases if c.startswith("copy-par")]
        for mine in ours:
            worst = max(x["s"] for x in results[mine])
            if torch_cases:
                best = min(torch_cases, key=lambda c: med[c])
                print(f"{mine} vs {best} (torch's best): {med[best] / med[mine]:.2f}x")
            if limits:
                limit = min(limits, key=lambda c: med[c])
                print(
                    f"{mine} at {med[limit] / med[mine]:.2f} of the disk's limit ({limit}, "
                    f"{med[limit]:.2f} s); worst round {worst:.2f} s"
                )
        raw["consolidate"] = results
    print(f"\nload average (1 min) after each round: {', '.join(f'{x:.1f}' for x in loads)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=1)
    shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
