"""Sharded checkpoints read: the index (or its folder) opened as one logical file, an index
disagreeing with its shards or naming files outside its folder refused, shards loaded two at a
time. (Writing them: tests/write/test_sharded.py.)"""

from __future__ import annotations

import json
import os

import fastst
import fastst.numpy
import numpy as np
import pytest
from fastst.numpy import save_sharded
from helpers.checkpoints import (
    INSIDE,
    MALFORMED,
    OUTSIDE,
    checkpoint_naming,
    index_with,
    ten_layers,
)


@pytest.fixture
def tensors():
    return ten_layers()


def test_index_disagreeing_with_shards_names_the_shard(tensors, tmp_path) -> None:
    save_sharded(tensors, tmp_path, max_shard_size=4096)
    data = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    wm = data["weight_map"]
    first = wm["layer.0.w"]

    bad = dict(wm)
    bad["ghost"] = first
    with pytest.raises(fastst.ShardIndexError, match=f"{first}.*ghost") as info:
        fastst.safe_open(index_with(tmp_path, bad), "np")
    assert info.value.rule == "shard-lacks-tensor"

    bad = {k: v for k, v in wm.items() if k != "layer.0.w"}
    with pytest.raises(fastst.ShardIndexError, match="does not place") as info:
        fastst.safe_open(index_with(tmp_path, bad), "np")
    assert info.value.rule == "shard-extra-tensor"

    bad = dict(wm)
    bad["layer.0.w"] = "model-missing.safetensors"
    with pytest.raises(fastst.ShardIndexError, match="missing") as info:
        fastst.safe_open(index_with(tmp_path, bad), "np")
    assert info.value.rule == "shard-missing"

    for outside in ("../x.safetensors", "/etc/passwd"):
        bad = dict(wm)
        bad["layer.0.w"] = outside
        with pytest.raises(fastst.ShardIndexError, match="outside") as info:
            fastst.safe_open(index_with(tmp_path, bad), "np")
        assert info.value.rule == "shard-path"


def test_malformed_index(tmp_path) -> None:
    path = tmp_path / "model.safetensors.index.json"
    path.write_text("{not json")
    with pytest.raises(fastst.ShardIndexError, match="not valid UTF-8 JSON"):
        fastst.safe_open(path, "np")
    path.write_text(json.dumps({"weight_map": []}))
    with pytest.raises(fastst.ShardIndexError, match="weight_map"):
        fastst.safe_open(path, "np")


def test_missing_tensor_and_closed(tensors, tmp_path) -> None:
    index = save_sharded(tensors, tmp_path, max_shard_size=4096)
    f = fastst.safe_open(index, "np")
    with pytest.raises(fastst.TensorNotFoundError, match="nope"):
        f.get_tensor("nope")
    a = f.get_tensor("layer.1.w")
    f.close()
    with pytest.raises(fastst.ClosedFileError):
        f.keys()
    np.testing.assert_array_equal(a, tensors["layer.1.w"])


# What an index may name: files inside the checkpoint only ------------------


@pytest.mark.parametrize("shard", OUTSIDE + MALFORMED)
def test_shards_outside_the_folder_are_refused(tmp_path, shard) -> None:
    index = checkpoint_naming(tmp_path, shard)
    for where in (index, index.parent):
        with pytest.raises(fastst.ShardIndexError) as info:
            fastst.safe_open(where, "np")
        assert info.value.rule == "shard-path" and info.value.tensor == "w"
        assert "do-not-print" not in str(info.value)
    with pytest.raises(fastst.ShardIndexError):
        fastst.numpy.load_file(index)


@pytest.mark.parametrize("shard", INSIDE)
def test_shard_names_inside_the_folder_are_accepted(tmp_path, shard) -> None:
    index = checkpoint_naming(tmp_path, shard)
    for where in (index, index.parent):
        with fastst.safe_open(where, "np") as f:
            assert f.metadata() == {"format": "np"}
            np.testing.assert_array_equal(f.get_tensor("w"), np.arange(4, dtype=np.float32))


def test_shards_linked_into_the_hugging_face_cache_are_accepted(tmp_path) -> None:
    # The cache's snapshots link every file to ../../blobs/<hash> of the same
    # repository; a link to another repository's blobs leads outside.
    repo = tmp_path / "hub" / "models--org--name"
    snapshot = repo / "snapshots" / "0123abcd"
    for folder in (repo / "blobs", snapshot, tmp_path / "hub" / "models--other" / "blobs"):
        folder.mkdir(parents=True)
    w = {"w": np.ones(2, np.float32)}
    fastst.numpy.save_file(w, repo / "blobs" / "aa11")
    os.symlink("../../blobs/aa11", snapshot / "model.safetensors")
    index = index_with(snapshot, {"w": "model.safetensors"})
    with fastst.safe_open(snapshot, "np") as f:
        assert f.keys() == ["w"]
    (snapshot / "model.safetensors").unlink()
    fastst.numpy.save_file(w, tmp_path / "hub" / "models--other" / "blobs" / "bb22")
    os.symlink("../../../models--other/blobs/bb22", snapshot / "model.safetensors")
    with pytest.raises(fastst.ShardIndexError) as info:
        fastst.safe_open(index, "np")
    assert info.value.rule == "shard-path"


