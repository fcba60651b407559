"""The remote reader's own guarantees (S3 on a real SeaweedFS store and a Range-honouring HTTP
server, behind the counting proxy of ``remote_servers``): owned loads in concurrent parts with
progress, conversions, large headers, empty objects, the options and the rules an index's
shard names follow."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import fastst
import fastst.numpy
import numpy as np
import pytest
from fastst import SafetensorError, ShardIndexError
from fastst._sources.remote import shard_url
from helpers.ranks import start_ranks
from helpers.remote_servers import Site

# Real servers (SeaweedFS, HTTP, a proxy) started for these tests: outside the inner loop.
pytestmark = pytest.mark.slow

FIRST = 64 << 10


def _tensors() -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    out = {f"w{i}": rng.standard_normal((512, 256), dtype=np.float32) for i in range(6)}
    out["b"] = rng.standard_normal(300, dtype=np.float32)
    return out


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reader") / "model.safetensors"
    fastst.numpy.save_file(_tensors(), str(path))
    return path


@pytest.fixture(scope="module")
def published(local: Path) -> Dict[str, Path]:
    return {"m/model.safetensors": local}


def _gets(site: Site) -> List[str]:
    """The Range headers of the GETs the proxy answered."""
    return [r.range or "" for r in site.proxy.records if r.method == "GET"]


def _opts(site: Site, **extra: str) -> Dict[str, str]:
    return {**(site.options or {}), **extra}


def test_owned_loads_fetch_in_parts_with_progress(remote: Site, local: Path) -> None:
    reports: List[Tuple[int, int]] = []
    got = fastst.numpy.load_file(
        remote.url("m/model.safetensors"),
        copy=True,
        progress=lambda done, total: reports.append((done, total)),
        storage_options=_opts(remote, fastst_remote_part_size="64K", fastst_remote_concurrency="3"),
    )
    want = _tensors()
    assert sorted(got) == sorted(want) and all(np.array_equal(got[k], want[k]) for k in want)
    data = sum(v.nbytes for v in want.values())
    # Every data byte once, in parts of at most 64 KiB.
    assert remote.proxy.body_bytes() <= local.stat().st_size + FIRST
    spans = [r.split("=")[1].split("-") for r in _gets(remote)[1:]]
    assert all(int(b) - int(a) + 1 <= 64 << 10 for a, b in spans)
    assert len(spans) >= data // (64 << 10)
    assert reports[-1] == (data, data) and len(reports) >= 1


@pytest.mark.parametrize("layout", ["file", "index"])
def test_plain_loads_fetch_runs_of_tensors_concurrently(
    remote: Site, tmp_path: Path, layout: str
) -> None:
    """A remote object has no pages to view: a plain ``load_file`` (no copy) is fetched as a
    ``copy=True`` load is (runs of small tensors in one GET, several GETs in flight), not one
    GET per tensor one after another; progress ends as a local load's does."""
    small = {f"s{i:03d}": np.full(1024, i, np.float32) for i in range(96)}
    folder = tmp_path / layout
    folder.mkdir()
    if layout == "file":
        files = [folder / "small.safetensors"]
        fastst.numpy.save_file(small, str(files[0]))
        url = remote.put("small/small.safetensors", files[0])
    else:
        index = Path(fastst.numpy.save_sharded(small, folder, max_shard_size=150_000))
        files = sorted(folder.glob("*.safetensors"))
        assert len(files) >= 2
        for f in folder.iterdir():
            remote.put(f"small/{f.name}", f)
        url = remote.url(f"small/{index.name}")
    remote.proxy.reset()
    reports: List[Tuple[int, int]] = []
    got = fastst.numpy.load_file(
        url,
        progress=lambda done, total: reports.append((done, total)),
        storage_options=_opts(remote, fastst_remote_part_size="16K", fastst_remote_concurrency="4"),
    )
    assert list(got) == list(small) and all(np.array_equal(got[k], small[k]) for k in small)
    data = sum(v.nbytes for v in small.values())
    assert reports[-1] == (data, data)
    # Past each object's first 64 KiB (fetched at open): 16 KiB runs of four tensors.
    gets = [r for r in remote.proxy.records if r.method == "GET" and r.range]
    past_first = [r for r in gets if not r.range.startswith("bytes=0-")]  # type: ignore[union-attr]
    assert len(past_first) <= sum(f.stat().st_size // (16 << 10) + 1 for f in files)
    assert remote.proxy.body_bytes() <= sum(f.stat().st_size for f in files) + len(files) * FIRST


def test_whole_loads_fetch_across_tensors_ending_on_the_objects_parts(
    remote: Site, tmp_path: Path
) -> None:
    """A whole load asks for ranges that span the ends of tensors (one GET fills several of
    them, straight), each ending where the object's offset is a multiple of the part size
    (where a multipart upload of that part size put the ends of its parts)."""
    big = {f"w{i}": np.full(300_000, i, np.float32) for i in range(6)}  # 1.2 MB each
    path = tmp_path / "big.safetensors"
    fastst.numpy.save_file(big, str(path))
    url = remote.put("big/big.safetensors", path)
    for part, most in [("1M", 1 << 20), (None, None)]:
        remote.proxy.reset()
        extra = {"fastst_remote_part_size": part} if part else {}
        got = fastst.numpy.load_file(url, storage_options=_opts(remote, **extra))
        assert list(got) == list(big) and all(np.array_equal(got[k], big[k]) for k in big)
        spans = sorted(
            (int(a), int(b) + 1) for a, b in (r.split("=")[1].split("-") for r in _gets(remote)[1:])
        )
        if most is None:
            # 7.2 MB, less than one part: one GET for the six tensors.
            assert len(spans) == 1
            continue
        assert all(end - start <= most for start, end in spans)
        assert all(end % most == 0 for _, end in spans[:-1])
        assert spans[-1][1] == path.stat().st_size
        # Requests follow each other, and none is cut at the end of a tensor.
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
        assert len(spans) == -(-path.stat().st_size // most)


def test_conversions_read_remote_bytes(remote: Site) -> None:
    url = remote.url("m/model.safetensors")
    got = fastst.numpy.load_file(url, dtype="F16", storage_options=remote.options)
    for name, w in _tensors().items():
        assert got[name].dtype == np.float16 and np.array_equal(got[name], w.astype(np.float16))


def test_a_large_header_takes_a_second_request(remote: Site, tmp_path: Path) -> None:
    many = {f"tensor.with.a.long.name.{i:05d}": np.full(2, i, np.float32) for i in range(2000)}
    path = tmp_path / "many.safetensors"
    fastst.numpy.save_file(many, str(path))
    with open(path, "rb") as f:
        header_end = 8 + struct.unpack("<Q", f.read(8))[0]
    assert header_end > FIRST
    url = remote.put("m/many.safetensors", path)
    remote.proxy.reset()
    with fastst.safe_open(url, "np", storage_options=remote.options) as f:
        assert len(f.keys()) == 2000
        assert len(_gets(remote)) == 2
        assert remote.proxy.body_bytes() <= header_end + FIRST
        assert np.array_equal(
            f.get_tensor("tensor.with.a.long.name.01999"), many["tensor.with.a.long.name.01999"]
        )


def test_an_empty_object_is_file_too_short(remote: Site) -> None:
    url = remote.put("m/empty.safetensors", b"")
    with pytest.raises(SafetensorError) as info:
        fastst.safe_open(url, "np", storage_options=remote.options)
    assert info.value.rule == "file-too-short" and "empty.safetensors" in str(info.value)


def test_a_header_past_the_end_is_refused(remote: Site) -> None:
    url = remote.put("m/past.safetensors", struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(SafetensorError) as info:
        fastst.safe_open(url, "np", storage_options=remote.options)
    assert info.value.rule == "header-past-end"
    assert remote.proxy.body_bytes() <= FIRST


@pytest.mark.parametrize(
    ("index", "shard", "url"),
    [
        ("http://h:1/m.index.json", "a.safetensors", "http://h:1/a.safetensors"),
        ("http://h:1/d/m.index.json", "a b.safetensors", "http://h:1/d/a%20b.safetensors"),
        ("s3://b/m.index.json", "sub/a.safetensors", "s3://b/sub/a.safetensors"),
        ("https://h/d/m.index.json?sig=1", "a.safetensors", "https://h/d/a.safetensors?sig=1"),
    ],
)
def test_shard_urls_sit_beside_the_index_even_at_the_root(index: str, shard: str, url: str) -> None:
    assert shard_url(index, shard) == url


def _index(remote: Site, name: str, shard: str) -> str:
    index = {"metadata": {}, "weight_map": {"b": shard}}
    return remote.put(f"m/{name}.safetensors.index.json", json.dumps(index).encode())


@pytest.mark.parametrize(
    "shard",
    ["../model.safetensors", "/m/model.safetensors", "s3://other/model.safetensors", "a\\b"],
)
def test_shard_names_stay_under_the_index_prefix(remote: Site, shard: str) -> None:
    url = _index(remote, "escape", shard)
    with pytest.raises(ShardIndexError) as info:
        fastst.safe_open(url, "np", storage_options=remote.options)
    assert info.value.rule == "shard-path"


def test_a_missing_shard_is_shard_missing(remote: Site) -> None:
    url = _index(remote, "missing", "nowhere.safetensors")
    with pytest.raises(ShardIndexError) as info:
        fastst.safe_open(url, "np", storage_options=remote.options)
    assert info.value.rule == "shard-missing"


def test_an_index_over_the_cap_is_not_fetched(
    remote: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = {"weight_map": {f"t{i}": "model.safetensors" for i in range(20000)}}
    url = remote.put("m/big.safetensors.index.json", json.dumps(big).encode())
    monkeypatch.setenv("FASTST_INDEX_CAP", "100K")
    remote.proxy.reset()
    with pytest.raises(ShardIndexError) as info:
        fastst.safe_open(url, "np", storage_options=remote.options)
    assert info.value.rule == "index-over-cap"
    assert remote.proxy.body_bytes() <= FIRST


def test_options_are_checked(remote: Site, local: Path) -> None:
    url = remote.url("m/model.safetensors")
    with pytest.raises(ValueError, match="no_such_option"):
        fastst.safe_open(url, "np", storage_options=_opts(remote, no_such_option="1"))
    with pytest.raises(ValueError, match="FASTST_REMOTE_CONCURRENCY"):
        fastst.safe_open(url, "np", storage_options=_opts(remote, FASTST_REMOTE_CONCURRENCY="0"))
    with pytest.raises(TypeError):
        fastst.safe_open(url, "np", storage_options=[("region", "x")])  # type: ignore[arg-type]
    with pytest.raises(fastst.StorageOptionsError, match="URLs"):
        fastst.safe_open(str(local), "np", storage_options={"region": "x"})
    assert remote.proxy.records == []  # nothing was asked of the store


def _rank(rank: int, world: int, port: int, url: str, out: str) -> None:
    """One rank of :func:`test_load_distributed_fetches_each_byte_once`."""
    import os
    from datetime import timedelta

    import fastst.torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    try:
        got = fastst.torch.load_distributed(url, unit="tensor")
        sums = {k: float(v.double().sum()) for k, v in got.items()}
        Path(out, f"rank{rank}.json").write_text(json.dumps(sums))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_load_distributed_fetches_each_byte_once(
    make_site: Callable[[str], Site], local: Path, tmp_path: Path
) -> None:
    """Two gloo ranks load an HTTP checkpoint: the store sends each data byte once in all."""
    pytest.importorskip("torch.distributed")
    import socket

    site = make_site("http")
    url = site.put("d/model.safetensors", local)
    site.proxy.reset()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    group = start_ranks(_rank, (2, port, url, str(tmp_path)), 2)
    while not group.join():
        pass
    want = {k: float(v.astype(np.float64).sum()) for k, v in _tensors().items()}
    for rank in range(2):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert got.keys() == want.keys() and all(got[k] == pytest.approx(want[k]) for k in want)
    data = sum(v.nbytes for v in _tensors().values())
    headers = local.stat().st_size - data
    assert data <= site.proxy.body_bytes() <= data + 2 * (headers + FIRST)
