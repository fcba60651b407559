"""Sharded checkpoints as wholes, for :mod:`fastst.tools.inspect` and the ``fastst`` command.

A checkpoint is an ``*.index.json`` and its shards, or the folder holding
it: which inputs are checkpoints, their totals, per-shard hashes and one
digest, and the index verified against its shards (leniently, as findings)."""

from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, Iterable, Iterator, List, Optional, Set, Tuple, Union, cast

from .. import _fastst
from .._errors import SafetensorError
from .._fastst.read import DEFAULT_HEADER_CAP
from .._layout import INDEX_SUFFIX, names_an_index
from .._paths import os_path as _path
from .._paths import progress_label, readable, shown
from .._sources import remote as _remote
from .._sources.folders import claimed_shards, index_shards, read_index
from .._sources.sharded import ShardedFile
from . import results
from .walk import walk

PathLike = Union[str, "os.PathLike[str]"]
Finding = Dict[str, Any]


def _hash_file(path: str, progress: bool = False, **options: Any) -> Dict[str, Any]:
    out = dict(_fastst.inspect.hash_file(path, progress=progress_label(path, progress), **options))
    out["path"] = shown(path)
    return out


def _verify_file(path: str, progress: bool = False, **options: Any) -> Dict[str, Any]:
    out = dict(
        _fastst.inspect.verify_file(path, progress=progress_label(path, progress), **options)
    )
    out["path"] = shown(path)
    return out


def _read_metadata(path: str, header_cap: int) -> Optional[Dict[str, str]]:
    pairs = _fastst.inspect.read_metadata(path, header_cap=header_cap)
    if pairs is None:
        return None
    out: Dict[str, str] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def _index(path: str) -> Tuple[bytes, Dict[str, Any]]:
    """The bytes and JSON object of the index ``path``, a file or a URL
    (read with the cap and rules of local indexes)."""
    return _remote.read_index(path, []) if _remote.is_url(path) else read_index(path)


def shard_location(index_path: str, shard: str) -> str:
    """Where the shard ``shard`` (a checked name) of the index ``index_path``
    is: the file beside it, or the object under the index URL's prefix
    (:func:`fastst._sources.remote.shard_url`)."""
    if _remote.is_url(index_path):
        return _remote.shard_url(index_path, shard)
    return os.path.join(os.path.dirname(os.path.abspath(index_path)), shard)


def _url_kind(url: str) -> str:
    return "checkpoint" if names_an_index(_remote.url_path(url)) else "file"


def iter_inputs(paths: Iterable[PathLike]) -> Iterator[Tuple[str, str]]:
    """``(kind, path)`` for each input: ``("checkpoint", index)`` for an
    ``*.index.json`` file and for each index found in a folder (the shards
    it names are then not listed on their own), ``("file", path)`` for
    every other ``*.safetensors`` file under a folder (recursively, sorted)
    and for every other path given (missing ones included, so that opening
    them reports the error), and ``("too-deep", folder)`` after the rest of
    a folder for the first folder under it nested too deep to scan
    (:func:`fastst.tools.walk.walk`). A URL is an object, an index, or a
    prefix ending in ``/`` holding one checkpoint
    (:func:`fastst._sources.remote.checkpoint_under`: its error when it holds none
    or several)."""
    for raw in paths:
        path = _path(raw)
        if _remote.is_url(path):
            if _remote.url_path(path).endswith("/"):
                path = _remote.checkpoint_under(path, [])
            yield _url_kind(path), path
            continue
        if not os.path.isdir(path):
            kind = "checkpoint" if names_an_index(path) else "file"
            yield kind, path
            continue
        too_deep: List[str] = []
        taken: Set[str] = set()  # an index may claim shards in sub-folders
        for root, files in walk(path, too_deep):
            for name in files:
                if name.endswith(INDEX_SUFFIX):
                    index = os.path.join(root, name)
                    yield "checkpoint", index
                    try:
                        taken |= claimed_shards(index)
                    except (OSError, ValueError, SafetensorError):
                        pass  # opening the checkpoint reports why
            for name in files:
                full = os.path.join(root, name)
                if name.lower().endswith(".safetensors") and os.path.normpath(full) not in taken:
                    yield "file", full
        for folder in too_deep:
            yield "too-deep", folder


def _open_checkpoint(index_path: str, header_cap: int, index: Dict[str, Any]) -> None:
    """Opens (and closes) the checkpoint as the reader does: its errors,
    with their rule ids, when the index and the shards disagree."""
    if _remote.is_url(index_path):
        _remote.open_url(index_path, header_cap, None).close()
    else:
        ShardedFile(index_path, "mmap", header_cap, index).close()


def _strict_index(index_path: str, header_cap: int) -> Tuple[List[str], Dict[str, Any], bytes]:
    """Shard names (sorted), the index's metadata and its bytes, after the
    reader checked the index against its shards (raising its errors, with
    their rule ids, when they disagree)."""
    raw, index = _index(index_path)
    _open_checkpoint(index_path, header_cap, index)
    meta = index.get("metadata")
    return sorted(set(index["weight_map"].values())), meta if isinstance(meta, dict) else {}, raw


