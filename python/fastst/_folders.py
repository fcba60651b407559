"""Model folders: ``safe_open(folder)`` and ``load_file(folder)`` open the
one checkpoint a folder holds.

A folder is accepted when it holds exactly one checkpoint, either

- one sharded checkpoint's index (``*.safetensors.index.json``; the
  ``.safetensors`` files it names are its shards, not separate
  checkpoints), or
- one ``.safetensors`` file that no index names (``model.safetensors``,
  ``diffusion_pytorch_model.safetensors``, ``adapter_model.safetensors``...).

Anything else is refused with a :class:`fastst.FolderError` that lists what
was found (several candidates), or an ``IsADirectoryError`` (none). Files
inside sub-folders are not looked at (a diffusers pipeline folder holds one
model per sub-folder: open the sub-folder).
"""

from __future__ import annotations

import errno
import json
import os
from typing import List, Set

from ._errors import rule_error

INDEX_SUFFIX = ".safetensors.index.json"
WEIGHTS_SUFFIX = ".safetensors"


def _shards_named_by(index_path: str) -> Set[str]:
    """The shard file names an index lists (empty when it cannot be read:
    opening it later reports why)."""
    try:
        with open(index_path, "rb") as fh:
            index = json.loads(fh.read().decode("utf-8"))
    except (OSError, ValueError):
        return set()
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        return set()
    return {shard for shard in weight_map.values() if isinstance(shard, str)}


def checkpoint_in(folder: str) -> str:
    """The path of the one checkpoint (index or single file) in ``folder``."""
    try:
        entries = sorted(os.listdir(folder))
    except OSError as exc:
        raise FileNotFoundError(f"No such file or directory: {folder}") from exc

    def is_file(name: str) -> bool:
        return os.path.isfile(os.path.join(folder, name))

    indexes = [e for e in entries if e.endswith(INDEX_SUFFIX) and is_file(e)]
    weights = [e for e in entries if e.endswith(WEIGHTS_SUFFIX) and is_file(e)]
    shards: Set[str] = set()
    for index in indexes:
        shards |= _shards_named_by(os.path.join(folder, index))
    candidates: List[str] = indexes + [w for w in weights if w not in shards]
    if len(candidates) == 1:
        return os.path.join(folder, candidates[0])
    if not candidates:
        raise IsADirectoryError(
            errno.EISDIR,
            f"Is a directory holding no .safetensors file and no {INDEX_SUFFIX} index",
            folder,
        )
    listed = ", ".join(candidates)
    error = rule_error(
        "folder-ambiguous",
        folder,
        f"the folder holds {len(candidates)} checkpoints ({listed}); open one of them by its path",
    )
    error.candidates = candidates  # type: ignore[attr-defined]
    raise error
