"""Every wait on a store has a deadline and hears Ctrl-C; every answer, listing and page count
has a cap; a checkpoint of many shards takes few sockets.

The servers are started here, on loopback: scripted ones that list forever, send huge bodies
or never answer (``helpers.hostile_servers``). What would hang if it regressed runs in a fresh
interpreter with a time limit, so that the test fails instead of waiting.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, Tuple

import fastst
import fastst.numpy
import numpy as np
import pytest
from fastst import _settings
from fastst._layout import NAMED_CANDIDATES
from fastst._sources.remote import SHARDS_AT_ONCE
from helpers.hostile_servers import (
    Answer,
    Scripted,
    SlowRanges,
    endless,
    list_page,
    run_python,
    s3_options,
)
from helpers.remote_servers import Proxy, RangeHTTPServer

MIB = 1 << 20


def _checkpoint(folder: Path) -> Path:
    """Two tensors of 1.25 MB each; the second starts at :func:`_second`."""
    path = folder / "m.safetensors"
    fastst.numpy.save_file(
        {"a": np.arange(312_500, dtype=np.float32), "b": np.ones(312_500, np.float32)}, str(path)
    )
    return path


def _second(path: Path) -> int:
    with fastst.safe_open(str(path), "numpy") as f:
        return int(f._raw.data_start + f._raw.info("b")[2])


def _data_start(path: Path) -> int:
    with fastst.safe_open(str(path), "numpy") as f:
        return int(f._raw.data_start)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return _checkpoint(tmp_path)


# listings: pages and time ---------------------------------------------------------------------


def _listing(fresh_tokens: bool) -> Scripted:
    """An S3 store whose listings send empty pages marked "more", with a new token each time
    (``fresh_tokens``) or always the same."""

    def answer(method: str, path: str, headers: Dict[str, str]) -> Answer:
        if "list-type=2" not in path:
            return 404, {}, b""
        pages = sum("list-type=2" in s.path for s in server.seen)
        return 200, {}, list_page([], f"page-{pages}" if fresh_tokens else "same")

    server = Scripted(answer)
    return server


_OPEN_PREFIX = """
import fastst
try:
    fastst.safe_open("s3://b/p/", "numpy", storage_options={options!r})
except Exception as e:
    print(type(e).__name__, getattr(e, "rule", None))
"""


@pytest.mark.slow
def test_a_listing_that_never_ends_stops_at_the_page_cap() -> None:
    server = _listing(fresh_tokens=True)
    try:
        out = run_python(_OPEN_PREFIX.format(options=s3_options(server.url)), timeout=240)
    finally:
        server.stop()
    assert out.stdout.split() == ["FolderError", "listing-pages-over-cap"], out.stderr
    assert sum("list-type=2" in s.path for s in server.seen) == 1000


def test_a_listing_that_repeats_its_page_is_refused_at_once() -> None:
    server = _listing(fresh_tokens=False)
    try:
        out = run_python(_OPEN_PREFIX.format(options=s3_options(server.url)), timeout=60)
    finally:
        server.stop()
    assert out.stdout.split() == ["FolderError", "listing-pages-over-cap"], out.stderr
    assert sum("list-type=2" in s.path for s in server.seen) == 2


def test_a_listing_has_the_deadline_of_a_read() -> None:
    server = Scripted(lambda m, p, h: None)  # never answers
    try:
        options = s3_options(server.url, fastst_remote_deadline="0.5")
        with pytest.raises(TimeoutError) as caught:
            fastst.safe_open("s3://b/p/", "numpy", storage_options=options)
    finally:
        server.stop()
    assert caught.value.rule == "remote-deadline"  # type: ignore[attr-defined]
    assert "s3://b/p/: cannot list the prefix: not done within" in str(caught.value)


def test_an_ambiguous_prefix_names_a_few_of_its_checkpoints() -> None:
    names = [f"{'n' * 3000}-{i:03d}.safetensors" for i in range(200)]
    server = Scripted(lambda m, p, h: (200, {}, list_page([f"p/{n}" for n in names], None)))
    try:
        with pytest.raises(fastst.FolderError) as caught:
            fastst.safe_open("s3://b/p/", "numpy", storage_options=s3_options(server.url))
    finally:
        server.stop()
    assert caught.value.rule == "folder-ambiguous"
    assert len(caught.value.candidates) == 200
    message = str(caught.value)
    assert f"and {200 - NAMED_CANDIDATES} more" in message
    assert len(message) < 8 * 1024


# bodies: errors and answers without a range -------------------------------------------------


@pytest.mark.parametrize(("status", "error"), [(403, PermissionError), (404, FileNotFoundError)])
def test_a_huge_error_body_is_cut_and_not_read(status: int, error: type) -> None:
    body = b"<Error><Code>AccessDenied</Code><Message>" + b"y" * (4 * MIB)
    server = Scripted(lambda m, p, h: (status, {}, endless(body, total=200 * MIB)))
    try:
        with pytest.raises(error) as caught:
            fastst.safe_open(server.url + "/m.safetensors", "numpy")
    finally:
        server.stop()
    message = str(caught.value)
    assert "AccessDenied" in message and str(status) in message
    assert "the rest of the answer was not read" in message
    assert len(message) < 12 * 1024
    assert server.sent < 64 * MIB


def test_a_huge_listing_page_is_refused() -> None:
    server = Scripted(lambda m, p, h: (200, {}, endless(total=200 * MIB)))
    try:
        with pytest.raises(OSError) as caught:
            fastst.safe_open("s3://b/p/", "numpy", storage_options=s3_options(server.url))
    finally:
        server.stop()
    assert caught.value.rule == "remote-answer-over-cap"  # type: ignore[attr-defined]
    assert "s3://b/p/: cannot list the prefix" in str(caught.value)
    assert server.sent < 64 * MIB


# deadlines of reads ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_drip_fed_read_ends_at_its_deadline(model: Path) -> None:
    slow = SlowRanges(model, slow_from=_data_start(model), mode="drip", every=0.2)
    try:
        options = {"fastst_remote_deadline": "1.5"}
        with fastst.safe_open(f"{slow.url}/{model.name}", "numpy", storage_options=options) as f:
            with pytest.raises(TimeoutError) as caught:
                f.get_tensor("a")
    finally:
        slow.stop()
    assert caught.value.rule == "remote-deadline"  # type: ignore[attr-defined]
    message = str(caught.value)
    assert 'tensor "a"' in message and "1.5 s" in message and "FASTST_REMOTE_DEADLINE" in message
    # One request for the tensor's bytes, not a retry after a retry.
    assert sum("range" in s.headers for s in slow.server.seen) <= 3


@pytest.mark.slow
def test_the_deadline_variable_is_read(model: Path) -> None:
    slow = SlowRanges(model, slow_from=_data_start(model), mode="hang")
    code = f"""
