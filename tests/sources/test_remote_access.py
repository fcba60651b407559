"""Remote checkpoints (S3 on a real SeaweedFS store, and HTTP) read through a counting proxy:
opening fetches the header and never the data, a tensor or a slice fetches its own bytes, a
whole load fetches each byte once and equals the local load bit for bit, sharded checkpoints
and the command line work on URLs."""

from __future__ import annotations

import functools
import json
import struct
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import fastst
import fastst.numpy
import numpy as np
import pytest
from helpers.remote_servers import Site, fastst_cli, local_cli

# Real servers (SeaweedFS, HTTP, a proxy) started for these tests: outside the inner loop.
pytestmark = pytest.mark.slow

FIRST = 64 << 10  # what opening may fetch besides the size prefix and the header
ROWS, COLS = 4096, 4096  # "big": 64 MiB of F32, so that fetching the data by mistake shows


@functools.cache
def _tensors() -> Dict[str, np.ndarray]:
    """The checkpoint's tensors, made once: read-only, since every test shares them."""
    rng = np.random.default_rng(0)
    tensors = {
        "big": rng.standard_normal((ROWS, COLS), dtype=np.float32),
        "small": rng.standard_normal((16, 16), dtype=np.float32),
        "half": rng.standard_normal((300, 70)).astype(np.float16),
        "ids": np.arange(1000, dtype=np.int64),
        "mask": rng.random((33, 7)) > 0.5,
        "scalar": np.array(2.5, dtype=np.float64),
        "empty": np.zeros((0, 5), dtype=np.float32),
    }
    for array in tensors.values():
        array.setflags(write=False)
    return tensors


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("remote") / "model.safetensors"
    fastst.numpy.save_file(_tensors(), str(path), metadata={"format": "pt", "note": "remote"})
    return path


@pytest.fixture(scope="module")
def header_end(local: Path) -> int:
    """Size prefix + header: the bytes before the data."""
    with open(local, "rb") as f:
        return 8 + struct.unpack("<Q", f.read(8))[0]


@pytest.fixture(scope="module")
def published(local: Path) -> Dict[str, Path]:
    return {"dir/model.safetensors": local}


def _url(site: Site) -> str:
    return site.url("dir/model.safetensors")


def _same(got: Dict[str, Any], want: Dict[str, Any]) -> None:
    assert list(got) == list(want)
    for name, w in want.items():
        g = got[name]
        assert (g.dtype, tuple(g.shape)) == (w.dtype, tuple(w.shape)), name
        assert g.tobytes() == w.tobytes(), name


def test_open_fetches_the_header_only(remote: Site, local: Path, header_end: int) -> None:
    with fastst.safe_open(_url(remote), framework="np", storage_options=remote.options) as f:
        assert sorted(f.keys()) == sorted(_tensors())
        assert f.metadata() == {"format": "pt", "note": "remote"}
    assert 0 < remote.proxy.body_bytes() <= header_end + FIRST


def test_get_tensor_fetches_that_tensor(remote: Site, local: Path) -> None:
    want = _tensors()
    with fastst.safe_open(_url(remote), framework="np", storage_options=remote.options) as f:
        opened = remote.proxy.body_bytes()
        got = f.get_tensor("big")
        fetched = remote.proxy.body_bytes() - opened
        assert want["big"].nbytes <= fetched <= want["big"].nbytes + FIRST
        _same({"big": got}, {"big": want["big"]})
        opened = remote.proxy.body_bytes()
        _same({"half": f.get_tensor("half")}, {"half": want["half"]})
        assert remote.proxy.body_bytes() - opened <= want["half"].nbytes + FIRST


def test_get_slice_fetches_those_rows(remote: Site) -> None:
    want = _tensors()["big"]
    with fastst.safe_open(_url(remote), framework="np", storage_options=remote.options) as f:
        opened = remote.proxy.body_bytes()
        got = f.get_slice("big")[1000:1100]
        fetched = remote.proxy.body_bytes() - opened
    assert np.array_equal(got, want[1000:1100])
    assert 100 * COLS * 4 <= fetched <= 100 * COLS * 4 + FIRST