# Index files are read up to a cap --------------------------------------------


def test_an_index_over_the_cap_is_refused_unread(tmp_path, monkeypatch) -> None:
    import tracemalloc

    huge = tmp_path / "model.safetensors.index.json"
    with open(huge, "wb") as fh:
        fh.truncate(1 << 30)  # sparse: costs no disk
    tracemalloc.start()
    try:
        with pytest.raises(fastst.ShardIndexError) as info:
            fastst.safe_open(tmp_path, "np")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert info.value.rule == "index-over-cap"
    assert "67,108,864 bytes" in str(info.value) and "FASTST_INDEX_CAP" in str(info.value)
    # The one knob: the environment variable, bytes or a size.
    huge.unlink()
    save_sharded({"w": np.zeros(4, np.float32)}, tmp_path, max_shard_size=1024)
    monkeypatch.setenv("FASTST_INDEX_CAP", "64")
    with pytest.raises(fastst.ShardIndexError, match="more than 64 bytes"):
        fastst.safe_open(tmp_path, "np")
    monkeypatch.setenv("FASTST_INDEX_CAP", "1M")
    fastst.safe_open(tmp_path, "np").close()
    monkeypatch.setenv("FASTST_INDEX_CAP", "lots")
    with pytest.raises(ValueError, match="FASTST_INDEX_CAP"):
        fastst.safe_open(tmp_path, "np")


def test_shards_load_two_at_a_time(tensors, tmp_path, monkeypatch) -> None:
    # The next shard's reads start while the one before still loads: the
    # first two loads meet (one after the other, they never would).
    import threading

    import fastst._read.stream

    index = save_sharded(tensors, tmp_path, max_shard_size=3 * 1024 + 10)
    real, met, order = fastst._read.stream.load_into, threading.Barrier(2, timeout=20), []

    def load_into(file, *args):
        order.append(os.path.basename(file.name))
        if len(order) <= 2:
            met.wait()
        return real(file, *args)

    monkeypatch.setattr(fastst._read.stream, "load_into", load_into)
    got = fastst.numpy.load_file(index, copy=True)
    assert sorted(order) == sorted(p.name for p in tmp_path.glob("model-*.safetensors"))
    assert got.keys() == tensors.keys()
    for k, v in tensors.items():
        np.testing.assert_array_equal(got[k], v)


def test_shards_that_fail_raise_the_first_in_file_order(tensors, tmp_path, monkeypatch) -> None:
    import time

    import fastst._read.stream

    index = save_sharded(tensors, tmp_path, max_shard_size=3 * 1024 + 10)
    real = fastst._read.stream.load_into

    def load_into(file, *args):
        name = os.path.basename(file.name)
        if name.startswith("model-00001"):
            time.sleep(0.5)  # fails after the second shard has failed
        if name.startswith(("model-00001", "model-00002")):
            raise fastst.SafetensorError(f"{name} failed")
        return real(file, *args)

    monkeypatch.setattr(fastst._read.stream, "load_into", load_into)
    with pytest.raises(fastst.SafetensorError, match="model-00001"):
        fastst.numpy.load_file(index, copy=True)


def test_a_failed_shard_stops_the_load_beside_it(tensors, tmp_path, monkeypatch) -> None:
    import threading

    import fastst._read.stream

    index = save_sharded(tensors, tmp_path, max_shard_size=3 * 1024 + 10)
    failed, seen = threading.Event(), []

    def load_into(file, members, outs, targets, report):
        if os.path.basename(file.name).startswith("model-00001"):
            failed.set()
            raise fastst.SafetensorError("the first shard failed")
        assert failed.wait(10)
        for _ in range(100):  # what the core does at each report
            try:
                report(0, 1)
            except BaseException as exc:
                seen.append(type(exc).__name__)
                raise
            threading.Event().wait(0.05)
        seen.append("never stopped")

    monkeypatch.setattr(fastst._read.stream, "load_into", load_into)
    with pytest.raises(fastst.SafetensorError, match="first shard"):
        fastst.numpy.load_file(index, copy=True)
    assert seen and set(seen) == {"LoadStopped"}  # every load that started stopped
