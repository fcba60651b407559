"""torch.distributed.checkpoint to and from object storage: fastst's DCP writer, reader and
consolidation with an ``s3://`` prefix (SeaweedFS behind the counting, fault-injecting proxy).

Two gloo ranks save DTensors to a prefix (and the same to a folder) and load them back in another
placement; this process loads them into one rank (resharding), counts the bytes a load fetches,
consolidates from the prefix and from the folder, and checks the commit: a rank killed in the
middle of its upload leaves the previous checkpoint, and strays are deleted by the next save.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import fastst.torch
import pytest
import torch
import torch.distributed as dist
from fastst.torch import dcp as fdcp
from helpers.dcp_states import MAPPING, differ, full_tensors, state_dict, tensors_of
from helpers.ranks import run_ranks
from helpers.remote_servers import Fault, Site

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (dist.is_available() and dist.is_gloo_available()), reason="torch without gloo"
    ),
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning"),
]

TIME_LIMIT = 240  # seconds for one spawned group
RECORD = "fastst-dcp.json"


# in the spawned ranks ---------------------------------------------------------------------


def _save_load(job: Dict[str, Any]) -> Dict[str, Any]:
    """Saves the DTensors to the prefix and to a folder, loads the prefix in other placements."""
    import torch.distributed.checkpoint as dcp

    options = job["options"]
    writer = fdcp.StorageWriter(
        job["url"],
        fqn_to_index_mapping=MAPPING,
        save_distributed=True,
        thread_count=2,
        storage_options=options,
    )
    dcp.save(state_dict("saved"), storage_writer=writer)
    local = fdcp.StorageWriter(job["local"], fqn_to_index_mapping=MAPPING, save_distributed=True)
    dcp.save(state_dict("saved"), storage_writer=local)
    got = state_dict("other", empty=True)
    dcp.load(got, storage_reader=fdcp.StorageReader(job["url"], storage_options=options))
    # Both ranks consolidate the prefix into another prefix, each its share of the files.
    index = fdcp.consolidate_on_every_rank(
        job["url"], job["url"][:-1] + "-consolidated/", MAPPING, storage_options=options
    )
    return {"differ": differ(got, state_dict("other")), "consolidated": index}


def _killed(job: Dict[str, Any]) -> Dict[str, Any]:
    """A save over the prefix whose rank 1 the test kills while its upload is under way."""
    import torch.distributed.checkpoint as dcp

    changed = {
        k: v if v.dtype == torch.float8_e4m3fn else v * 2 for k, v in state_dict("saved").items()
    }
    writer = fdcp.StorageWriter(job["url"], save_distributed=True, storage_options=job["options"])
    try:
        dcp.save(changed, storage_writer=writer)
    except Exception as exc:  # noqa: BLE001 - what rank 0 sees
        return {"raised": type(exc).__name__}
    return {"raised": None}


SCENARIOS: Dict[str, Callable[[Dict[str, Any]], Dict[str, Any]]] = {
    "save_load": _save_load,
    "killed": _killed,
}


def _worker(rank: int, world: int, port: int, which: str, job: Dict[str, Any]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if sys.platform.startswith("linux"):
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    try:
        try:
            result = SCENARIOS[which](job)
        except Exception:  # noqa: BLE001 - reported to the test
            result = {"crashed": traceback.format_exc()}
        Path(job["root"], f"{which}-rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def spawn(
    which: str, job: Dict[str, Any], on_start: Optional[Callable[[List[Any]], None]] = None
) -> List[Any]:
    """Runs the scenario ``which`` on 2 ranks; each rank's result (None for a rank that died)
    and the exit codes. ``on_start`` gets the started processes."""
    return run_ranks(_worker, 2, (which, job), Path(job["root"]), which, TIME_LIMIT, on_start)


def ok(result: Dict[str, Any]) -> Dict[str, Any]:
    assert result is not None and "crashed" not in result, result and result["crashed"]
    return result


# here -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(make_site: Any) -> Site:
    return make_site("s3")


@pytest.fixture
def site(store: Site) -> Iterator[Site]:
    store.proxy.reset()
    yield store
    store.proxy.reset()


def _prefix(site: Site, tag: str) -> str:
    return f"s3://{site.bucket}/{site.folder}{tag}/"


def _objects(site: Site, prefix: str) -> Dict[str, bytes]:
    """The objects under ``prefix`` (at any depth): name -> bytes, read past fastst."""
    assert site.s3 is not None
    client = site.s3.client()
    key = prefix.removeprefix(f"s3://{site.bucket}/")
    listed = client.list_objects_v2(Bucket=site.bucket, Prefix=key).get("Contents", [])
    return {
        e["Key"].removeprefix(key): client.get_object(Bucket=site.bucket, Key=e["Key"])[
            "Body"
        ].read()
        for e in listed
    }


def _whole(names: Any) -> Dict[str, torch.Tensor]:
    """Empty plain tensors shaped as the whole saved ones (a load into one rank)."""
    want = full_tensors()
    return {n: torch.zeros_like(want[n]) for n in names}


def _load_here(url: str, site: Site, names: Any = None, reader: Any = None) -> Dict[str, Any]:
    import torch.distributed.checkpoint as dcp

    got = _whole(full_tensors() if names is None else names)
    reader = reader or fdcp.StorageReader(url, storage_options=site.options)
    dcp.load(got, storage_reader=reader, no_dist=True)
    return got


def _save_here(sd: Dict[str, torch.Tensor], url: str, site: Site, **options: Any) -> None:
    import torch.distributed.checkpoint as dcp

    writer = fdcp.StorageWriter(url, storage_options=site.options, **options)
    dcp.save(sd, storage_writer=writer, no_dist=True)


def _job(site: Site, root: Path, url: str) -> Dict[str, Any]:
    return {"url": url, "options": site.options, "root": str(root), "local": str(root / "local")}


@pytest.fixture(scope="module")
def saved(store: Site, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    root = tmp_path_factory.mktemp("dcp-remote")
    url = _prefix(store, "two-ranks")
    results, codes = spawn("save_load", _job(store, root, url))
    assert codes == [0, 0], results
    return {"root": root, "url": url, "results": results}


def test_two_ranks_save_to_s3_and_load_back_in_any_world_size(
    saved: Dict[str, Any], site: Site
) -> None:
    for res in saved["results"]:
        assert ok(res)["differ"] == []  # 2 ranks, every placement changed
    objects = _objects(site, saved["url"])
    record = json.loads(objects[RECORD])
    part = record["part"]
    # The rank files carry the save's part, the record names them; nothing else is there.
    want = [
        f"shard-0000{r}-model-{part}-0000{i}-of-00002.safetensors" for r in (1, 2) for i in (1, 2)
    ]
    assert record["files"] == want
    assert sorted(objects) == sorted([*want, RECORD])
    # One rank loads the whole tensors (resharding 2 -> 1), equal bit for bit.
    got = _load_here(saved["url"], site)
    assert differ(got, full_tensors()) == []


class _Marked(fdcp.StorageReader):
    """The reader, clearing the proxy's records once the headers are read."""

    site: Site

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        meta = super().read_metadata(*args, **kwargs)
        self.site.proxy.reset()
        return meta


