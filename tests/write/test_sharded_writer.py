"""The sharded writer: a sharded checkpoint written tensor by tensor from its layout, whole or not
at all (``fastst.open_sharded_writer`` and ``save_sharded(..., layout=)``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import fastst
import fastst.numpy as fnp
import numpy as np
import pytest
from fastst._layout import UNFINISHED

NAMES = [f"layer.{i:02d}.weight" for i in range(8)]
LAYOUT = {n: ("F32", [64, 32]) for n in NAMES}  # 8 KiB each


def tensors(value: float) -> Dict[str, np.ndarray]:
    return {n: np.full((64, 32), value + i, dtype=np.float32) for i, n in enumerate(NAMES)}


def listing(folder: Path) -> List[str]:
    return sorted(p.name for p in folder.iterdir())


def checkpoint(folder: Path) -> Dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_generator_gives_the_bytes_a_dict_gives(tmp_path: Path) -> None:
    fed, whole = tmp_path / "fed", tmp_path / "whole"
    values = tensors(1.0)

    def pairs() -> Iterator[Tuple[str, np.ndarray]]:
        for name in reversed(NAMES):  # any order
            yield name, values[name]

    index = fnp.save_sharded(pairs(), fed, max_shard_size="20KB", layout=LAYOUT, align=64)
    fnp.save_sharded(values, whole, max_shard_size="20KB", align=64)
    assert index == str(fed / "model.safetensors.index.json")
    assert checkpoint(fed) == checkpoint(whole)
    assert len(listing(fed)) == 4 + 1  # 3 shards of 2 tensors... and the index
    meta = json.loads(Path(index).read_text())["metadata"]
    assert meta == {"total_size": 8 * 8192, "total_parameters": 8 * 2048}


def test_torch_generator_with_bf16_matches_the_dict_save(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import fastst.torch as ft

    state = {n: torch.randn(16, 8).to(torch.bfloat16) for n in NAMES}
    layout = {n: (torch.bfloat16, (16, 8)) for n in NAMES}
    ft.save_sharded(iter(state.items()), tmp_path / "fed", max_shard_size="1KB", layout=layout)
    ft.save_sharded(state, tmp_path / "whole", max_shard_size="1KB")
    fed = checkpoint(tmp_path / "fed")
    whole = checkpoint(tmp_path / "whole")
    # The dict save's index also counts tied weights; the shards are the same bytes.
    assert {k: v for k, v in fed.items() if k.endswith(".safetensors")} == {
        k: v for k, v in whole.items() if k.endswith(".safetensors")
    }
    loaded = ft.load_file(tmp_path / "fed")
    assert all(torch.equal(loaded[n], state[n]) for n in NAMES)


def test_threads_write_at_once(tmp_path: Path) -> None:
    values = tensors(5.0)
    with fastst.open_sharded_writer(tmp_path, LAYOUT, max_shard_size="20KB") as w:
        threads = [threading.Thread(target=w.write, args=(n, values[n])) for n in NAMES]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert w.missing() == []
    out = fnp.load_file(tmp_path)
    assert all((out[n] == values[n]).all() for n in NAMES)
    assert w.closed


@pytest.mark.parametrize("how", ["exception", "missing", "abort"])
def test_a_failed_save_leaves_the_old_checkpoint_and_nothing_else(tmp_path: Path, how: str) -> None:
    fnp.save_sharded(tensors(1.0), tmp_path, max_shard_size="20KB")
    before = checkpoint(tmp_path)
    new = tensors(2.0)
    if how == "exception":
        with pytest.raises(RuntimeError, match="stop"):
            with fastst.open_sharded_writer(tmp_path, LAYOUT, max_shard_size="20KB") as w:
                for name in NAMES[:5]:
                    w.write(name, new[name])
                raise RuntimeError("stop")
    elif how == "missing":
        with pytest.raises(fastst.SerializeError, match="3 tensors of the layout") as info:
            with fastst.open_sharded_writer(tmp_path, LAYOUT, max_shard_size="20KB") as w:
                for name in NAMES[:5]:
                    w.write(name, new[name])
        assert info.value.rule == "tensors-missing"
        assert NAMES[5] in str(info.value)
    else:
        w = fastst.open_sharded_writer(tmp_path, LAYOUT, max_shard_size="20KB")
        w.write(NAMES[0], new[NAMES[0]])
        w.abort()
        w.abort()  # again: nothing
        assert w.closed
    assert checkpoint(tmp_path) == before
    assert not [n for n in listing(tmp_path) if UNFINISHED.fullmatch(n)]


def test_hostile_writes_are_refused_with_their_rule(tmp_path: Path) -> None:
    with fastst.open_sharded_writer(tmp_path, LAYOUT, max_shard_size="20KB") as w:
        with pytest.raises(fastst.SerializeError) as info:
            w.write("not.in.layout", np.zeros((64, 32), np.float32))
        assert info.value.rule == "tensor-not-in-layout"
        with pytest.raises(fastst.SafetensorError) as info:
            w.write(NAMES[0], np.zeros((32, 64), np.float32))
        assert info.value.rule == "layout-mismatch"
        with pytest.raises(fastst.SafetensorError) as info:
            w.write(NAMES[0], np.zeros((64, 32), np.float64))
        assert info.value.rule == "layout-mismatch"
        with pytest.raises(TypeError):
            w.write(b"bytes-name", np.zeros((64, 32), np.float32))  # type: ignore[arg-type]
        values = tensors(3.0)
        for name in NAMES:
            w.write(name, values[name])
        with pytest.raises(fastst.SafetensorError) as info:
            w.write(NAMES[0], values[NAMES[0]])
        assert info.value.rule == "tensor-written-twice"
    with pytest.raises(fastst.ClosedFileError):
        w.write(NAMES[0], values[NAMES[0]])
    with pytest.raises(fastst.ClosedFileError):
        w.close()
    assert (fnp.load_file(tmp_path)[NAMES[2]] == 5.0).all()


def test_bad_arguments_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    with pytest.raises(ValueError, match="max_shard_size"):
        fastst.open_sharded_writer(folder, LAYOUT, max_shard_size=0)
    with pytest.raises(ValueError, match="prefix"):
        fastst.open_sharded_writer(folder, LAYOUT, prefix="../x")
    with pytest.raises(fastst.SafetensorError) as info:
        fastst.open_sharded_writer(folder, {"a": ("NOPE", [1])})
    assert info.value.rule == "unsupported-dtype"
    with pytest.raises(fastst.StorageOptionsError, match="apply to URLs") as refused:
        fastst.open_sharded_writer(folder, LAYOUT, storage_options={})
    assert refused.value.rule == "storage-options-local" and str(folder) in str(refused.value)
    with pytest.raises(ValueError, match="not a configuration key of S3"):
        fastst.open_sharded_writer("s3://b/run/", LAYOUT, storage_options={"no_such_key": "1"})
    with pytest.raises(ValueError, match="not a configuration key of S3"):
        fnp.save_sharded(iter([]), "s3://b/run/", layout=LAYOUT, storage_options={"nope": "1"})
    with pytest.raises(TypeError, match="pairs"):
        fnp.save_sharded(iter([np.zeros(3)]), folder, layout=LAYOUT)
    with pytest.raises(TypeError, match="layout="):
        fnp.save_sharded(iter([]), folder)  # type: ignore[arg-type]
    assert not folder.exists() or not [n for n in listing(folder) if n.endswith(".json")]


def test_a_symbolic_link_among_the_shards_is_replaced_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"keep me")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "model-00001-of-00004.safetensors").symlink_to(outside)
    fnp.save_sharded(iter(tensors(1.0).items()), folder, max_shard_size="20KB", layout=LAYOUT)
    assert outside.read_bytes() == b"keep me"
    assert not (folder / "model-00001-of-00004.safetensors").is_symlink()
    assert (fnp.load_file(folder)[NAMES[0]] == 1.0).all()


MEMORY_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import fastst.numpy as fnp

    folder, count, each = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def peak() -> int:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise SystemExit("no VmHWM")

    n = each // 4
    layout = {f"t{i:02d}": ("F32", [n]) for i in range(count)}

    def produce():
        for i in range(count):
            a = np.empty(n, dtype=np.float32)
            a.fill(i)
            yield f"t{i:02d}", a
            del a

    fnp.save_sharded(iter([("w", np.zeros(4, np.float32))]), folder + ".warm",
                     layout={"w": ("F32", [4])})
    base = peak()
    fnp.save_sharded(produce(), folder, layout=layout, max_shard_size=4 * each)
    print(peak() - base)
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_peak_memory_is_bounded_by_a_tensor_not_the_checkpoint(tmp_path: Path) -> None:
    count, each = 24, 64 << 20  # 1.5 GiB of tensors in 6 shards, made one at a time
    folder = tmp_path / "big"
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(folder), str(count), str(each)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    growth = int(result.stdout.split()[-1])
    assert len([n for n in listing(folder) if n.endswith(".safetensors")]) == 6
    with fastst.safe_open(folder / "model.safetensors.index.json", "np") as f:
        assert len(f.keys()) == count
        assert f.get_slice(f"t{count - 1:02d}")[-2:].tolist() == [count - 1.0] * 2
    # A tensor or two in hand and the writer's buffers: far below the checkpoint.
    assert growth < 300 << 20, f"peak RSS grew by {growth >> 20} MiB"
