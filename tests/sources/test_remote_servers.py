"""The servers and the proxy the remote-source tests rely on, checked without fastst: a ranged
GET gets 206 and the exact bytes, the proxy counts exactly what it sends, each fault does what
it says."""

from __future__ import annotations

import http.client
import os
import subprocess
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import pytest
from helpers.remote_servers import Fault, Proxy, RangeHTTPServer, SeaweedS3, parse_range

# Real servers (SeaweedFS, HTTP, a proxy) started for these tests: outside the inner loop.
pytestmark = pytest.mark.slow

DATA = os.urandom(300_000)


def get(url: str, path: str, headers: Optional[Dict[str, str]] = None, method: str = "GET"):
    """(status, headers, body) of one request on a fresh connection; body as far as it came."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        body = b""
        try:
            while chunk := resp.read(1 << 16):  # in pieces: a hostile length is not allocated
                body += chunk
        except http.client.IncompleteRead as exc:
            body += exc.partial
        return resp.status, dict(resp.getheaders()), body
    finally:
        conn.close()


@pytest.fixture
def served(http_dir: Tuple[Path, RangeHTTPServer]) -> RangeHTTPServer:
    root, server = http_dir
    (root / "d").mkdir()
    (root / "d" / "blob.bin").write_bytes(DATA)
    return server


def test_parse_range() -> None:
    assert parse_range("bytes=0-9", 100) == (0, 10)
    assert parse_range("bytes=90-", 100) == (90, 100)
    assert parse_range("bytes=-10", 100) == (90, 100)
    assert parse_range("bytes=95-200", 100) == (95, 100)
    assert parse_range("bytes=100-", 100) is None
    with pytest.raises(ValueError):
        parse_range("bytes=0-1,5-6", 100)


def test_http_server_honours_range(served: RangeHTTPServer) -> None:
    status, headers, body = get(served.url, "/d/blob.bin", {"Range": "bytes=1000-1999"})
    assert (status, body, headers["Content-Range"]) == (
        206,
        DATA[1000:2000],
        "bytes 1000-1999/300000",
    )
    status, headers, body = get(served.url, "/d/blob.bin", method="HEAD")
    assert (status, headers["Content-Length"], body) == (200, "300000", b"")
    etag = headers["ETag"]
    assert get(served.url, "/d/blob.bin", {"Range": "bytes=-5"})[2] == DATA[-5:]
    assert get(served.url, "/d/blob.bin", {"Range": "bytes=400000-"})[0] == 416
    assert get(served.url, "/d/blob.bin", {"If-Match": '"other"'})[0] == 412
    assert get(served.url, "/d/blob.bin", {"If-Match": etag})[2] == DATA
    assert get(served.url, "/d/missing.bin")[0] == 404
    assert get(served.url, "/../../etc/passwd")[0] == 404


def test_curl_range_through_proxy(
    served: RangeHTTPServer, proxy_factory: Callable[[str], Proxy]
) -> None:
    proxy = proxy_factory(served.url)
    out = subprocess.run(
        ["curl", "-sf", "-r", "100-4195", f"{proxy.url}/d/blob.bin"],
        capture_output=True,
        check=True,
    )
    assert out.stdout == DATA[100:4196]
    [rec] = proxy.records
    assert (rec.status, rec.range, rec.body, rec.method) == (206, "bytes=100-4195", 4096, "GET")
    assert rec.headers > 100 and "curl" in rec.user_agent


def test_proxy_counts_per_request_and_client(
    served: RangeHTTPServer, proxy_factory: Callable[[str], Proxy]
) -> None:
    proxy = proxy_factory(served.url)
    host, port = proxy.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port))  # two requests on one connection
    for r in ("bytes=0-99", "bytes=1000-1499"):
        conn.request("GET", "/d/blob.bin", headers={"Range": r})
        conn.getresponse().read()
    conn.close()
    get(proxy.url, "/d/blob.bin", method="HEAD")
    a, b, c = proxy.records
    assert [a.body, b.body, c.body] == [100, 500, 0]
    assert a.client == b.client != c.client
    assert proxy.body_bytes() == 600 and proxy.body_bytes("/other") == 0
    assert proxy.header_bytes() == a.headers + b.headers + c.headers


def test_proxy_faults(served: RangeHTTPServer, proxy_factory: Callable[[str], Proxy]) -> None:
    proxy = proxy_factory(served.url)
    r = {"Range": "bytes=0-99999"}
    proxy.faults.append(Fault("status", times=2, status=503))
    assert [get(proxy.url, "/d/blob.bin", r)[0] for _ in range(3)] == [503, 503, 206]

    proxy.faults[:] = [Fault("drop", after=1234)]
    status, headers, body = get(proxy.url, "/d/blob.bin", r)
    assert (status, headers["Content-Length"], body) == (206, "100000", DATA[:1234])
    assert proxy.records[-1].body == 1234

    proxy.faults[:] = [Fault("truncate")]
    status, headers, body = get(proxy.url, "/d/blob.bin", r)
    assert (status, headers["Content-Range"], body) == (206, "bytes 0-99999/300000", DATA[:50000])

    proxy.faults[:] = [Fault("whole")]
    status, headers, body = get(proxy.url, "/d/blob.bin", r)
    assert (status, body) == (200, DATA) and "Content-Range" not in headers

    proxy.faults[:] = [Fault("etag", skip=1, etag='"new"')]
    etags = [get(proxy.url, "/d/blob.bin", r)[1]["ETag"] for _ in range(3)]
    assert etags[0] == etags[2] != '"new"' and etags[1] == '"new"'

    proxy.faults[:] = [Fault("length", length=1 << 40)]
    status, headers, body = get(proxy.url, "/d/blob.bin", r)
    assert (headers["Content-Length"], body) == (str(1 << 40), DATA[:100000])

    calls = []
    proxy.faults[:] = [Fault("call", call=lambda: calls.append(1))]
    assert get(proxy.url, "/d/blob.bin", r)[2] == DATA[:100000] and calls == [1]
    assert get(proxy.url, "/d/blob.bin", method="HEAD")[0] == 200  # GETs only by default


@pytest.mark.slow
def test_seaweedfs_ranged_get_through_proxy(
    s3_server: SeaweedS3, proxy_factory: Callable[[str], Proxy]
) -> None:
    s3_server.upload("servers", "dir/blob.bin", DATA)
    proxy = proxy_factory(s3_server.endpoint)
    s3 = s3_server.client(proxy.url)  # signed for the proxy's host, which it passes on
    resp = s3.get_object(Bucket="servers", Key="dir/blob.bin", Range="bytes=5000-13191")
    assert resp["Body"].read() == DATA[5000:13192]
    assert resp["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert s3.head_object(Bucket="servers", Key="dir/blob.bin")["ContentLength"] == len(DATA)
    get_rec = [r for r in proxy.records if r.method == "GET"]
    assert [r.body for r in get_rec] == [8192]
    proxy.faults.append(Fault("status", status=503, times=1))
    with pytest.raises(Exception, match="InjectedFault"):
        s3.get_object(Bucket="servers", Key="dir/blob.bin", Range="bytes=0-9")
    assert proxy.records[-1].status == 503
    unsigned = get(s3_server.endpoint, "/servers/dir/blob.bin")
    assert unsigned[0] == 403  # anonymous access is refused: the tests' credentials are used