import fastst
with fastst.safe_open("{slow.url}/{model.name}", "numpy") as f:
    try:
        f.get_tensor("a")
    except TimeoutError as e:
        print(e.rule)
"""
    try:
        out = run_python(code, timeout=60, env={_settings.REMOTE_DEADLINE_ENV: "1"})
    finally:
        slow.stop()
    assert out.stdout.split() == ["remote-deadline"], out.stderr


def test_a_bad_deadline_is_refused(model: Path) -> None:
    with pytest.raises(ValueError, match="(?i)FASTST_REMOTE_DEADLINE.*not a positive duration"):
        fastst.safe_open(
            "http://127.0.0.1:9/m.safetensors",
            "numpy",
            storage_options={"fastst_remote_deadline": "soon"},
        )


# Ctrl-C and leaving loads ---------------------------------------------------------------------

_PRELUDE = """
import sys, fastst, fastst.numpy
url = {url!r}
print("started", flush=True)
try:
{body}
    print("finished")
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
"""

_WAITS = {
    "open": "    fastst.safe_open(url, 'numpy')",
    "get_tensor": "    fastst.safe_open(url, 'numpy').get_tensor('a')",
    "load_file": (
        "    fastst.numpy.load_file(url, storage_options={'fastst_remote_part_size': '256KiB'})"
    ),
    "iter_tensors": "    list(fastst.safe_open(url, 'numpy').iter_tensors())",
}


def _interrupt(args: list, hung: Scripted) -> subprocess.CompletedProcess:
    """Runs ``args``, sends SIGINT once the server holds one of its requests, and returns what
    the process did; it must end within 30 s (the deadline of reads is 120 s)."""
    # Started with Ctrl-C's default action, as from a terminal (a runner that started the
    # tests in the background has SIGINT ignored, and children inherit that).
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        limit = time.monotonic() + 60
        while hung.hung == 0 and proc.poll() is None and time.monotonic() < limit:
            time.sleep(0.05)
        assert hung.hung > 0, "the server never held a request"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


@pytest.mark.slow
@pytest.mark.parametrize("wait", sorted(_WAITS))
def test_ctrl_c_is_heard_while_waiting_on_a_server(model: Path, wait: str) -> None:
    slow = SlowRanges(model, slow_from=0 if wait == "open" else _data_start(model))
    url = f"{slow.url}/{model.name}"
    code = _PRELUDE.format(url=url, body=_WAITS[wait])
    try:
        done = _interrupt([sys.executable, "-c", code], slow.server)
    finally:
        slow.stop()
    assert done.returncode == 3, done.stderr
    assert done.stdout.split() == ["started", "interrupted"]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["inspect", "stats"])
def test_the_command_exits_130_on_ctrl_c(model: Path, command: str) -> None:
    slow = SlowRanges(model, slow_from=0 if command == "inspect" else _data_start(model))
    try:
        done = _interrupt(
            [sys.executable, "-m", "fastst", command, f"{slow.url}/{model.name}"], slow.server
        )
    finally:
        slow.stop()
    assert done.returncode == 130, done.stderr
    assert "interrupted" in done.stderr


def test_a_keyboard_interrupt_in_readinto_comes_out_as_itself(model: Path) -> None:
    import io

    data = model.read_bytes()

    class Interrupted(io.RawIOBase):
        def __init__(self) -> None:
            self.inner = io.BytesIO(data)
            self.armed = False

        def readable(self) -> bool:
            return True

        def seekable(self) -> bool:
            return True

        def seek(self, offset: int, whence: int = 0) -> int:
            return self.inner.seek(offset, whence)

        def readinto(self, buf: bytearray) -> int:  # type: ignore[override]
            if self.armed:
                raise KeyboardInterrupt
            return self.inner.readinto(buf)

    source = Interrupted()
    f = fastst.safe_open(source, "numpy")
    source.armed = True
    with pytest.raises(KeyboardInterrupt):
        f.get_tensor("a")
    with pytest.raises(KeyboardInterrupt):
        next(f.iter_tensors())


@pytest.mark.slow
def test_leaving_iter_tensors_stops_the_reads_in_flight(model: Path) -> None:
    slow = SlowRanges(model, slow_from=_second(model))
    code = f"""
