"""Saves a file to a URL of object storage with a multipart upload, whole or not at all.

Stores are ``s3://``, ``gs://``, ``az://``...; the upload is done by the
compiled ``fastst-remote`` crate (see ``docs/remote.md``, "Saving to object
storage"): the parts go up as the tensors' bytes come, a bounded number of
them in flight, so that the memory a save takes does not grow with the
file; the object appears under its key only when the upload completes, and
any error aborts the upload (an old object stays as it was). The store is
configured as for reading: ``storage_options``, else the environment. Also
the streaming writer's object (:func:`layout_writer`: tensors in any order,
each part sent under its own number once every byte of it is written), and
the small writes of a sharded save to a URL prefix
(``fastst._write.sharded``): an object in one request (the index, written
last), deletion, and the shards an index names."""

from __future__ import annotations

from typing import Any, List, Mapping, Optional

from .._errors import SafetensorError
from .._fastst import remote as _fastst_remote
from .._fastst.write import LayoutWriter, WritePlan
from .._paths import readable
from .._sources import remote as _remote

#: Whether a destination is a URL (rather than a path), as for reading.
is_url = _remote.is_url

#: A URL as messages show it (without user, password, query or fragment).


def upload(
    layout: WritePlan,
    url: str,
    sources: List[Any],
    storage_options: Optional[Mapping[str, Any]],
) -> None:
    """Writes the file ``layout`` lays out (the tensors' data in
    ``sources``, as :func:`fastst._write.tensors.plan` gives them) to the
    object ``url``; errors name the URL as :func:`fastst._paths.readable` shows it."""
    pairs = _remote.options(storage_options)
    _fastst_remote.upload_file(layout, url, readable(url), pairs, sources)


def layout_writer(
    url: str,
    entries: List[Any],
    metadata: Optional[List[Any]],
    header_cap: int,
    align: int,
    storage_options: Optional[Mapping[str, Any]],
) -> LayoutWriter:
    """The native streaming writer of the object ``url`` holding the tensors ``entries``
    (``(name, header dtype, shape)``) and ``metadata``: a multipart upload started now, completed
    by its ``commit`` (see :mod:`fastst._write.streaming`)."""
    pairs = _remote.options(storage_options)
    return LayoutWriter.to_url(
        url, readable(url), entries, metadata, pairs, header_cap=header_cap, align=align
    )


def put_bytes(url: str, data: bytes, storage_options: Optional[Mapping[str, Any]]) -> None:
    """Writes ``data`` as the object ``url`` with one request (a small object: an index),
    whole or not at all."""
    pairs = _remote.options(storage_options)
    _fastst_remote.put_remote(url, readable(url), pairs, bytes(data))


def delete(url: str, storage_options: Optional[Mapping[str, Any]]) -> None:
    """Deletes the object ``url`` (one that is not there is no error)."""
    _fastst_remote.delete_remote(url, readable(url), _remote.options(storage_options))


def shards_named(index_url: str, storage_options: Optional[Mapping[str, Any]]) -> List[str]:
    """The shard names the index at ``index_url`` names; none when there is no index there, or
    one that cannot be read as an index."""
    try:
        _, index = _remote.read_index(index_url, _remote.options(storage_options))
    except (FileNotFoundError, SafetensorError):
        return []
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict):
        return []
    return sorted({s for s in weight_map.values() if isinstance(s, str)})


def names_under(prefix_url: str, storage_options: Optional[Mapping[str, Any]]) -> List[str]:
    """The names of the objects directly under ``prefix_url`` (ending in ``/``); none when the
    prefix holds more than the listing cap (nothing is then cleaned up)."""
    url = readable(prefix_url)
    names = _fastst_remote.list_remote(
        prefix_url, url, _remote.options(storage_options), _remote.LIST_CAP
    )
    return list(names or [])


def shard_url(prefix_url: str, name: str) -> str:
    """The URL of the object ``name`` (a plain file name) under ``prefix_url`` (ending in
    ``/``), as shard names of indexes are read (:func:`fastst._sources.remote.child_url`)."""
    return _remote.child_url(prefix_url, name)
