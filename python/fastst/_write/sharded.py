"""Sharded checkpoints written: tensors split into shards, plus the index naming them.

Sharded checkpoints written: tensors split into shards of at most ``max_shard_size`` bytes, plus
the index naming them."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, Optional

from .._settings import parse_size
from .atomic import replace_bytes

__all__ = ["plan_shards", "write_sharded"]


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
    save_one: Any,
    *,
    max_shard_size: Any = "5GB",
    metadata: Optional[Dict[str, str]] = None,
    prefix: str = "model",
    index_metadata: Optional[Dict[str, Any]] = None,
) -> str:
    """Writes ``tensors`` as shards ``{prefix}-00001-of-0000N.safetensors``
    plus ``{prefix}.safetensors.index.json`` into ``folder``; returns the
    index's path. ``save_one(subset, path, metadata)`` writes one shard;
    ``index_metadata`` joins ``total_size`` in the index's ``metadata``.
    Each file is replaced atomically, the index last; shards of an earlier
    save under the same prefix that the new index no longer names are
    removed afterwards."""
    limit = parse_size(max_shard_size, "max_shard_size")
    if limit <= 0:
        raise ValueError(f"max_shard_size must be positive, got {max_shard_size!r}")
    folder = os.fsdecode(os.fspath(folder))
    os.makedirs(folder, exist_ok=True)
    groups = plan_shards(sizes, limit)
    total = len(groups)
    weight_map: Dict[str, str] = {}
    written = set()
    for i, names in enumerate(groups, start=1):
        shard = f"{prefix}-{i:05d}-of-{total:05d}.safetensors"
        save_one({n: tensors[n] for n in names}, os.path.join(folder, shard), metadata)
        written.add(shard)
        for n in names:
            weight_map[n] = shard
    index = {
        "metadata": {"total_size": sum(sizes.values()), **(index_metadata or {})},
        "weight_map": dict(sorted(weight_map.items())),
    }
    index_path = os.path.join(folder, f"{prefix}.safetensors.index.json")
    text = json.dumps(index, indent=2, ensure_ascii=False) + "\n"
    replace_bytes(index_path, text.encode("utf-8"))
    pattern = re.compile(re.escape(prefix) + r"-\d{5}-of-\d{5}\.safetensors$")
    for entry in os.listdir(folder):
        if pattern.match(entry) and entry not in written:
            os.remove(os.path.join(folder, entry))
    return index_path
