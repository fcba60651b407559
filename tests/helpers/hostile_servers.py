"""Hostile HTTP servers for the remote-source tests, started by the tests on loopback addresses.

- :class:`Scripted`: answers every request with what a test's function returns (a status,
  headers and a body, which may be a generator: a huge or endless body is streamed, never held),
  on any loopback address (``127.0.0.2`` for "another host"), and records each request it
  received (method, path, headers) and the body bytes it sent. Its functions make a store that
  redirects, lists forever, sends huge error bodies or huge listing pages.
- :class:`SlowRanges`: a file served with ``Range`` as a real server does, except that
  requests at or past an offset are answered slowly (a byte at a time) or never.
- :func:`run_python`: runs a script in a fresh interpreter with a time limit, for behaviour that
  would hang if it regressed (the test then fails instead of waiting forever).
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from helpers.remote_servers import parse_range

Body = Union[bytes, Iterable[bytes]]
#: What a :class:`Scripted` server answers: ``(status, headers, body)``.
Answer = Tuple[int, Dict[str, str], Body]


@dataclass
class Seen:
    """A request a :class:`Scripted` server received."""

    method: str
    path: str
    headers: Dict[str, str]


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients hang up on purpose


def _closed(sock: socket.socket, wait: float) -> bool:
    """Whether the peer of ``sock`` has closed the connection (waits up to ``wait`` s)."""
    ready, _, _ = select.select([sock], [], [], wait)
    if not ready:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


@dataclass
class Scripted:
    """An HTTP server on ``host`` (any of 127.0.0.0/8) answering each request with
    ``answer(method, path, headers)``; ``self.seen`` lists what it received and ``self.sent``
    counts the body bytes it wrote. A body that is ``None`` never comes: the server holds the
    request until the client hangs up (``self.hung`` counts those, ``self.released`` those whose
    client hung up)."""

    answer: Callable[[str, str, Dict[str, str]], Optional[Answer]]
    host: str = "127.0.0.1"
    seen: List[Seen] = field(default_factory=list)
    sent: int = 0
    hung: int = 0
    released: int = 0

    def __post_init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                # Headers and body go out as they are written (no wait for an ACK).
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                owner.seen.append(Seen(self.command, self.path, headers))
                got = owner.answer(self.command, self.path, headers)
                if got is None:
                    owner.hung += 1
                    while not owner.stopping.is_set() and not _closed(self.connection, 0.2):
                        pass
                    owner.released += 1
                    self.close_connection = True
                    return
                status, extra, body = got
                self.send_response(status)
                for k, v in extra.items():
                    self.send_header(k, v)
                if isinstance(body, bytes):
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self._send(body)
                    return
                if not any(k.lower() == "content-length" for k in extra):
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                try:
                    for chunk in body:
                        self._send(chunk)
                except OSError:
                    self.close_connection = True

            def _send(self, data: bytes) -> None:
                self.wfile.write(data)
                self.wfile.flush()
                owner.sent += len(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

        self.stopping = threading.Event()
        self.server = _Quiet((self.host, 0), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://{self.host}:{self.port}"
        serve = lambda: self.server.serve_forever(poll_interval=0.05)  # noqa: E731
        threading.Thread(target=serve, daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


def endless(chunk: bytes = b"x" * 65536, total: Optional[int] = None) -> Iterable[bytes]:
    """A body of ``chunk`` repeated, ``total`` bytes in all (None: without end)."""
    left = total
    while left is None or left > 0:
        piece = chunk if left is None else chunk[:left]
        yield piece
        if left is not None:
            left -= len(piece)


def drip(data: bytes, every: float) -> Iterable[bytes]:
    """``data`` a byte at a time, one every ``every`` seconds."""
    for i in range(len(data)):
        time.sleep(every)
        yield data[i : i + 1]


def list_page(keys: Iterable[str], token: Optional[str]) -> bytes:
    """An S3 ListObjectsV2 page holding ``keys``, marked "more" with ``token`` when given."""
    contents = "".join(
        f"<Contents><Key>{k}</Key><Size>1</Size>"
        "<LastModified>2024-01-01T00:00:00.000Z</LastModified></Contents>"
        for k in keys
    )
    more = (
        f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}</NextContinuationToken>"
        if token
        else "<IsTruncated>false</IsTruncated>"
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>b</Name>{contents}{more}</ListBucketResult>"
    ).encode()


def s3_options(endpoint: str, **extra: str) -> Dict[str, str]:
    """``storage_options`` of an S3 store at ``endpoint`` with made-up keys."""
    return {
        "aws_endpoint": endpoint,
        "aws_access_key_id": "AKIDEXAMPLE",
        "aws_secret_access_key": "secret-key-never-shown",
        "aws_region": "us-east-1",
        "aws_allow_http": "true",
        **extra,
    }


class SlowRanges:
    """``path`` served with ``Range`` (206, ``Content-Range``, ``ETag``) at ``self.url`` +
    ``/name``; a request whose range starts at or past ``slow_from`` is answered with its
    headers and then nothing (``mode="hang"``) or a byte every ``every`` seconds
    (``mode="drip"``). ``self.server`` records the requests."""

    def __init__(self, path: Path, slow_from: int, mode: str = "hang", every: float = 0.5):
        data = path.read_bytes()
        self.name = path.name
        etag = f'"{len(data):x}-fixed"'

        def answer(method: str, target: str, headers: Dict[str, str]) -> Optional[Answer]:
            if target.split("?")[0] != f"/{self.name}":
                return 404, {}, b"not found"
            span = parse_range(headers.get("range", f"bytes=0-{len(data) - 1}"), len(data))
            if span is None:
                return 416, {"Content-Range": f"bytes */{len(data)}"}, b""
            start, end = span
            head = {
                "Content-Range": f"bytes {start}-{end - 1}/{len(data)}",
                "ETag": etag,
                "Content-Length": str(end - start),
            }
            part = data[start:end] if method != "HEAD" else b""
            if start < slow_from:
                return 206, head, [part]
            if mode == "hang":
                return None
            return 206, head, drip(part, every)

        self.server = Scripted(answer)
        self.url = self.server.url

    def stop(self) -> None:
        self.server.stop()


def run_python(
    code: str, timeout: float, env: Optional[Dict[str, str]] = None
) -> subprocess.CompletedProcess[str]:
    """``code`` run by a fresh interpreter (this one's ``sys.path``); a run past ``timeout``
    seconds is killed and raises ``subprocess.TimeoutExpired`` (a hang fails the test)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
    )
