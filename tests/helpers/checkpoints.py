"""Sharded checkpoints for the tests: ten layers to shard, and what an index may name (shard
names inside a checkpoint's folder, outside it and malformed, and the checkpoints that name
them), shared by the reader's, the writer's and the command's tests."""

from __future__ import annotations

import json
import os

import fastst.numpy
import numpy as np


def ten_layers():
    """Ten (16, 16) F32 tensors, 1 KiB each: ``layer.{i}.w``."""
    rng = np.random.default_rng(0)
    return {f"layer.{i}.w": rng.standard_normal((16, 16)).astype(np.float32) for i in range(10)}


def index_with(tmp_path, weight_map, metadata=None):
    path = tmp_path / "model.safetensors.index.json"
    path.write_text(json.dumps({"metadata": metadata or {}, "weight_map": weight_map}))
    return path


#: Shard names leading outside the checkpoint's folder, to a file there:
#: "/abs" stands for that file's absolute path, "link" for a symbolic link
#: to it beside the index, "dirlink/x.safetensors" for a link to its folder.
OUTSIDE = ["../x.safetensors", "/abs", "sub/../../x.safetensors", "link", "dirlink/x.safetensors"]
#: Names that are not plain relative names at all.
MALFORMED = ["sub\\x.safetensors", "x\0.safetensors"]
#: Names of files inside the folder, which must be accepted.
INSIDE = ["..x.safetensors", "sub/shard.safetensors"]
SECRET = {"secret": "do-not-print"}


def checkpoint_naming(tmp_path, shard):
    """``tmp_path/ckpt/model.safetensors.index.json`` placing tensor "w" in
    the shard named ``shard``: a file made inside the folder for the names
    of INSIDE (and the backslash one), else ``tmp_path/x.safetensors``
    (metadata SECRET), outside it."""
    folder = tmp_path / "ckpt"
    (folder / "sub").mkdir(parents=True)
    w = {"w": np.arange(4, dtype=np.float32)}
    fastst.numpy.save_file(w, tmp_path / "x.safetensors", metadata=SECRET)
    if shard == "/abs":
        shard = str(tmp_path / "x.safetensors")
    elif shard == "link":
        shard = "link.safetensors"
        os.symlink(tmp_path / "x.safetensors", folder / shard)
    elif shard.startswith("dirlink/"):
        os.symlink(tmp_path, folder / "dirlink")
    elif "\0" not in shard and ".." not in shard.split("/"):
        fastst.numpy.save_file(w, folder / shard, metadata={"format": "np"})
    return index_with(folder, {"w": shard})
