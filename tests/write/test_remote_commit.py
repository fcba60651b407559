"""A sharded save to object storage over an existing checkpoint commits as one: killed after any
step (a shard's upload completed, the index written, an old shard deleted) or in the middle of a
shard's upload, every loader sees the complete old checkpoint or the complete new one.

A child process saves a checkpoint whose tensors are all 2.0 over one whose tensors are all 1.0,
to a prefix of a real S3 store (SeaweedFS, behind the test's proxy), and is killed (SIGKILL);
then fastst's loaders (the prefix, the index, ``safe_open``) and the reference package reading the
index's shards as huggingface_hub does (fetched with boto3, past fastst) load what is there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any, Dict, Iterator, List

import fastst
import fastst.numpy
import numpy as np
import pytest
from helpers.remote_servers import Fault, Site

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]

NAMES = [f"layer.{i}.weight" for i in range(6)]
ELEMENTS = 256 * 1024  # 1 MiB of F32 per tensor: shards of two tensors at "2.5MB"

SAVER = textwrap.dedent(
    """
    import json, os, signal, sys
    import numpy as np
    import fastst.numpy as fnp
    from fastst._faces import io as fio
    from fastst._write import sharded

    prefix, value, stop_at = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    options = json.loads(sys.argv[4])
    done = [0]

    def counted(fn):
        def wrapped(*args, **kwargs):
            result = fn(*args, **kwargs)
            done[0] += 1
            if done[0] == stop_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return result
        return wrapped

    sharded._remote.put_bytes = counted(sharded._remote.put_bytes)
    sharded._remote.delete = counted(sharded._remote.delete)
    fio.FrameworkIO.save_file = counted(fio.FrameworkIO.save_file)
    names = [f"layer.{i}.weight" for i in range(6)]
    tensors = {n: np.full(256 * 1024, value, dtype=np.float32) for n in names}
    print("pid", os.getpid(), flush=True)
    fnp.save_sharded(tensors, prefix, max_shard_size="2.5MB", storage_options=options)
    print("operations", done[0], flush=True)
    """
)


@pytest.fixture(scope="module")
def store(make_site: Any) -> Site:
    return make_site("s3")


@pytest.fixture
def site(store: Site, request: pytest.FixtureRequest) -> Iterator[Site]:
    store.name = request.node.name.replace("[", "-").rstrip("]")
    store.proxy.reset()
    yield store
    store.proxy.reset()


def _options(site: Site) -> Dict[str, str]:
    return {**(site.options or {}), "fastst_remote_part_size": str(5 << 20)}


def _prefix(site: Site, tag: str) -> str:
    return f"s3://{site.bucket}/{site.folder}{site.name}-{tag}/"


def _save_here(site: Site, prefix: str, value: float) -> None:
    tensors = {n: np.full(ELEMENTS, value, dtype=np.float32) for n in NAMES}
    fastst.numpy.save_sharded(
        tensors, prefix, max_shard_size="2.5MB", storage_options=_options(site)
    )


def _child(site: Site, prefix: str, value: float, stop_at: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", SAVER, prefix, str(value), str(stop_at), json.dumps(_options(site))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _values_seen(site: Site, prefix: str) -> Dict[str, set]:
    """Loader -> the set of values its tensors hold (each tensor uniform)."""
    seen: Dict[str, set] = {}

    def note(loader: str, tensors: Dict[str, Any]) -> None:
        assert sorted(tensors) == NAMES, (loader, sorted(tensors))
        values = set()
        for name, t in tensors.items():
            array = np.asarray(t)
            assert array.shape == (ELEMENTS,), (loader, name)
            assert (array == array[0]).all(), (loader, name)
            values.add(float(array[0]))
        seen[loader] = values

    index = prefix + "model.safetensors.index.json"
    options = site.options
    note("fastst prefix", fastst.numpy.load_file(prefix, storage_options=options))
    note("fastst index", fastst.numpy.load_file(index, storage_options=options))
    with fastst.safe_open(index, "np", storage_options=options) as f:
        note("fastst safe_open", {k: f.get_tensor(k) for k in f.keys()})
    # The reference, reading the shards the index names, fetched past fastst.
    import safetensors.numpy as reference

    assert site.s3 is not None
    client = site.s3.client()
    key = prefix.removeprefix(f"s3://{site.bucket}/")
    body = client.get_object(Bucket=site.bucket, Key=key + "model.safetensors.index.json")["Body"]
    weight_map = json.loads(body.read())["weight_map"]
    by_reference: Dict[str, Any] = {}
    for shard in sorted(set(weight_map.values())):
        data = client.get_object(Bucket=site.bucket, Key=key + shard)["Body"].read()
        by_reference.update(
            {k: v for k, v in reference.load(data).items() if weight_map[k] == shard}
        )
    note("reference", by_reference)
    return seen


def _objects(site: Site, prefix: str) -> List[str]:
    assert site.s3 is not None
    key = prefix.removeprefix(f"s3://{site.bucket}/")
    listed = site.s3.client().list_objects_v2(Bucket=site.bucket, Prefix=key)
    return sorted(e["Key"].removeprefix(key) for e in listed.get("Contents", []))


def test_killed_after_any_step_loaders_see_old_or_new(site: Site) -> None:
    count = _prefix(site, "count")
    _save_here(site, count, 1.0)
    full = _child(site, count, 2.0, 0)
    out, err = full.communicate(timeout=120)
    assert full.returncode == 0, err
    total = int(out.split()[-1])
    assert total >= 5  # three shards, the index, old shards deleted
    states = []
    for stop_at in range(1, total + 1):
        prefix = _prefix(site, f"at{stop_at}")
        _save_here(site, prefix, 1.0)
        child = _child(site, prefix, 2.0, stop_at)
        _, err = child.communicate(timeout=120)
        assert child.returncode in (-signal.SIGKILL, 0), err
        values = set().union(*_values_seen(site, prefix).values())
        # Every loader sees one checkpoint, all old or all new, the same one.
        assert values in ({1.0}, {2.0}), (stop_at, values)
        states.append(values.pop())
    # The kills landed both before and after the commit.
    assert states[0] == 1.0 and states[-1] == 2.0, states
    # A later save over a prefix where a save was killed before its index (strays of it left)
    # leaves only its own checkpoint.
    prefix = _prefix(site, "at1")
    assert len(_objects(site, prefix)) > 4
    _save_here(site, prefix, 3.0)
    assert _values_seen(site, prefix)["fastst prefix"] == {3.0}
    assert site.s3 is not None
    key = prefix.removeprefix(f"s3://{site.bucket}/") + "model.safetensors.index.json"
    index = json.loads(site.s3.client().get_object(Bucket=site.bucket, Key=key)["Body"].read())
    named = set(index["weight_map"].values())
    stray = [n for n in _objects(site, prefix) if n not in named | {"model.safetensors.index.json"}]
    # Shards the killed save left (named by no index) were deleted by the next save.
    assert stray == []


@pytest.mark.parametrize("shard", [1, 2, 3])
def test_killed_in_the_middle_of_a_shard_upload_loaders_see_the_old(site: Site, shard: int) -> None:
    """The store receives the part of the ``shard``-th shard's upload (each shard is one part
    here) and the saving process is killed right then: the old index and shards stay, and every
    loader sees the old checkpoint."""
    prefix = _prefix(site, f"mid{shard}")
    _save_here(site, prefix, 1.0)
    before = _objects(site, prefix)
    holder: Dict[str, subprocess.Popen] = {}
    killed = threading.Event()

    def kill() -> None:
        os.kill(holder["child"].pid, signal.SIGKILL)
        killed.set()

    site.proxy.faults.append(
        Fault("call", call=kill, method="PUT", path="partNumber=1&", skip=shard - 1, ranged=False)
    )
    holder["child"] = _child(site, prefix, 2.0, 0)
    _, err = holder["child"].communicate(timeout=120)
    assert killed.is_set() and holder["child"].returncode == -signal.SIGKILL, err
    assert set(before) <= set(_objects(site, prefix))
    assert set().union(*_values_seen(site, prefix).values()) == {1.0}
