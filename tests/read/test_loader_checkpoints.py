"""safe_open.prefetch(plan) on a sharded checkpoint (a loader per shard, one budget), and a loader
outliving its handle (it holds the file open itself, until its own close)."""

from __future__ import annotations

import gc
import json
import os
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Set

import fastst
import numpy as np
import pytest
from fastst._read.safe_open import safe_open as fastst_safe_open
from helpers.raw_files import raw_file

from tests.read.test_loader import _DTYPES, _FORMS, JOIN, MIB, _patterned, _Probe, _same


def _checkpoint(folder: Path, shards: List[Dict[str, Any]]) -> Path:
    """Shards ``shards`` ({name: (dtype, shape, data)} each) and their index
    in ``folder``: the index's path."""
    folder.mkdir(exist_ok=True)
    weight_map = {}
    for i, tensors in enumerate(shards):
        shard = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        (folder / shard).write_bytes(raw_file(tensors))
        weight_map.update(dict.fromkeys(tensors, shard))
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return index


@pytest.fixture
def mixed_shards(tmp_path: Path) -> Path:
    """The dtypes of tests/read/test_loader.py's ``mixed`` file over two shards."""
    tensors = {
        name.lower(): (name, (6, 8), _patterned(n, i))
        for i, (name, n) in enumerate(_DTYPES.items())
    }
    names = list(tensors)
    half = len(names) // 2
    return _checkpoint(
        tmp_path / "ckpt",
        [{n: tensors[n] for n in names[:half]}, {n: tensors[n] for n in names[half:]}],
    )


def _u8_shards(tmp_path: Path, shards: int, count: int, nbytes: int) -> Path:
    """``shards`` shards of ``count`` U8 tensors of ``nbytes`` each, tensor
    ``s{shard}t{i}`` filled with ``10 * shard + i``."""
    return _checkpoint(
        tmp_path / "u8",
        [
            {f"s{s}t{i}": ("U8", (nbytes,), bytes([10 * s + i]) * nbytes) for i in range(count)}
            for s in range(shards)
        ],
    )


def _workers(loader: Any) -> List[threading.Thread]:
    return [w for part in loader._parts or [loader] for w in part._workers]


@pytest.mark.parametrize("opened", ["index", "folder"])
@pytest.mark.parametrize("value, index", _FORMS)
def test_every_plan_form_on_a_checkpoint_gives_what_get_slice_gives(
    mixed_shards: Path, opened: str, value: Any, index: Any
) -> None:
    names = [n.lower() for n in _DTYPES]
    source = mixed_shards if opened == "index" else mixed_shards.parent
    with fastst.safe_open(source, "np") as f:
        with f.prefetch({n: value for n in names}) as loader:
            assert loader.names() == [n for n in f.offset_keys() if n in names]
            assert len(loader) == len(names)
            got = dict(loader)
        assert sorted(got) == sorted(names)
        for name in names:
            _same(got[name], f.get_tensor(name) if index is ... else f.get_slice(name)[index])
        with f.prefetch(names) as loader:
            for name in reversed(names):
                _same(loader.take(name), f.get_tensor(name))


def test_a_checkpoint_hands_each_tensor_out_once(mixed_shards: Path) -> None:
    with fastst.safe_open(mixed_shards, "np") as f, f.prefetch() as loader:
        first, last = loader.names()[0], loader.names()[-1]
        _same(loader.take(last), f.get_tensor(last))
        for name in (last, "nope"):
            with pytest.raises(fastst.SafetensorError) as info:
                loader.take(name)
            assert info.value.rule == "loader-take" and info.value.tensor == name
        rest = [name for name, _ in loader]
        assert sorted(rest) == sorted(set(f.keys()) - {last}) and first in rest
        assert list(loader) == []
    with pytest.raises(fastst.SafetensorError) as info:
        loader.take(first)
    assert info.value.rule == "closed-file"


def test_a_missing_tensor_names_the_index_and_the_tensor(mixed_shards: Path) -> None:
    with fastst.safe_open(mixed_shards, "np") as f:
        with pytest.raises(fastst.SafetensorError, match="does not contain") as info:
            f.prefetch({"f32": None, "nope": None})
    assert info.value.rule == "tensor-not-found" and info.value.tensor == "nope"
    assert str(mixed_shards) in str(info.value)


def _on_read(monkeypatch: pytest.MonkeyPatch, before: Callable[[List[str]], None]) -> None:
    """Calls ``before(names)`` as each read of a loader starts, with the
    names of the tensors it reads (one entry, or a run of them)."""
    attr = "_read_entries" if hasattr(fastst_safe_open, "_read_entries") else "_read_entry"
    original = getattr(fastst_safe_open, attr)

    def read(self: Any, what: Any, *args: Any) -> Any:
        before([e.name for e in what] if isinstance(what, list) else [what.name])
        return original(self, what, *args)

    monkeypatch.setattr(fastst_safe_open, attr, read)


