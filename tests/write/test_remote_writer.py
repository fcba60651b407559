"""The streaming writers to object storage: ``open_writer("s3://...")`` takes tensors in any order,
from any thread, and uploads each planned part of the object, under its own number, once every
byte of it is written (to a real S3 store, SeaweedFS, behind the fault-injecting proxy); the
object is byte for byte what ``save_file`` writes and appears only when the block ends cleanly
with every tensor written. Hostile writes, failures, Ctrl-C and kills leave no object (or the
old one). ``open_sharded_writer`` and ``save_sharded(pairs, layout=...)`` to a URL prefix commit
as the dict ``save_sharded`` does (index last); killed part-way, the old checkpoint loads
whole. Memory stays bounded by the parts in flight, not the object."""

from __future__ import annotations

import _thread
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterator, List

import fastst
import fastst.numpy as fnp
import ml_dtypes
import numpy as np
import pytest
from fastst import SerializeError
from helpers.remote_servers import Fault, SeaweedS3, Site
from helpers.s3_objects import PART, torch_tensors
from helpers.s3_objects import absent as _absent
from helpers.s3_objects import listed as _listed
from helpers.s3_objects import local_bytes as _local
from helpers.s3_objects import options as _options
from helpers.s3_objects import pending_uploads as _pending_uploads
from helpers.s3_objects import stored as _object
from helpers.s3_objects import under as _under

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _tensors(seed: int = 0) -> Dict[str, np.ndarray]:
    """About 17 MB: four parts of 5 MiB, tensors of many dtypes and layouts, several of them
    straddling the parts' edges."""
    rng = np.random.default_rng(seed)
    return {
        "big": rng.standard_normal((2000, 1024), dtype=np.float32),  # 8 MB
        "mid": rng.standard_normal((1500, 1024)).astype(ml_dtypes.bfloat16),  # 3 MB
        "fortran": np.asfortranarray(rng.standard_normal((600, 700))),  # 3.4 MB, converted
        "strided": np.arange(3_000_000, dtype=np.int16)[::2],  # 3 MB, converted
        "f8": rng.standard_normal(1000).astype(ml_dtypes.float8_e4m3fn),
        "scalar": np.float16(1.5),
        "empty": np.zeros((0, 4), dtype=np.uint8),
        "bool": np.array([True, False, True]),
    }


def _layout(tensors: Dict[str, Any]) -> Dict[str, Any]:
    return {n: (np.asarray(t).dtype, np.shape(t)) for n, t in tensors.items()}


def _part_numbers(site: Site) -> List[int]:
    """The part numbers of the parts the store took, in the order it answered them."""
    numbers = []
    for r in list(site.proxy.records):
        m = re.search(r"partNumber=(\d+)", r.path)
        if m and r.method == "PUT" and r.status == 200:
            numbers.append(int(m.group(1)))
    return numbers


def _write_all(writer: Any, tensors: Dict[str, Any], order: List[str], threads: int = 4) -> None:
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda n: writer.write(n, tensors[n]), order))


