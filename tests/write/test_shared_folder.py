"""Saves that share a folder: two processes racing sharded saves into one folder end with one
whole checkpoint every round (never a mix, never nothing); a save killed mid-commit blocks no
later save; a save removes the other layout's files of its prefix once it is whole, and only
what saves of its prefix made."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, List

import fastst
import fastst.numpy as fnp
import numpy as np
import pytest
from fastst._layout import UNFINISHED

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX semantics")

RACER = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import fastst.numpy as fnp

    folder, side, rounds, sync = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    # Side "a" saves 6 tensors in 3 shards, side "b" 8 in 4 shards: names and counts differ.
    count = 6 if side == "a" else 8
    for r in range(rounds):
        go = os.path.join(sync, f"go-{r}")
        while not os.path.exists(go):
            time.sleep(0.001)
        value = float(r * 10 + (1 if side == "a" else 2))
        tensors = {f"{side}.{i}": np.full(4096, value, dtype=np.float32) for i in range(count)}
        try:
            fnp.save_sharded(tensors, folder, max_shard_size="40KB")
            outcome = "ok"
        except Exception as exc:  # one may fail cleanly
            outcome = f"{type(exc).__name__}: {exc}"
        with open(os.path.join(sync, f"outcome-{r}-{side}"), "w") as fh:
            fh.write(outcome)
        os.rename(fh.name, os.path.join(sync, f"done-{r}-{side}"))
    """
)


def reference_through_index(folder: Path) -> Dict[str, np.ndarray]:
    import safetensors.numpy as reference

    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    out: Dict[str, np.ndarray] = {}
    for shard in sorted(set(weight_map.values())):
        loaded = reference.load_file(folder / shard)
        out.update({k: v for k, v in loaded.items() if weight_map[k] == shard})
    return out


def one_save(tensors: Dict[str, np.ndarray], round_: int) -> str:
    """The side whose save ``tensors`` are, wholly; fails on a mix."""
    names = sorted(tensors)
    sides = {n.split(".")[0] for n in names}
    assert len(sides) == 1, names
    side = sides.pop()
    count = 6 if side == "a" else 8
    assert names == sorted(f"{side}.{i}" for i in range(count)), names
    value = float(round_ * 10 + (1 if side == "a" else 2))
    assert all((t == value).all() for t in tensors.values()), (round_, side)
    return side


def test_two_processes_racing_saves_leave_one_whole_checkpoint(tmp_path: Path) -> None:
    folder, sync = tmp_path / "ckpt", tmp_path / "sync"
    sync.mkdir()
    rounds = 10
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(folder), side, str(rounds), str(sync)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for side in "ab"
    ]
    winners: List[str] = []
    try:
        for r in range(rounds):
            (sync / f"go-{r}").touch()
            deadline = time.monotonic() + 120
            while not all((sync / f"done-{r}-{s}").exists() for s in "ab"):
                assert time.monotonic() < deadline, "a racer hangs"
                assert all(p.poll() in (None, 0) for p in racers), [p.stderr.read() for p in racers]
                time.sleep(0.002)
            outcomes = {s: (sync / f"done-{r}-{s}").read_text() for s in "ab"}
            assert "ok" in outcomes.values(), outcomes
            for outcome in outcomes.values():
                assert outcome == "ok" or "SafetensorError" in outcome or "Error" in outcome
            # Every loader sees the same one save, whole.
            side = one_save(fnp.load_file(folder), r)
            assert one_save(fnp.load_file(folder / "model.safetensors.index.json"), r) == side
            assert one_save(reference_through_index(folder), r) == side
            # Loaders that prefer the single file find none.
            assert not (folder / "model.safetensors").exists()
            names = sorted(os.listdir(folder))
            assert not [n for n in names if UNFINISHED.fullmatch(n)], names
            shards = [n for n in names if n.endswith(".safetensors")]
            assert len(shards) == (3 if side == "a" else 4), names
            winners.append(side)
    finally:
        for r in range(rounds):  # racers waiting for a round end at once
            (sync / f"go-{r}").touch()
        for p in racers:
            p.wait(timeout=120)
    assert all(p.returncode == 0 for p in racers)


