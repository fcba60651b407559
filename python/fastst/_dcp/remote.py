"""DCP checkpoints under a URL prefix: files named with a save's own part, the commit object last.

Object storage cannot rename, so a save of
:class:`fastst.torch.dcp.StorageWriter` to a URL prefix
(``s3://bucket/run/step-100/``) does not stage and link as a local one
(:mod:`fastst._dcp.commit`): it commits as a sharded save to a
prefix does, through the one sequence of
:class:`fastst._write.sharded.UrlCommit`:

1. the coordinator reads the names the current commit object holds and
   picks this save's own part, 8 hex digits in none of them; every rank
   learns it from the save plan;
2. every rank uploads its files (multipart uploads streamed from its
   tensors) under names carrying the part:
   ``shard-00001-model-<part>-00001-of-00002.safetensors`` when every rank
   saves its own (``save_distributed``),
   ``model-<part>-00001-of-00002.safetensors`` otherwise; nothing a
   reader follows changes;
3. once every rank's uploads completed (``finish`` runs on the coordinator
   only then), the coordinator writes the commit object in one request:
   :data:`RECORD` naming the rank files (and the part) for a
   ``save_distributed`` save, the Hugging Face index
   ``model.safetensors.index.json`` naming the files otherwise (what
   ``fastst.safe_open`` and the loaders of a sharded checkpoint read);
4. then it deletes the files the previous commit object of the kind named
   that the new one does not, and the strays of saves that never committed
   (files of the kind with a part of their own that no commit object names).

fastst's reader and consolidation take the files the commit objects name
(:func:`checkpoint_urls`), so a rank that fails or is killed before step 3
leaves the previous checkpoint loadable and no partial new one: the files
uploaded so far are strays (an upload cut short stays pending, invisible,
until the store's lifecycle rule aborts it), deleted by the next save. A
prefix without commit objects (written by torch's writer through fsspec)
is listed instead: its ``.safetensors`` objects are the checkpoint, those
with a save's part aside. Readers that list the prefix themselves (torch's)
also see the strays of a killed save until the next save deletes them.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, Optional

from .. import _fastst
from .._errors import SafetensorError, rule_error
from .._fastst.read import DEFAULT_HEADER_CAP, RawFile
from .._layout import MODEL_OBJECT, RANK_OBJECT
from .._settings import index_cap
from .._sources import remote as _remote
from .._write.remote import is_url
from .._write.sharded import UrlCommit
from .._write.sharded import forget as _forget
from . import commit as dcp_commit

__all__ = [
    "RECORD",
    "prefix",
    "object_url",
    "forget",
    "begin",
    "commit",
    "checkpoint_urls",
    "open_checkpoint",
    "reopen",
]

#: The commit object of a ``save_distributed`` save under a URL prefix.
RECORD = "fastst-dcp.json"
_FORMAT = "fastst-dcp"

#: The commit object of each kind of save, and the names of the files of the kind.
_COMMIT_OBJECT = {"rank": RECORD, "model": dcp_commit.INDEX_NAME}
_FAMILY = {"rank": RANK_OBJECT, "model": MODEL_OBJECT}

#: Files named with a save's own part (:func:`fastst._layout.output_name`).
_PARTED = re.compile(r"(?:shard-\d{5}-)?model-[0-9a-f]{8}-\d{5}-of-\d{5}\.safetensors")


def prefix(url: str) -> str:
    """``url`` ending in ``/``: the prefix the checkpoint's objects are under."""
    return url if url.endswith("/") else url + "/"


def object_url(base: str, name: str) -> str:
    """The URL of the file ``name`` under the prefix ``base``."""
    return _remote.shard_url(base, name)


def forget(base: str, names: List[str], storage_options: Optional[Mapping[str, Any]]) -> None:
    """Deletes the files ``names`` under ``base`` that a failed save uploaded (no commit
    object names them), as a clean-up: a failure leaves them to the next save."""
    for name in names:
        _forget(object_url(base, name), storage_options)


def _read(url: str, opts: _remote.Options) -> Optional[bytes]:
    """The bytes of the small object ``url`` (at most the cap on index files), or None
    when there is none."""
    name = _remote.display(url)
    try:
        raw = _fastst.remote.read_remote(url, name, opts, index_cap())
    except FileNotFoundError:
        return None
    if raw is None:
        raise rule_error(
            "index-over-cap",
            name,
            f"the object holds more than {index_cap():,} bytes, the cap on index files; "
            "set FASTST_INDEX_CAP to a larger size (e.g. 256MiB) to read it",
        )
    return raw


def _names(where: str, names: Any) -> List[str]:
    """``names`` checked as a commit object's list of files: plain ``.safetensors``
    names (no folder, nothing hidden), at most as many as a listing reads."""
    if (
        not isinstance(names, list)
        or len(names) > _remote.LIST_CAP
        or not all(dcp_commit.plain_name(n) for n in names)
    ):
        raise rule_error(
            "dcp-sharding-info",
            where,
            "the commit object does not name the checkpoint's files as fastst writes them "
            f"(a list of at most {_remote.LIST_CAP:,} plain .safetensors names)",
        )
    return sorted(set(names))


