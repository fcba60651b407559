"""Fixtures shared by every room of the tests (helpers live in the ``helpers`` package, imported
as ``from helpers.x import ...``; nothing imports this file)."""

from __future__ import annotations

from pathlib import Path
from typing import Tuple

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
