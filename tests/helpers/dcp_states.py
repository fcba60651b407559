"""The state dicts and comparisons of the DCP tests: DTensors over a gloo group, compared by bit.

Shared by ``dcp/test_dcp.py`` (local folders) and ``dcp/test_dcp_remote.py``
(object storage); the functions taking a mesh run inside the spawned ranks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List

import fastst
import torch
import torch.distributed as dist

MAPPING = {
    "w_row": 1,
    "w_col": 1,
    "w_rep": 2,
    "uneven": 2,
    "f8": 2,
    "bias": 1,
    "embed.weight": 1,
    "lm_head.weight": 2,
}


# the state dicts ------------------------------------------------------------------


def full_tensors() -> Dict[str, torch.Tensor]:
    """The whole tensors every scenario saves (tied: embed.weight is lm_head.weight)."""
    g = torch.Generator().manual_seed(7)
    embed = torch.randn(10, 4, generator=g)
    return {
        "w_row": torch.randn(8, 6, generator=g),
        "w_col": torch.randn(6, 10, generator=g).to(torch.bfloat16),
        "w_rep": torch.randn(5, generator=g),
        "uneven": torch.randn(7, 3, generator=g),
        "f8": torch.randn(6, 4, generator=g).to(torch.float8_e4m3fn),
        "bias": torch.randn(3, generator=g),
        "embed.weight": embed,
        "lm_head.weight": embed,
    }


def placements(kind: str) -> Dict[str, Any]:
    from torch.distributed.tensor import Replicate, Shard

    if kind == "saved":
        return {
            "w_row": Shard(0),
            "w_col": Shard(1),
            "w_rep": Replicate(),
            "uneven": Shard(0),
            "f8": Shard(0),
            "embed.weight": Shard(0),
        }
    return {  # another placement for every tensor
        "w_row": Shard(1),
        "w_col": Shard(0),
        "w_rep": Shard(0),
        "uneven": Shard(0),
        "f8": Replicate(),
        "embed.weight": Shard(1),
    }


def state_dict(kind: str, empty: bool = False) -> Dict[str, Any]:
    """DTensors over all ranks (plain tensors for ``bias``), the tied pair one object."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    where = placements(kind)
    out: Dict[str, Any] = {}
    for name, full in full_tensors().items():
        if name == "lm_head.weight":
            out[name] = out["embed.weight"]
            continue
        value = torch.zeros_like(full) if empty else full
        if name == "bias":
            out[name] = value.clone()
        else:
            out[name] = distribute_tensor(value, mesh, [where[name]], src_data_rank=None)
    return out


def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8) if t.numel() else t.to(torch.uint8)


def differ(got: Dict[str, Any], want: Dict[str, Any]) -> List[str]:
    """Names whose local parts differ in dtype, shape or any bit."""
    from torch.distributed.tensor import DTensor

    bad = []
    for name, w in want.items():
        g = got[name]
        gl = g.to_local() if isinstance(g, DTensor) else g
        wl = w.to_local() if isinstance(w, DTensor) else w
        if gl.dtype != wl.dtype or gl.shape != wl.shape or not torch.equal(bits(gl), bits(wl)):
            bad.append(name)
    return bad


def local_bytes(sd: Dict[str, Any]) -> int:
    from torch.distributed.tensor import DTensor

    total = 0
    for t in sd.values():
        local = t.to_local() if isinstance(t, DTensor) else t
        total += local.numel() * local.element_size()
    return total


def tensors_of(folder: Path) -> Dict[str, Dict[str, Any]]:
    """Each consolidated file's tensors (as bytes) and metadata, by file name; the index."""
    out: Dict[str, Any] = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            with fastst.safe_open(str(folder / name), "np") as f:
                out[name] = {
                    "metadata": f.metadata(),
                    "tensors": {
                        k: (
                            f.get_slice(k).get_dtype(),
                            f.get_slice(k).get_shape(),
                            f.get_tensor(k).tobytes(),
                        )
                        for k in f.keys()
                    },
                }
    out["index"] = json.loads((folder / "model.safetensors.index.json").read_text())
    return out
