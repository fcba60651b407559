"""Model folders: ``safe_open`` and ``load_file`` of a folder open the one checkpoint it holds.

A folder is accepted when it holds exactly one checkpoint, either

- one sharded checkpoint's index (``*.safetensors.index.json``; the
  ``.safetensors`` files it names are its shards, not separate
  checkpoints), or
- one ``.safetensors`` file that no index names (``model.safetensors``,
  ``diffusion_pytorch_model.safetensors``, ``adapter_model.safetensors``...).

Anything else is refused with a :class:`fastst.FolderError` that lists what
was found (several candidates), or an ``IsADirectoryError`` (none). The one
checkpoint found follows the link rule of shards (:func:`shard_problem`): a
symbolic link leading outside the folder (other than into the Hugging Face
cache's ``blobs``) is refused (rule ``folder-link``). An index
that cannot be read raises its error (:func:`read_index`). Files
inside sub-folders are not looked at (a diffusers pipeline folder holds one
model per sub-folder: open the sub-folder).

Every reader of an index goes through the two rules here:

- :func:`read_index` reads an index file: a regular file (opened without
  blocking) of at most :func:`index_cap` bytes, ``FASTST_INDEX_CAP`` (a size,
  :func:`fastst._settings.parse_size`) or 64 MiB (rule ``index-over-cap``; real indexes hold a
  few MB).
- :func:`shard_problem` says whether a ``weight_map`` entry names a file
  inside the checkpoint (rule ``shard-path``): a relative name, ``/``
  between folders, with no ``..`` component, NUL or backslash, whose real
  path (symbolic links resolved) is inside the index's folder, or in the
  ``blobs`` folder of the Hugging Face cache repository whose
  ``snapshots`` hold the index (the cache's own links). For an index read
  from a URL, :func:`object_problem`: the same name rules, and no URL.

:func:`placements` walks an index's entries through them, reporting each
entry refused: the first rule of the index against its shards, whose rule
set is :mod:`fastst._sources.shard_rules`.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from .._errors import rule_error
from .._layout import choose_checkpoint
from .._paths import readable
from .._settings import INDEX_CAP_ENV, index_cap


def _nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


def read_index(path: str) -> Tuple[bytes, Dict[str, Any]]:
    """The bytes of the index file ``path`` and its JSON object, whose
    ``weight_map`` is an object. Raises ``FileAccessError`` (rule
    ``not-regular-file``) for a FIFO, socket or device, without blocking;
    ``ShardIndexError`` for a file above :func:`index_cap` (read no
    further), text that is not UTF-8 JSON, or another shape."""
    name = readable(path)
    cap = index_cap()
    with open(path, "rb", opener=_nonblocking) as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise rule_error("not-regular-file", name, "the index is not a regular file")
        raw = fh.read(cap + 1) if st.st_size <= cap else b""
        if st.st_size > cap or len(raw) > cap:
            raise rule_error(
                "index-over-cap",
                name,
                f"the index holds more than {cap:,} bytes, the cap on index files; "
                f"set {INDEX_CAP_ENV} to a larger size (e.g. 256MiB) to read it",
            )
    return raw, parse_index(raw, name)


def parse_index(raw: bytes, name: str) -> Dict[str, Any]:
    """The JSON object of the index bytes ``raw`` (named ``name``), whose
    ``weight_map`` is an object; else the ``ShardIndexError`` of
    :func:`read_index`."""
    try:
        index = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise rule_error("index-json", name, f"index is not valid UTF-8 JSON: {exc}") from None
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        raise rule_error("index-shape", name, 'index must be an object with a "weight_map" object')
    return index


def _cache_blobs(folder: str) -> Optional[str]:
    """The ``blobs`` folder of the Hugging Face cache repository whose
    ``snapshots/<revision>`` holds the real folder ``folder``, if any."""
    parts = folder.split(os.sep)
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "snapshots":
            return os.sep.join(parts[:i] + ["blobs"])
    return None


def _inside(path: str, folder: str) -> bool:
    return path != folder and os.path.commonpath([path, folder]) == folder


def _outside_by_name(shard: str) -> bool:
    return os.path.isabs(shard) or ".." in shard.split("/")


def name_problem(shard: Any) -> Optional[Tuple[str, str]]:
    """``(rule, why)`` when ``shard`` is not a relative name without
    ``..``, NUL or backslash (what any index entry must be), else None."""
    if not isinstance(shard, str) or not shard:
        return "index-shape", "shard must be a file name"
    if "\0" in shard or "\\" in shard:
        return "shard-path", f"shard {shard!r} holds a NUL or a backslash"
    if _outside_by_name(shard):
        return "shard-path", f"shard {shard!r} is outside the index's folder"
    return None


def shard_file(folder: str, shard: Any) -> Optional[str]:
    """The file the ``weight_map`` entry ``shard`` of an index in ``folder``
    names (normalized), or None when the name leads outside or is not a
    name; symbolic links are not looked at (which files an index claims)."""
    if not isinstance(shard, str) or not shard or _outside_by_name(shard):
        return None
    return os.path.normpath(os.path.join(folder, shard))


def shard_problem(folder: str, shard: Any) -> Optional[Tuple[str, str]]:
    """``(rule, why)`` when the ``weight_map`` entry ``shard`` of an index
    in ``folder`` does not name a file inside the checkpoint, else None:
    ``index-shape`` when it is not a non-empty string, ``shard-path`` when
    it is absolute, holds a ``..`` component, a NUL or a backslash, or
    leads outside ``folder`` through a symbolic link (see the module's
    documentation). A shard that does not exist is not a problem here."""
    problem = name_problem(shard)
    if problem:
        return problem
    root = os.path.realpath(folder)
    real = os.path.realpath(os.path.join(root, shard))
    if not _inside(real, root) and os.path.dirname(real) != _cache_blobs(root):
        shown = readable(real)
        return "shard-path", (
            f"shard {shard!r} is outside the index's folder (a symbolic link leads to {shown!r})"
        )
    return None


def object_problem(shard: Any) -> Optional[Tuple[str, str]]:
    """:func:`shard_problem` for an index in an object store or on an HTTP
    server: :func:`name_problem`, and no URL (an object has no links to
    follow; the name is percent-encoded under the index's prefix)."""
    problem = name_problem(shard)
    if problem is None and "://" in shard:
        return "shard-path", f"shard {shard!r} is a URL, not a name beside the index"
    return problem


def placements(
    folder: Optional[str],
    weight_map: Dict[Any, Any],
    refused: Callable[[str, str, str, str], None],
) -> Dict[str, List[str]]:
    """Each shard the ``weight_map`` of an index in ``folder`` names, in
    order, with the tensors it places there. An entry :func:`shard_problem`
    refuses (:func:`object_problem` for a remote index, ``folder`` None) is
    left out and passed to ``refused(rule, message, tensor, why)``: the
    message is ``tensor 'name': why``. The first rule of the index against
    its shards (:mod:`fastst._sources.shard_rules`)."""
    shards: Dict[str, List[str]] = {}
    for tensor, shard in weight_map.items():
        if not (isinstance(shard, str) and shard in shards):
            problem = object_problem(shard) if folder is None else shard_problem(folder, shard)
            if problem:
                rule, why = problem
                refused(rule, f"tensor {tensor!r}: {why}", tensor, why)
                continue
            shards[shard] = []
        shards[shard].append(tensor)
    return shards


def index_shards(
    name: str,
    folder: Optional[str],
    weight_map: Dict[Any, Any],
) -> Dict[str, List[str]]:
    """:func:`placements`, raising the ``ShardIndexError`` of the first
    entry refused (naming the index ``name`` and the tensor)."""

    def refuse(rule: str, message: str, tensor: str, _why: str) -> None:
        raise rule_error(rule, name, message, tensor)

    return placements(folder, weight_map, refuse)


def claimed_shards(index_path: str) -> Set[str]:
    """The files (normalized paths) the index ``index_path`` claims as its
    shards, by name (:func:`shard_file`): a folder scan does not list them
    on their own. Raises :func:`read_index`'s errors."""
    index = read_index(index_path)[1]
    folder = os.path.dirname(index_path)
    named = (shard_file(folder, s) for s in index["weight_map"].values())
    return {path for path in named if path}


def checkpoint_in(folder: str) -> str:
    """The path of the one checkpoint (index or single file) in ``folder``
    (:func:`fastst._layout.choose_checkpoint`, the one rule), which must
    not be a symbolic link leading outside it (rule ``folder-link``)."""
    try:
        entries = os.listdir(folder)
    except OSError as exc:
        raise FileNotFoundError(f"No such file or directory: {folder}") from exc
    files = [e for e in entries if os.path.isfile(os.path.join(folder, e))]
    root = os.path.normpath(folder)

    def claimed(index: str) -> Set[str]:
        return {os.path.relpath(p, root) for p in claimed_shards(os.path.join(folder, index))}

    chosen = choose_checkpoint(folder, files, claimed)
    if shard_problem(folder, chosen) is not None:
        shown = readable(os.path.realpath(os.path.join(folder, chosen)))
        raise rule_error(
            "folder-link",
            folder,
            f"{chosen!r} is a symbolic link leading outside the folder (to {shown!r}); "
            "open the file by its own path to read it",
        )
    return os.path.join(folder, chosen)
