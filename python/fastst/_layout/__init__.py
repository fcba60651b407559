"""The checkpoint layout: suffixes, the names saves give files, which checkpoint a listing holds.

Every fact of how a checkpoint lies in a folder or under an object prefix
lives here, and every room reads it from here:

- the suffixes (:data:`WEIGHTS_SUFFIX`, :data:`INDEX_SUFFIX`; :func:`index_name`,
  and :func:`names_an_index` for a path given as an index);
- the cap on an index file's size: :func:`fastst._settings.index_cap`
  (``FASTST_INDEX_CAP``, else :data:`fastst._settings.DEFAULT_INDEX_CAP`,
  64 MiB), with every setting;
- the names a save gives its files: a shard (:func:`shard_name`, recognised by
  :func:`own_shard`), a file staged before its commit (:func:`staged_name`,
  recognised with a temporary by :data:`UNFINISHED`), a DCP output or rank file
  (:func:`output_name`, :func:`rank_file_name`; :data:`RANK_FILE`,
  :data:`MODEL_FILE`, and :data:`RANK_OBJECT`, :data:`MODEL_OBJECT` under a URL
  prefix);
- :func:`choose_checkpoint`: the one checkpoint a folder's or a prefix's
  listing holds (rule ``folder-ambiguous`` when it holds several).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
from typing import Callable, Iterable, List, Optional, Set

from .._errors import rule_error

#: A single file of tensors, and a sharded checkpoint's index.
WEIGHTS_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".safetensors.index.json"

#: The ecosystem's name of a shard: ``{prefix}-00001-of-00002.safetensors``.
_SHARD_NAME = re.compile(r"(.+)-\d{5}-of-\d{5}\.safetensors")

#: A shard name's stem with the part of one save's own that shards saved
#: to object storage carry (see :func:`shard_name`).
_SAVE_PART = re.compile(r"(.+)-[0-9a-f]{8}")

#: A file an unfinished fastst save wrote, never a checkpoint of its own: a
#: temporary file (``.<16 hex>.fastst-tmp``, where the system has no unnamed
#: ones) or a shard staged by a sharded save (:func:`staged_name`: group 1 is
#: its final name), which counts only while an index names it.
UNFINISHED = re.compile(r"\.[0-9a-f]{16}\.fastst-tmp(?:\.(.+\.safetensors))?")

#: Names the DCP writers give their files (group 1: the rank's index, if any).
RANK_FILE = re.compile(r"shard-(\d{5})-model-\d{5}-of-\d{5}\.safetensors")
MODEL_FILE = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
#: The same with or without a save's own part (:func:`output_name`), as under a URL prefix.
RANK_OBJECT = re.compile(r"shard-(\d{5})-model-(?:[0-9a-f]{8}-)?\d{5}-of-\d{5}\.safetensors")
MODEL_OBJECT = re.compile(r"model-(?:[0-9a-f]{8}-)?\d{5}-of-\d{5}\.safetensors")

#: The candidates a ``folder-ambiguous`` message names (the rest counted),
#: each cut to :data:`NAME_SHOWN` characters (a store's keys hold at most
#: 1,024 bytes; a lying server's may not).
NAMED_CANDIDATES = 10
NAME_SHOWN = 256


def index_name(prefix: str) -> str:
    """The name of the index of the checkpoint ``prefix``: ``{prefix}.safetensors.index.json``."""
    return prefix + INDEX_SUFFIX


def names_an_index(path: str) -> bool:
    """Whether the path or URL path ``path``, given by a caller, names an
    index (``*.index.json``) rather than a file of tensors."""
    return path.endswith(".index.json")


def shard_name(prefix: str, number: int, total: int, part: str = "") -> str:
    """The name of shard ``number`` of ``total`` of the checkpoint
    ``{prefix}.safetensors.index.json``: ``{prefix}-00001-of-00003.safetensors``,
    or with ``part`` (8 hex digits, one save's own, for stores that cannot
    rename) ``{prefix}-{part}-00001-of-00003.safetensors``."""
    stem = f"{prefix}-{part}" if part else prefix
    return f"{stem}-{number:05d}-of-{total:05d}.safetensors"


def shard_pattern(prefix: str) -> re.Pattern[str]:
    """Matches the names :func:`shard_name` gives the shards of ``prefix``
    (without a save's own part): what a local sharded save of it made."""
    return re.compile(re.escape(prefix) + r"-\d{5}-of-\d{5}\.safetensors")


def checkpoint_of(name: str) -> Optional[str]:
    """The prefix of the checkpoint whose shard ``name`` is by the ecosystem's
    rule (``run-20240101-00001-of-00002.safetensors``: ``run-20240101``, whose
    index is ``run-20240101.safetensors.index.json``); None for another name."""
    match = _SHARD_NAME.fullmatch(name)
    return None if match is None else match.group(1)


def own_shard(name: str, prefixes: Set[str]) -> bool:
    """Whether ``name`` is a shard's name (:func:`shard_name`, with or without
    a save's own part) of the index of one of ``prefixes``: such a file
    belongs to that checkpoint (or to a save of it that did not finish), never
    a checkpoint of its own."""
    match = _SHARD_NAME.fullmatch(name)
    if match is None:
        return False
    if match.group(1) in prefixes:
        return True
    part = _SAVE_PART.fullmatch(match.group(1))
    return part is not None and part.group(1) in prefixes


#: The longest file name the common file systems take (``NAME_MAX``), in bytes.
NAME_MAX = 255


def staged_name(token: str, final: str) -> str:
    """The name the save ``token`` (16 hex) writes the file to be named
    ``final`` under before its commit (:data:`UNFINISHED` recognises it):
    ``.<token>.fastst-tmp.<final>``, or where that would be longer than
    :data:`NAME_MAX` bytes, ``.<token>.fastst-tmp.<16 hex of the final
    name's SHA-256>.safetensors``, so that a staged name fits wherever its
    final name fits."""
    name = f".{token}.fastst-tmp.{final}"
    if len(os.fsencode(name)) <= NAME_MAX:
        return name
    digest = hashlib.sha256(os.fsencode(final)).hexdigest()[:16]
    return f".{token}.fastst-tmp.{digest}{WEIGHTS_SUFFIX}"


def output_name(index: int, last: int, part: str = "") -> str:
    """``model-00001-of-00004.safetensors``: DCP output file ``index`` of ``last``;
    with ``part`` (a save's own, under a URL prefix) ``model-<part>-00001-of-00004.safetensors``
    (:func:`shard_name`, the one rule)."""
    return shard_name("model", index, last, part)


def rank_file_name(index: int, last: int, shard: Optional[int], part: str = "") -> str:
    """The name of a DCP rank's file: :func:`output_name`, prefixed with
    ``shard-00001-`` (``shard``, counted from 1) when every rank saves its own."""
    name = output_name(index, last, part)
    return name if shard is None else f"shard-{shard:05d}-{name}"


def choose_checkpoint(
    where: str,
    names: Iterable[str],
    claimed: Callable[[str], Set[str]],
    listing: str = "folder",
) -> str:
    """The name of the one checkpoint among ``names``, the files a listing
    of ``where`` holds (a local folder's regular files, or the objects
    directly under a prefix, ``listing="prefix"``): one index, or one
    ``.safetensors`` file that is not a shard of a listed index.

    ``claimed(index)`` gives the names (in the listing's terms) the index
    ``index`` names as its shards (raising its errors). Shards named as an
    index's own (:func:`own_shard`: ``{prefix}-00001-of-00002.safetensors``
    beside ``{prefix}.safetensors.index.json``, with a save's part or
    without) belong to it even while it names their staged twins, or after
    a save was killed; unfinished files (:data:`UNFINISHED`) are nobody's.

    None is an ``IsADirectoryError`` for a folder, a ``FileNotFoundError``
    for a prefix; several, a ``FolderError`` (rule ``folder-ambiguous``)
    listing them, all of them in its ``candidates``."""
    listed = sorted(n for n in names if not UNFINISHED.fullmatch(n))
    indexes = [n for n in listed if n.endswith(INDEX_SUFFIX)]
    weights = [n for n in listed if n.endswith(WEIGHTS_SUFFIX)]
    shards: Set[str] = set()
    for index in indexes:
        shards |= claimed(index)
    prefixes = {i[: -len(INDEX_SUFFIX)] for i in indexes}
    candidates: List[str] = indexes + [
        w for w in weights if w not in shards and not own_shard(w, prefixes)
    ]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        if listing == "folder":
            raise IsADirectoryError(
                errno.EISDIR,
                f"Is a directory holding no .safetensors file and no {INDEX_SUFFIX} index",
                where,
            )
        raise FileNotFoundError(
            f"{where}: no .safetensors object and no {INDEX_SUFFIX} index under this prefix"
        )
    shown = ", ".join(
        c if len(c) <= NAME_SHOWN else c[:NAME_SHOWN] + "..." for c in candidates[:NAMED_CANDIDATES]
    )
    if len(candidates) > NAMED_CANDIDATES:
        shown += f" and {len(candidates) - NAMED_CANDIDATES:,} more"
    by = "path" if listing == "folder" else "URL"
    error = rule_error(
        "folder-ambiguous",
        where,
        f"the {listing} holds {len(candidates)} checkpoints ({shown}); "
        f"open one of them by its {by}",
    )
    error.candidates = candidates  # type: ignore[attr-defined]
    raise error
