"""Credentials never leave for another host, and settings that weaken security are heard.

Every store whose requests carry credentials (S3's signature and session token, GCS's bearer
token, Azure's shared key, a presigned URL's query, a URL's user part) follows no redirect: a
server on 127.0.0.1 answering ``302`` to 127.0.0.2 is an error, and 127.0.0.2 receives nothing.
A plain URL without credentials still follows redirects, as HTTP clients do. A store made
without certificate checks warns once per process with ``fastst.InsecureTransportWarning``.
"""

from __future__ import annotations

import json
import warnings
from typing import Dict, Iterator, Optional, Tuple

import fastst
import fastst.numpy
import numpy as np
import pytest
from helpers.hostile_servers import Scripted, run_python, s3_options
from helpers.remote_servers import parse_range

SECRET = "SECRET-TOKEN-never-elsewhere"


@pytest.fixture
def elsewhere() -> Iterator[Scripted]:
    """Another host (127.0.0.2) serving a small checkpoint to whoever comes."""
    body = fastst.numpy.save({"w": np.arange(4, dtype=np.float32)})

    def answer(
        method: str, path: str, headers: Dict[str, str]
    ) -> Tuple[int, Dict[str, str], bytes]:
        start, end = parse_range(headers.get("range", "bytes=0-"), len(body)) or (0, 0)
        span = {"Content-Range": f"bytes {start}-{end - 1}/{len(body)}", "ETag": '"e"'}
        return 206, span, body[start:end]

    server = Scripted(answer, host="127.0.0.2")
    yield server
    server.stop()


@pytest.fixture
def redirecting(elsewhere: Scripted) -> Iterator[Scripted]:
    """A store on 127.0.0.1 that answers every request with a 302 to :func:`elsewhere`."""
    server = Scripted(lambda m, p, h: (302, {"Location": elsewhere.url + p}, b""))
    yield server
    server.stop()


def _signed(url: str, kind: str) -> Tuple[str, Optional[Dict[str, str]]]:
    """A URL of the store at ``url`` of ``kind`` and its options, carrying :data:`SECRET`."""
    if kind == "s3":
        return "s3://bucket/m.safetensors", s3_options(url, aws_session_token=SECRET)
    if kind == "gcs":
        options = {"google_base_url": url, "google_bearer_token": SECRET, "allow_http": "true"}
        return "gs://bucket/m.safetensors", options
    if kind == "azure":
        options = {
            "azure_storage_account_name": "acct",
            "azure_storage_account_key": "U0VDUkVULVRPS0VO",
            "azure_storage_endpoint": url,
            "allow_http": "true",
        }
        return "az://container/m.safetensors", options
    if kind == "presigned":
        return f"{url}/b/m.safetensors?X-Amz-Signature={SECRET}", None
    assert kind == "user"
    return url.replace("http://", f"http://user:{SECRET}@") + "/m.safetensors", None


@pytest.mark.parametrize("kind", ["s3", "gcs", "azure", "presigned", "user"])
def test_requests_with_credentials_follow_no_redirect(
    redirecting: Scripted, elsewhere: Scripted, kind: str
) -> None:
    url, options = _signed(redirecting.url, kind)
    with pytest.raises(OSError) as caught:
        fastst.safe_open(url, "numpy", storage_options=options)
    assert "302" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert redirecting.seen, "the store was asked"
    assert elsewhere.seen == [], "a request with credentials went to another host"


def test_the_credentials_were_sent_to_the_store_itself(redirecting: Scripted) -> None:
    # What the test above protects: each store does put its secret on the request.
    for kind in ("s3", "gcs", "presigned"):
        url, options = _signed(redirecting.url, kind)
        with pytest.raises(OSError):
            fastst.safe_open(url, "numpy", storage_options=options)
    sent = json.dumps([[s.path, s.headers] for s in redirecting.seen])
    assert sent.count(SECRET) >= 3


def test_a_plain_url_without_credentials_follows_redirects(
    redirecting: Scripted, elsewhere: Scripted
) -> None:
    with fastst.safe_open(redirecting.url + "/m.safetensors", "numpy") as f:
        assert f.get_tensor("w").tolist() == [0.0, 1.0, 2.0, 3.0]
    assert elsewhere.seen and all("authorization" not in s.headers for s in elsewhere.seen)


_WARNS = """
import warnings, fastst
warnings.simplefilter("always")
url, options = {url!r}, {options!r}
with warnings.catch_warnings(record=True) as got:
    for _ in range(3):
        try:
            fastst.safe_open(url, "numpy", storage_options=options)
        except OSError:
            pass
print(sum(issubclass(w.category, fastst.InsecureTransportWarning) for w in got))
"""


@pytest.fixture
def missing() -> Iterator[Scripted]:
    """A store that has nothing (every request: 404)."""
    server = Scripted(lambda m, p, h: (404, {}, b"<Error><Code>NoSuchKey</Code></Error>"))
    yield server
    server.stop()


@pytest.mark.parametrize("how", ["storage-option", "environment"])
def test_certificate_checks_off_warn_once_per_process(missing: Scripted, how: str) -> None:
    if how == "storage-option":
        url, options = missing.url + "/m.safetensors", {"allow_invalid_certificates": "true"}
        env = {}
    else:
        url, options = "s3://bucket/m.safetensors", s3_options(missing.url)
        env = {"AWS_ALLOW_INVALID_CERTIFICATES": "true"}
    out = run_python(_WARNS.format(url=url, options=options), timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1"]


def test_the_warning_can_be_turned_into_an_error(missing: Scripted) -> None:
    code = (
        "import warnings, fastst\n"
        "warnings.simplefilter('error', fastst.InsecureTransportWarning)\n"
        "try:\n"
        f"    fastst.safe_open('{missing.url}/m.safetensors', 'numpy',\n"
        "                     storage_options={'allow_invalid_certificates': True})\n"
        "except fastst.InsecureTransportWarning as e:\n"
        "    print('refused:', e)\n"
    )
    out = run_python(code, timeout=120)
    assert out.stdout.startswith("refused: TLS certificate checks are off"), out.stderr
    assert issubclass(fastst.InsecureTransportWarning, Warning)


def test_checked_certificates_do_not_warn(redirecting: Scripted) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", fastst.InsecureTransportWarning)
        with pytest.raises(OSError):
            fastst.safe_open(redirecting.url + "/b/x?sig=1", "numpy")
