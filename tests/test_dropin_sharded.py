"""save_sharded with tied/shared tensors, as huggingface_hub's
save_torch_state_dict writes them."""

from __future__ import annotations

import json

import fastst
import fastst.torch
import pytest
import torch

hub = pytest.importorskip("huggingface_hub")


def _state():
    torch.manual_seed(0)
    embed = torch.randn(50, 8)
    return {
        "embed.weight": embed,
        "lm_head.weight": embed,  # tied: the same tensor
        "view.weight": embed[:10],  # a view into it
        "layer.weight": torch.randn(8, 8),
        "layer.bias": torch.randn(8),
        "strided": torch.randn(8, 4).t(),  # not contiguous
    }


def _load_index(folder):
    with open(folder / "model.safetensors.index.json") as fh:
        return json.load(fh)


def test_matches_huggingface_hub(tmp_path) -> None:
    ours_dir, hub_dir = tmp_path / "ours", tmp_path / "hub"
    fastst.torch.save_sharded(_state(), ours_dir, max_shard_size=1000)
    hub_dir.mkdir()
    hub.save_torch_state_dict(_state(), hub_dir, max_shard_size=1000)
    ours, theirs = _load_index(ours_dir), _load_index(hub_dir)
    assert set(ours["weight_map"]) == set(theirs["weight_map"])
    assert ours["metadata"]["total_size"] == theirs["metadata"]["total_size"]
    dropped = {k: v for k, v in theirs["metadata"].items() if k != "total_size"}
    assert {k: ours["metadata"][k] for k in dropped} == dropped
    assert ours["metadata"]["total_parameters"] == sum(
        t.numel() for k, t in _state().items() if k in theirs["weight_map"]
    )
    loaded_ours = fastst.torch.load_file(ours_dir)
    loaded_hub = fastst.torch.load_file(hub_dir)
    assert loaded_ours.keys() == loaded_hub.keys()
    for name, tensor in loaded_hub.items():
        assert torch.equal(loaded_ours[name], tensor)
    with fastst.safe_open(ours_dir / "model.safetensors.index.json", "pt") as f:
        assert f.metadata() == {"format": "pt"}


def test_tied_tensors_are_stored_once_and_discard_is_honoured(tmp_path) -> None:
    state = _state()
    fastst.torch.save_sharded(
        state, tmp_path, max_shard_size=100, shared_tensors_to_discard=["embed.weight"]
    )
    index = _load_index(tmp_path)
    assert "lm_head.weight" in index["weight_map"]
    assert "embed.weight" not in index["weight_map"]
    assert "view.weight" not in index["weight_map"]
    assert index["metadata"]["embed.weight"] == "lm_head.weight"
    loaded = fastst.torch.load_file(tmp_path)
    assert torch.equal(loaded["lm_head.weight"], state["embed.weight"])
    assert torch.equal(loaded["strided"], state["strided"])


def test_force_contiguous_false_refuses_strided(tmp_path) -> None:
    with pytest.raises(ValueError, match="non contiguous"):
        fastst.torch.save_sharded({"s": torch.randn(3, 2).t()}, tmp_path, force_contiguous=False)
