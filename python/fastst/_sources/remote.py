"""URLs as sources: objects in object stores and files behind HTTP(S), read with ranged GETs.

Stores are ``s3://``, ``gs://``, ``az://``...; the reads are done by the
compiled ``fastst-remote`` crate (see ``docs/remote.md``).

- :func:`is_url` tells a URL from a path (:func:`fastst._paths.is_url`:
  under the drop-in switch, names are paths unless the user opts in);
  :func:`open_url` opens one object
  (a ``.safetensors`` file, a sharded checkpoint's index, or a prefix
  ending in ``/`` holding one checkpoint, when the store can list).
- ``storage_options`` (:func:`options`) configure the store; without them
  credentials, endpoint and region come from the environment.
- Messages name the URL without its query, fragment or user part
  (:func:`display`): presigned URLs carry their signature in the query.
- An index is read with the cap of local ones (``FASTST_INDEX_CAP``); its
  shards are objects under the index's own prefix (:func:`shard_url`: a
  relative name, no ``..``, no other bucket or host), opened several at a
  time (:data:`SHARDS_AT_ONCE`) through one client per store.
- A listing of a prefix reads at most :data:`LIST_CAP` objects (rule
  ``folder-over-cap``) and a thousand pages (rule
  ``listing-pages-over-cap``), within the deadline of a read.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from .._errors import rule_error
from .._fastst import remote as _fastst_remote
from .._fastst.read import RawFile
from .._layout import choose_checkpoint, names_an_index
from .._paths import is_url as is_url  # the one test, re-exported
from .._paths import readable
from .._settings import index_cap
from .folders import parse_index, placements
from .raw import RawSource
from .sharded import ShardedFile

#: The most objects (at any depth) a listing of a prefix reads.
LIST_CAP = 10_000

#: The shards of a remote index opened at once.
SHARDS_AT_ONCE = 16

#: ``(key, value)`` pairs as the compiled store builder takes them.
Options = List[Tuple[str, str]]


def refuse_local_options(storage_options: Optional[Mapping[str, Any]], target: object) -> None:
    """The one refusal of ``storage_options`` given for ``target``, a local
    path or a file object (they configure the store of a URL only): a
    :class:`fastst.StorageOptionsError` (also a ``ValueError``) naming
    ``target`` and rule ``storage-options-local``; nothing when they are
    None."""
    if storage_options is None:
        return
    if isinstance(target, (str, bytes, os.PathLike)):
        name = readable(os.fsdecode(os.fspath(target)))
    else:
        name = f"<{type(target).__name__}>"
    raise rule_error(
        "storage-options-local",
        name,
        "storage_options apply to URLs (s3://, gs://, az://, https://...) only, not to a "
        "local path or a file object (rule storage-options-local)",
    )


def options(storage_options: Optional[Mapping[str, Any]]) -> Options:
    """``storage_options`` as pairs of strings (booleans as ``"true"`` /
    ``"false"``, numbers as text); a key that is not a string is a
    ``TypeError``."""
    if storage_options is None:
        return []
    if not isinstance(storage_options, Mapping):
        raise TypeError(
            f"storage_options must be a mapping of str to str, got {type(storage_options).__name__}"
        )
    pairs: Options = []
    for key, value in storage_options.items():
        if not isinstance(key, str):
            raise TypeError(f"storage_options keys must be str, got {key!r}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        pairs.append((key, str(value)))
    return pairs


def url_path(url: str) -> str:
    """The path part of ``url``: for a cloud store's URL (``s3://``, ``gs://``,
    ``az://``...) its object key, taken literally (``#``, ``?``, ``%``, spaces
    and ``..`` are characters of it, as boto3 takes a key; the compiled
    ``literal_key``, the one rule); for an HTTP(S) URL its path by the URL rules
    (no query or fragment)."""
    literal = _fastst_remote.object_key(url)
    return urlsplit(url).path if literal is None else literal[1]


def url_name(url: str) -> str:
    """The object's name, the last segment of :func:`url_path`: as typed in a cloud
    store's key, percent-decoded from an HTTP(S) URL's path."""
    literal = _fastst_remote.object_key(url)
    path = unquote(urlsplit(url).path) if literal is None else literal[1]
    return posixpath.basename(path)


def child_url(prefix_url: str, name: str) -> str:
    """The URL of the object ``name`` (a checked relative name) under
    ``prefix_url`` (ending in ``/``): appended as it is to a cloud store's
    key (taken literally), percent-encoded into an HTTP(S) URL's path, so
    that it cannot leave the prefix."""
    if _fastst_remote.object_key(prefix_url) is not None:
        return prefix_url + name
    return prefix_url + quote(name, safe="/")


def shard_url(index_url: str, shard: str) -> str:
    """The URL of the shard ``shard`` (a checked relative name) beside the
    index ``index_url`` (:func:`child_url` of the index's prefix)."""
    literal = _fastst_remote.object_key(index_url)
    if literal is not None:
        root, key = literal
        folder = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
        return child_url(f"{root}/{folder}", shard)
    parts = urlsplit(index_url)
    path = posixpath.dirname(parts.path).rstrip("/") + "/" + quote(shard, safe="/")
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def read_index(url: str, opts: Options) -> Tuple[bytes, Dict[str, Any]]:
    """The bytes and JSON object of the index at ``url``, with the rules of
    local indexes (:func:`fastst._sources.folders.read_index`)."""
    name = readable(url)
    cap = index_cap()
    raw = _fastst_remote.read_remote(url, name, opts, cap)
    if raw is None:
        raise rule_error(
            "index-over-cap",
            name,
            f"the index holds more than {cap:,} bytes, the cap on index files; "
            "set FASTST_INDEX_CAP to a larger size (e.g. 256MiB) to read it",
        )
    return raw, parse_index(raw, name)


def checkpoint_under(url: str, opts: Options) -> str:
    """The URL of the one checkpoint (index or single file) directly under
    the prefix ``url`` (ending in ``/``), as a local folder's
    (:func:`fastst._layout.choose_checkpoint`, the one rule); a prefix
    with more than :data:`LIST_CAP` objects under it is refused (rule
    ``folder-over-cap``) rather than listed whole."""
    names = _fastst_remote.list_remote(url, readable(url), opts, LIST_CAP)
    if names is None:
        raise rule_error(
            "folder-over-cap",
            readable(url),
            f"the prefix holds more than {LIST_CAP:,} objects, the most one listing reads; "
            "name the checkpoint's index or file by its URL",
        )

    def claimed(index: str) -> Set[str]:
        weight_map = read_index(child_url(url, index), opts)[1]["weight_map"]
        return {s for s in weight_map.values() if isinstance(s, str)}

    return child_url(url, choose_checkpoint(readable(url), names, claimed, "prefix"))


def _sharded(url: str, opts: Options, header_cap: int) -> ShardedFile:
    """The checkpoint whose index is the object at ``url``: its shards
    (those whose names the index may hold) opened :data:`SHARDS_AT_ONCE`
    at a time, then held to the rules of indexes in the index's order (the
    first failure in that order is raised)."""
    index = read_index(url, opts)[1]
    shards = list(placements(None, index["weight_map"], lambda *_: None))
    urls = [shard_url(url, shard) for shard in shards]
    got = _fastst_remote.open_urls(
        urls, [readable(u) for u in urls], opts, header_cap, SHARDS_AT_ONCE
    )
    # The list ends at the first failure: the walk below raises it there.
    opened = dict(zip(shards, got, strict=False))

    def open_shard(shard: str) -> Optional[RawFile]:
        got = opened.pop(shard)
        if isinstance(got, BaseException):
            raise got
        return got

    try:
        return ShardedFile.of_objects(readable(url), index, open_shard)
    finally:
        for left in opened.values():  # not handed to the checkpoint (it failed)
            if isinstance(left, RawFile):
                left.close()


def open_url(url: str, header_cap: int, storage_options: Optional[Mapping[str, Any]]) -> RawSource:
    """The ``RawSource`` of the object, index or prefix at ``url``."""
    opts = options(storage_options)
    if url_path(url).endswith("/"):
        url = checkpoint_under(url, opts)
    if names_an_index(url_path(url)):
        return _sharded(url, opts, header_cap)
    return _fastst_remote.open_object(url, readable(url), opts, header_cap)
