"""Sharded checkpoints written whole or not at all: the shards and the index that names them.

A save over an existing checkpoint commits as one, through this sequence
(each step durable before the next):

1. every new shard is written (atomically, flushed) under a staged name,
   ``.<16 hex>.fastst-tmp.<final name>``, unique to this save; the old
   index still names the old shards, untouched;
2. the index is replaced by one naming the staged shards: from here on a
   reader sees the new checkpoint;
3. each staged shard is linked to its final name
   (``{prefix}-00001-of-0000N.safetensors``), replacing an old shard of
   that name in one step (:func:`fastst._fastst.link_file`);
4. the index is replaced by one naming the final names;
5. the staged names, and the shards of earlier saves under the same
   prefix that the new index does not name, are removed.

Killed at any instant, a loader sees the complete old checkpoint (before
step 2) or the complete new one (after it), never a mix and never an index
naming a missing or partial shard. A kill before step 5 ends leaves staged
files: while an index names them they are the checkpoint; otherwise they
are stale temporaries (``fastst verify``'s ``stale-temp-file`` rule finds
them), and the next save under the prefix removes them.

A save to a URL prefix of object storage (``s3://bucket/run/``) cannot rename,
so its shards carry a part of their own instead,
``{prefix}-<8 hex>-00001-of-0000N.safetensors``, unique to this save (the
index records the names): each shard is uploaded whole (a multipart upload,
see :mod:`fastst._write.remote`), then the index is written last, in one
request, which is the commit; an old index never names a new shard. Then
the shards the old index named and the new one does not are deleted. A
failure before the index is written deletes the shards uploaded so far and
leaves the old checkpoint as it was.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Dict, List, Mapping, Optional

from .._fastst import link_file
from .._paths import readable
from .._settings import parse_size
from .._sources.folders import UNFINISHED
from . import remote as _remote
from .atomic import replace_bytes

__all__ = ["plan_shards", "write_sharded", "staged_name", "commit_staged"]


def staged_name(token: str, final: str) -> str:
    """The name a shard is written under before the commit (see above;
    :data:`fastst._sources.folders.UNFINISHED` recognises it)."""
    return f".{token}.fastst-tmp.{final}"


def plan_shards(sizes: Dict[str, int], max_size: int) -> List[List[str]]:
    """Groups tensor names, in the given order, into shards of at most
    ``max_size`` bytes (a tensor larger than that gets a shard of its own)."""
    shards: List[List[str]] = []
    current: List[str] = []
    used = 0
    for name, size in sizes.items():
        if current and used + size > max_size:
            shards.append(current)
            current, used = [], 0
        current.append(name)
        used += size
    if current or not shards:
        shards.append(current)
    return shards


def write_sharded(
    tensors: Dict[str, Any],
    folder: Any,
    sizes: Dict[str, int],
    save_one: Callable[..., None],
    *,
    max_shard_size: Any = "5GB",
    metadata: Optional[Dict[str, str]] = None,
    prefix: str = "model",
    index_metadata: Optional[Dict[str, Any]] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> str:
    """Writes ``tensors`` as shards ``{prefix}-00001-of-0000N.safetensors``
    plus ``{prefix}.safetensors.index.json`` into ``folder``, committed as
    one (see the module's documentation); returns the index's path.
    ``save_one(subset, path, metadata, durable)`` writes one shard;
    ``index_metadata`` joins ``total_size`` in the index's ``metadata``.
    A URL prefix of object storage (configured by ``storage_options``)
    gets shards with names of this save's own and the index last; the
    index's URL is returned."""
    limit = parse_size(max_shard_size, "max_shard_size")
    if limit <= 0:
        raise ValueError(f"max_shard_size must be positive, got {max_shard_size!r}")
    if not isinstance(prefix, str) or not prefix or "/" in prefix or "\0" in prefix:
        raise ValueError(f"prefix must be a non-empty file name without '/', got {prefix!r}")
    groups = plan_shards(sizes, limit)

    def index_bytes(names: List[str]) -> bytes:
        weight_map = {t: names[i] for i, members in enumerate(groups) for t in members}
        index = {
            "metadata": {"total_size": sum(sizes.values()), **(index_metadata or {})},
            "weight_map": dict(sorted(weight_map.items())),
        }
        return (json.dumps(index, indent=2, ensure_ascii=False) + "\n").encode("utf-8")

    if _remote.is_url(folder):
        shards = {"tensors": tensors, "groups": groups, "metadata": metadata}
        return _write_to_url(folder, shards, save_one, prefix, index_bytes, storage_options)
    if storage_options is not None:
        raise ValueError("storage_options apply to URLs (s3://, gs://, az://, https://...) only")
    folder = os.fsdecode(os.fspath(folder))
    os.makedirs(folder, exist_ok=True)
    total = len(groups)
    finals = [f"{prefix}-{i:05d}-of-{total:05d}.safetensors" for i in range(1, total + 1)]
    token = os.urandom(8).hex()
    staged = [staged_name(token, name) for name in finals]

    # 1. The new shards, under names no reader knows yet.
    written: List[str] = []
    try:
        for members, name in zip(groups, staged, strict=True):
            path = os.path.join(folder, name)
            save_one({n: tensors[n] for n in members}, path, metadata, True)
            written.append(path)
    except BaseException:
        for path in written:
            _remove(path)
        raise
    return commit_staged(folder, prefix, staged, finals, index_bytes)


def commit_staged(
    folder: str,
    prefix: str,
    staged: List[str],
    finals: List[str],
    index_bytes: Callable[[List[str]], bytes],
) -> str:
    """Steps 2 to 5 of the sequence (see the module's documentation), once
    the shards ``staged`` (names in ``folder``, each complete and flushed)
    are written: the index ``{prefix}.safetensors.index.json``, whose
    bytes ``index_bytes(shard names)`` gives, commits them under the names
    ``finals``; returns the index's path."""
    total = len(finals)
    index_path = os.path.join(folder, f"{prefix}.safetensors.index.json")
    # 2. The commit: the index names the new shards.
    replace_bytes(index_path, index_bytes(staged))
    # 3. The ecosystem's names, each replaced in one step.
    for at, (name, final) in enumerate(zip(staged, finals, strict=True)):
        target = os.path.join(folder, final)
        link_file(os.path.join(folder, name), target, readable(target), at == total - 1)
    # 4. The index names them.
    replace_bytes(index_path, index_bytes(finals))
    # 5. What no index names any more.
    ours = re.compile(re.escape(prefix) + r"-\d{5}-of-\d{5}\.safetensors")
    keep = set(finals)
    for entry in os.listdir(folder):
        old_shard = ours.fullmatch(entry) is not None and entry not in keep
        match = UNFINISHED.fullmatch(entry)
        staged_for = None if match is None else match.group(1)
        if old_shard or (staged_for is not None and ours.fullmatch(staged_for) is not None):
            _remove(os.path.join(folder, entry))
    return index_path


def _write_to_url(
    folder: str,
    shards: Dict[str, Any],
    save_one: Callable[..., None],
    prefix: str,
    index_bytes: Callable[[List[str]], bytes],
    storage_options: Optional[Mapping[str, Any]],
) -> str:
    """The sharded save to the URL prefix ``folder`` (see the module's documentation):
    ``shards`` holds the ``tensors``, their ``groups`` (one per shard) and the shards'
    ``metadata``; returns the index's URL."""
    base = folder if folder.endswith("/") else folder + "/"
    index_url = _remote.shard_url(base, f"{prefix}.safetensors.index.json")
    old = _remote.shards_named(index_url, storage_options)
    groups: List[List[str]] = shards["groups"]
    total = len(groups)
    while True:  # a part of this save's own: no name the old index holds
        token = os.urandom(4).hex()
        names = [
            f"{prefix}-{token}-{i:05d}-of-{total:05d}.safetensors" for i in range(1, 1 + total)
        ]
        if not set(names) & set(old):
            break
    # 1. The shards, each uploaded whole, under names no index names.
    written: List[str] = []
    try:
        for members, name in zip(groups, names, strict=True):
            url = _remote.shard_url(base, name)
            written.append(url)
            subset = {n: shards["tensors"][n] for n in members}
            save_one(subset, url, shards["metadata"], None)
        # 2. The commit: the index, last, in one request.
        _remote.put_bytes(index_url, index_bytes(names), storage_options)
    except BaseException:
        for url in written:  # named by no index: not part of any checkpoint
            _forget(url, storage_options)
        raise
    # 3. What the old index named and the new one does not.
    for name in sorted(set(old) - set(names)):
        if "/" not in name and name not in (".", ".."):
            _forget(_remote.shard_url(base, name), storage_options)
    return index_url


def _forget(url: str, storage_options: Optional[Mapping[str, Any]]) -> None:
    """Deletes the object ``url``, as a clean-up: a failure leaves it (no index names it)."""
    try:
        _remote.delete(url, storage_options)
    except Exception:
        pass


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
