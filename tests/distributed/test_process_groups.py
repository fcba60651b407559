"""Loading across processes over torch.distributed (gloo, loopback).

Each test spawns 2 or 4 local processes that run a list of scenarios in one
process group (spawning is the slow part) and write what they saw to JSON;
the assertions run here. Bytes read from storage per rank come from
``/proc/self/io`` (``rchar``: the bytes this process's read calls returned,
which gloo's socket traffic does not add to).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Dict, List

import fastst
import numpy as np
import pytest
import torch
import torch.distributed as dist
from fastst import _distributed as D
from fastst._distributed import replicated, tensor_parallel  # noqa: F401 (D.replicated, D.tensor_parallel)
from fastst._sources.sharded import find_index
from fastst.torch import (
    DistributedLoadError,
    load_distributed,
    load_file,
    load_tensor_parallel,
    save_file,
    save_sharded,
)
from helpers.ranks import start_ranks

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (dist.is_available() and dist.is_gloo_available()), reason="torch without gloo"
    ),
]

TIME_LIMIT = 150  # seconds for one spawned group, scenarios included
SLACK = 16 << 10  # reads of /proc/self/io and similar, besides headers
GAP = 4096  # a local file's byte ranges closer than this are read as one (Source::coalesce_gap)


# the checkpoints --------------------------------------------------------------


def _tensors() -> Dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    out: Dict[str, torch.Tensor] = {}
    for i in range(6):
        out[f"layers.{i}.attn.q_proj.weight"] = torch.randn(96, 128, generator=g)
        out[f"layers.{i}.mlp.up.weight"] = torch.randn(200, 96, generator=g).to(torch.bfloat16)
        out[f"layers.{i}.norm"] = torch.randn(96, generator=g).to(torch.float16)
    out["embed"] = torch.randn(301, 64, 3, generator=g)
    out["ids"] = torch.arange(1000, dtype=torch.int64)
    out["mask"] = torch.rand(33, 7, generator=g) > 0.5
    out["scalar"] = torch.tensor(2.5)
    out["empty"] = torch.empty(0, 5)
    out["bytes"] = torch.randint(0, 255, (4099,), dtype=torch.uint8, generator=g)
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    root = tmp_path_factory.mktemp("dist")
    tensors = _tensors()
    single = root / "single.safetensors"
    save_file(tensors, str(single), metadata={"format": "pt"})
    index = save_sharded(tensors, root / "sharded", max_shard_size=300_000)
    one = root / "one"
    one.mkdir()
    save_file(tensors, str(one / "model.safetensors"))
    other = dict(tensors)
    other["layers.0.norm"] = torch.zeros(97, dtype=torch.float16)
    save_file(other, str(root / "other.safetensors"))
    big = {
        f"w{i}": torch.randn(1536, 1024, generator=torch.Generator().manual_seed(i))
        for i in range(16)
    }
    save_file(big, str(root / "big.safetensors"))  # 96 MiB
    bad = root / "bad.safetensors"
    bad.write_bytes((10**9).to_bytes(8, "little") + b'{"a": 1}')
    return {
        "root": str(root),
        "single": str(single),
        "index": index,
        "sharded": str(root / "sharded"),
        "one": str(one),
        "other": str(root / "other.safetensors"),
        "bad": str(bad),
        "missing": str(root / "missing.safetensors"),
        "big": str(root / "big.safetensors"),
    }


# in the spawned processes ------------------------------------------------------


HAVE_IO = os.path.exists("/proc/self/io")


def _rchar() -> int:
    """Bytes this process's read calls returned so far (0 without /proc)."""
    if not HAVE_IO:
        return 0
    with open("/proc/self/io") as fh:
        return int(next(line for line in fh if line.startswith("rchar:")).split(":")[1])


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu().contiguous().reshape(-1)
    return t.view(torch.uint8) if t.numel() else t.to(torch.uint8)


