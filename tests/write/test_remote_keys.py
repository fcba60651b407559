"""Object keys are taken literally, and a save to a prefix deletes only what saves of it made.

Against a real S3 store (SeaweedFS, behind the test's proxy): keys holding ``#``, ``?``, ``%2F``,
``%``, ``..`` inside a name, spaces and non-ASCII letters are written and read back byte for byte
under the key as typed (as boto3 stores them), never cut at ``#`` or ``?``, decoded or resolved
(an unrelated object named like the cut key stays as it was); a key the store cannot be addressed
by (a ``..`` segment, an empty segment) is refused, rule ``object-key``, before any request. A
sharded save to a prefix deletes its own old shards and the strays of saves of it, never another
checkpoint's shards or other names an old index listed. An upload that the store does not answer
ends at its deadline (``fastst_remote_deadline``), leaving no object and no pending upload.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Dict

import fastst
import fastst.numpy
import numpy as np
import pytest
from helpers.remote_servers import SECRET_KEY, Fault, Site
from helpers.s3_objects import absent as _absent
from helpers.s3_objects import client as _client
from helpers.s3_objects import local_bytes as _local
from helpers.s3_objects import options as _options
from helpers.s3_objects import pending_uploads as _pending_uploads
from helpers.s3_objects import stored as _object

pytestmark = pytest.mark.slow

LITERAL_NAMES = [
    "exp#3/model.safetensors",
    "a?versionId=1.safetensors",
    "a%2Fb/c.safetensors",
    "100%.safetensors",
    "100%25.safetensors",
    "x..y/..z.safetensors",
    "with space/\u00fcnic\u00f6de \u6a21\u578b.safetensors",
]


def _small(seed: int = 0) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((64, 8), dtype=np.float32), "b": np.arange(5, dtype=np.int64)}


def _keys(site: Site, under: str) -> Dict[str, bytes]:
    """{key relative to the site's folder: bytes} of the objects under ``under``, as boto3
    lists them (straight from the store)."""
    s3 = _client(site)
    entries = s3.list_objects_v2(Bucket=site.bucket, Prefix=site.folder + under).get("Contents", [])
    return {
        e["Key"].removeprefix(site.folder): bytes(
            s3.get_object(Bucket=site.bucket, Key=e["Key"])["Body"].read()
        )
        for e in entries
    }


def test_keys_are_written_and_read_as_typed(site: Site, tmp_path: Path) -> None:
    base = site.name.removesuffix(".safetensors") + "/"
    tensors = _small()
    want = _local(tensors, tmp_path)
    for name in LITERAL_NAMES:
        # What a parser of URLs would make of the key: cut at "#" or "?", decoded.
        cut = base + name.split("#")[0].split("?")[0].replace("%2F", "/").replace("%25", "%")
        if cut != base + name:
            site.put(cut, b"unrelated")
        url = site.url(base + name)
        fastst.numpy.save_file(tensors, url, storage_options=_options(site))
        assert _object(site, base + name) == want, name
        listed = _keys(site, base)
        assert base + name in listed, name
        if cut != base + name:
            assert listed[cut] == b"unrelated", name
        back = fastst.numpy.load_file(url, storage_options=_options(site))
        assert all(np.array_equal(back[k], v) for k, v in tensors.items()), name


def test_a_key_put_by_another_client_is_read_as_typed(site: Site, tmp_path: Path) -> None:
    tensors = _small(1)
    name = site.name.removesuffix(".safetensors") + "/r?x=1#f%2Fg %.safetensors"
    url = site.put(name, _local(tensors, tmp_path))
    with fastst.safe_open(url, "numpy", storage_options=_options(site)) as f:
        assert np.array_equal(f.get_tensor("w"), tensors["w"])


def test_a_sharded_save_under_a_prefix_holding_a_hash_stays_under_it(site: Site) -> None:
    base = site.name.removesuffix(".safetensors") + "/"
    site.put(base + "runs/exp", b"unrelated")
    prefix = base + "runs/exp#3/"
    tensors = {f"t{i}": np.full(300_000, i, dtype=np.float32) for i in range(4)}
    url = site.url(prefix)
    fastst.numpy.save_sharded(tensors, url, max_shard_size="1.3MB", storage_options=_options(site))
    listed = _keys(site, base)
    assert listed[base + "runs/exp"] == b"unrelated"
    ours = sorted(k.removeprefix(prefix) for k in listed if k.startswith(prefix))
    assert len(ours) == 5 and ours[-1] == "model.safetensors.index.json", ours
    index = json.loads(listed[prefix + "model.safetensors.index.json"])
    assert sorted(set(index["weight_map"].values())) == ours[:-1]
    back = fastst.numpy.load_file(url, storage_options=_options(site))
    assert all(np.array_equal(back[k], v) for k, v in tensors.items())


@pytest.mark.parametrize(
    "name", ["d/../e.safetensors", "d//e.safetensors", "./e.safetensors"], ids=range(3)
)
def test_a_key_the_store_cannot_be_addressed_by_is_refused(site: Site, name: str) -> None:
    url = site.url(site.name.removesuffix(".safetensors") + "/" + name)
    with pytest.raises(fastst.SafetensorError) as raised:
        fastst.numpy.save_file(_small(), url, storage_options=_options(site))
    assert raised.value.rule == "object-key"  # type: ignore[attr-defined]
    assert url in str(raised.value) and SECRET_KEY not in str(raised.value)
    assert site.proxy.records == []  # refused before any request
    with pytest.raises(fastst.SafetensorError) as raised:
        fastst.numpy.load_file(url, storage_options=_options(site))
    assert raised.value.rule == "object-key"  # type: ignore[attr-defined]


def test_a_save_deletes_only_what_saves_of_its_prefix_made(site: Site, tmp_path: Path) -> None:
    base = site.name.removesuffix(".safetensors") + "/"
    foreign = {
        # Another checkpoint whose prefix looks like "model" and a save's own part.
        "model-20240101-00001-of-00001.safetensors": _local(_small(2), tmp_path),
        "model-20240101.safetensors.index.json": json.dumps(
            {"metadata": {}, "weight_map": {"w": "model-20240101-00001-of-00001.safetensors"}}
        ).encode(),
        "config.json": b'{"hidden": 8}',
        "tokenizer.json": b"{}",
        "notes.safetensors": b"not ours",
    }
    for name, body in foreign.items():
        site.put(base + name, body)
    # The old checkpoint of "model": its index names its shard and, wrongly, other files.
    old_shard = "model-00001-of-00001.safetensors"
    site.put(base + old_shard, _local(_small(3), tmp_path))
    weight_map = {"w": old_shard, "b": old_shard, "cfg": "config.json", "tok": "tokenizer.json"}
    site.put(
        base + "model.safetensors.index.json",
        json.dumps({"metadata": {}, "weight_map": weight_map}).encode(),
    )
    # What a save of "model" killed before its index left.
    stray = "model-0badc0de-00001-of-00002.safetensors"
    site.put(base + stray, b"left by a killed save")
    tensors = _small(4)
    fastst.numpy.save_sharded(tensors, site.url(base), storage_options=_options(site))
    listed = {k.removeprefix(base): v for k, v in _keys(site, base).items()}
    for name, body in foreign.items():
        assert listed.get(name) == body, name
    assert old_shard not in listed and stray not in listed
    index = json.loads(listed["model.safetensors.index.json"])
    new = sorted(set(index["weight_map"].values()))
    assert set(listed) == set(foreign) | set(new) | {"model.safetensors.index.json"}
    index_url = site.url(base + "model.safetensors.index.json")
    back = fastst.numpy.load_file(index_url, storage_options=_options(site))
    assert all(np.array_equal(back[k], v) for k, v in tensors.items())


def test_an_upload_the_store_does_not_answer_ends_at_its_deadline(site: Site) -> None:
    site.proxy.faults.append(
        Fault(
            "call", times=-1, method="PUT", path="partNumber=", ranged=False,
            call=lambda: time.sleep(6),
        )
    )  # fmt: skip
    tensors = {"big": np.ones((3, 1 << 20), dtype=np.float32)}  # 12 MiB: three parts
    url = site.url(site.name)
    with pytest.raises(TimeoutError) as raised:
        fastst.numpy.save_file(
            tensors, url, storage_options=_options(site, fastst_remote_deadline="1")
        )
    assert "not done within its deadline (1 s" in str(raised.value)
    assert site.bucket in str(raised.value) and SECRET_KEY not in str(raised.value)
    time.sleep(6)  # the parts held by the proxy arrive after the abort and are refused
    assert _absent(site)
    assert _pending_uploads(site) == []
