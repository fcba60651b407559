"""Writers and descriptors: a closed, aborted or failed writer holds no descriptor of its file
(a deleted file's blocks, a failed save's space are given back at once, not when the writer is
collected), and the sharded writer opens a shard's file when its tensors come, so a checkpoint
of many shards saves under the usual limit of 1024 descriptors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import List

import fastst
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="descriptors listed in /proc/self/fd"
)

LAYOUT = {f"t{i}": ("F32", [256 * 1024]) for i in range(2)}  # 1 MiB each


def held_in(folder: Path) -> List[str]:
    """Descriptors of this process on files in ``folder`` (deleted ones too)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder) + os.sep):
            held.append(target)
    return held


def fill(writer, names) -> None:
    for name in names:
        writer.write(name, np.ones(256 * 1024, np.float32))


@pytest.mark.parametrize("durable", [True, False])
def test_a_committed_writer_holds_no_descriptor(tmp_path: Path, durable: bool) -> None:
    w = fastst.open_writer(tmp_path / "m.safetensors", LAYOUT, durable=durable)
    fill(w, LAYOUT)
    w.close()
    assert held_in(tmp_path) == []
    os.remove(tmp_path / "m.safetensors")
    assert held_in(tmp_path) == []  # its blocks are free now
    del w


@pytest.mark.parametrize("how", ["abort", "missing", "exception"])
def test_an_aborted_or_failed_writer_holds_no_descriptor(tmp_path: Path, how: str) -> None:
    w = fastst.open_writer(tmp_path / "m.safetensors", LAYOUT)
    fill(w, ["t0"])
    if how == "abort":
        w.abort()
    elif how == "missing":
        with pytest.raises(fastst.SerializeError):
            w.close()
    else:
        with pytest.raises(RuntimeError):
            with w:
                raise RuntimeError("stop")
    assert held_in(tmp_path) == []
    assert os.listdir(tmp_path) == []
    del w


def test_a_sharded_writer_holds_no_descriptor_when_done(tmp_path: Path) -> None:
    layout = {f"t{i}": ("F32", [256 * 1024]) for i in range(6)}
    with fastst.open_sharded_writer(tmp_path / "a", layout, max_shard_size="2MB") as w:
        fill(w, layout)
    assert held_in(tmp_path) == []
    w = fastst.open_sharded_writer(tmp_path / "b", layout, max_shard_size="2MB")
    fill(w, ["t0", "t1", "t3"])
    w.abort()
    assert held_in(tmp_path) == []
    assert os.listdir(tmp_path / "b") == []
    del w


MANY_SHARDS = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    import fastst, fastst.numpy as fnp
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    folder, how = sys.argv[1], sys.argv[2]
    layout = {f"t{i:03d}": ("F32", [1024]) for i in range(600)}
    pairs = ((n, np.full(1024, float(i), np.float32)) for i, n in enumerate(layout))
    if how == "writer":
        with fastst.open_sharded_writer(folder, layout, max_shard_size="4KB") as w:
            for name, t in pairs:
                w.write(name, t)
    else:
        fnp.save_sharded(pairs, folder, max_shard_size="4KB", layout=layout)
    loaded = fnp.load_file(folder)
    assert len(loaded) == 600 and float(loaded["t599"][0]) == 599.0
    """
)


@pytest.mark.parametrize("how", ["writer", "save_sharded"])
def test_600_shards_save_under_1024_descriptors(tmp_path: Path, how: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", MANY_SHARDS, str(tmp_path / "ckpt"), how],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(os.listdir(tmp_path / "ckpt")) == 601
