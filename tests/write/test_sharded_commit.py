"""A sharded save over an existing checkpoint commits as one: killed after any file operation of
the commit sequence, every loader sees the complete old checkpoint or the complete new one.

A child process saves a checkpoint whose tensors are all 2.0 over one whose tensors are all 1.0
and is killed (SIGKILL) right after its N-th file operation (a shard written, the index replaced,
a shard linked to its final name, a file removed), for every N; then fastst's loaders (the folder,
the index, ``safe_open``), the reference package reading the index by hand, huggingface_hub's
``load_torch_model`` and transformers' ``from_pretrained`` load what is there.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import fastst
import fastst.numpy as fnp
import numpy as np
import pytest
from fastst._layout import UNFINISHED

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX semantics"),
]

torch = pytest.importorskip("torch")

NAMES = [f"layer.{i:02d}.weight" for i in range(12)]
ELEMENTS = 1 << 16  # 256 KiB of F32 per tensor

SAVER = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    import fastst.numpy as fnp
    from fastst._faces import io as fio
    from fastst._write import sharded

    folder, value, limit, stop_at = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    feed = sys.argv[5] == "feed"
    done = [0]

    def counted(fn):
        def wrapped(*args, **kwargs):
            result = fn(*args, **kwargs)
            done[0] += 1
            if done[0] == stop_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return result
        return wrapped

    sharded.replace_bytes = counted(sharded.replace_bytes)
    sharded.link_file = counted(sharded.link_file)
    sharded.remove_if_present = counted(sharded.remove_if_present)
    fio.FrameworkIO.save_file = counted(fio.FrameworkIO.save_file)
    sharded.TensorWriter.close = counted(sharded.TensorWriter.close)
    sharded.TensorWriter.write = counted(sharded.TensorWriter.write)
    names = [f"layer.{i:02d}.weight" for i in range(12)]
    if feed:
        # Tensor by tensor from a generator, in reverse order, with a layout.
        layout = {n: ("F32", [1 << 16]) for n in names}
        pairs = ((n, np.full(1 << 16, value, dtype=np.float32)) for n in reversed(names))
        fnp.save_sharded(pairs, folder, max_shard_size=limit, metadata={"format": "pt"},
                         layout=layout)
    else:
        tensors = {n: np.full(1 << 16, value, dtype=np.float32) for n in names}
        fnp.save_sharded(tensors, folder, max_shard_size=limit, metadata={"format": "pt"})
    print("operations", done[0], flush=True)
    """
)


def save(
    folder: Path, value: float, limit: str, stop_at: int = 0, feed: str = "dict"
) -> subprocess.CompletedProcess:
    """A save in a child process, killed after its ``stop_at``-th file operation (0: never);
    ``feed`` "dict" saves a dict, "feed" a generator with a layout (the sharded writer)."""
    return subprocess.run(
        [sys.executable, "-c", SAVER, str(folder), str(value), limit, str(stop_at), feed],
        capture_output=True,
        text=True,
    )


def save_here(folder: Path, value: float, limit: str) -> None:
    tensors = {n: np.full(ELEMENTS, value, dtype=np.float32) for n in NAMES}
    fnp.save_sharded(tensors, folder, max_shard_size=limit, metadata={"format": "pt"})