def _same(got: Dict[str, torch.Tensor], want: Dict[str, torch.Tensor]) -> List[str]:
    """Names whose tensors differ in order, dtype, shape or any bit."""
    if list(got) != list(want):
        return ["<names or order differ>"]
    return [
        k
        for k in want
        if got[k].dtype != want[k].dtype
        or got[k].shape != want[k].shape
        or not torch.equal(_bits(got[k]), _bits(want[k]))
    ]


def _overhead(path: str) -> int:
    """Bytes every rank reads besides tensor data: headers and the index."""
    handle, _entries, _meta = D.open_table(path)
    try:
        raw = handle._raw
        shards = getattr(raw, "_shards", None)
        total = sum(s.data_start for s in shards.values()) if shards else raw.data_start
    finally:
        handle.close()
    resolved = D.resolve_path(path)
    if os.path.isdir(resolved) or resolved.endswith(".json"):
        index = find_index(resolved)
        total += os.path.getsize(index)
    return total + SLACK


def _read_bytes() -> int:
    """Bytes this process caused to be fetched from storage (0 without /proc)."""
    if not HAVE_IO:
        return 0
    with open("/proc/self/io") as fh:
        return int(next(line for line in fh if line.startswith("read_bytes:")).split(":")[1])


def _cold(path: str) -> Callable[[int, int], Dict[str, Any]]:
    """A load from a cold page cache (rank 0 evicts the file first),
    measuring what each rank fetched from storage."""

    def run(rank: int, world: int) -> Dict[str, Any]:
        if rank == 0 and hasattr(os, "posix_fadvise"):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)  # dirty pages are not evicted
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        dist.barrier()
        before = _read_bytes()
        got = load_distributed(path, chunk_size=1 << 20)
        fetched = _read_bytes() - before
        return {"fetched": fetched, "total": sum(t.numel() * 4 for t in got.values())}

    return run


def _replicate(path: str, **options: Any) -> Callable[[int, int], Dict[str, Any]]:
    def run(rank: int, world: int) -> Dict[str, Any]:
        before = _rchar()
        got = load_distributed(path, **options)
        read = _rchar() - before
        handle, entries, _meta = D.open_table(path)
        handle.close()
        plan = D.plan_reads(
            entries, world, options.get("unit", "chunk"), options.get("chunk_size", D.DEFAULT_CHUNK)
        )
        return {
            "differ": _same(got, load_file(D.resolve_path(path))),
            "read": read,
            "planned": D.plan_bytes(plan),
            "overhead": _overhead(path),
            "total": sum(e.nbytes for e in entries),
        }

    return run


TP_PLAN = {
    "*.q_proj.weight": "row",
    "*.up.weight": "column",
    "embed": 1,
    "ids": (slice(3, 900, 7),),
    "mask": (None, Ellipsis, slice(2, 5)),
    "scalar": "replicate",
    "bytes": "skip",
}


def _gaps(shape: Any, itemsize: int, index: Any) -> int:
    """The bytes between the byte ranges ``index`` selects that are read with them: the gaps
    of at most :data:`GAP`."""
    offsets = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(tuple(shape))[index]
    starts = np.unique(offsets) * itemsize
    gaps = starts[1:] - (starts[:-1] + itemsize)
    return int(gaps[(gaps > 0) & (gaps <= GAP)].sum())


def _tp(path: str, plan: Any, **options: Any) -> Callable[[int, int], Dict[str, Any]]:
    def run(rank: int, world: int) -> Dict[str, Any]:
        before = _rchar()
        got = load_tensor_parallel(path, plan, **options)
        read = _rchar() - before
        r = options.get("rank", rank)
        w = options.get("world_size", world)
        handle, entries, _meta = D.open_table(path)
        want: Dict[str, torch.Tensor] = {}
        gaps = 0
        with fastst.safe_open(path if not os.path.isdir(path) else path, "pt") as f:
            for e in entries:
                spec = D.tensor_parallel._spec_for(plan, e.name, e.shape, "replicate")
                index = D.tp_index(e, spec, r, w)
                if index is not None:
                    want[e.name] = f.get_slice(e.name)[index]
                    gaps += _gaps(e.shape, want[e.name].element_size(), index)
        handle.close()
        data = sum(t.numel() * t.element_size() for t in got.values())
        return {
            "differ": _same(got, want),
            "read": read,
            "data": data,
            "gaps": gaps,
            "overhead": _overhead(path),
        }

    return run


