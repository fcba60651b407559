"""Saving to object storage: ``save_file("s3://bucket/key", ...)`` writes the object with a
multipart upload to a real S3 store (SeaweedFS, behind the fault-injecting proxy), byte for byte
what a local save writes, with bounded memory; the object appears only when the upload
completes, and any failure (a Python exception mid-upload, a store that keeps failing, Ctrl-C)
aborts the upload, leaving no object or the old one. Signed requests follow no redirect;
messages name the URL without credentials. ``save_sharded`` to a prefix writes shards under
names of the save's own and the index last."""

from __future__ import annotations

import _thread
import hashlib
import importlib.util
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Tuple

import fastst
import fastst.numpy
import numpy as np
import pytest
from helpers.remote_servers import Fault, Proxy, SeaweedS3, Site
from helpers.s3_objects import PART, torch_tensors
from helpers.s3_objects import absent as _absent
from helpers.s3_objects import listed as _listed
from helpers.s3_objects import local_bytes as _local
from helpers.s3_objects import options as _options
from helpers.s3_objects import pending_uploads as _pending_uploads
from helpers.s3_objects import stored as _object
from helpers.s3_objects import under as _under


def _tensors(seed: int = 0) -> Dict[str, np.ndarray]:
    """About 13 MB: three parts of 5 MiB, tensors of several dtypes and layouts."""
    rng = np.random.default_rng(seed)
    return {
        "big": rng.standard_normal((3000, 1024), dtype=np.float32),  # 12 MB
        "fortran": np.asfortranarray(rng.standard_normal((64, 300))),
        "strided": np.arange(40_000, dtype=np.int16)[::3],
        "scalar": np.float16(1.5),
        "empty": np.zeros((0, 4), dtype=np.uint8),
    }


def _parts_sent(site: Site) -> int:
    return sum(r.method == "PUT" and "partNumber=" in r.path for r in site.proxy.records)