def _record_files(base: str, opts: _remote.Options) -> Optional[List[str]]:
    """The files :data:`RECORD` under ``base`` names, or None when there is none."""
    url = base + RECORD
    raw = _read(url, opts)
    if raw is None:
        return None
    where = _remote.display(url)
    try:
        record = json.loads(raw.decode("utf-8"))
    except ValueError:
        record = None
    if not isinstance(record, dict) or record.get("format") != _FORMAT:
        raise rule_error("dcp-sharding-info", where, "the commit record is not one fastst wrote")
    return _names(where, record.get("files"))


def _index_files(base: str, opts: _remote.Options) -> Optional[List[str]]:
    """The files the index under ``base`` names, or None when there is none."""
    url = base + dcp_commit.INDEX_NAME
    try:
        _, index = _remote.read_index(url, opts)
    except FileNotFoundError:
        return None
    where = _remote.display(url)
    return _names(where, list(index["weight_map"].values()))


def begin(base: str, kind: str, storage_options: Optional[Mapping[str, Any]]) -> UrlCommit:
    """Step 1 (see the module's documentation), on the coordinator: the save of ``kind``
    (``"rank"`` or ``"model"``) under the prefix ``base``, with its part."""
    opts = _remote.options(storage_options)
    try:
        old = (_record_files if kind == "rank" else _index_files)(base, opts) or []
    except SafetensorError:  # not one of ours: the new commit object replaces it
        old = []
    return UrlCommit(base, _COMMIT_OBJECT[kind], old, storage_options)


def commit(save: UrlCommit, kind: str, names: List[str], index: Optional[bytes]) -> str:
    """Steps 3 and 4, on the coordinator once every rank's uploads completed: the files
    ``names`` become the checkpoint's files of ``kind``; ``index`` (bytes, naming them)
    is the commit object of a ``"model"`` save. Returns the commit object's URL."""
    if kind == "rank":
        body = {"format": _FORMAT, "part": save.part, "files": sorted(names)}
        data = (json.dumps(body, indent=2) + "\n").encode("utf-8")
    else:
        assert index is not None
        data = index
    family = _FAMILY[kind]
    return save.commit(data, names, lambda name: family.fullmatch(name) is not None)


def checkpoint_urls(base: str, opts: _remote.Options) -> List[str]:
    """URLs of the ``.safetensors`` objects making up the checkpoint under the prefix
    ``base``, sorted by name: those the commit objects name (:data:`RECORD`, the index),
    else those a listing of the prefix finds (saves' strays aside)."""
    record = _record_files(base, opts)
    index = _index_files(base, opts)
    if record is not None or index is not None:
        names = sorted(set(record or []) | set(index or []))
    else:
        listed = _fastst.remote.list_remote(base, _remote.display(base), opts, _remote.LIST_CAP)
        if listed is None:
            raise rule_error(
                "folder-over-cap",
                _remote.display(base),
                f"the prefix holds more than {_remote.LIST_CAP:,} objects, the most one "
                "listing reads",
            )
        names = sorted(
            n
            for n in listed
            if n.endswith(".safetensors") and dcp_commit.plain_name(n) and not _PARTED.fullmatch(n)
        )
    return [_remote.shard_url(base, n) for n in names]


def _open_urls(urls: List[str], opts: _remote.Options) -> Dict[str, RawFile]:
    """The objects ``urls`` opened (their headers read and checked), several at once."""
    got = _fastst.remote.open_urls(
        urls,
        [_remote.display(u) for u in urls],
        opts,
        DEFAULT_HEADER_CAP,
        _remote.SHARDS_AT_ONCE,
    )
    out: Dict[str, RawFile] = {}
    failure: Optional[BaseException] = None
    for url, item in zip(urls, got, strict=False):
        if isinstance(item, RawFile):
            out[url] = item
        elif failure is None:
            failure = item if isinstance(item, BaseException) else None
    if failure is None and len(out) < len(urls):
        failure = RuntimeError(f"{_remote.display(urls[len(out)])}: not opened")
    if failure is not None:
        for raw in out.values():
            raw.close()
        raise failure
    return out


def open_checkpoint(
    where: str, storage_options: Optional[Mapping[str, Any]], backend: str = "mmap"
) -> Dict[str, RawFile]:
    """The files of the checkpoint at ``where`` opened, by path or URL (the names its
    chunks record): under a URL prefix those :func:`checkpoint_urls` gives, in a local
    folder :func:`fastst._dcp.commit.checkpoint_files`' (read with
    ``backend``). None is ``FileNotFoundError``."""
    if is_url(where):
        base = prefix(where)
        keys = checkpoint_urls(base, _remote.options(storage_options))
        if not keys:
            raise FileNotFoundError(f"{_remote.display(base)}: no checkpoint under this prefix")
        return _open_urls(keys, _remote.options(storage_options))
    paths = dcp_commit.checkpoint_files(where)
    if not paths:
        raise FileNotFoundError(f"{where}: no .safetensors files")
    return dcp_commit.open_files(paths, backend)


def reopen(key: str, storage_options: Optional[Mapping[str, Any]]) -> RawFile:
    """The file ``key`` (a path or URL :func:`open_checkpoint` gave) opened again."""
    if is_url(key):
        return _open_urls([key], _remote.options(storage_options))[key]
    return dcp_commit.open_files([key])[key]
