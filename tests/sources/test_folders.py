"""Model folders as sources: ``safe_open(folder)`` and ``load_file(folder)`` open the one
safetensors file or the index of a folder (as the reference's loaders do), list what they found
when it is ambiguous, refuse a file linked out of the folder (the Hugging Face cache's links to
its blobs aside), and say so when there is nothing to open."""

from __future__ import annotations

import json
import os

import fastst
import fastst.numpy
import fastst.torch
import numpy as np
import pytest
import torch

A = np.arange(50, dtype=np.float32).reshape(10, 5)


def test_folder_with_one_file(tmp_path) -> None:
    fastst.numpy.save_file({"a": A}, tmp_path / "diffusion_pytorch_model.safetensors")
    (tmp_path / "config.json").write_text("{}")
    np.testing.assert_array_equal(fastst.numpy.load_file(tmp_path)["a"], A)
    with fastst.safe_open(tmp_path, "np") as f:
        assert f.keys() == ["a"]


def test_folder_with_an_index_and_its_shards(tmp_path) -> None:
    tensors = {f"w{i}": torch.full((100,), float(i)) for i in range(4)}
    fastst.torch.save_sharded(tensors, tmp_path, max_shard_size=800)
    loaded = fastst.torch.load_file(tmp_path)
    assert set(loaded) == set(tensors)


def test_ambiguous_folder_lists_what_it_found(tmp_path) -> None:
    fastst.numpy.save_file({"a": A}, tmp_path / "model.safetensors")
    fastst.numpy.save_file({"a": A}, tmp_path / "model.fp16.safetensors")
    with pytest.raises(fastst.FolderError) as err:
        fastst.safe_open(tmp_path, "np")
    assert "model.fp16.safetensors" in str(err.value)
    assert "model.safetensors" in str(err.value)
    assert err.value.candidates == ["model.fp16.safetensors", "model.safetensors"]
    assert err.value.rule == "folder-ambiguous"


def test_folder_with_index_and_a_stray_file_is_ambiguous(tmp_path) -> None:
    fastst.torch.save_sharded({"w": torch.zeros(4)}, tmp_path)
    fastst.numpy.save_file({"a": A}, tmp_path / "extra.safetensors")
    with pytest.raises(fastst.FolderError, match="extra.safetensors"):
        fastst.safe_open(tmp_path, "np")


def test_a_folder_whose_file_links_outside_it_is_refused(tmp_path) -> None:
    secret = tmp_path / "elsewhere.safetensors"
    fastst.numpy.save_file({"a": A}, secret, metadata={"k": "do-not-print"})
    folder = tmp_path / "model"
    folder.mkdir()
    os.symlink(secret, folder / "model.safetensors")
    for opener in (lambda: fastst.safe_open(folder, "np"), lambda: fastst.numpy.load_file(folder)):
        with pytest.raises(fastst.FolderError) as err:
            opener()
        assert err.value.rule == "folder-link" and "do-not-print" not in str(err.value)
    # By its own path the file opens: the rule is about what a folder claims.
    with fastst.safe_open(folder / "model.safetensors", "np") as f:
        assert f.keys() == ["a"]


def test_a_folder_file_linked_inside_it_or_into_the_cache_blobs_opens(tmp_path) -> None:
    folder = tmp_path / "model"
    (folder / "real").mkdir(parents=True)
    fastst.numpy.save_file({"a": A}, folder / "real" / "weights.bin")
    os.symlink(folder / "real" / "weights.bin", folder / "model.safetensors")
    np.testing.assert_array_equal(fastst.numpy.load_file(folder)["a"], A)
    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "abc").mkdir(parents=True)
    fastst.numpy.save_file({"a": A}, repo / "blobs" / "0123")
    os.symlink("../../blobs/0123", repo / "snapshots" / "abc" / "model.safetensors")
    np.testing.assert_array_equal(fastst.numpy.load_file(repo / "snapshots" / "abc")["a"], A)


def test_empty_folder(tmp_path) -> None:
    (tmp_path / "model.safetensors.index.json.bak").write_text(json.dumps({}))
    with pytest.raises(IsADirectoryError, match="no .safetensors file"):
        fastst.safe_open(tmp_path, "np")