# round trips ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_save_to_a_url_is_the_local_file_byte_for_byte(site: Site, tmp_path: Path) -> None:
    tensors = _tensors()
    want = _local(tensors, tmp_path, metadata={"format": "np"}, align=64)
    url = site.url(site.name)
    fastst.numpy.save_file(tensors, url, {"format": "np"}, align=64, storage_options=_options(site))
    assert _object(site) == want
    # A multipart upload: begun, parts, completed last; nothing left pending.
    methods = [(r.method, r.path.split("?")[-1].split("=")[0]) for r in site.proxy.records]
    assert methods[0] == ("POST", "uploads")
    assert methods[-1] == ("POST", "uploadId")
    assert _parts_sent(site) == -(-len(want) // PART) == 3
    assert _pending_uploads(site) == []
    # And it reads back.
    back = fastst.numpy.load_file(url, storage_options=_options(site))
    assert all(np.array_equal(back[k], np.asarray(v)) for k, v in tensors.items())


@pytest.mark.slow
def test_the_environment_configures_a_save_as_it_does_a_load(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in site.env.items():
        monkeypatch.setenv(key, value)
    tensors = _tensors(1)
    fastst.serialize_file(tensors, site.url(site.name), {"k": "v"})
    assert _object(site) == _local(tensors, tmp_path, metadata={"k": "v"})


@pytest.mark.slow
def test_a_save_replaces_the_old_object(site: Site, tmp_path: Path) -> None:
    site.put(site.name, b"old bytes")
    small = {"x": np.arange(10, dtype=np.int64)}
    fastst.numpy.save_file(small, site.url(site.name), storage_options=_options(site))
    assert _object(site) == _local(small, tmp_path)
    assert _parts_sent(site) == 1


@pytest.mark.slow
def test_torch_saves_to_a_url(site: Site, tmp_path: Path) -> None:
    tensors, want = torch_tensors(tmp_path)
    import fastst.torch

    fastst.torch.save_file(
        tensors, site.url(site.name), {"format": "pt"}, storage_options=_options(site)
    )
    assert _object(site) == want


FRAMEWORK_SAVE = {
    "flax": "import jax.numpy as jnp; t = {'w': jnp.asarray(w)}",
    "tensorflow": "import tensorflow as tf; t = {'w': tf.constant(w)}",
    "paddle": "import paddle; t = {'w': paddle.to_tensor(w)}",
    "mlx": "import mlx.core as mx; t = {'w': mx.array(w)}",
}


@pytest.mark.slow
@pytest.mark.parametrize("framework", sorted(FRAMEWORK_SAVE))
def test_every_framework_saves_to_a_url(site: Site, tmp_path: Path, framework: str) -> None:
    """Each framework module's ``save_file`` takes a URL and ``storage_options`` (in a process of
    its own: some frameworks cannot be imported after others)."""
    module = {"flax": "jax", "tensorflow": "tensorflow", "paddle": "paddle", "mlx": "mlx"}
    if importlib.util.find_spec(module[framework]) is None:
        pytest.skip(f"{framework} is not installed here")
    w = np.arange(3 << 20, dtype=np.float32).reshape(3072, 1024)
    np.save(tmp_path / "w.npy", w)
    script = (
        "import json, sys, numpy as np\n"
        f"w = np.load({str(tmp_path / 'w.npy')!r})\n"
        f"{FRAMEWORK_SAVE[framework]}\n"
        f"import fastst.{framework} as fw\n"
        "fw.save_file(t, sys.argv[1], {'format': 'x'}, storage_options=json.loads(sys.argv[2]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, site.url(site.name), json.dumps(_options(site))],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert _object(site) == _local({"w": w}, tmp_path, metadata={"format": "x"})


# whole or nothing -----------------------------------------------------------------------------


class _FailingConversion(np.ndarray):
    """A strided array (converted a few megabytes at a time while the file is written) whose
    conversion fails part way: the writer takes one row (to size its pieces), converts the first
    piece of 8 MiB, and the second one raises."""

    slices = 0
    #: Called before raising (waits until the first parts are stored).
    before_failing: Callable[[], None] = staticmethod(lambda: None)

    def __getitem__(self, index: Any) -> Any:
        _FailingConversion.slices += 1
        if _FailingConversion.slices > 2:
            _FailingConversion.before_failing()
            raise RuntimeError("conversion failed half way")
        return np.asarray(super().__getitem__(index))


def _failing_tensors() -> Dict[str, np.ndarray]:
    """12 MB written first (two parts go up), then a tensor whose conversion fails."""
    _FailingConversion.slices = 0
    late = np.ones((1024, 2 * 4096), dtype=np.float32)[:, ::2].view(_FailingConversion)
    return {"a_first": np.zeros((3000, 1024), dtype=np.float32), "b_late": late}


@pytest.mark.slow
@pytest.mark.parametrize("old", [True, False], ids=["replacing", "new"])
def test_an_exception_mid_upload_aborts_it(
    site: Site, old: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if old:
        site.put(site.name, b"the old object")

    def two_parts_stored() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            stored = [r for r in site.proxy.records if "partNumber=" in r.path and r.status == 200]
            if len(stored) >= 2:
                return
            time.sleep(0.01)

    monkeypatch.setattr(_FailingConversion, "before_failing", staticmethod(two_parts_stored))
    with pytest.raises(RuntimeError, match="conversion failed half way"):
        fastst.numpy.save_file(
            _failing_tensors(), site.url(site.name), storage_options=_options(site)
        )
    assert _parts_sent(site) >= 2, "the exception came after parts were stored"
    # Aborted (a part cancelled on its way may reach the proxy later).
    assert [r.status for r in site.proxy.records if r.method == "DELETE"] == [204]
    assert _pending_uploads(site) == []
    if old:
        assert _object(site) == b"the old object"
    else:
        assert _absent(site)


@pytest.mark.slow
def test_transient_failures_of_parts_are_retried(site: Site, tmp_path: Path) -> None:
    site.proxy.faults += [
        Fault("status", status=503, times=2, method="PUT", path="partNumber=2&", ranged=False),
        Fault("hangup", times=1, method="PUT", path="partNumber=3&", ranged=False),
        Fault("status", status=500, times=1, method="POST", path="uploadId=", ranged=False),
    ]
    tensors = _tensors(2)
    fastst.numpy.save_file(tensors, site.url(site.name), storage_options=_options(site))
    assert _object(site) == _local(tensors, tmp_path)
    assert [r.status for r in site.proxy.records].count(503) == 2
    assert _pending_uploads(site) == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hangup", "status"])
def test_a_part_that_keeps_failing_aborts_the_upload(site: Site, kind: str) -> None:
    """Every try of the second part loses its connection (or gets a 503): after the store's
    retries the save fails naming the URL, the upload is aborted and the old object stays."""
    site.put(site.name, b"the old object")
    fault = Fault(kind, status=503, times=-1, method="PUT", path="partNumber=2&", ranged=False)
    site.proxy.faults.append(fault)
    with pytest.raises(OSError) as caught:
        fastst.numpy.save_file(_tensors(), site.url(site.name), storage_options=_options(site))
    assert str(caught.value).startswith(site.url(site.name) + ": cannot upload bytes ")
    assert fault.hits > 2, "retried first"
    assert _pending_uploads(site) == []
    assert _object(site) == b"the old object"


@pytest.mark.slow
def test_ctrl_c_while_waiting_for_the_store_aborts_the_upload(site: Site) -> None:
    """The store is slow to take a part; Ctrl-C (SIGINT) arrives meanwhile: KeyboardInterrupt is
    raised while the save still waits (it waits with the GIL released, hearing signals), and
    the upload is aborted."""
    site.put(site.name, b"the old object")
    slow = threading.Event()
    site.proxy.faults.append(
        Fault("call", call=lambda: slow.wait(10), method="PUT", path="partNumber=1&", ranged=False)
    )
    timer = threading.Timer(0.5, _thread.interrupt_main)
    # Ctrl-C's Python handler, as in an interactive process (a runner that started the tests
    # in the background has SIGINT ignored, and interrupt_main then does nothing).
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            fastst.numpy.save_file(_tensors(), site.url(site.name), storage_options=_options(site))
        assert time.monotonic() - started < 5
    finally:
        timer.cancel()
        slow.set()
        signal.signal(signal.SIGINT, handler)
    assert [r.status for r in site.proxy.records if r.method == "DELETE"] == [204]
    assert _object(site) == b"the old object"


# sharded saves to a prefix --------------------------------------------------------------------

SHARD = re.compile(r"model-([0-9a-f]{8})-(\d{5})-of-(\d{5})\.safetensors")


def _sharded(seed: int) -> Dict[str, np.ndarray]:
    """Six tensors of 1 MiB: three shards of at most 2.5 MB."""
    rng = np.random.default_rng(seed)
    return {f"layer{i}": rng.standard_normal((256, 1024), dtype=np.float32) for i in range(6)}


@pytest.mark.slow
def test_a_sharded_save_to_a_prefix_writes_the_index_last(site: Site, tmp_path: Path) -> None:
    tensors = _sharded(0)
    prefix, key = _under(site)
    got = fastst.numpy.save_sharded(
        tensors, prefix, max_shard_size="2.5MB", storage_options=_options(site)
    )
    assert got == prefix + "model.safetensors.index.json"
    local = fastst.numpy.save_sharded(tensors, str(tmp_path), max_shard_size="2.5MB")
    objects = _listed(site, key)
    index = json.loads(objects.pop("model.safetensors.index.json"))
    assert index == json.loads(Path(local).read_text()) | {"weight_map": index["weight_map"]}
    # Each shard is the local save's, under a name with a part of this save's own.
    assert sorted(objects) == sorted(set(index["weight_map"].values()))
    matches = [SHARD.fullmatch(name) for name in sorted(objects)]
    assert all(matches) and len({m.group(1) for m in matches if m}) == 1
    for name, data in objects.items():
        m = SHARD.fullmatch(name)
        assert m is not None
        assert data == (tmp_path / f"model-{m.group(2)}-of-{m.group(3)}.safetensors").read_bytes()
    # The index is the last write, after every shard's upload completed; after it only the
    # clean-up (a listing of the prefix, deletions of what no index names).
    records = site.proxy.records
    at = [i for i, r in enumerate(records) if r.method == "PUT" and "index.json" in r.path]
    assert len(at) == 1, [(r.method, r.path) for r in records]
    assert all(r.method in ("GET", "DELETE") for r in records[at[0] + 1 :])
    assert not any("uploadId=" in r.path for r in records[at[0] + 1 :])
    assert sum(r.method == "POST" and "uploadId=" in r.path for r in site.proxy.records) == 3
    for where in (got, prefix):
        back = fastst.numpy.load_file(where, storage_options=site.options)
        assert all(np.array_equal(back[k], tensors[k]) for k in tensors)


@pytest.mark.slow
def test_a_sharded_save_over_another_names_none_of_its_shards(site: Site) -> None:
    prefix, key = _under(site)
    fastst.numpy.save_sharded(
        _sharded(0), prefix, max_shard_size="2.5MB", storage_options=_options(site)
    )
    first = set(_listed(site, key))
    fastst.numpy.save_sharded(
        _sharded(1), prefix, max_shard_size="4.5MB", storage_options=_options(site)
    )
    second = set(_listed(site, key))
    # The old shards are gone once the new index is written; no name is shared.
    assert first & second == {"model.safetensors.index.json"}
    assert len(second) == 3
    back = fastst.numpy.load_file(prefix, storage_options=site.options)
    assert all(np.array_equal(back[k], v) for k, v in _sharded(1).items())


@pytest.mark.slow
def test_a_failed_sharded_save_leaves_the_old_checkpoint(site: Site) -> None:
    """The second shard of the new save is refused: the old index and shards stay as they
    were, the new shards are deleted, the error names the shard."""
    prefix, key = _under(site)
    fastst.numpy.save_sharded(
        _sharded(0), prefix, max_shard_size="2.5MB", storage_options=_options(site)
    )
    before = _listed(site, key)
    site.proxy.faults.append(
        Fault("status", status=403, times=-1, method="POST", path="-00002-of-", ranged=False)
    )
    with pytest.raises(PermissionError, match=r"-00002-of-00002\.safetensors: cannot start"):
        fastst.numpy.save_sharded(
            _sharded(1), prefix, max_shard_size="4.5MB", storage_options=_options(site)
        )
    assert _listed(site, key) == before
    back = fastst.numpy.load_file(prefix, storage_options=site.options)
    assert all(np.array_equal(back[k], v) for k, v in _sharded(0).items())


@pytest.mark.slow
def test_torch_saves_a_sharded_checkpoint_to_a_prefix(site: Site) -> None:
    torch = pytest.importorskip("torch")
    import fastst.torch

    prefix, key = _under(site)
    state = {f"w{i}": torch.full((512, 1024), float(i)) for i in range(3)}  # 2 MiB each
    state["tied"] = state["w0"]
    index_url = fastst.torch.save_sharded(
        state, prefix, max_shard_size="3MB", storage_options=_options(site)
    )
    index = json.loads(_listed(site, key)["model.safetensors.index.json"])
    # The tied pair is stored once, the dropped name recorded as torch's local save does.
    dropped = {"tied", "w0"} & set(index["metadata"])
    assert len(dropped) == 1 and len(set(index["weight_map"].values())) == 3
    back = fastst.torch.load_file(index_url, storage_options=site.options)
    assert len(back) == 3 and all(torch.equal(back[k], state[k]) for k in back)


# messages -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_refused_upload_names_the_url_without_credentials(site: Site) -> None:
    site.proxy.faults.append(
        Fault("status", status=403, times=-1, method="POST", path="uploads", ranged=False)
    )
    # "?" and "#" are characters of an object key (taken literally): shown, the user part not.
    key = f"{site.folder}{site.name}?token=t0k3n#frag"
    url = f"s3://someone:s3cr3t@{site.bucket}/{key}"
    with pytest.raises(PermissionError) as caught:
        fastst.numpy.save_file(_tensors(), url, storage_options=_options(site))
    text = str(caught.value)
    assert f"s3://{site.bucket}/{key}: cannot start the upload" in text
    for secret in ("someone", "s3cr3t", "fastst-test-secret"):
        assert secret not in text
    assert _absent(site)


@pytest.mark.slow
@pytest.mark.parametrize("request_kind", ["save", "load"])
def test_signed_requests_follow_no_redirect(
    site: Site, proxy_factory: Callable[[str], Proxy], request_kind: str
) -> None:
    """The store answers 307 with a Location elsewhere: the request is not sent there (its
    signature and session token stay with the store); the save or load fails naming the
    status."""
    assert site.s3 is not None
    elsewhere = proxy_factory(site.s3.endpoint)
    site.put(site.name, fastst.numpy.save({"x": np.zeros(3)}))
    url = site.url(site.name)
    moved = f"{elsewhere.url}/{site.bucket}/{site.folder}{site.name}"
    method = "POST" if request_kind == "save" else "GET"
    site.proxy.faults.append(
        Fault("status", status=307, location=moved, method=method, ranged=False, times=-1)
    )
    with pytest.raises(OSError, match="307") as caught:
        if request_kind == "save":
            fastst.numpy.save_file({"x": np.ones(3)}, url, storage_options=_options(site))
        else:
            fastst.numpy.load_file(url, storage_options=site.options)
    assert str(caught.value).startswith(url + ": ")
    assert elsewhere.records == []
    assert _object(site) == fastst.numpy.save({"x": np.zeros(3)})


@pytest.mark.parametrize(
    "url",
    [
        "https://user:pa55word@127.0.0.1:1/bucket/m.safetensors",
        "https://h.example/bucket/m.safetensors?X-Amz-Signature=pa55word",
        "http://user:pa55word@127.0.0.1:1/m.safetensors",
    ],
)
def test_plain_http_and_presigned_urls_take_no_saves(url: str) -> None:
    with pytest.raises(ValueError, match="only objects of S3, GCS and Azure") as caught:
        fastst.numpy.save_file({"x": np.zeros(2)}, url)
    assert "pa55word" not in str(caught.value) and "user" not in str(caught.value)


def test_options_and_urls_are_checked_before_anything_is_sent(tmp_path: Path) -> None:
    x = {"x": np.zeros(2)}
    with pytest.raises(ValueError, match='"no_such_key" is not a configuration key of S3'):
        fastst.numpy.save_file(x, "s3://b/k.safetensors", storage_options={"no_such_key": "1"})
    with pytest.raises(ValueError, match="names no object"):
        fastst.numpy.save_file(x, "s3://b/prefix/", storage_options={"region": "us-east-1"})
    with pytest.raises(fastst.StorageOptionsError, match="storage_options apply to URLs"):
        fastst.numpy.save_file(x, str(tmp_path / "x.safetensors"), storage_options={})
    with pytest.raises(fastst.StorageOptionsError, match="storage_options apply to URLs"):
        fastst.numpy.save_sharded(x, str(tmp_path / "sharded"), storage_options={})
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(TypeError, match="storage_options must be a mapping"):
        fastst.serialize_file(x, "s3://b/k.safetensors", storage_options=[("a", "b")])  # type: ignore[arg-type]


# memory ---------------------------------------------------------------------------------------

_MEMORY_SCRIPT = """
import json, sys
import numpy as np
import fastst.numpy

def peak():
    # VmHWM: this process's own peak resident memory (ru_maxrss would count the test's).
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) * 1024

url, options, local = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
tensors = {"big": np.full(30 << 20, 1.0, dtype=np.float32)}  # 120 MiB, one contiguous buffer
for i in range(10):
    tensors[f"t{i}"] = np.full((1024, 1024), i, dtype=np.float64)  # 8 MiB each
tensors["strided"] = np.ones((2048, 4096), dtype=np.float32)[:, ::2]  # 16 MiB, converted
before = peak()
fastst.numpy.save_file(tensors, url, storage_options=options)
after = peak()
fastst.numpy.save_file(tensors, local)  # what the object must hold
print(json.dumps([before, after]))
"""


def _sha256(chunks: Iterator[bytes]) -> Tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


@pytest.mark.slow
def test_a_large_save_takes_bounded_memory(s3_server: SeaweedS3, tmp_path: Path) -> None:
    """A save of about 230 MB, straight to the store, grows the process's peak memory by far
    less than the file: parts go up as they fill, a bounded number in flight."""
    s3_server.upload("memory", "probe", b"x")
    url, local = "s3://memory/large.safetensors", tmp_path / "large.safetensors"
    args = [url, json.dumps(s3_server.storage_options()), str(local)]
    script = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT, *args], capture_output=True, text=True
    )
    assert script.returncode == 0, script.stderr[-2000:]
    before, after = json.loads(script.stdout)
    body = s3_server.client().get_object(Bucket="memory", Key="large.safetensors")["Body"]
    got, size = _sha256(iter(lambda: body.read(1 << 20), b""))
    with open(local, "rb") as f:
        assert (got, size) == _sha256(iter(lambda: f.read(1 << 20), b""))
    assert size > 200 << 20
    # At most 64 MiB of parts in flight and one filling (8 MiB each by default), besides the
    # runtime and a piece of the strided tensor being converted: not the file's size.
    assert after - before < min(size // 2, 104 << 20), (after - before, size)
