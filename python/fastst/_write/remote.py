"""Saves a file to a URL of object storage with a multipart upload, whole or not at all.

Saves a file to a URL of object storage (``s3://``, ``gs://``, ``az://``...) with a multipart
upload by the compiled ``fastst-remote`` crate (see ``docs/remote.md``, "Saving to object
storage"): the parts go up as the tensors' bytes come, a bounded number of them in flight, so
that the memory a save takes does not grow with the file; the object appears under its key only
when the upload completes, and any error aborts the upload (an old object stays as it was).
The store is configured as for reading: ``storage_options``, else the environment.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional

from .. import _fastst
from .._fastst import WritePlan
from .._sources import remote as _remote

#: Whether a destination is a URL (rather than a path), as for reading.
is_url = _remote.is_url

#: A URL as messages show it (without user, password, query or fragment).
display = _remote.display


def upload(
    layout: WritePlan,
    url: str,
    sources: List[Any],
    storage_options: Optional[Mapping[str, Any]],
) -> None:
    """Writes the file ``layout`` lays out (the tensors' data in
    ``sources``, as :func:`fastst._write.tensors.plan` gives them) to the
    object ``url``; errors name the URL as :func:`display` shows it."""
    pairs = _remote.options(storage_options)
    _fastst.upload_file(layout, url, display(url), pairs, sources)
