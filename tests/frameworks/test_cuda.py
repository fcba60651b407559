"""fastst's torch paths with CUDA devices, against the reference on the same
files: loads to ``cuda``/``cuda:0``/``0`` (views, copies, conversions,
slices), saves of CUDA tensors, and the distributed loader under NCCL in a
one-rank group. Skipped where torch sees no CUDA device (CI has none); the
CPU-only behaviour with those device names is checked in test_torch.py."""

from __future__ import annotations

import contextlib
import socket
from datetime import timedelta
from pathlib import Path
from typing import Dict, Iterator

import fastst
import fastst.torch as ft
import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.torch as ref
import torch
import torch.distributed as dist

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

KINDS = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]


def _bits(t: torch.Tensor) -> bytes:
    """The tensor's bytes, wherever it lives (bit patterns: NaN payloads count)."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def _tensors() -> Dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    out: Dict[str, torch.Tensor] = {}
    for i, kind in enumerate(KINDS):
        shape = (37, 65) if i % 2 else (1 << 20,)
        raw = torch.randint(0, 256, (int(np.prod(shape)) * kind.itemsize,), generator=gen)
        t = raw.to(torch.uint8).view(kind).reshape(shape)
        if kind == torch.bool:
            t = raw[: t.numel()].remainder(2).to(torch.bool).reshape(shape)
        out[f"t{i}.{str(kind).split('.')[-1]}"] = t
    out["scalar"] = torch.tensor(3.5)
    out["empty"] = torch.empty(0, 4)
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cuda") / "model.safetensors"
    ref.save_file(_tensors(), str(path), metadata={"format": "pt"})
    return path


@pytest.mark.parametrize("device", ["cuda", "cuda:0", 0, torch.device("cuda", 0)])
def test_load_file_matches_the_reference(model: Path, device: object) -> None:
    ours = ft.load_file(model, device=device)
    # The reference refuses a torch.device here ("device ... is invalid");
    # fastst takes it, as torch's own loaders do.
    theirs = ref.load_file(model, device="cuda:0" if isinstance(device, torch.device) else device)
    assert list(ours) == list(theirs)
    for name, t in ours.items():
        assert t.device == theirs[name].device and t.device.type == "cuda", name
        assert t.dtype == theirs[name].dtype and t.shape == theirs[name].shape, name
        assert _bits(t) == _bits(theirs[name]), name


def test_safe_open_tensors_and_slices_match_the_reference(model: Path) -> None:
    with (
        fastst.safe_open(model, "pt", device="cuda:0") as f,
        safetensors.safe_open(model, "pt", device="cuda:0") as r,
    ):
        assert f.keys() == r.keys()
        for name in f.keys():
            a, b = f.get_tensor(name), r.get_tensor(name)
            assert a.device == b.device and _bits(a) == _bits(b), name
            if a.dim() >= 1 and a.shape[0] > 3:
                sa, sb = f.get_slice(name)[1:-2], r.get_slice(name)[1:-2]
                assert sa.device == sb.device and _bits(sa) == _bits(sb), name


def test_owned_and_converted_loads_land_on_the_device(model: Path) -> None:
    cpu = ft.load_file(model)
    copies = ft.load_file(model, device="cuda:0", copy=True)
    for name, t in copies.items():
        assert t.device.type == "cuda" and _bits(t) == _bits(cpu[name]), name
    halves = [n for n, t in cpu.items() if t.dtype in (torch.float16, torch.bfloat16)]
    assert len(halves) == 2
    with fastst.safe_open(model, "pt", device="cuda:0") as f:
        for name in halves:
            t = f.get_tensor(name, dtype=torch.float32)
            assert t.device.type == "cuda" and t.dtype == torch.float32, name
            # Widening is exact and keeps NaN payloads (signalling NaNs
            # too, which torch's own CPU conversion quiets): numpy and
            # ml_dtypes are the oracle, as for the CPU paths.
            kind = np.float16 if cpu[name].dtype == torch.float16 else ml_dtypes.bfloat16
            want = np.frombuffer(_bits(cpu[name]), kind).astype(np.float32)
            assert _bits(t) == want.tobytes(), name
        with pytest.raises(ValueError, match="no conversion from I64 to F32"):
            f.get_tensor("t4.int64", dtype=torch.float32)


def test_saving_cuda_tensors_writes_the_reference_bytes(tmp_path: Path) -> None:
    tensors = {k: v.to("cuda:0") for k, v in _tensors().items()}
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
    ft.save_file(tensors, ours, metadata={"k": "v"})
    ref.save_file(tensors, str(theirs), metadata={"k": "v"})
    assert ours.read_bytes() == theirs.read_bytes()
    assert ft.save(tensors) == ref.save(tensors)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _nccl_group() -> Iterator[None]:
    """A one-rank NCCL process group for the block (skips where torch has no NCCL)."""
    if not dist.is_nccl_available():
        pytest.skip("torch without NCCL")
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{_free_port()}",
        rank=0,
        world_size=1,
        timeout=timedelta(seconds=60),
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_distributed_load_under_nccl_in_a_one_rank_group(model: Path) -> None:
    from fastst.torch import load_distributed

    with _nccl_group():
        for unit in ("chunk", "tensor", "file"):
            got = load_distributed(model, unit=unit, chunk_size=1 << 20)
            want = ft.load_file(model)
            assert list(got) == list(want)
            for name, t in got.items():
                assert t.device.type == "cuda", (unit, name)
                assert _bits(t) == _bits(want[name]), (unit, name)
        on_cpu = load_distributed(model, device="cpu")
        assert all(t.device.type == "cpu" for t in on_cpu.values())


def dcp_round_trip(root: Path, device: str) -> None:
    """Saves a state dict of ``device`` tensors (DTensors of a one-device mesh, F8 and BF16
    among them, and a plain tensor) with fastst's DCP writer and consolidation, then loads
    it back into ``device`` tensors through fastst's reader and torch's, and reads the
    consolidated checkpoint: every tensor bit for bit. Needs a process group of one rank."""
    import torch.distributed.checkpoint as dcp
    from fastst.torch import dcp as fdcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    mesh = init_device_mesh(device, (1,))
    gen = torch.Generator().manual_seed(3)
    plain = {
        "w.bf16": torch.randn(64, 48, generator=gen).to(torch.bfloat16),
        "w.f32": torch.randn(40, 8, generator=gen),
        "w.f8": torch.randn(32, 16, generator=gen).to(torch.float8_e4m3fn),
        "step": torch.tensor(7, dtype=torch.int64),
    }
    sd: Dict[str, torch.Tensor] = {
        n: distribute_tensor(t.to(device), mesh, [Shard(0)], src_data_rank=None)
        if t.dim()
        else t.to(device)
        for n, t in plain.items()
    }
    dcp.save(
        sd,
        storage_writer=fdcp.StorageWriter(
            str(root), save_distributed=True, enable_consolidation=True
        ),
    )

    def empty() -> Dict[str, torch.Tensor]:
        return {
            n: distribute_tensor(
                torch.zeros_like(t).to(device), mesh, [Shard(0)], src_data_rank=None
            )
            if t.dim()
            else torch.zeros_like(t).to(device)
            for n, t in plain.items()
        }

    sharded = str(root / "sharded")
    for reader in (fdcp.StorageReader(sharded), HuggingFaceStorageReader(sharded)):
        got = empty()
        dcp.load(got, storage_reader=reader)
        for n, t in got.items():
            local = t.to_local() if isinstance(t, DTensor) else t
            assert local.device.type == torch.device(device).type, (type(reader).__name__, n)
            assert _bits(local) == _bits(plain[n]), (type(reader).__name__, n)
    whole = ft.load_file(root)
    assert sorted(whole) == sorted(plain)
    for n, t in whole.items():
        assert _bits(t) == _bits(plain[n]), n


def test_dcp_save_consolidate_and_load_of_cuda_tensors_under_nccl(tmp_path: Path) -> None:
    with _nccl_group():
        dcp_round_trip(tmp_path, "cuda")
