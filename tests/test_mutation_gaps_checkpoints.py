"""Checkpoints and model folders: behaviour no other test pinned down, found
by the Python mutation pass (scripts/pymutants.py; the mutant each test kills
is named in its docstring, see docs/python-mutants.md)."""

from __future__ import annotations

import json
import random

import fastst
import fastst.numpy
import fastst.tools.inspect
import numpy as np
import pytest


def _shards(folder, placed, stored):
    """Writes shards (``stored``: shard -> tensor names) and an index
    (``placed``: tensor -> shard); returns the index path."""
    for shard, names in stored.items():
        fastst.numpy.save_file(
            {n: np.full(3, i, dtype=np.float32) for i, n in enumerate(names)}, folder / shard
        )
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": placed}))
    return index


def test_iter_inputs_lists_a_folder_sorted(tmp_path):
    """Files found under a folder come sorted by name, whatever order the
    filesystem lists them in (mutant: ``files.sort()`` dropped)."""
    names = [f"w{i:02d}.safetensors" for i in range(16)]
    random.Random(3).shuffle(names)
    for name in names:  # created in a shuffled order
        fastst.numpy.save_file({"x": np.zeros(1, np.float32)}, tmp_path / name)
    got = list(fastst.tools.inspect.iter_inputs([tmp_path]))
    assert got == [("file", str(tmp_path / n)) for n in sorted(names)]


def test_checkpoint_metadata_rejects_an_index_of_the_wrong_shape(tmp_path):
    """An index that is JSON but not ``{"weight_map": {...}}`` is refused
    with rule index-shape (mutant: the check dropped, which fails later
    with an unrelated error)."""
    for bad in ([1, 2], {"weight_map": ["a.safetensors"]}, {"metadata": {}}):
        index = tmp_path / "model.safetensors.index.json"
        index.write_text(json.dumps(bad))
        with pytest.raises(fastst.SafetensorError) as err:
            fastst.tools.inspect.checkpoint_metadata(index)
        assert err.value.rule == "index-shape"
        assert "weight_map" in str(err.value)


def test_verify_checkpoint_counts_checked_values(tmp_path):
    """``values_checked`` of a checkpoint is the sum over its shards (mutant:
    the count started at 1)."""
    index = _shards(
        tmp_path,
        {"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"},
        {"s1.safetensors": ["a", "b"], "s2.safetensors": ["c"]},
    )
    report = fastst.tools.inspect.verify_checkpoint(index, values=True)
    per_shard = [
        fastst.tools.inspect.verify_file(tmp_path / s, values=True)["values_checked"]
        for s in ("s1.safetensors", "s2.safetensors")
    ]
    assert report["values_checked"] == sum(per_shard) == 3  # tensors whose values were read
    assert fastst.tools.inspect.verify_checkpoint(index)["values_checked"] is None


def test_verify_checkpoint_names_the_other_shard_of_a_duplicate(tmp_path):
    """A tensor stored in two shards: each shard's finding names the *other*
    shard as also holding it (mutant: the shard itself named)."""
    index = _shards(
        tmp_path,
        {"a": "s1.safetensors", "b": "s2.safetensors"},
        {"s1.safetensors": ["a"], "s2.safetensors": ["a", "b"]},
    )
    report = fastst.tools.inspect.verify_checkpoint(index)
    dups = [f for f in report["findings"] if f["rule"] == "shard-duplicate-tensor"]
    assert dups, report["findings"]
    for finding in dups:
        shard = finding["shard"]
        other = "s1.safetensors" if shard.endswith("s2.safetensors") else "s2.safetensors"
        also = finding["message"].split("also stored in", 1)[1].split(";", 1)[0]
        assert other in also and shard.rsplit("/", 1)[-1] not in also


@pytest.mark.parametrize(
    "content", [b"{not json", b"\xff\xfe", b'{"weight_map": []}', b"[]"], ids=str
)
def test_folder_with_an_unreadable_index(tmp_path, content):
    """A folder whose only index is not JSON, not UTF-8 or has no
    ``weight_map`` object opens that index (which then reports what is wrong
    with it) instead of failing while listing the shards it names (mutants:
    ``None`` instead of an empty set of shard names)."""
    (tmp_path / "model.safetensors.index.json").write_bytes(content)
    with pytest.raises(fastst.SafetensorError) as err:
        fastst.safe_open(tmp_path, "np")
    assert "model.safetensors.index.json" in str(err.value)
