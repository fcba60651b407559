"""Sharded checkpoints written: shards + index in the Hugging Face layout (read back as one
file), stale shards of an earlier save removed, and tied/shared tensors as huggingface_hub's
save_torch_state_dict writes them."""

from __future__ import annotations

import json

import fastst
import fastst.torch
import numpy as np
import pytest
import torch
from fastst.numpy import save_sharded
from helpers.checkpoints import ten_layers
from safetensors import safe_open as ref_open


@pytest.fixture
def tensors():
    return ten_layers()


def test_write_then_read_as_one_file(tensors, tmp_path) -> None:
    index = save_sharded(tensors, tmp_path, max_shard_size=3 * 1024 + 10, metadata={"format": "np"})
    assert index == str(tmp_path / "model.safetensors.index.json")
    data = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert data["metadata"]["total_size"] == 10 * 1024
    shards = sorted(p.name for p in tmp_path.glob("model-*.safetensors"))
    assert shards == [f"model-{i:05d}-of-00004.safetensors" for i in range(1, 5)]
    assert set(data["weight_map"]) == set(tensors)
    for where in (index, tmp_path):
        with fastst.safe_open(where, "np") as f:
            assert f.keys() == sorted(tensors)
            assert len(f) == 10 and "layer.3.w" in f
            assert f.metadata() == {"format": "np"}
            for k, v in tensors.items():
                np.testing.assert_array_equal(f.get_tensor(k), v)
                np.testing.assert_array_equal(f.get_slice(k)[2:5, ::-2], v[2:5, ::-2])
            np.testing.assert_array_equal(
                f.get_tensor("layer.0.w", copy=True), tensors["layer.0.w"]
            )
            assert list(f.get_tensors()) == f.offset_keys()
    # every shard is a plain file the reference reads
    for shard in shards:
        with ref_open(tmp_path / shard, "np") as r:
            for k in r.keys():
                np.testing.assert_array_equal(r.get_tensor(k), tensors[k])


def test_resaving_with_fewer_shards_removes_stale_ones(tensors, tmp_path) -> None:
    save_sharded(tensors, tmp_path, max_shard_size=2048)
    assert len(list(tmp_path.glob("model-*.safetensors"))) == 5
    save_sharded(tensors, tmp_path, max_shard_size="1MB")
    assert [p.name for p in tmp_path.glob("model-*.safetensors")] == [
        "model-00001-of-00001.safetensors"
    ]
    with fastst.safe_open(tmp_path, "np") as f:
        assert f.keys() == sorted(tensors)


def test_torch_sharded_round_trip(tmp_path) -> None:
    from fastst.torch import load_file
    from fastst.torch import save_sharded as torch_save_sharded

    sd = {f"w{i}": torch.full((64,), float(i), dtype=torch.bfloat16) for i in range(4)}
    index = torch_save_sharded(sd, tmp_path, max_shard_size=256)
    loaded = load_file(index)
    assert list(loaded) == ["w0", "w1", "w2", "w3"]
    for k, v in sd.items():
        assert torch.equal(loaded[k], v)


@pytest.fixture
def hub():
    return pytest.importorskip("huggingface_hub")


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


def test_matches_huggingface_hub(hub, tmp_path) -> None:
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