def test_shards_are_read_side_by_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = _u8_shards(tmp_path, 2, 4, 4096)
    started = {0: threading.Event(), 1: threading.Event()}
    saw_other: Dict[int, bool] = {}

    def before(names: List[str]) -> None:
        shard = int(names[0][1])
        if shard not in saw_other:
            # the first read of each shard waits for one of the other shard
            started[shard].set()
            saw_other[shard] = started[1 - shard].wait(JOIN / 4)

    _on_read(monkeypatch, before)
    with fastst.safe_open(index, "np") as f, f.prefetch(threads=2) as loader:
        got = dict(loader)
    assert saw_other == {0: True, 1: True}
    assert all((got[f"s{s}t{i}"] == 10 * s + i).all() for s in range(2) for i in range(4))


def test_the_budget_holds_across_shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    size = MIB
    index = _u8_shards(tmp_path, 3, 6, size)
    probe = _Probe(monkeypatch)
    with fastst.safe_open(index, "np") as f, f.prefetch(budget=3 * size, threads=6) as loader:
        got = {}
        for name in loader.names():
            threading.Event().wait(0.02)  # the readers run as far ahead as allowed
            got[name] = loader.take(name)
    # the loader's budget counts the bytes of all its shards together: the
    # budget, plus the one tensor the waiting take asks for beyond it (the
    # other shards' tensors, taken later, fill it; a budget per shard would
    # let each shard hold 3 tensors)
    assert len(probe.landed) == 18 and max(probe.held) <= 4 * size, probe.held
    assert all((got[f"s{s}t{i}"] == 10 * s + i).all() for s in range(3) for i in range(6))


def test_closing_a_checkpoint_loader_stops_every_shard(tmp_path: Path) -> None:
    index = _u8_shards(tmp_path, 3, 8, 1 << 20)
    with fastst.safe_open(index, "np") as f:
        loader = f.prefetch(budget=2 << 20, threads=3)
        assert (loader.take("s1t0") == 10).all()
        loader.close()
        with pytest.raises(fastst.SafetensorError) as info:
            next(iter(loader))
        assert info.value.rule == "closed-file"
    for worker in _workers(loader):
        worker.join(JOIN)
        assert not worker.is_alive()
    assert all(not part._ready and not part._held for part in loader._parts)


# --- a loader outlives its handle ---------------------------------------------


def _held_open(path: Path) -> Set[str]:
    """This process's descriptors and mappings of ``path``'s file."""
    target = os.path.realpath(path)
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                held.add(f"fd {fd}")
        except OSError:
            pass
    with open("/proc/self/maps") as maps:
        held.update(line.strip() for line in maps if line.rstrip().endswith(" " + target))
    return held


def _shard_files(index: Path) -> List[Path]:
    return sorted(index.parent.glob("*.safetensors"))


@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize("release", ["close", "collect"])
def test_a_loader_reads_on_after_its_handle_closes(
    tmp_path: Path, backend: str, release: str
) -> None:
    index = _u8_shards(tmp_path, 2, 6, 256 << 10)
    single = tmp_path / "single.safetensors"
    single.write_bytes(raw_file({f"t{i}": ("U8", (4096,), bytes([i]) * 4096) for i in range(6)}))
    for path, files in ((single, [single]), (index, _shard_files(index))):
        with fastst.safe_open(path, "np", backend=backend) as f:
            loader = f.prefetch(threads=2, budget=256 << 10)
            names = loader.names()
        assert f.closed
        with pytest.raises(fastst.SafetensorError):
            f.get_tensor(names[0])
        # the loader holds the files open itself
        assert all(_held_open(file) for file in files)
        got = {names[0]: loader.take(names[0])}
        got.update(loader)
        assert list(got) and sorted(got) == sorted(names)
        for name, array in got.items():
            fill = int(name[1:]) if path == single else 10 * int(name[1]) + int(name[3:])
            assert (array == fill).all()
        workers = _workers(loader)
        if release == "close":
            loader.close()
        else:
            del loader
            gc.collect()
        for worker in workers:
            worker.join(JOIN)
        # released at the loader's own close (or collection)
        assert [_held_open(file) for file in files] == [set()] * len(files)
        assert all((array == got[name]).all() for name, array in got.items())


def test_closing_the_handle_keeps_the_file_of_a_loader_only(tmp_path: Path) -> None:
    path = tmp_path / "one.safetensors"
    path.write_bytes(raw_file({"a": ("F32", (4,), np.arange(4, dtype="<f4").tobytes())}))
    with fastst.safe_open(path, "np") as f:
        pass
    assert _held_open(path) == set()
    with fastst.safe_open(path, "np") as f:
        loader = f.prefetch()
        loader.close()
    for worker in _workers(loader):
        worker.join(JOIN)  # a read in flight ends with its tensor
    assert _held_open(path) == set()
