"""Fixtures shared by every room of the tests (helpers live in the ``helpers`` package, imported
as ``from helpers.x import ...``; nothing imports this file)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import pytest
from helpers.foreign_files import FOREIGN

# The real servers of the remote-source tests, as fixtures (helpers/remote_servers.py).
from helpers.remote_servers import (  # noqa: F401
    http_dir,
    make_site,
    proxy_factory,
    published,
    remote,
    s3_server,
    site,
)


@pytest.fixture
def write(tmp_path: Path):
    """write(bytes, name="x.safetensors") -> path of a new file holding them."""

    def _write(content: bytes, name: str = "x.safetensors") -> Path:
        path = tmp_path / name
        path.write_bytes(content)
        return path

    return _write


@pytest.fixture(params=sorted(FOREIGN))
def foreign(request: pytest.FixtureRequest, tmp_path: Path) -> Tuple[Path, str, str]:
    """(path, kind, words): a file of each kind in FOREIGN (helpers/foreign_files.py), named
    ``*.safetensors``."""
    make, kind, words = FOREIGN[request.param]
    path = tmp_path / f"{request.param}.safetensors"
    make(path)
    return path, kind, words


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    """Groups for ``pytest -n N --dist loadgroup`` (scripts/test.sh): the tests of one module
    run on one worker, so that a module's fixtures (a transformers model saved and loaded twice,
    the example files of docs/cli.md, ...) are made once, and every test of the S3 store (the
    session's SeaweedFS server, ``s3_server``) runs on one worker, which alone starts it."""
    for item in items:
        if "s3_server" in getattr(item, "fixturenames", ()):
            group = "s3-store"
        else:
            group = item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
