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
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Dict, List, Optional

from .._fastst import link_file
from .._paths import readable
from .._settings import parse_size
from .._sources.folders import UNFINISHED
from .atomic import replace_bytes
from .remote import display, is_url

__all__ = ["plan_shards", "write_sharded", "staged_name"]


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
) -> str:
    """Writes ``tensors`` as shards ``{prefix}-00001-of-0000N.safetensors``
    plus ``{prefix}.safetensors.index.json`` into ``folder``, committed as
    one (see the module's documentation); returns the index's path.
    ``save_one(subset, path, metadata, durable)`` writes one shard;
    ``index_metadata`` joins ``total_size`` in the index's ``metadata``."""
    limit = parse_size(max_shard_size, "max_shard_size")
    if limit <= 0:
        raise ValueError(f"max_shard_size must be positive, got {max_shard_size!r}")
    if not isinstance(prefix, str) or not prefix or "/" in prefix or "\0" in prefix:
        raise ValueError(f"prefix must be a non-empty file name without '/', got {prefix!r}")
    if is_url(folder):
        # Not a local folder named "s3:": refused before anything is written.
        raise ValueError(
            f"{display(folder)}: sharded saves to a URL are not supported yet; "
            "save each shard with save_file and write the index last"
        )
    folder = os.fsdecode(os.fspath(folder))
    os.makedirs(folder, exist_ok=True)
    groups = plan_shards(sizes, limit)
    total = len(groups)
    finals = [f"{prefix}-{i:05d}-of-{total:05d}.safetensors" for i in range(1, total + 1)]
    token = os.urandom(8).hex()
    staged = [staged_name(token, name) for name in finals]
    index_path = os.path.join(folder, f"{prefix}.safetensors.index.json")

    def index_bytes(names: List[str]) -> bytes:
        weight_map = {t: names[i] for i, members in enumerate(groups) for t in members}
        index = {
            "metadata": {"total_size": sum(sizes.values()), **(index_metadata or {})},
            "weight_map": dict(sorted(weight_map.items())),
        }
        return (json.dumps(index, indent=2, ensure_ascii=False) + "\n").encode("utf-8")

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


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