def _merge_by_dtype(parts: List[List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    merged: Dict[str, Dict[str, Any]] = {}
    for part in parts:
        for d in part:
            m = merged.setdefault(
                d["dtype"], {"dtype": d["dtype"], "tensors": 0, "parameters": 0, "bytes": 0}
            )
            for k in ("tensors", "parameters", "bytes"):
                m[k] += d[k]
    return sorted(merged.values(), key=lambda d: (-d["bytes"], d["dtype"]))


def inspect_checkpoint(
    index_path: PathLike, *, tensors: bool = False, header_cap: int = DEFAULT_HEADER_CAP
) -> results.CheckpointSummary:
    """A summary of a sharded checkpoint (its ``*.index.json``) as a whole.

    Like :func:`inspect_file`, with totals over the shards (``file_len``,
    ``tensors``, ``parameters``, ``data_len``, ``by_dtype``), ``kind``
    ``"checkpoint"``, ``shards`` (``file``, ``file_len``, ``tensors``,
    ``parameters`` each), ``index_metadata`` and ``metadata`` (the first
    shard's ``__metadata__``); with ``tensors=True`` the ``table`` rows
    carry the shard file as a sixth item. ``header_len``, ``data_start``
    and ``data_alignment`` are None. Raises the reader's errors when the
    index and shards disagree.
    """
    path = _path(index_path)
    names, index_meta, raw = _strict_index(path, header_cap)
    shards = []
    table: List[Tuple[str, str, List[int], int, int, str]] = []
    parts = []
    metadata = None
    file_len = len(raw)
    for i, name in enumerate(names):
        info = _fastst.inspect.inspect_file(
            shard_location(path, name), table=tensors, header_cap=header_cap
        )
        if i == 0:
            metadata = info["metadata"]
        file_len += info["file_len"]
        parts.append(info["by_dtype"])
        shards.append(
            {
                "file": name,
                "file_len": info["file_len"],
                "tensors": info["tensors"],
                "parameters": info["parameters"],
            }
        )
        for row in info.get("table") or []:
            table.append((*row, name))
    result: Dict[str, Any] = {
        "path": shown(path),
        "kind": "checkpoint",
        "file_len": file_len,
        "tensors": sum(s["tensors"] for s in shards),
        "parameters": sum(s["parameters"] for s in shards),
        "header_len": None,
        "data_start": None,
        "data_alignment": None,
        "data_len": sum(d["bytes"] for d in _merge_by_dtype(parts)),
        "by_dtype": _merge_by_dtype(parts),
        "metadata": metadata,
        "index_metadata": index_meta,
        "shards": shards,
    }
    if tensors:
        result["table"] = table
    return cast(results.CheckpointSummary, result)


def _digest_listing(entries: List[Tuple[str, str]]) -> str:
    lines = "".join(
        f"{digest}  {name}\n"
        for name, digest in sorted(entries, key=lambda e: e[0].encode("utf-8", "surrogateescape"))
    )
    return hashlib.sha256(lines.encode("utf-8", "surrogateescape")).hexdigest()


def hash_checkpoint(
    index_path: PathLike,
    *,
    tensors: bool = False,
    header_cap: int = DEFAULT_HEADER_CAP,
    threads: int = 0,
    progress: bool = False,
) -> results.CheckpointHashes:
    """Per-shard hashes of a sharded checkpoint and one digest for it all.

    ``{"path", "kind": "checkpoint", "checkpoint_sha256", "index_sha256",
    "shards", "tensors"}``: ``shards`` holds :func:`fastst.tools.inspect.hash_file`'s result for
    each shard plus its ``file`` name; ``checkpoint_sha256`` is the SHA-256
    of the listing ``sha256sum`` would print for the index file and every
    shard (``<hex>  <file name>\\n`` per file, sorted by name), so it
    changes when any byte of any file or any file name does;
    ``tensors`` (with ``tensors=True``) maps every tensor to its SHA-256.
    """
    path = _path(index_path)
    names, _meta, raw = _strict_index(path, header_cap)
    index_sha = hashlib.sha256(raw).hexdigest()
    shards = []
    per_tensor: Optional[Dict[str, str]] = {} if tensors else None
    for name in names:
        h = _hash_file(
            shard_location(path, name),
            tensors=tensors,
            header_cap=header_cap,
            threads=threads,
            progress=progress,
        )
        h["file"] = name
        shards.append(h)
        if per_tensor is not None and h.get("tensors"):
            per_tensor.update(h["tensors"])
    index_name = _remote.url_name(path) if _remote.is_url(path) else os.path.basename(path)
    listing = [(index_name, index_sha)] + [(s["file"], s["sha256"]) for s in shards]
    hashes = {
        "path": shown(path),
        "kind": "checkpoint",
        "checkpoint_sha256": _digest_listing(listing),
        "index_sha256": index_sha,
        "shards": shards,
        "tensors": per_tensor,
    }
    return cast(results.CheckpointHashes, hashes)


def checkpoint_metadata(
    index_path: PathLike, *, header_cap: int = DEFAULT_HEADER_CAP
) -> Tuple[Optional[Dict[str, str]], Dict[str, Any]]:
    """The first shard's ``__metadata__`` (read leniently, as
    :func:`fastst.tools.inspect.read_metadata`) and the index's own ``metadata`` object."""
    path = _path(index_path)
    index = _index(path)[1]
    url = _remote.is_url(path)
    folder = None if url else os.path.dirname(os.path.abspath(path))
    name = readable(path)
    names = sorted(index_shards(name, folder, index["weight_map"]))
    meta = index.get("metadata")
    index_meta = meta if isinstance(meta, dict) else {}
    if not names:
        return None, index_meta
    return _read_metadata(shard_location(path, names[0]), header_cap), index_meta
