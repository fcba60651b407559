"""``align=N``: the header padded so the data section starts at a multiple of N, in every
writer (serialize, save/save_file of the framework modules, save_sharded, open_writer); the
files load with the reference and fastst; the default stays byte-identical to the reference;
bad values are refused with rule ``bad-alignment``; ``fastst inspect`` shows the alignment and
``fastst meta --set`` keeps it."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Dict

import fastst
import fastst.numpy as fnp
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
from helpers.cli_files import run, run_json


def data_start(data: bytes) -> int:
    (n,) = struct.unpack("<Q", data[:8])
    return 8 + n


def json_of(data: bytes) -> str:
    return data[8 : data_start(data)].decode("utf-8")


def sample() -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "w": rng.standard_normal((7, 5)).astype(np.float32),
        "b": rng.standard_normal(3).astype(ml_dtypes.bfloat16),
        "i": np.arange(11, dtype=np.int64),
        "m": np.array([True, False, True]),
        "big_endian_strided": np.arange(24, dtype=">f8").reshape(4, 6)[:, ::2],
    }


def same(a: Dict[str, np.ndarray], b: Dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype.newbyteorder("=") == b[k].dtype.newbyteorder("=")
        assert a[k].shape == b[k].shape
        assert a[k].tobytes() == np.ascontiguousarray(b[k], dtype=a[k].dtype).tobytes(), k


@pytest.mark.parametrize("align", [64, 4096])
def test_aligned_files_load_with_the_reference_and_fastst(tmp_path: Path, align: int) -> None:
    tensors = sample()
    meta = {"format": "np", "note": "aligned"}
    path = tmp_path / f"a{align}.safetensors"
    fnp.save_file(tensors, path, metadata=meta, align=align)
    data = path.read_bytes()
    assert data_start(data) % align == 0
    assert data == fastst.serialize(tensors, meta, align=align)
    assert data == fnp.save(tensors, meta, align=align)
    # Only spaces were added: the same JSON, the same data section.
    plain = fnp.save(tensors, meta)
    assert json_of(data).rstrip(" ") == json_of(plain).rstrip(" ")
    assert data[data_start(data) :] == plain[data_start(plain) :]
    expected = {
        k: np.ascontiguousarray(v).astype(v.dtype.newbyteorder("<")) for k, v in tensors.items()
    }
    same(expected, safetensors.numpy.load_file(str(path)))
    same(expected, fnp.load_file(path))
    same(expected, fnp.load(data))
    with fastst.safe_open(path, "np") as f:
        assert f.metadata() == meta


def test_the_default_is_byte_identical_to_the_reference(tmp_path: Path) -> None:
    tensors = {
        k: np.ascontiguousarray(v).astype(v.dtype.newbyteorder("<")) for k, v in sample().items()
    }
    tensors.pop("b")  # the reference's numpy writer has no bfloat16
    meta = {"format": "np"}
    reference = safetensors.numpy.save(tensors, metadata=meta)
    assert fnp.save(tensors, meta) == reference
    for small in (None, 1, 2, 4, 8):
        assert fnp.save(tensors, meta, align=small) == reference, small
        assert fastst.serialize(tensors, meta, align=small) == reference, small
    assert data_start(fnp.save(tensors, meta, align=16)) % 16 == 0


@pytest.mark.parametrize("align", [2**k for k in range(13)])
def test_every_power_of_two_aligns_every_header_length(align: int) -> None:
    # Names of every length mod 64: the padding covers each remainder.
    for n in range(0, 64, 3):
        tensors = {"x" * (n + 1): np.zeros(2, np.uint8)}
        data = fastst.serialize(tensors, align=align)
        start = data_start(data)
        assert start % max(align, 8) == 0
        assert start - 8 - len(json_of(data).rstrip(" ")) < max(align, 8)
        assert safetensors.numpy.load(data)["x" * (n + 1)].tolist() == [0, 0]


@pytest.mark.parametrize("bad", [0, 3, 12, 8192, -8, True, False, 64.0, "64", b"64", [64]])
def test_bad_alignments_are_refused(tmp_path: Path, bad: object) -> None:
    tensors = {"a": np.zeros(2, np.float32)}
    target = tmp_path / "a.safetensors"
    calls = [
        lambda: fastst.serialize(tensors, align=bad),
        lambda: fastst.serialize_file(tensors, target, align=bad),
        lambda: fnp.save(tensors, align=bad),
        lambda: fnp.save_file(tensors, target, align=bad),
        lambda: fnp.save_sharded(tensors, tmp_path / "sharded", align=bad),
        lambda: fastst.open_writer(target, {"a": ("F32", [2])}, align=bad),
    ]
    for call in calls:
        with pytest.raises(fastst.SerializeError) as info:
            call()
        assert isinstance(info.value, ValueError)
        assert info.value.rule == "bad-alignment"
        assert "power of two from 1 to 4096" in str(info.value)
    assert not target.exists()
    assert not (tmp_path / "sharded").exists() or not any((tmp_path / "sharded").iterdir())


def test_numpy_integers_are_alignments() -> None:
    tensors = {"a": np.zeros(2, np.float32)}
    assert fastst.serialize(tensors, align=np.int64(64)) == fastst.serialize(tensors, align=64)


def test_save_sharded_aligns_every_shard(tmp_path: Path) -> None:
    tensors = {f"t{i}": np.full(300, i, np.float32) for i in range(5)}
    index = fnp.save_sharded(tensors, tmp_path / "ck", max_shard_size=2500, align=256)
    shards = sorted((tmp_path / "ck").glob("model-*.safetensors"))
    assert len(shards) > 1
    for shard in shards:
        assert data_start(shard.read_bytes()) % 256 == 0
        loaded = safetensors.numpy.load_file(str(shard))
        for name, value in loaded.items():
            assert np.array_equal(value, tensors[name])
    with fastst.safe_open(index, "np") as f:
        assert sorted(f.keys()) == sorted(tensors)


def test_torch_saves_align(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import fastst.torch as ftorch
    import safetensors.torch

    state = {"w": torch.arange(12, dtype=torch.bfloat16).reshape(3, 4), "b": torch.ones(5)}
    path = tmp_path / "t.safetensors"
    ftorch.save_file(state, path, align=128)
    data = path.read_bytes()
    assert data_start(data) % 128 == 0
    assert data == ftorch.save(state, align=128)
    loaded = safetensors.torch.load_file(str(path))
    for k, v in state.items():
        assert torch.equal(loaded[k], v)
    assert ftorch.save(state) == safetensors.torch.save(state)
    index = ftorch.save_sharded(state, tmp_path / "ck", max_shard_size=30, align=512)
    for shard in (tmp_path / "ck").glob("model-*.safetensors"):
        assert data_start(shard.read_bytes()) % 512 == 0
    assert Path(index).exists()


def test_inspect_shows_the_alignment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "a.safetensors"
    fnp.save_file({"a": np.zeros(4, np.float32)}, path, align=4096)
    code, results = run_json(["inspect", "--json", str(path)], capsys)
    assert code == 0
    assert results[0]["data_start"] == 4096
    assert results[0]["data_alignment"] == 4096
    code, out, _ = run(["inspect", str(path)], capsys)
    assert code == 0
    assert "data at offset 4,096 (aligned to 4,096)" in out
    from fastst.tools.inspect import inspect_file

    summary = inspect_file(path)
    assert (summary["data_start"], summary["data_alignment"]) == (4096, 4096)
    plain = tmp_path / "p.safetensors"
    fnp.save_file({"abc": np.zeros(4, np.float32)}, plain)
    start = data_start(plain.read_bytes())
    expected = start & -start
    assert inspect_file(plain)["data_alignment"] == min(expected, 4096)
    # A checkpoint has no one data section.
    index = fnp.save_sharded({"a": np.zeros(4, np.float32)}, tmp_path / "ck")
    code, results = run_json(["inspect", "--json", index], capsys)
    assert results[0]["data_alignment"] is None


@pytest.mark.parametrize("align", [64, 1024, 4096])
def test_meta_set_keeps_the_alignment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], align: int
) -> None:
    tensors = sample()
    path = tmp_path / "a.safetensors"
    fnp.save_file(tensors, path, metadata={"format": "np"}, align=align)
    before = path.read_bytes()
    # Long values: the header grows past the old padding.
    value = "v" * (align + 123)
    code, _out, err = run(["meta", "--set", f"note={value}", "--in-place", str(path)], capsys)
    assert code == 0, err
    after = path.read_bytes()
    assert data_start(after) % align == 0
    assert data_start(after) > data_start(before)
    assert after[data_start(after) :] == before[data_start(before) :]
    assert json.loads(json_of(after))["__metadata__"] == {"format": "np", "note": value}
    same(
        {k: np.ascontiguousarray(v).astype(v.dtype.newbyteorder("<")) for k, v in tensors.items()},
        safetensors.numpy.load_file(str(path)),
    )
    # The library call keeps it as well, also when the header shrinks.
    fastst.update_metadata(path, remove=["note"])
    shrunk = path.read_bytes()
    assert data_start(shrunk) % align == 0
    assert data_start(shrunk) <= data_start(after)
    assert json_of(shrunk).rstrip(" ") == json_of(before).rstrip(" ")
    assert shrunk[data_start(shrunk) :] == before[data_start(before) :]


def test_meta_set_on_a_default_file_stays_minimal(tmp_path: Path) -> None:
    # A file written without align keeps the alignment its data offset has
    # (a multiple of 8 at least), and never grows more than that needs.
    path = tmp_path / "a.safetensors"
    tensors = {"a": np.arange(3, dtype=np.float32)}
    fnp.save_file(tensors, path)
    old = data_start(path.read_bytes())
    kept = min(old & -old, 4096)
    fastst.update_metadata(path, {"k": "v"})
    new = data_start(path.read_bytes())
    assert new % kept == 0
    assert new - 8 - len(json_of(path.read_bytes()).rstrip(" ")) < kept