def test_load_file_numpy_equals_local_and_fetches_each_byte_once(remote: Site, local: Path) -> None:
    got = fastst.numpy.load_file(_url(remote), storage_options=remote.options)
    _same(got, fastst.numpy.load_file(str(local)))
    assert remote.proxy.body_bytes() <= local.stat().st_size + FIRST


def test_load_file_torch_equals_local(remote: Site, local: Path) -> None:
    torch = pytest.importorskip("torch")
    import fastst.torch

    got = fastst.torch.load_file(_url(remote), storage_options=remote.options)
    want = fastst.torch.load_file(str(local))
    assert list(got) == list(want)
    for name, w in want.items():
        g = got[name]
        assert (g.dtype, g.shape) == (w.dtype, w.shape), name
        assert torch.equal(g.reshape(-1).view(torch.uint8), w.reshape(-1).view(torch.uint8))


def test_sharded_index_and_prefix(remote: Site, tmp_path: Path) -> None:
    tensors = {k: v for k, v in _tensors().items() if k != "big"}
    tensors["mid"] = np.random.default_rng(1).standard_normal((512, 256), dtype=np.float32)
    index = Path(fastst.numpy.save_sharded(tensors, tmp_path, max_shard_size=200_000))
    files = sorted(tmp_path.iterdir())
    assert len(files) >= 3
    for f in files:
        remote.put(f"sharded/{f.name}", f)
    want = fastst.numpy.load_file(str(index))
    got = fastst.numpy.load_file(
        remote.url(f"sharded/{index.name}"), storage_options=remote.options
    )
    _same(got, want)
    if remote.kind == "s3":  # a prefix is a folder where the store lists
        got = fastst.numpy.load_file(remote.url("sharded/"), storage_options=remote.options)
        _same(got, want)


# the command line -----------------------------------------------------------------------------


def _cli(remote: Site, *args: str) -> subprocess.CompletedProcess[str]:
    return fastst_cli(*args, env=remote.env)


def _results(out: subprocess.CompletedProcess[str]) -> List[Dict[str, Any]]:
    """The --json results without the fields naming the inputs."""
    doc = json.loads(out.stdout)
    assert doc["errors"] == [], doc["errors"]
    return [{k: v for k, v in r.items() if k not in ("path", "a", "b")} for r in doc["results"]]


def test_cli_inspect_fetches_the_header_only(remote: Site, local: Path, header_end: int) -> None:
    out = _cli(remote, "inspect", "--json", _url(remote))
    assert out.returncode == 0, out.stderr
    assert _results(out) == _results(local_cli("inspect", "--json", str(local)))
    assert remote.proxy.body_bytes() <= header_end + FIRST


@pytest.mark.parametrize("command", ["verify", "hash"])
def test_cli_verify_and_hash_agree_with_local(remote: Site, local: Path, command: str) -> None:
    out = _cli(remote, command, "--json", _url(remote))
    here = local_cli(command, "--json", str(local))
    assert out.returncode == here.returncode, out.stderr
    assert _results(out) == _results(here)


def test_cli_diff_agrees_with_local(remote: Site, local: Path, tmp_path: Path) -> None:
    changed = dict(fastst.numpy.load_file(str(local)))
    changed["small"] = changed["small"] + 1
    other = tmp_path / "other.safetensors"
    fastst.numpy.save_file(changed, str(other), metadata={"format": "pt", "note": "remote"})
    url = remote.put("dir/other.safetensors", other)
    out = _cli(remote, "diff", "--json", _url(remote), url)
    here = local_cli("diff", "--json", str(local), str(other))
    assert out.returncode == here.returncode == 1, out.stderr
    assert _results(out) == _results(here)
    assert _results(out)[0]["different"][0]["name"] == "small"
