"""Remote reads when the network or the server misbehaves (faults injected by the proxy in front
of a real SeaweedFS S3 store or HTTP server): transient failures are retried and the result is
exact; persistent ones are clear errors naming the URL, the tensor and the HTTP status; an
object that changes mid-load is rule ``file-changed``; a server that ignores the range, cuts a
body short or announces a huge length never yields a wrong tensor nor a big allocation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, Iterator

import fastst
import fastst.numpy
import numpy as np
import pytest
from fastst import FileAccessError, SafetensorError
from helpers.remote_servers import Fault, Site

# Real servers (SeaweedFS, HTTP, a proxy) started for these tests: outside the inner loop.
pytestmark = pytest.mark.slow

NAMES = [f"t{i}" for i in range(8)]


def _tensors(seed: int = 0) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal((256, 256), dtype=np.float32) for n in NAMES}  # 256 KiB each


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("faults") / "model.safetensors"
    fastst.numpy.save_file(_tensors(), str(path))
    return path


@pytest.fixture
def remote(site: Site, local: Path, request: pytest.FixtureRequest) -> Iterator[Site]:
    """The site holding a fresh copy of the checkpoint at ``site.name``, records cleared."""
    site.name = f"{request.node.name.replace('[', '-').rstrip(']')}.safetensors"
    site.put(site.name, local)
    site.proxy.reset()
    yield site
    unfired = [f for f in site.proxy.faults if f.hits <= f.skip]
    site.proxy.reset()
    assert not unfired, f"faults never applied: {unfired}"


def _load(site: Site, **options: str) -> Dict[str, np.ndarray]:
    """The whole checkpoint, with extra ``options`` (tuning)."""
    merged = {**(site.options or {}), **options} or None
    return fastst.numpy.load_file(site.url(site.name), storage_options=merged)


def _same(got: Dict[str, np.ndarray], want: Dict[str, np.ndarray]) -> None:
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k


def _replace(site: Site) -> Callable[[], None]:
    """Replaces the object with other bytes of the same size (a new ETag)."""

    def run() -> None:
        other = fastst.numpy.save({k: v + 1 for k, v in _tensors().items()})
        site.put(site.name, other)

    return run


# transient faults: retried, exact -------------------------------------------------------------


@pytest.mark.parametrize("skip", [0, 1], ids=["open", "data"])
def test_transient_503s_are_retried(remote: Site, skip: int) -> None:
    remote.proxy.faults.append(Fault("status", status=503, times=2, skip=skip))
    _same(_load(remote), _tensors())
    assert [r.status for r in remote.proxy.records].count(503) == 2


@pytest.mark.parametrize("skip", [0, 1], ids=["open", "data"])
def test_dropped_connections_are_retried(remote: Site, skip: int) -> None:
    remote.proxy.faults.append(Fault("drop", after=1000, times=2, skip=skip))
    _same(_load(remote), _tensors())
    assert sum(r.body == 1000 for r in remote.proxy.records) == 2


def test_a_body_cut_short_once_is_retried(remote: Site) -> None:
    remote.proxy.faults.append(Fault("truncate", skip=1))
    _same(_load(remote), _tensors())


# what must never be trusted -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["truncate", "whole"])
def test_short_or_whole_bodies_never_make_wrong_tensors(remote: Site, kind: str) -> None:
    """Every ranged GET after the opening one is cut short, or answered with 200 and the
    whole object: each tensor asked for is exact, or the read fails."""
    remote.proxy.faults.append(Fault(kind, skip=1, times=-1))
    want = _tensors()
    with fastst.safe_open(remote.url(remote.name), "np", storage_options=remote.options) as f:
        for name in ("t5", "t0"):
            try:
                got = f.get_tensor(name)
            except (SafetensorError, OSError) as exc:
                assert remote.name in str(exc)
                continue
            assert np.array_equal(got, want[name]), name
    try:
        got = _load(remote)
    except (SafetensorError, OSError) as exc:
        assert remote.name in str(exc)
    else:
        _same(got, want)


@pytest.mark.parametrize("skip", [0, 1], ids=["open", "data"])
def test_a_huge_announced_length_allocates_nothing(remote: Site, skip: int) -> None:
    """The server announces 1 TiB for every range: the read fails cleanly, in a process whose
    peak memory stays small (an allocation of the announced size would abort it)."""
    remote.proxy.faults.append(Fault("length", length=1 << 40, skip=skip, times=-1))
    script = """
