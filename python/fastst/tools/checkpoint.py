"""Sharded checkpoints (an ``*.index.json`` and its shards, or the folder
holding it) as wholes, for :mod:`fastst.tools.inspect` and the ``fastst`` command:
which inputs are checkpoints, their totals, per-shard hashes and one digest,
and the index verified against its shards (leniently, as findings)."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, Iterable, Iterator, List, Optional, Set, Tuple, Union, cast

from .. import _fastst
from .._errors import SafetensorError, ShardIndexError
from .._fastst import DEFAULT_HEADER_CAP
from .._folders import INDEX_SUFFIX, claimed_shards, index_shards, read_index, shard_problem
from .._paths import progress_label, readable
from .._sharded import ShardedFile
from . import results
from .walk import walk

PathLike = Union[str, "os.PathLike[str]"]
Finding = Dict[str, Any]

_SEVERITIES = ("info", "low", "medium", "high", "critical")


def _path(path: PathLike) -> str:
    p = os.fspath(path)
    return os.fsdecode(p) if isinstance(p, bytes) else p


def _hash_file(path: str, progress: bool = False, **options: Any) -> Dict[str, Any]:
    out = dict(_fastst.hash_file(path, progress=progress_label(path, progress), **options))
    out["path"] = path
    return out


def _verify_file(path: str, progress: bool = False, **options: Any) -> Dict[str, Any]:
    out = dict(_fastst.verify_file(path, progress=progress_label(path, progress), **options))
    out["path"] = path
    return out


def _read_metadata(path: str, header_cap: int) -> Optional[Dict[str, str]]:
    pairs = _fastst.read_metadata(path, header_cap=header_cap)
    if pairs is None:
        return None
    out: Dict[str, str] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def iter_inputs(paths: Iterable[PathLike]) -> Iterator[Tuple[str, str]]:
    """``(kind, path)`` for each input: ``("checkpoint", index)`` for an
    ``*.index.json`` file and for each index found in a folder (the shards
    it names are then not listed on their own), ``("file", path)`` for
    every other ``*.safetensors`` file under a folder (recursively, sorted)
    and for every other path given (missing ones included, so that opening
    them reports the error), and ``("too-deep", folder)`` after the rest of
    a folder for the first folder under it nested too deep to scan
    (:func:`fastst.tools.walk.walk`)."""
    for raw in paths:
        path = _path(raw)
        if not os.path.isdir(path):
            kind = "checkpoint" if path.endswith(".index.json") else "file"
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


def _strict_index(index_path: str, header_cap: int) -> Tuple[List[str], Dict[str, Any], bytes]:
    """Shard names (sorted), the index's metadata and its bytes, after the
    reader checked the index against its shards (raising its errors, with
    their rule ids, when they disagree)."""
    raw, index = read_index(index_path)
    ShardedFile(index_path, "mmap", header_cap, index).close()
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
    carry the shard file as a sixth item. ``header_len`` and ``data_start``
    are None. Raises the reader's errors when the index and shards disagree.
    """
    path = _path(index_path)
    names, index_meta, _raw = _strict_index(path, header_cap)
    folder = os.path.dirname(os.path.abspath(path))
    shards = []
    table: List[Tuple[str, str, List[int], int, int, str]] = []
    parts = []
    metadata = None
    file_len = os.stat(path).st_size
    for i, name in enumerate(names):
        info = _fastst.inspect_file(
            os.path.join(folder, name), table=tensors, header_cap=header_cap
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
        "path": path,
        "kind": "checkpoint",
        "file_len": file_len,
        "tensors": sum(s["tensors"] for s in shards),
        "parameters": sum(s["parameters"] for s in shards),
        "header_len": None,
        "data_start": None,
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
    folder = os.path.dirname(os.path.abspath(path))
    index_sha = hashlib.sha256(raw).hexdigest()
    shards = []
    per_tensor: Optional[Dict[str, str]] = {} if tensors else None
    for name in names:
        h = _hash_file(
            os.path.join(folder, name),
            tensors=tensors,
            header_cap=header_cap,
            threads=threads,
            progress=progress,
        )
        h["file"] = name
        shards.append(h)
        if per_tensor is not None and h.get("tensors"):
            per_tensor.update(h["tensors"])
    listing = [(os.path.basename(path), index_sha)] + [(s["file"], s["sha256"]) for s in shards]
    hashes = {
        "path": path,
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
    index = read_index(path)[1]
    folder = os.path.dirname(os.path.abspath(path))
    names = sorted(index_shards(readable(path), folder, index["weight_map"]))
    meta = index.get("metadata")
    index_meta = meta if isinstance(meta, dict) else {}
    if not names:
        return None, index_meta
    return _read_metadata(os.path.join(folder, names[0]), header_cap), index_meta


def _severity(rule: str) -> str:
    for r in _fastst.rule_catalogue():
        if r["id"] == rule:
            return r["severity"]
    raise ValueError(f"no rule {rule!r} in the catalogue")


def _cfinding(
    rule: str,
    message: str,
    *,
    shard: Optional[str] = None,
    tensor: Optional[str] = None,
    count: Optional[int] = None,
) -> Finding:
    return {
        "rule": rule,
        "severity": _severity(rule),
        "message": message,
        "tensor": tensor,
        "key": None,
        "offset": None,
        "length": None,
        "count": count,
        "shard": shard,
    }


def _q(text: Any) -> str:
    """``text`` quoted as a JSON string (controls escaped)."""
    return json.dumps(text, ensure_ascii=False)


def _names(names: List[str]) -> str:
    shown = ", ".join(_q(n) for n in names[:5])
    return shown + (f" and {len(names) - 5:,} more" if len(names) > 5 else "")


def _n(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def verify_checkpoint(
    index_path: PathLike,
    *,
    values: bool = False,
    header_cap: int = DEFAULT_HEADER_CAP,
    threads: int = 0,
    progress: bool = False,
) -> results.CheckpointVerification:
    """Verifies a sharded checkpoint as a whole: the index, every shard
    (:func:`fastst.tools.inspect.verify_file`, each finding tagged with its ``shard``) and the
    index against the shards: ``index-json``, ``index-shape``,
    ``shard-path``, ``shard-missing``, ``shard-lacks-tensor``,
    ``shard-extra-tensor``, ``shard-duplicate-tensor`` and
    ``index-total-size`` findings.

    Returns the keys of :func:`fastst.tools.inspect.verify_file` (``file_len`` and ``tensors``
    summed, ``header_len`` None) plus ``kind`` (``"checkpoint"``) and
    ``shards`` (``file``, ``accepted``, ``complete``, ``findings`` count
    each); ``accepted`` says whether ``safe_open`` accepts the checkpoint.
    """
    path = _path(index_path)
    findings: List[Finding] = []
    report: Dict[str, Any] = {
        "path": path,
        "kind": "checkpoint",
        "file_len": os.stat(path).st_size,
        "header_len": None,
        "tensors": 0,
        "accepted": False,
        "complete": False,
        "values_checked": 0 if values else None,
        "findings": findings,
        "shards": [],
    }
    try:
        index = read_index(path)[1]
    except ShardIndexError as exc:
        text, name = str(exc), f"{exc.filename}: "
        findings.append(_cfinding(str(exc.rule), text.removeprefix(name)))
        return cast(results.CheckpointVerification, report)
    folder = os.path.dirname(os.path.abspath(path))
    placed: Dict[str, List[str]] = {}
    complete = True
    for tensor, shard in index["weight_map"].items():
        known = isinstance(shard, str) and shard in placed
        problem = None if known else shard_problem(folder, shard)
        if problem:
            message = f"tensor {_q(tensor)}: {problem[1]}"
            findings.append(_cfinding(problem[0], message, tensor=tensor))
            complete = False
            continue
        placed.setdefault(shard, []).append(tensor)
    holders: Dict[str, List[str]] = {}
    data_bytes = 0
    for shard, listed in placed.items():
        shard_path = os.path.join(folder, shard)
        if not os.path.exists(shard_path):
            findings.append(
                _cfinding(
                    "shard-missing",
                    f"shard {_q(shard)} listed in the index is missing "
                    f"({_n(len(listed), 'tensor')} placed in it)",
                    shard=shard,
                    count=len(listed),
                )
            )
            complete = False
            continue
        sub = _verify_file(
            shard_path, values=values, header_cap=header_cap, threads=threads, progress=progress
        )
        for f in sub["findings"]:
            f["shard"] = shard
            findings.append(f)
        report["file_len"] += sub["file_len"]
        report["tensors"] += sub["tensors"] or 0
        if values and sub["values_checked"] is not None:
            report["values_checked"] += sub["values_checked"]
        report["shards"].append(
            {
                "file": shard,
                "accepted": sub["accepted"],
                "complete": sub["complete"],
                "findings": len(sub["findings"]),
            }
        )
        if not sub["accepted"]:
            complete = complete and sub["complete"]
            continue
        info = _fastst.inspect_file(shard_path, table=True, header_cap=header_cap)
        present = [row[0] for row in info["table"]]
        data_bytes += info["data_len"] - 0
        for name in present:
            holders.setdefault(name, []).append(shard)
        lacking = sorted(set(listed) - set(present))
        if lacking:
            findings.append(
                _cfinding(
                    "shard-lacks-tensor",
                    f"{_n(len(lacking), 'tensor')} the index places in this shard "
                    f"{'are' if len(lacking) != 1 else 'is'} not in it: {_names(lacking)}",
                    shard=shard,
                    tensor=lacking[0],
                    count=len(lacking),
                )
            )
    weight_map = index["weight_map"]
    for shard_entry in report["shards"]:
        shard = shard_entry["file"]
        extra = sorted(
            n for n, where in holders.items() if shard in where and weight_map.get(n) != shard
        )
        duplicated = [n for n in extra if len(holders[n]) > 1]
        only_here = [n for n in extra if len(holders[n]) == 1]
        if only_here:
            findings.append(
                _cfinding(
                    "shard-extra-tensor",
                    f"{_n(len(only_here), 'tensor')} in this shard the index does not place "
                    f"in it: {_names(only_here)}",
                    shard=shard,
                    tensor=only_here[0],
                    count=len(only_here),
                )
            )
        for name in duplicated:
            others = [s for s in holders[name] if s != shard]
            findings.append(
                _cfinding(
                    "shard-duplicate-tensor",
                    f"tensor {_q(name)} is also stored in {', '.join(_q(o) for o in others)}; "
                    f"the index places it in {_q(weight_map.get(name))}",
                    shard=shard,
                    tensor=name,
                )
            )
    meta = index.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if (
        complete
        and isinstance(total, int)
        and not isinstance(total, bool)
        and all(s["accepted"] for s in report["shards"])
    ):
        tensor_bytes = _tensor_bytes(folder, report["shards"], header_cap)
        if total != tensor_bytes:
            findings.append(
                _cfinding(
                    "index-total-size",
                    f"the index's metadata.total_size is {total:,} but the shards' tensors "
                    f"hold {_n(tensor_bytes, 'byte')}",
                )
            )
    report["complete"] = complete
    try:
        ShardedFile(path, "mmap", header_cap, index).close()
        report["accepted"] = True
    except (OSError, ValueError, KeyError, SafetensorError):
        report["accepted"] = False
    findings.sort(key=lambda f: -_SEVERITIES.index(f["severity"]))
    return cast(results.CheckpointVerification, report)


def _tensor_bytes(folder: str, shards: List[Dict[str, Any]], header_cap: int) -> int:
    total = 0
    for s in shards:
        info = _fastst.inspect_file(
            os.path.join(folder, s["file"]), table=False, header_cap=header_cap
        )
        total += sum(d["bytes"] for d in info["by_dtype"])
    return total