def _fails(call: Callable[[], Any]) -> Dict[str, Any]:
    start = time.monotonic()
    try:
        call()
    except DistributedLoadError as exc:
        return {
            "raised": type(exc).__name__,
            "rule": exc.rule,
            "message": str(exc),
            "causes": {str(k): v for k, v in exc.causes.items()},
            "is_safetensor_error": isinstance(exc, fastst.SafetensorError),
            "seconds": time.monotonic() - start,
        }
    except Exception as exc:  # noqa: BLE001 - reported to the test
        return {"raised": type(exc).__name__, "message": str(exc)}
    return {"raised": None}


def _inject_read_failure(rank_to_fail: int, path: str) -> Callable[[int, int], Dict[str, Any]]:
    """A rank whose reads fail in the middle of the transfer (as a disk or a
    network file system would), after the ranks agreed."""

    def run(rank: int, world: int) -> Dict[str, Any]:
        original = D.replicated._Reader.read
        calls = [0]

        def failing(self: Any, jobs: Any) -> None:
            calls[0] += 1
            if rank == rank_to_fail and calls[0] == 3:
                raise OSError(5, "Input/output error (injected)")
            original(self, jobs)

        D.replicated._Reader.read = failing  # type: ignore[method-assign]
        try:
            return _fails(lambda: load_distributed(path, budget=world * 2 * 8192, chunk_size=4096))
        finally:
            D.replicated._Reader.read = original  # type: ignore[method-assign]

    return run


def _direct(run: Callable[[int, int], Dict[str, Any]]) -> Callable[[int, int], Dict[str, Any]]:
    """``run`` with every piece of 1000 bytes or more sent straight between
    destination tensors (the path large tensors take under gloo)."""

    def patched(rank: int, world: int) -> Dict[str, Any]:
        saved = D.replicated._DIRECT_MIN
        D.replicated._DIRECT_MIN = 1000
        try:
            return run(rank, world)
        finally:
            D.replicated._DIRECT_MIN = saved

    return patched


def _scenarios(files: Dict[str, str], world: int, full: bool) -> Dict[str, Any]:
    last = world - 1
    s: Dict[str, Any] = {
        "single_chunk": _replicate(files["single"], chunk_size=4096, budget=world * 2 * 64 << 10),
        "sharded_tensor": _replicate(files["index"], unit="tensor"),
        "sharded_direct": _direct(_replicate(files["index"], chunk_size=4096, budget=64 << 10)),
        "tp_single": _tp(files["single"], TP_PLAN),
        "missing_on_last": lambda r, w: _fails(
            lambda: load_distributed(files["missing"] if r == last else files["single"])
        ),
        "other_checkpoint_on_rank_1": lambda r, w: _fails(
            lambda: load_distributed(files["other"] if r == 1 else files["single"])
        ),
    }
    if full:
        s.update(
            {
                "folder_index_file": _replicate(files["sharded"], unit="file"),
                "folder_one_file": _replicate(files["one"], chunk_size=8192),
                "single_default": _replicate(files["single"]),
                "tp_sharded_callable": _tp(
                    files["index"], lambda name, shape: "column" if len(shape) >= 2 else None
                ),
                "tp_explicit_rank": _tp(files["single"], {"embed": "row"}, rank=1, world_size=3),
                "malformed_on_rank_0": lambda r, w: _fails(
                    lambda: load_distributed(files["bad"] if r == 0 else files["single"])
                ),
                "options_differ": lambda r, w: _fails(
                    lambda: load_distributed(files["single"], unit="tensor" if r else "chunk")
                ),
                "bad_plan_on_rank_1": lambda r, w: _fails(
                    lambda: load_tensor_parallel(files["single"], {"scalar": "row"} if r else None)
                ),
                "read_fails_on_rank_1": _inject_read_failure(1, files["single"]),
                "read_fails_direct": _direct(_inject_read_failure(1, files["single"])),
                "after_failures": _replicate(files["single"], chunk_size=4096),
                "cold_big": _cold(files["big"]),
            }
        )
    return s


