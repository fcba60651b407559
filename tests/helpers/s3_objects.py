"""What the tests of saves to object storage share: their S3 site, and reading it back."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import fastst.numpy
import pytest
from helpers.remote_servers import Site

# The parts of an upload are at least 5 MiB (S3's smallest); the test objects take a few.
PART = 5 << 20


@pytest.fixture(scope="module")
def store(make_site: Any) -> Site:
    """The module's S3 site (a folder of the session's SeaweedFS store, behind a proxy)."""
    return make_site("s3")


@pytest.fixture
def site(store: Site, request: pytest.FixtureRequest) -> Iterator[Site]:
    """The S3 site with a key of this test's own (``site.name``), records cleared; every
    fault the test set must have fired."""
    store.name = f"{request.node.name.replace('[', '-').rstrip(']')}.safetensors"
    store.proxy.reset()
    yield store
    unfired = [f for f in store.proxy.faults if f.hits <= f.skip]
    store.proxy.reset()
    assert not unfired, f"faults never applied: {unfired}"


def local_bytes(tensors: Dict[str, Any], tmp_path: Path, **kwargs: Any) -> bytes:
    """The bytes of a local ``save_file`` of ``tensors`` (what a save to a URL must store)."""
    path = tmp_path / "local.safetensors"
    fastst.numpy.save_file(tensors, str(path), **kwargs)
    return path.read_bytes()


def client(site: Site) -> Any:
    """A boto3 client of the site's store (not through the proxy)."""
    assert site.s3 is not None
    return site.s3.client()


def stored(site: Site, name: str = "") -> bytes:
    """The bytes under the site's key (or ``name``), read back past fastst (boto3, straight
    from the store)."""
    got = client(site).get_object(Bucket=site.bucket, Key=site.folder + (name or site.name))
    return bytes(got["Body"].read())


def absent(site: Site) -> bool:
    """Whether no object lies under the site's key."""
    listed = client(site).list_objects_v2(Bucket=site.bucket, Prefix=site.folder + site.name)
    return not listed.get("Contents")


def pending_uploads(site: Site) -> List[str]:
    """Keys of multipart uploads begun and neither completed nor aborted under the site's key."""
    listed = client(site).list_multipart_uploads(Bucket=site.bucket, Prefix=site.folder)
    return [u["Key"] for u in listed.get("Uploads", []) if u["Key"].endswith(site.name)]


def options(site: Site, **more: str) -> Dict[str, str]:
    """The site's options, parts of :data:`PART` bytes (the smallest)."""
    return {**(site.options or {}), "fastst_remote_part_size": str(PART), **more}


def under(site: Site) -> Tuple[str, str]:
    """(URL, key) of a prefix of this test's own."""
    key = f"{site.folder}{site.name.removesuffix('.safetensors')}/"
    return f"s3://{site.bucket}/{key}", key


def listed(site: Site, key: str) -> Dict[str, bytes]:
    """{name: bytes} of the objects under the prefix ``key``."""
    entries = client(site).list_objects_v2(Bucket=site.bucket, Prefix=key).get("Contents", [])
    got = {}
    for entry in entries:
        body = client(site).get_object(Bucket=site.bucket, Key=entry["Key"])["Body"]
        got[entry["Key"].removeprefix(key)] = bytes(body.read())
    return got


def torch_tensors(tmp_path: Path) -> Tuple[Dict[str, Any], bytes]:
    """Torch tensors of two dtypes (three parts of :data:`PART`) and the bytes of
    ``fastst.torch.save_file`` of them with ``{"format": "pt"}``: what a torch save to a URL
    must store."""
    torch = pytest.importorskip("torch")
    import fastst.torch

    tensors = {
        "w": torch.arange(3 << 20, dtype=torch.float32).reshape(3072, 1024),
        "b": torch.ones(7, dtype=torch.bfloat16),
    }
    path = tmp_path / "local.safetensors"
    fastst.torch.save_file(tensors, str(path), {"format": "pt"})
    return tensors, path.read_bytes()