# round trips ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_any_order_from_threads_is_the_local_file_byte_for_byte(site: Site, tmp_path: Path) -> None:
    tensors = _tensors()
    meta = {"format": "np", "step": "7"}
    want = _local(tensors, tmp_path, metadata=meta, align=64)
    url = site.url(site.name)
    order = list(tensors)
    random.Random(3).shuffle(order)
    with fastst.open_writer(
        url, _layout(tensors), metadata=meta, align=64, storage_options=_options(site)
    ) as w:
        assert w.name == url and w.missing() == list(tensors)
        _write_all(w, tensors, order)
        assert w.missing() == []
        # Every tensor written: the parts are up, but no object until the block ends.
        assert _absent(site)
    assert w.closed
    assert _object(site) == want
    # Each part went up once, under its own number, and the completion came last.
    parts = _part_numbers(site)
    assert sorted(parts) == list(range(1, 1 + -(-len(want) // PART))) == [1, 2, 3, 4]
    records = [r for r in site.proxy.records if r.status < 400]
    assert records[-1].method == "POST" and "uploadId=" in records[-1].path
    assert _pending_uploads(site) == []
    back = fnp.load_file(url, storage_options=site.options)
    assert all(np.array_equal(back[k], np.asarray(v)) for k, v in tensors.items())


def _until(check: Any) -> None:
    """Waits (at most 30 s) until ``check()`` holds: the store's answers come in their time."""
    deadline = time.monotonic() + 30
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)


def _stored(site: Site, want: set) -> set:
    """The part numbers stored, once they include ``want`` (or after 30 s)."""
    _until(lambda: set(_part_numbers(site)) >= want)
    return set(_part_numbers(site))


@pytest.mark.slow
def test_each_part_goes_up_once_every_byte_of_it_is_written(site: Site, tmp_path: Path) -> None:
    """Five tensors of 4 MiB written last-first into parts of 5 MiB: each part is uploaded,
    under its own number, as soon as its last byte is written (the last part first), before
    the block ends; no other part is."""
    tensors = {f"t{i}": np.full((1 << 20,), i, dtype=np.float32) for i in range(5)}
    url = site.url(site.name)
    # Part 5 holds the end of t4; part k (k < 5) the end of t(k-1) and the start of t(k).
    stored_after = {"t4": {5}, "t3": {4, 5}, "t2": {3, 4, 5}, "t1": {2, 3, 4, 5}}
    with fastst.open_writer(url, _layout(tensors), storage_options=_options(site)) as w:
        assert w.data_start < 1 << 20
        for name in ["t4", "t3", "t2", "t1"]:
            w.write(name, tensors[name])
            assert _stored(site, stored_after[name]) == stored_after[name], name
        w.write("t0", tensors["t0"])
        assert _stored(site, {1, 2, 3, 4, 5}) == {1, 2, 3, 4, 5}
        assert sorted(_part_numbers(site)) == [1, 2, 3, 4, 5]
        assert _absent(site)
    assert _object(site) == _local(tensors, tmp_path)


@pytest.mark.slow
def test_a_writer_replaces_the_old_object_and_the_environment_configures_it(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in site.env.items():
        monkeypatch.setenv(key, value)
    site.put(site.name, b"the old object")
    small = {"x": np.arange(10, dtype=np.int64), "y": np.ones((2, 3), dtype=np.float16)}
    with fastst.open_writer(site.url(site.name), _layout(small), metadata={"k": "v"}) as w:
        w.write_parts("y", [np.ones((2, 3), dtype=np.float16).tobytes()])
        w.write("x", small["x"])
    assert _object(site) == _local(small, tmp_path, metadata={"k": "v"})
    assert _part_numbers(site) == [1]


@pytest.mark.slow
def test_torch_tensors_are_written_as_torch_save_file_writes_them(
    site: Site, tmp_path: Path
) -> None:
    tensors, want = torch_tensors(tmp_path)
    layout = {n: (t.dtype, tuple(t.shape)) for n, t in tensors.items()}
    url = site.url(site.name)
    with fastst.open_writer(
        url, layout, metadata={"format": "pt"}, storage_options=_options(site)
    ) as w:
        w.write("b", tensors["b"])
        w.write("w", tensors["w"])
    assert _object(site) == want


@pytest.mark.slow
def test_drops_and_503s_are_retried(site: Site, tmp_path: Path) -> None:
    site.proxy.faults += [
        Fault("status", status=503, times=2, method="PUT", path="partNumber=2&", ranged=False),
        Fault("hangup", times=1, method="PUT", path="partNumber=3&", ranged=False),
        Fault("status", status=500, times=1, method="POST", path="uploads", ranged=False),
        Fault("status", status=503, times=1, method="POST", path="uploadId=", ranged=False),
    ]
    tensors = _tensors(2)
    with fastst.open_writer(
        site.url(site.name), _layout(tensors), storage_options=_options(site)
    ) as w:
        _write_all(w, tensors, list(reversed(list(tensors))))
    assert _object(site) == _local(tensors, tmp_path)
    assert [r.status for r in site.proxy.records].count(503) == 3
    assert _pending_uploads(site) == []


# whole or nothing -----------------------------------------------------------------------------


def _gone_or_old(site: Site, old: bool) -> None:
    """No upload left pending; the old object as it was, or none."""
    assert _pending_uploads(site) == []
    if old:
        assert _object(site) == b"the old object"
    else:
        assert _absent(site)


@pytest.mark.slow
def test_hostile_writes_are_refused_naming_the_url_the_tensor_and_the_rule(site: Site) -> None:
    site.put(site.name, b"the old object")
    tensors = _tensors()
    url = f"s3://someone:s3cr3t@{site.bucket}/{site.folder}{site.name}"
    shown = site.url(site.name)  # without the user part
    caught: List[SerializeError] = []

    def refused(call: Any, rule: str, tensor: str) -> None:
        with pytest.raises(SerializeError) as info:
            call()
        assert (info.value.rule, info.value.tensor) == (rule, tensor), info.value
        assert str(info.value).startswith(shown + ": ") and tensor in str(info.value)
        caught.append(info.value)

    with pytest.raises(SerializeError) as missing:
        with fastst.open_writer(url, _layout(tensors), storage_options=_options(site)) as w:
            assert w.name == shown
            w.write("big", tensors["big"])
            refused(lambda: w.write("mid", tensors["big"]), "layout-mismatch", "mid")
            refused(
                lambda: w.write("bool", np.array([1, 0, 1], np.uint8)), "layout-mismatch", "bool"
            )
            refused(lambda: w.write("f8", tensors["f8"][:10]), "layout-mismatch", "f8")
            refused(lambda: w.write_parts("bool", [b"\x01\x00"]), "data-length", "bool")
            refused(lambda: w.write("nope", tensors["bool"]), "tensor-not-in-layout", "nope")
            refused(lambda: w.write("big", tensors["big"]), "tensor-written-twice", "big")
            # A write that stops part-way can be done again (its parts were not complete)...
            with pytest.raises(RuntimeError, match="stopped"):
                w.write_parts("bool", _pieces([b"\x01"], RuntimeError("stopped")))
            w.write("bool", tensors["bool"])
            w.write("mid", tensors["mid"])
            w.write("scalar", tensors["scalar"])
            # ... but not once some of its bytes completed a part, which went up: the part
            # holding the end of "big", "mid" and "scalar" ends 1.1 MB into "strided".
            raw = np.asarray(tensors["strided"]).tobytes()
            with pytest.raises(RuntimeError, match="stopped"):
                w.write_parts("strided", _pieces([raw[:2_000_000]], RuntimeError("stopped")))
            refused(
                lambda: w.write("strided", tensors["strided"]), "tensor-written-twice", "strided"
            )
            assert "uploaded already" in str(caught[-1])
            for name in ("fortran", "empty"):
                w.write(name, tensors[name])
    # Closing with tensors missing saves nothing and names them.
    assert (missing.value.rule, missing.value.tensor) == ("tensors-missing", "strided")
    assert str(missing.value).startswith(shown + ": ") and '"f8"' in str(missing.value)
    for error in [*caught, missing.value]:
        for secret in ("someone", "s3cr3t", "fastst-test-secret"):
            assert secret not in str(error)
    _gone_or_old(site, old=True)


def _pieces(first: List[bytes], then: BaseException) -> Iterator[bytes]:
    yield from first
    raise then


@pytest.mark.slow
@pytest.mark.parametrize("old", [True, False], ids=["replacing", "new"])
def test_an_exception_in_the_block_aborts_the_upload(site: Site, old: bool) -> None:
    if old:
        site.put(site.name, b"the old object")
    tensors = _tensors()
    with pytest.raises(KeyError, match="boom"):
        with fastst.open_writer(
            site.url(site.name), _layout(tensors), storage_options=_options(site)
        ) as w:
            _write_all(w, tensors, list(tensors))
            _until(lambda: len(_part_numbers(site)) == 4)
            raise KeyError("boom")
    assert w.closed
    assert len(_part_numbers(site)) == 4, "the parts were stored before the exception"
    assert [r.status for r in site.proxy.records if r.method == "DELETE"] == [204]
    _gone_or_old(site, old)
    with pytest.raises(fastst.ClosedFileError):
        w.write("big", tensors["big"])


@pytest.mark.slow
def test_abort_and_garbage_collection_leave_no_object(site: Site) -> None:
    site.put(site.name, b"the old object")
    tensors = _tensors()
    w = fastst.open_writer(site.url(site.name), _layout(tensors), storage_options=_options(site))
    w.write("big", tensors["big"])
    w.abort()
    w.abort()
    _gone_or_old(site, old=True)
    w = fastst.open_writer(site.url(site.name), _layout(tensors), storage_options=_options(site))
    _write_all(w, tensors, list(tensors))
    del w  # never closed: aborted in the background
    _until(lambda: not _pending_uploads(site))
    _gone_or_old(site, old=True)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hangup", "status"])
def test_a_part_that_keeps_failing_aborts_the_upload(site: Site, kind: str) -> None:
    """Every try of the second part loses its connection (or gets a 503): after the store's
    retries the writer fails naming the URL and what the part holds; the upload is aborted and
    the old object stays."""
    site.put(site.name, b"the old object")
    fault = Fault(kind, status=503, times=-1, method="PUT", path="partNumber=2&", ranged=False)
    site.proxy.faults.append(fault)
    tensors = _tensors()
    with pytest.raises(OSError) as caught:
        with fastst.open_writer(
            site.url(site.name), _layout(tensors), storage_options=_options(site)
        ) as w:
            for name in tensors:
                w.write(name, tensors[name])
    text = str(caught.value)
    assert text.startswith(site.url(site.name) + f": cannot upload bytes {PART}..{2 * PART} ")
    assert '(tensor "big")' in text or '(tensors "big"' in text, text
    assert fault.hits > 2, "retried first"
    _gone_or_old(site, old=True)


@pytest.mark.slow
@pytest.mark.parametrize("waiting", ["writer", "close"])
def test_ctrl_c_while_waiting_for_the_store_aborts_the_upload(site: Site, waiting: str) -> None:
    """The store is slow to take the first part; Ctrl-C (SIGINT) arrives meanwhile, while a
    writer waits for room (one part in flight at most) or the block's end waits for the last
    parts: KeyboardInterrupt is raised at once (the waits release the GIL and hear signals),
    and the upload is aborted."""
    site.put(site.name, b"the old object")
    slow = threading.Event()
    site.proxy.faults.append(
        Fault("call", call=lambda: slow.wait(10), method="PUT", path="partNumber=1&", ranged=False)
    )
    one = {"fastst_remote_concurrency": "1"} if waiting == "writer" else {}
    tensors = _tensors()
    timer = threading.Timer(0.5, _thread.interrupt_main)
    # Ctrl-C's Python handler, as in an interactive process (a runner that started the tests
    # in the background has SIGINT ignored, and interrupt_main then does nothing).
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    written: List[str] = []
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            with fastst.open_writer(
                site.url(site.name), _layout(tensors), storage_options=_options(site, **one)
            ) as w:
                for name in tensors:
                    w.write(name, tensors[name])
                    written.append(name)
        assert time.monotonic() - started < 5
    finally:
        timer.cancel()
        slow.set()
        signal.signal(signal.SIGINT, handler)
    assert (written == list(tensors)) == (waiting == "close"), written
    assert [r.status for r in site.proxy.records if r.method == "DELETE"] == [204]
    assert _object(site) == b"the old object"


KILLED_WRITER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import fastst
    url, options = sys.argv[1], json.loads(sys.argv[2])
    tensors = {f"t{i}": np.full((1 << 20,), 2.0, dtype=np.float32) for i in range(5)}
    layout = {n: (t.dtype, t.shape) for n, t in tensors.items()}
    with fastst.open_writer(url, layout, storage_options=options) as w:
        for name, t in tensors.items():
            w.write(name, t)
    print("saved", flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("part", [2, 5])
def test_a_writer_killed_mid_way_leaves_the_old_object(site: Site, part: int) -> None:
    """The writing process is SIGKILLed when the store receives its second (or its last) part:
    no object appears, the old one stays (the unfinished upload is left to the store's
    lifecycle rules)."""
    site.put(site.name, b"the old object")
    holder: Dict[str, subprocess.Popen] = {}
    killed = threading.Event()

    def kill() -> None:
        os.kill(holder["child"].pid, signal.SIGKILL)
        killed.set()

    site.proxy.faults.append(
        Fault("call", call=kill, method="PUT", path=f"partNumber={part}&", ranged=False)
    )
    holder["child"] = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, site.url(site.name), json.dumps(_options(site))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = holder["child"].communicate(timeout=120)
    assert killed.is_set() and holder["child"].returncode == -signal.SIGKILL, err
    assert "saved" not in out
    assert _object(site) == b"the old object"


# sharded checkpoints to a prefix --------------------------------------------------------------

SHARD = re.compile(r"model-([0-9a-f]{8})-(\d{5})-of-(\d{5})\.safetensors")
NAMES = [f"layer{i}" for i in range(6)]


def _sharded(value: float) -> Dict[str, np.ndarray]:
    """Six tensors of 1 MiB: three shards of at most 2.5 MB."""
    return {n: np.full((256, 1024), value + i, dtype=np.float32) for i, n in enumerate(NAMES)}


def _loads(prefix: str, site: Site, value: float) -> None:
    back = fnp.load_file(prefix, storage_options=site.options)
    assert sorted(back) == NAMES
    assert all(np.array_equal(back[k], v) for k, v in _sharded(value).items())


@pytest.mark.slow
def test_a_sharded_writer_to_a_prefix_commits_as_save_sharded_does(
    site: Site, tmp_path: Path
) -> None:
    prefix, key = _under(site)
    fnp.save_sharded(_sharded(1.0), prefix, max_shard_size="2.5MB", storage_options=_options(site))
    old = set(_listed(site, key))
    tensors = _sharded(2.0)
    layout = _layout(tensors)
    site.proxy.reset()
    with fastst.open_sharded_writer(
        prefix, layout, max_shard_size="2.5MB", storage_options=_options(site)
    ) as w:
        assert w.index_path == prefix + "model.safetensors.index.json"
        _write_all(w, tensors, list(reversed(NAMES)))
        assert set(_listed(site, key)) == old, "nothing new is visible before the block ends"
    local = fastst.open_sharded_writer(tmp_path, layout, max_shard_size="2.5MB")
    with local:
        for n in NAMES:
            local.write(n, tensors[n])
    objects = _listed(site, key)
    index = json.loads(objects.pop("model.safetensors.index.json"))
    want = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index == want | {"weight_map": index["weight_map"]}
    # Each shard is the local writer's, under a name with a part of this save's own; the old
    # shards are gone.
    assert sorted(objects) == sorted(set(index["weight_map"].values())) and not old & set(objects)
    for name, data in objects.items():
        m = SHARD.fullmatch(name)
        assert m is not None
        assert data == (tmp_path / f"model-{m.group(2)}-of-{m.group(3)}.safetensors").read_bytes()
    # The index is the one PUT that is no part, after every shard's upload completed.
    records = site.proxy.records
    at = [i for i, r in enumerate(records) if r.method == "PUT" and "index.json" in r.path]
    assert len(at) == 1
    assert sum(r.method == "POST" and "uploadId=" in r.path for r in records[: at[0]]) == 3
    assert not any("uploadId=" in r.path for r in records[at[0] :])
    _loads(prefix, site, 2.0)


@pytest.mark.slow
def test_a_generator_fed_sharded_save_to_a_prefix(site: Site, tmp_path: Path) -> None:
    prefix, key = _under(site)
    tensors = _sharded(3.0)
    got = fnp.save_sharded(
        ((n, tensors[n]) for n in NAMES),
        prefix,
        max_shard_size="2.5MB",
        storage_options=_options(site),
        layout=_layout(tensors),
    )
    assert got == prefix + "model.safetensors.index.json"
    _loads(prefix, site, 3.0)
    local = fnp.save_sharded(tensors, str(tmp_path), max_shard_size="2.5MB")
    index = json.loads(_listed(site, key)["model.safetensors.index.json"])
    assert index["metadata"] == json.loads(Path(local).read_text())["metadata"]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["exception", "missing"])
def test_a_failed_sharded_writer_leaves_the_old_checkpoint(site: Site, how: str) -> None:
    prefix, key = _under(site)
    fnp.save_sharded(_sharded(1.0), prefix, max_shard_size="2.5MB", storage_options=_options(site))
    before = _listed(site, key)
    tensors = _sharded(2.0)
    error = RuntimeError if how == "exception" else SerializeError
    with pytest.raises(error):
        with fastst.open_sharded_writer(
            prefix, _layout(tensors), max_shard_size="2.5MB", storage_options=_options(site)
        ) as w:
            for n in NAMES[:-1]:
                w.write(n, tensors[n])
            if how == "exception":
                raise RuntimeError("boom")
    assert _listed(site, key) == before
    _loads(prefix, site, 1.0)


KILLED_SHARDED = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import fastst
    prefix, options = sys.argv[1], json.loads(sys.argv[2])
    names = [f"layer{i}" for i in range(6)]
    layout = {n: (np.float32, (256, 1024)) for n in names}
    with fastst.open_sharded_writer(
        prefix, layout, max_shard_size="2.5MB", storage_options=options
    ) as w:
        for i, n in enumerate(names):
            w.write(n, np.full((256, 1024), 2.0 + i, dtype=np.float32))
    print("saved", flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("at", ["part", "completion", "index"])
def test_a_sharded_writer_killed_mid_way_leaves_the_old_checkpoint_whole(
    site: Site, at: str
) -> None:
    """Killed when the store receives the second shard's part, its completion, or the index
    (the proxy still forwards that request): before the index, every loader sees the old
    checkpoint; at the index, the old or the new one, whole."""
    prefix, key = _under(site)
    fnp.save_sharded(_sharded(1.0), prefix, max_shard_size="2.5MB", storage_options=_options(site))
    holder: Dict[str, subprocess.Popen] = {}
    killed = threading.Event()

    def kill() -> None:
        os.kill(holder["child"].pid, signal.SIGKILL)
        killed.set()

    method, path, skip = {
        "part": ("PUT", "-00002-of-00003.safetensors?partNumber=", 0),
        "completion": ("POST", "uploadId=", 1),
        "index": ("PUT", "index.json", 0),
    }[at]
    site.proxy.faults.append(
        Fault("call", call=kill, method=method, path=path, skip=skip, ranged=False)
    )
    holder["child"] = subprocess.Popen(
        [sys.executable, "-c", KILLED_SHARDED, prefix, json.dumps(_options(site))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = holder["child"].communicate(timeout=120)
    assert killed.is_set() and holder["child"].returncode == -signal.SIGKILL, err
    if at == "index":
        # The index may or may not have reached the store: either checkpoint, whole.
        back = fnp.load_file(prefix, storage_options=site.options)
        value = float(back[NAMES[0]][0, 0])
        assert value in (1.0, 2.0)
        _loads(prefix, site, value)
    else:
        _loads(prefix, site, 1.0)


# memory ---------------------------------------------------------------------------------------

_MEMORY_SCRIPT = """
import hashlib, json, sys
import numpy as np
import fastst

def peak():
    # VmHWM: this process's own peak resident memory (ru_maxrss would count the test's).
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) * 1024

url, options, count = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
layout = {f"t{i:03d}": (np.float32, (2 << 20,)) for i in range(count)}  # 8 MiB each

def produce():
    for i in range(count):
        yield f"t{i:03d}", np.full(2 << 20, i, dtype=np.float32)

before = peak()
with fastst.open_writer(url, layout, storage_options=options) as w:
    for name, tensor in produce():
        w.write(name, tensor)
after = peak()
print(json.dumps([before, after, w.data_start]))
"""


@pytest.mark.slow
def test_a_large_object_written_tensor_by_tensor_takes_bounded_memory(
    s3_server: SeaweedS3,
) -> None:
    """About 1 GB written tensor by tensor from a generator, in the layout's order: the
    process's peak memory grows by the parts in flight and the one being filled (plus a
    tensor in hand), far less than the object."""
    s3_server.upload("memory", "probe", b"x")
    count = 128
    url = "s3://memory/writer.safetensors"
    options = {**s3_server.storage_options(), "fastst_remote_part_size": str(8 << 20)}
    script = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT, url, json.dumps(options), str(count)],
        capture_output=True,
        text=True,
    )
    assert script.returncode == 0, script.stderr[-2000:]
    before, after, data_start = json.loads(script.stdout)
    client = s3_server.client()
    size = client.head_object(Bucket="memory", Key="writer.safetensors")["ContentLength"]
    assert size == data_start + count * (8 << 20) > 1 << 30
    # Spot checks of the bytes: the first and the last tensor's.
    for i in (0, count - 1):
        at = data_start + i * (8 << 20)
        got = client.get_object(
            Bucket="memory", Key="writer.safetensors", Range=f"bytes={at}-{at + 4095}"
        )["Body"].read()
        assert np.array_equal(np.frombuffer(got, np.float32), np.full(1024, i, np.float32))
    client.delete_object(Bucket="memory", Key="writer.safetensors")
    # At most 64 MiB of parts in flight, one queued and one filling (8 MiB each), a tensor in
    # hand, the runtime: not the object's size.
    assert after - before < 160 << 20, (after - before, size)