def _worker(rank: int, world: int, port: int, files: Dict[str, str], full: bool, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if sys.platform.startswith("linux"):
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    results: Dict[str, Any] = {}
    try:
        for name, scenario in _scenarios(files, world, full).items():
            try:
                results[name] = scenario(rank, world)
            except Exception:  # noqa: BLE001 - reported to the test
                results[name] = {"crashed": traceback.format_exc()}
        Path(out, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(world: int, files: Dict[str, str], full: bool, out: Path) -> List[Dict[str, Any]]:
    ctx = start_ranks(_worker, (world, _free_port(), files, full, str(out)), world)
    deadline = time.monotonic() + TIME_LIMIT
    while not ctx.join(timeout=max(1.0, deadline - time.monotonic())):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            pytest.fail(f"{world} ranks did not finish within {TIME_LIMIT} s (a hang)")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


# assertions ---------------------------------------------------------------------


def _check_replicated(results: List[Dict[str, Any]], name: str, unit_max: int) -> None:
    world = len(results)
    for rank, res in enumerate(results):
        got = res[name]
        assert "crashed" not in got, got.get("crashed")
        assert got["differ"] == [], (name, rank)
        planned = got["planned"]
        assert sum(planned) == got["total"]
        # balanced: no rank reads more than its share plus one unit of work
        assert max(planned) <= got["total"] / world + unit_max, (name, planned)
        # what this rank really read: its share of the data, plus headers
        if HAVE_IO:
            assert planned[rank] <= got["read"] <= planned[rank] + got["overhead"], (name, got)
    assert min(results[0][name]["planned"]) > 0 or world > 8


def _check_tp(results: List[Dict[str, Any]], name: str) -> None:
    for rank, res in enumerate(results):
        got = res[name]
        assert "crashed" not in got, got.get("crashed")
        assert got["differ"] == [], (name, rank)
        # only the slices: their bytes, the short gaps read with them, and headers
        if HAVE_IO:
            assert got["data"] <= got["read"] <= got["data"] + got["gaps"] + got["overhead"], got


def _check_failure(results: List[Dict[str, Any]], name: str, rule: str, *words: str) -> None:
    for rank, res in enumerate(results):
        got = res[name]
        assert got.get("raised") == "DistributedLoadError", (name, rank, got)
        assert got["rule"] == rule and got["is_safetensor_error"]
        assert f"[{rule}]" in got["message"]
        for word in words:
            assert word in got["message"], (name, rank, word, got["message"])
        assert got["seconds"] < 30


def test_two_ranks(files: Dict[str, str], tmp_path: Path) -> None:
    results = _spawn(2, files, True, tmp_path)
    biggest = max(t.numel() * t.element_size() for t in _tensors().values())
    _check_replicated(results, "single_chunk", 4096)
    _check_replicated(results, "single_default", D.DEFAULT_CHUNK)
    _check_replicated(results, "sharded_tensor", biggest)
    _check_replicated(results, "folder_index_file", 300_000)
    _check_replicated(results, "folder_one_file", 8192)
    _check_replicated(results, "after_failures", 4096)
    _check_tp(results, "tp_single")
    _check_tp(results, "tp_sharded_callable")
    _check_tp(results, "tp_explicit_rank")
    _check_failure(results, "missing_on_last", "dist-rank-failed", "rank 1", "FileNotFoundError")
    _check_failure(results, "malformed_on_rank_0", "dist-rank-failed", "rank 0", "bad.safetensors")
    _check_failure(
        results, "other_checkpoint_on_rank_1", "dist-header-mismatch", "rank 0", "rank 1"
    )
    _check_failure(results, "options_differ", "dist-option-mismatch", "rank 0", "rank 1")
    _check_failure(results, "bad_plan_on_rank_1", "dist-rank-failed", "rank 1", "dist-bad-plan")
    _check_failure(results, "read_fails_on_rank_1", "dist-rank-failed", "rank 1", "injected")
    _check_failure(results, "read_fails_direct", "dist-rank-failed", "rank 1", "injected")
    _check_replicated(results, "sharded_direct", 4096)
    for res in results:
        assert list(res["missing_on_last"]["causes"]) == ["1"]
    # From a cold cache, storage serves each rank about its half of the 96 MiB file (plus what
    # the kernel reads ahead, up to a few MiB), never the whole file. Filesystems that do not
    # account reads per process (tmpfs, some containers) report 0 for every rank.
    fetched = [res["cold_big"]["fetched"] for res in results]
    total = results[0]["cold_big"]["total"]
    if sum(fetched):
        assert sum(fetched) >= 0.9 * total, fetched
        assert max(fetched) <= total / 2 + (16 << 20), fetched


def test_four_ranks(files: Dict[str, str], tmp_path: Path) -> None:
    results = _spawn(4, files, False, tmp_path)
    biggest = max(t.numel() * t.element_size() for t in _tensors().values())
    _check_replicated(results, "single_chunk", 4096)
    _check_replicated(results, "sharded_tensor", biggest)
    _check_replicated(results, "sharded_direct", 4096)
    _check_tp(results, "tp_single")
    _check_failure(results, "missing_on_last", "dist-rank-failed", "rank 3", "FileNotFoundError")
    _check_failure(
        results, "other_checkpoint_on_rank_1", "dist-header-mismatch", "ranks 0,2,3", "rank 1"
    )


# without processes ---------------------------------------------------------------


def _entries(sizes: List[int], files: List[str]) -> List[D.Entry]:
    out, offset = [], {f: 0 for f in files}
    for i, (size, f) in enumerate(zip(sizes, files, strict=True)):
        out.append(D.Entry(f"t{i}", "U8", (size,), f, offset[f], offset[f] + size))
        offset[f] += size
    return out


@pytest.mark.parametrize("unit", D.UNITS)
@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_plans_read_every_byte_once(unit: str, world: int) -> None:
    g = torch.Generator().manual_seed(world)
    sizes = [int(x) for x in torch.randint(0, 50_000, (40,), generator=g)]
    names = [f"s{i % 3}" for i in range(40)]
    entries = _entries(sizes, names)
    plan = D.plan_reads(entries, world, unit, chunk_size=1000)
    covered: Dict[int, List[tuple]] = {}
    for pieces in plan:
        for i, start, stop in pieces:
            assert 0 <= start < stop <= sizes[i]
            covered.setdefault(i, []).append((start, stop))
    for i, size in enumerate(sizes):
        spans = sorted(covered.get(i, []))
        position = 0
        for start, stop in spans:
            assert start == position
            position = stop
        assert position == size
    loads = D.plan_bytes(plan)
    unit_max = {"chunk": 1000, "tensor": max(sizes), "file": max(sizes) * 14}[unit]
    assert max(loads) <= sum(sizes) / world + unit_max


def test_split_bounds_match_tensor_split() -> None:
    for n in (0, 1, 5, 12, 13):
        for world in (1, 2, 3, 4, 5):
            parts = torch.arange(n).tensor_split(world)
            for rank in range(world):
                lo, hi = D.split_bounds(n, rank, world)
                assert torch.equal(torch.arange(n)[lo:hi], parts[rank])


@pytest.mark.parametrize(
    "index",
    [
        (slice(1, 3),),
        (slice(None), slice(2, 7)),
        (Ellipsis, 2),
        (Ellipsis, -1, slice(1, None, 2)),
        (None, 1, slice(0, 5, 2)),
        (slice(1, 2), Ellipsis, slice(1, 3)),
        (slice(0, 0),),
        (-1, slice(-3, None)),
        (slice(10, 20),),
        (Ellipsis,),
        (2,),
        slice(5, 9),
    ],
)
def test_tensor_parallel_index_equals_get_slice(files: Dict[str, str], index: Any) -> None:
    with fastst.safe_open(files["single"], "pt") as f:
        want = f.get_slice("embed")[index]
    got = load_tensor_parallel(
        files["single"], {"embed": index}, rank=0, world_size=1, default="skip"
    )
    assert list(got) == ["embed"]
    assert got["embed"].shape == want.shape and torch.equal(got["embed"], want)


def test_tensor_parallel_torch_errors_pass_through(files: Dict[str, str]) -> None:
    with pytest.raises(ValueError):
        load_tensor_parallel(
            files["single"], {"embed": (slice(None, None, -1),)}, rank=0, world_size=1
        )
    with pytest.raises(IndexError):
        load_tensor_parallel(files["single"], {"embed": (400,)}, rank=0, world_size=1)


def test_without_a_group(files: Dict[str, str]) -> None:
    assert not dist.is_initialized()
    with pytest.raises(DistributedLoadError) as info:
        load_distributed(files["single"])
    assert info.value.rule == "dist-no-group"
    with pytest.raises(DistributedLoadError) as info:
        load_tensor_parallel(files["single"], {"embed": "row"})
    assert info.value.rule == "dist-no-group"
    with pytest.raises(DistributedLoadError) as info:
        load_tensor_parallel(files["single"], {"scalar": "row"}, rank=0, world_size=2)
    assert info.value.rule == "dist-bad-plan" and "scalar" in str(info.value)


def test_folder_with_several_files_and_no_index(tmp_path: Path) -> None:
    save_file({"a": torch.zeros(2)}, str(tmp_path / "a.safetensors"))
    save_file({"b": torch.zeros(2)}, str(tmp_path / "b.safetensors"))
    with pytest.raises(fastst.FolderError) as info:
        D.resolve_path(tmp_path)
    # The rule of every listing's choice (fastst._layout.choose_checkpoint).
    assert info.value.rule == "folder-ambiguous"
    assert info.value.candidates == ["a.safetensors", "b.safetensors"]


@pytest.mark.parametrize("spec, dim", [("row", 0), ("column", 1), (2, 2), (-1, 2), ("np1", 1)])
def test_split_parts_put_together_are_the_tensor(
    files: Dict[str, str], spec: Any, dim: int
) -> None:
    import numpy as np

    if spec == "np1":
        spec = np.int64(1)
    whole = load_file(files["single"])["embed"]
    parts = [
        load_tensor_parallel(
            files["single"], {"embed": spec}, rank=r, world_size=3, default="skip"
        )["embed"]
        for r in range(3)
    ]
    assert [p.shape[dim] for p in parts] == [t.shape[dim] for t in whole.tensor_split(3, dim)]
    assert torch.equal(torch.cat(parts, dim), whole)


def test_a_status_record_round_trips_through_its_bytes() -> None:
    ok = D.Status(None, bytes(range(32)), bytes(range(32, 64)))
    assert len(ok.to_bytes()) == D.Status.SIZE
    assert D.Status.from_bytes(ok.to_bytes()) == ok
    failed = D.Status("OSError: gone \u00e9")
    assert D.Status.from_bytes(failed.to_bytes()) == failed
    long = D.Status.from_bytes(D.Status("x" * 5000).to_bytes())
    assert long.failure is not None and long.failure.endswith("...")
    assert len(long.failure.encode()) <= D.Status.SIZE - 3