import fastst
f = fastst.safe_open("{slow.url}/{model.name}", "numpy",
                     storage_options={{"fastst_remote_part_size": "256KiB"}})
for name, t in f.iter_tensors():
    print(name, t.shape, flush=True)
    break
f.close()
print("closed", flush=True)
"""
    try:
        out = run_python(code, timeout=30)
        deadline = time.monotonic() + 10
        while slow.server.released < slow.server.hung and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        slow.stop()
    assert out.stdout.split() == ["a", "(312500,)", "closed"], out.stderr
    assert slow.server.hung > 0 and slow.server.released == slow.server.hung


def test_closing_a_file_stops_a_read_in_flight_with_closed_file(model: Path) -> None:
    import threading

    slow = SlowRanges(model, slow_from=_data_start(model))
    caught: Dict[str, BaseException] = {}
    try:
        f = fastst.safe_open(f"{slow.url}/{model.name}", "numpy")

        def read() -> None:
            try:
                f.get_tensor("a")
            except BaseException as e:  # noqa: BLE001 - handed to the test
                caught["error"] = e

        reader = threading.Thread(target=read)
        reader.start()
        limit = time.monotonic() + 30
        while slow.server.hung == 0 and time.monotonic() < limit:
            time.sleep(0.02)
        f.close()
        reader.join(timeout=30)
        assert not reader.is_alive(), "the read went on after close()"
    finally:
        slow.stop()
    assert isinstance(caught.get("error"), fastst.ClosedFileError), caught


# many shards ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuple[str, Proxy]]:
    """The URL of an index of 300 one-tensor shards on an HTTP server, and the proxy in front
    of the server (which records each request and the connection it came on)."""
    root = tmp_path_factory.mktemp("shards")
    (root / "d").mkdir()
    weight_map = {}
    for i in range(300):
        name = f"m-{i:05d}-of-00300.safetensors"
        fastst.numpy.save_file({f"t{i}": np.full(4, i, np.float32)}, str(root / "d" / name))
        weight_map[f"t{i}"] = name
    (root / "d" / "m.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    server = RangeHTTPServer(root)
    proxy = Proxy(server.url)
    yield f"{proxy.url}/d/m.safetensors.index.json", proxy
    proxy.stop()
    server.stop()


@pytest.mark.slow
def test_the_shards_of_an_index_share_one_client(shards: Tuple[str, Proxy]) -> None:
    url, proxy = shards
    proxy.reset()
    with fastst.safe_open(url, "numpy") as f:
        assert len(f.keys()) == 300
        assert f.get_tensor("t299").tolist() == [299.0] * 4
    connections = {r.client for r in proxy.records}
    assert len(proxy.records) == 301  # the index, each shard once (the tensor came with it)
    # One client's connections, reused: a client per shard would make 300. A connection goes
    # back to the client's pool once its answer is read, which on a busy host can come after
    # the next shard's request took a new one (20 seen under load): the bound leaves room.
    assert len(connections) <= 2 * SHARDS_AT_ONCE, len(connections)


_FEW_DESCRIPTORS = """
import os, resource, fastst, fastst.numpy
open_now = len(os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit}))
try:
    with fastst.safe_open({url!r}, "numpy") as f:
        print(len(f.keys()))
except OSError as e:
    print(type(e).__name__, e.errno, e)
"""


@pytest.mark.slow
def test_an_index_of_many_shards_opens_with_few_descriptors(shards: Tuple[str, Proxy]) -> None:
    out = run_python(_FEW_DESCRIPTORS.format(limit=128, url=shards[0]), timeout=120)
    assert out.stdout.split() == ["300"], out.stderr


@pytest.mark.slow
def test_running_out_of_descriptors_is_an_os_error(shards: Tuple[str, Proxy]) -> None:
    code = _FEW_DESCRIPTORS.replace(
        "({limit}, {limit})", "(open_now + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[1])"
    )
    out = run_python(code.format(url=shards[0]), timeout=120)
    assert out.stdout.split()[:2] == ["OSError", "24"], (out.stdout, out.stderr)