KILLED_IN_COMMIT = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import fastst.numpy as fnp
    from fastst._write import sharded

    def stuck(*args, **kwargs):
        open(sys.argv[2], "w").close()
        time.sleep(600)

    sharded.link_file = stuck
    fnp.save_sharded({"x": np.ones(4096, np.float32), "y": np.ones(4096, np.float32)},
                     sys.argv[1], max_shard_size="16KB")
    """
)


def test_a_save_killed_in_its_commit_blocks_no_later_save(tmp_path: Path) -> None:
    folder, flag = tmp_path / "ckpt", tmp_path / "in-commit"
    child = subprocess.Popen([sys.executable, "-c", KILLED_IN_COMMIT, str(folder), str(flag)])
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.01)
        # It holds the folder's commit lock now; killed, the lock goes with it.
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    saver = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, numpy as np, fastst.numpy as f; "
            "f.save_sharded({'z': np.full(4096, 3.0, np.float32)}, sys.argv[1])",
            str(folder),
        ],
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert saver.returncode == 0, saver.stderr
    assert sorted(fnp.load_file(folder)) == ["z"]
    # The killed save's staged files and mark went with the next save of the prefix.
    left = sorted(os.listdir(folder))
    assert left == ["model-00001-of-00001.safetensors", "model.safetensors.index.json"], left


def test_a_live_save_keeps_its_staged_shards_through_another_commit(tmp_path: Path) -> None:
    layout = {f"t{i}": ("F32", [1024]) for i in range(4)}
    with fastst.open_sharded_writer(tmp_path, layout, max_shard_size="4KB") as slow:
        slow.write("t0", np.zeros(1024, np.float32))  # one staged shard complete
        slow.write("t1", np.zeros(1024, np.float32))
        fnp.save_sharded({"other": np.ones(8, np.float32)}, tmp_path)
        assert sorted(fnp.load_file(tmp_path)) == ["other"]
        for i in (2, 3):
            slow.write(f"t{i}", np.zeros(1024, np.float32))
    assert sorted(fnp.load_file(tmp_path)) == sorted(layout)
    assert not [n for n in os.listdir(tmp_path) if UNFINISHED.fullmatch(n)]


def tensors(value: float, count: int = 4) -> Dict[str, np.ndarray]:
    return {f"w.{i}": np.full(512, value, dtype=np.float32) for i in range(count)}


def test_a_sharded_save_removes_the_single_file_of_its_prefix(tmp_path: Path) -> None:
    fnp.save_file(tensors(1.0), tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text("{}")
    fnp.save_file(tensors(5.0), tmp_path / "other.safetensors")
    fnp.save_sharded(tensors(2.0), tmp_path, max_shard_size="4KB")
    assert not (tmp_path / "model.safetensors").exists()
    assert (tmp_path / "config.json").exists() and (tmp_path / "other.safetensors").exists()
    loaded = fnp.load_file(tmp_path / "model.safetensors.index.json")
    assert all((t == 2.0).all() for t in loaded.values())
    # The streaming sharded writer too.
    fnp.save_file(tensors(1.0), tmp_path / "model.safetensors")
    layout = {n: ("F32", [512]) for n in tensors(0.0)}
    with fastst.open_sharded_writer(tmp_path, layout, max_shard_size="4KB") as w:
        for name, t in tensors(3.0).items():
            w.write(name, t)
    assert not (tmp_path / "model.safetensors").exists()
    transformers_style = fnp.load_file(tmp_path / "model.safetensors.index.json")
    assert all((t == 3.0).all() for t in transformers_style.values())


def test_a_single_file_save_removes_the_sharded_checkpoint_of_its_prefix(tmp_path: Path) -> None:
    fnp.save_sharded(tensors(1.0, 8), tmp_path, max_shard_size="4KB")
    fnp.save_sharded(tensors(4.0), tmp_path, max_shard_size="4KB", prefix="other")
    (tmp_path / "model-notes.txt").write_text("kept")
    fnp.save_file(tensors(2.0), tmp_path / "model.safetensors")
    names = sorted(os.listdir(tmp_path))
    assert "model.safetensors.index.json" not in names
    assert not [n for n in names if n.startswith("model-0")], names
    assert "other.safetensors.index.json" in names and "model-notes.txt" in names
    assert all((t == 2.0).all() for t in fnp.load_file(tmp_path / "model.safetensors").values())
    # The streaming writer of one file too.
    fnp.save_sharded(tensors(1.0, 8), tmp_path, max_shard_size="4KB")
    layout = {n: ("F32", [512]) for n in tensors(0.0)}
    with fastst.open_writer(tmp_path / "model.safetensors", layout) as w:
        for name, t in tensors(3.0).items():
            w.write(name, t)
    assert not (tmp_path / "model.safetensors.index.json").exists()
    assert not [n for n in os.listdir(tmp_path) if n.startswith("model-0")]


def test_a_failed_index_write_removes_the_staged_shards(tmp_path: Path, monkeypatch) -> None:
    from fastst._write import sharded

    fnp.save_sharded(tensors(1.0), tmp_path, max_shard_size="4KB")
    before = sorted(os.listdir(tmp_path))

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sharded, "replace_bytes", full)
    with pytest.raises(OSError, match="No space left"):
        fnp.save_sharded(tensors(2.0, 8), tmp_path, max_shard_size="4KB")
    assert sorted(os.listdir(tmp_path)) == before
    assert all((t == 1.0).all() for t in fnp.load_file(tmp_path).values())


@pytest.mark.parametrize("shape", [[512], [4, 128]])
def test_prefixes_up_to_the_name_limit_save(tmp_path: Path, shape: List[int]) -> None:
    suffix = len("-00001-of-00002.safetensors")
    prefix = "p" * (255 - suffix)  # the shard's name is 255 bytes
    data = {n: t.reshape(shape) for n, t in tensors(1.0).items()}
    fnp.save_sharded(data, tmp_path, max_shard_size="4KB", prefix=prefix)
    loaded = fnp.load_file(tmp_path / f"{prefix}.safetensors.index.json")
    assert sorted(loaded) == sorted(data)
    layout = {n: ("F32", shape) for n in data}
    folder = tmp_path / "w"
    with fastst.open_sharded_writer(folder, layout, max_shard_size="4KB", prefix=prefix) as w:
        for name, t in data.items():
            w.write(name, t)
    assert sorted(fnp.load_file(tmp_path / "w")) == sorted(data)
    assert not [n for n in os.listdir(tmp_path / "w") if UNFINISHED.fullmatch(n)]