def test_a_load_fetches_only_the_bytes_it_asks_for(site: Site) -> None:
    """Two tensors of a checkpoint of two files, each after 128 KiB of another (past what
    opening a file fetches), are loaded alone: the bodies the store sends after the headers
    hold exactly their bytes, in ranged GETs."""
    import torch.distributed.checkpoint as dcp

    url = _prefix(site, "bytes")
    g = torch.Generator().manual_seed(5)
    sd = {
        "a_pad": torch.randn(32768, generator=g),
        "b": torch.randn(100, 30, generator=g),
        "c_pad": torch.randn(32768, generator=g),
        "d": torch.randn(70, generator=g).to(torch.bfloat16),
    }
    mapping = {"a_pad": 1, "b": 1, "c_pad": 2, "d": 2}
    _save_here(sd, url, site, save_distributed=True, fqn_to_index_mapping=mapping)
    reader = _Marked(url, storage_options=site.options)
    reader.site = site
    got = {n: torch.zeros_like(sd[n]) for n in ("b", "d")}
    dcp.load(got, storage_reader=reader, no_dist=True)
    assert differ(got, {n: sd[n] for n in got}) == []
    reads = [r for r in site.proxy.records if r.method == "GET"]
    assert reads and all(r.range for r in reads)
    assert sum(r.body for r in reads) == sum(t.numel() * t.element_size() for t in got.values())


def test_consolidation_from_a_prefix_equals_the_folders(
    saved: Dict[str, Any], site: Site, tmp_path: Path
) -> None:
    local = saved["root"] / "local"
    fdcp.consolidate(local, tmp_path / "from-folder", MAPPING)
    fdcp.consolidate(saved["url"], tmp_path / "from-url", MAPPING, storage_options=site.options)
    want = tensors_of(tmp_path / "from-folder")
    assert tensors_of(tmp_path / "from-url") == want
    # The same files as torch's writer leaves them (no commit object): the prefix is listed.
    plain = _prefix(site, "plain")
    assert site.s3 is not None
    key = plain.removeprefix(f"s3://{site.bucket}/")
    for f in sorted(local.iterdir()):
        site.s3.upload(site.bucket, key + f.name, f)
    fdcp.consolidate(plain, tmp_path / "from-plain", MAPPING, storage_options=site.options)
    assert tensors_of(tmp_path / "from-plain") == want