import json, sys
import fastst, fastst.numpy
url, options = sys.argv[1], json.loads(sys.argv[2])
try:
    fastst.numpy.load_file(url, storage_options=options)
    what = "loaded"
except Exception as exc:
    what = type(exc).__name__
# VmHWM: this process's own peak (ru_maxrss would count the forking test's)
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
print(json.dumps([what, peak * 1024]))
"""
    args = [remote.url(remote.name), json.dumps(remote.options)]
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    what, peak = json.loads(out.stdout)
    assert what != "loaded" and peak < 512 << 20


# persistent failures: clear errors ------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 503, 403])
def test_persistent_errors_name_url_tensor_and_status(remote: Site, status: int) -> None:
    url = remote.url(remote.name)
    with fastst.safe_open(url, "np", storage_options=remote.options) as f:
        remote.proxy.faults.append(Fault("status", status=status, times=-1))
        with pytest.raises((SafetensorError, OSError)) as info:
            f.get_tensor("t3")
    text = str(info.value)
    assert remote.name in text and "t3" in text and str(status) in text, text


@pytest.mark.parametrize("status", [500, 403])
def test_persistent_errors_at_open_name_url_and_status(remote: Site, status: int) -> None:
    fault = Fault("status", status=status, times=-1, method="", ranged=False)
    remote.proxy.faults.append(fault)  # whatever the opening request is
    with pytest.raises((SafetensorError, OSError)) as info:
        fastst.safe_open(remote.url(remote.name), "np", storage_options=remote.options)
    assert remote.name in str(info.value) and str(status) in str(info.value), str(info.value)


def test_missing_object_is_file_not_found(remote: Site) -> None:
    url = remote.url("no/such.safetensors")
    with pytest.raises(FileNotFoundError) as info:
        fastst.safe_open(url, "np", storage_options=remote.options)
    assert "no/such.safetensors" in str(info.value)


def test_wrong_credentials_name_url_and_403(remote: Site) -> None:
    if remote.kind != "s3":
        pytest.skip("credentials are S3's")
    assert remote.options is not None
    options = {**remote.options, "aws_secret_access_key": "wrong"}
    with pytest.raises((SafetensorError, OSError)) as info:
        fastst.safe_open(remote.url(remote.name), "np", storage_options=options)
    assert remote.name in str(info.value) and "403" in str(info.value), str(info.value)


# the object changes underneath ----------------------------------------------------------------


def test_object_replaced_after_open_is_file_changed(remote: Site) -> None:
    with fastst.safe_open(remote.url(remote.name), "np", storage_options=remote.options) as f:
        _replace(remote)()
        with pytest.raises(FileAccessError) as info:
            f.get_tensor("t2")
    assert info.value.rule == "file-changed" and info.value.tensor in ("t2", None)
    assert remote.name in str(info.value)


def test_object_replaced_mid_load_is_file_changed(remote: Site) -> None:
    remote.proxy.faults.append(Fault("call", skip=3, call=_replace(remote)))
    with pytest.raises(FileAccessError) as info:
        _load(remote, fastst_remote_part_size="64K", fastst_remote_concurrency="2")
    assert info.value.rule == "file-changed"
    assert remote.proxy.faults[0].hits > 3  # the object was replaced during the load


def test_etag_changed_by_the_server_is_file_changed(remote: Site) -> None:
    """A server that ignores If-Match but answers with another ETag."""
    remote.proxy.faults.append(Fault("etag", skip=1, times=-1))
    with pytest.raises(FileAccessError) as info:
        _load(remote)
    assert info.value.rule == "file-changed"