def operations(tmp_path: Path, limit: str, feed: str) -> int:
    """How many file operations a save over a checkpoint takes (a full run)."""
    folder = tmp_path / "count"
    save_here(folder, 1.0, limit)
    out = save(folder, 2.0, limit, 0, feed)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def values_seen(folder: Path) -> Dict[str, set]:
    """Loader -> the set of values its tensors hold (each tensor uniform)."""
    seen: Dict[str, set] = {}

    def note(loader: str, tensors: Dict[str, object]) -> None:
        assert sorted(tensors) == NAMES, (loader, sorted(tensors))
        values = set()
        for name, t in tensors.items():
            array = t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)
            assert array.shape == (ELEMENTS,), (loader, name)
            assert (array == array[0]).all(), (loader, name)
            values.add(float(array[0]))
        seen[loader] = values

    index = folder / "model.safetensors.index.json"
    note("fastst folder", fnp.load_file(folder))
    note("fastst index", fnp.load_file(index))
    with fastst.safe_open(index, "np") as f:
        note("fastst safe_open", {k: f.get_tensor(k) for k in f.keys()})
    # The reference, reading the index as huggingface_hub and transformers do.
    import safetensors.numpy as reference

    weight_map = json.loads(index.read_text())["weight_map"]
    by_reference: Dict[str, object] = {}
    for shard in sorted(set(weight_map.values())):
        by_reference.update(
            {k: v for k, v in reference.load_file(folder / shard).items() if weight_map[k] == shard}
        )
    note("reference", by_reference)
    from huggingface_hub import load_torch_model

    model = torch.nn.Module()
    model.layer = torch.nn.Module()
    for name in NAMES:
        holder = torch.nn.Module()
        holder.register_parameter("weight", torch.nn.Parameter(torch.zeros(ELEMENTS)))
        model.layer.add_module(name.split(".")[1], holder)
    load_torch_model(model, folder, strict=True)
    note("huggingface_hub", dict(model.state_dict()))
    return seen


def listing(folder: Path) -> List[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize(
    ("old_limit", "new_limit", "feed"),
    [("600KB", "600KB", "dict"), ("300KB", "600KB", "dict"), ("300KB", "600KB", "feed")],
    ids=["same-names", "other-names", "fed-by-a-generator"],
)
def test_killed_after_any_operation_loaders_see_old_or_new(
    tmp_path: Path, old_limit: str, new_limit: str, feed: str
) -> None:
    total = operations(tmp_path, new_limit, feed)
    assert total >= 6
    states = []
    for stop_at in range(1, total + 1):
        folder = tmp_path / f"at{stop_at}"
        save_here(folder, 1.0, old_limit)
        out = save(folder, 2.0, new_limit, stop_at, feed)
        assert out.returncode in (-signal.SIGKILL, 0), out.stderr
        seen = values_seen(folder)
        values = set().union(*seen.values())
        # Every loader sees one checkpoint, all old or all new, the same one.
        assert values in ({1.0}, {2.0}), (stop_at, seen)
        states.append(values.pop())
        if out.returncode == 0:
            # Completed: only the ecosystem's names remain.
            names = listing(folder)
            assert not [n for n in names if UNFINISHED.fullmatch(n)], names
    # The kills landed both before and after the commit.
    assert states[0] == 1.0 and states[-1] == 2.0, states
    # And a later save over a half-committed folder cleans up after it.
    folder = tmp_path / f"at{total // 2}"
    save_here(folder, 3.0, new_limit)
    assert not [n for n in listing(folder) if UNFINISHED.fullmatch(n)]
    assert values_seen(folder)["fastst folder"] == {3.0}


def test_transformers_loads_a_checkpoint_whose_index_names_staged_shards(tmp_path: Path) -> None:
    # The state between the two index writes: the index names the staged
    # (hidden, temporary-named) shards. transformers must load it as is.
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16)
    model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(tmp_path / "ref")
    folder = tmp_path / "model"
    folder.mkdir()
    config.save_pretrained(folder)
    saver = textwrap.dedent(
        f"""
        import os, signal, torch, transformers
        import fastst.torch as ft
        from fastst._write import sharded
        original = sharded.replace_bytes
        def first_index_only(*args, **kwargs):
            original(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
        sharded.replace_bytes = first_index_only
        model = transformers.GPT2LMHeadModel.from_pretrained({str(tmp_path / "ref")!r})
        ft.save_sharded(model.state_dict(), {str(folder)!r}, max_shard_size="20KB")
        """
    )
    out = subprocess.run([sys.executable, "-c", saver], capture_output=True, text=True)
    assert out.returncode == -signal.SIGKILL, out.stderr
    weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    assert all(UNFINISHED.fullmatch(name) for name in weight_map.values()), weight_map
    loaded = transformers.GPT2LMHeadModel.from_pretrained(folder)
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