def _as_folder(site: Site, prefix: str, into: Path) -> Dict[str, Any]:
    """The objects of a consolidation to ``prefix``, its part taken out of the shards' names
    (as the index names them), written into the folder ``into``: :func:`tensors_of` of it,
    and the index."""
    objects = _objects(site, prefix)
    index = json.loads(objects["model.safetensors.index.json"])
    named = sorted(set(index["weight_map"].values()))
    assert sorted(objects) == sorted([*named, "model.safetensors.index.json"])
    into.mkdir()

    def final(name: str) -> str:  # model-<part>-00001-of-00002... -> model-00001-of-00002...
        stem, _, rest = name.split("-", 2)
        return f"{stem}-{rest}"

    for name in named:
        (into / final(name)).write_bytes(objects[name])
    plain = {**index, "weight_map": {k: final(v) for k, v in index["weight_map"].items()}}
    (into / "model.safetensors.index.json").write_text(json.dumps(plain, indent=2) + "\n")
    return {"tensors": tensors_of(into), "index": index}


def test_consolidation_to_a_prefix_equals_the_folders_and_commits_last(
    saved: Dict[str, Any], site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = saved["root"] / "local"
    fdcp.consolidate(local, tmp_path / "from-folder", MAPPING)
    want = tensors_of(tmp_path / "from-folder")
    out = _prefix(site, "consolidated")
    index_url = fdcp.consolidate(saved["url"], out, MAPPING, storage_options=site.options)
    assert index_url == out + "model.safetensors.index.json"
    first = _as_folder(site, out, tmp_path / "first")
    assert first["tensors"] == want
    # The same, split between two ranks (consolidate_on_every_rank in the spawned group).
    split = saved["url"][:-1] + "-consolidated/"
    assert [r["consolidated"] for r in saved["results"]] == [
        split + "model.safetensors.index.json",
        None,
    ]
    assert _as_folder(site, split, tmp_path / "split")["tensors"] == want
    loaded = fastst.torch.load_file(index_url, storage_options=site.options)
    assert sorted(loaded) == sorted(first["index"]["weight_map"])
    # A second consolidation over it that fails part-way leaves the first whole, and no
    # object of its own behind; the next one replaces the first and deletes its files.
    from fastst._dcp import consolidate as module

    real = module.pieces
    calls = {"n": 0}

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("read failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "pieces", failing)
    with pytest.raises(RuntimeError, match="read failed"):
        fdcp.consolidate(local, out, MAPPING, storage_options=site.options, thread_count=1)
    monkeypatch.setattr(module, "pieces", real)
    assert _as_folder(site, out, tmp_path / "after-failure") == first
    fdcp.consolidate(local, out, MAPPING, storage_options=site.options)
    second = _as_folder(site, out, tmp_path / "second")
    assert second["tensors"] == want
    assert not set(second["index"]["weight_map"].values()) & set(
        first["index"]["weight_map"].values()
    )


def test_enable_consolidation_to_a_prefix(site: Site, tmp_path: Path) -> None:
    url = _prefix(site, "with-consolidation")
    full = full_tensors()
    full["lm_head.weight"] = full["lm_head.weight"].clone()
    _save_here(
        full,
        url,
        site,
        save_distributed=True,
        enable_consolidation=True,
        fqn_to_index_mapping=MAPPING,
    )
    objects = _objects(site, url)
    assert RECORD in {n.removeprefix("sharded/") for n in objects if n.startswith("sharded/")}
    index = url + "model.safetensors.index.json"
    got = fastst.torch.load_file(index, storage_options=site.options)
    assert differ(got, full) == []
    # What the sharded files hold consolidates (again, into a folder) to the same tensors.
    folder = tmp_path / "again"
    fdcp.consolidate(url + "sharded/", folder, MAPPING, storage_options=site.options)
    assert differ(fastst.torch.load_file(str(folder)), full) == []


def test_a_save_without_save_distributed_is_a_sharded_checkpoint(site: Site) -> None:
    url = _prefix(site, "model-kind")
    full = full_tensors()
    full["lm_head.weight"] = full["lm_head.weight"].clone()
    _save_here(full, url, site, fqn_to_index_mapping=MAPPING)
    index = json.loads(_objects(site, url)["model.safetensors.index.json"])
    files = sorted(set(index["weight_map"].values()))
    assert len(files) == 2 and all(f.startswith("model-") and "-of-00002" in f for f in files)
    assert sorted(_objects(site, url)) == sorted([*files, "model.safetensors.index.json"])
    # fastst's loaders read it as the sharded checkpoint it is, and DCP loads it back.
    back = fastst.torch.load_file(url, storage_options=site.options)
    assert differ(back, full) == []
    assert differ(_load_here(url, site), full) == []


def _part_named(site: Site, url: str, name: str) -> None:
    """Uploads a rank file as a killed save would have left it (past fastst): half of
    ``w_row``, which overlaps the whole one if read with it."""
    assert site.s3 is not None
    data = fastst.torch.save({"w_row": torch.full((4, 6), 5.0)})
    site.s3.upload(site.bucket, url.removeprefix(f"s3://{site.bucket}/") + name, data)


def test_strays_are_ignored_then_deleted_by_the_next_save(site: Site) -> None:
    url = _prefix(site, "strays")
    first = {"w_row": torch.ones(8, 6)}
    _save_here(first, url, site, save_distributed=True)
    before = set(_objects(site, url))
    strays = [
        "shard-00001-model-0badcafe-00001-of-00001.safetensors",
        "shard-00002-model-0badcafe-00001-of-00001.safetensors",
    ]
    for name in strays:
        _part_named(site, url, name)
    # No commit object names them: readers see the committed checkpoint alone.
    assert torch.equal(_load_here(url, site, ["w_row"])["w_row"], first["w_row"])
    second = {"w_row": torch.full((8, 6), 3.0)}
    _save_here(second, url, site, save_distributed=True)
    after = _objects(site, url)
    record = json.loads(after[RECORD])
    # The previous save's file and the strays are gone; the new file is all there is.
    assert sorted(after) == sorted([*record["files"], RECORD])
    assert not (set(record["files"]) & before)
    assert torch.equal(_load_here(url, site, ["w_row"])["w_row"], second["w_row"])


def test_a_rank_killed_mid_upload_leaves_the_previous_checkpoint(
    site: Site, tmp_path: Path
) -> None:
    url = _prefix(site, "killed")
    full = full_tensors()
    full["lm_head.weight"] = full["lm_head.weight"].clone()
    _save_here(full, url, site, save_distributed=True)
    record = _objects(site, url)[RECORD]
    holder: Dict[str, List[Any]] = {}

    def kill() -> None:
        os.kill(holder["procs"][1].pid, signal.SIGKILL)

    # Rank 1's first part reaches the store: rank 1 dies right then.
    site.proxy.faults.append(
        Fault("call", call=kill, method="PUT", path="/shard-00002-model-", ranged=False)
    )
    results, codes = spawn(
        "killed", _job(site, tmp_path, url), lambda procs: holder.update(procs=procs)
    )
    assert site.proxy.faults[0].hits >= 1
    assert codes[1] == -signal.SIGKILL and results[1] is None
    assert ok(results[0])["raised"] is not None
    site.proxy.reset()
    # The commit object is the previous one, and the previous checkpoint loads whole and equal;
    # rank 0's file of the killed save is there, named by no commit object.
    left = _objects(site, url)
    assert left[RECORD] == record
    strays = set(left) - set(json.loads(record)["files"]) - {RECORD}
    assert strays and all(n.startswith("shard-00001-model-") for n in strays), strays
    assert differ(_load_here(url, site), full) == []
    # The next save deletes what the killed save left.
    _save_here({"bias": torch.ones(3)}, url, site, save_distributed=True)
    after = _objects(site, url)
    assert sorted(after) == sorted([*json.loads(after[RECORD])["files"], RECORD])
    assert len(after) == 2


@pytest.mark.parametrize(
    "record",
    [
        b"{not json",
        b'{"files": []}',
        b'{"format": "fastst-dcp", "files": "a.safetensors"}',
        b'{"format": "fastst-dcp", "files": ["../other/a.safetensors"]}',
        b'{"format": "fastst-dcp", "files": [".hidden.safetensors"]}',
    ],
)
def test_a_commit_record_fastst_did_not_write_is_refused(site: Site, record: bytes) -> None:
    """The record is hostile input: one that is not fastst's, or that names a file outside
    the prefix or not a plain ``.safetensors`` name, is refused before any file is opened."""
    url = _prefix(site, "hostile")
    assert site.s3 is not None
    site.s3.upload(site.bucket, url.removeprefix(f"s3://{site.bucket}/") + RECORD, record)
    with pytest.raises(fastst.SafetensorError) as caught:
        fdcp.StorageReader(url, storage_options=site.options).read_metadata()
    assert caught.value.rule == "dcp-sharding-info"  # type: ignore[attr-defined]
    assert not [r for r in site.proxy.records if r.path.endswith(".safetensors")]
