"""A sharded checkpoint's index verified against its shards, leniently, as findings.

Every shard is verified (:func:`fastst.tools.inspect.verify_file`); the
findings are every problem the reader's rule set
(:func:`fastst._sources.shard_rules.check_shards`) reports, where the reader
raises the first, and ``index-total-size``."""

from __future__ import annotations

import json
import os
from functools import partial
from typing import Any, Collection, Dict, List, Union, cast

from .. import _fastst
from .._errors import SafetensorError, ShardIndexError
from .._fastst.read import DEFAULT_HEADER_CAP
from .._paths import shown
from .._sources import remote as _remote
from .._sources.shard_rules import ShardProblem, Table, check_shards
from . import results
from .checkpoint import (
    PathLike,
    _index,
    _open_checkpoint,
    _path,
    _verify_file,
    shard_location,
)

Finding = Dict[str, Any]


#: A checkpoint's finding: its ``shard`` is always said (None: the index).
_cfinding = partial(results.finding, shard=None)


def _tensors_finding(rule: str, shard: str, names: List[str], claim: str) -> Finding:
    """A finding about the tensors ``names`` of ``shard``: how many, the
    ``claim`` about them, the first few names."""
    message = f"{_n(len(names), 'tensor')} {claim}: {_names(names)}"
    return _cfinding(rule, message, shard=shard, tensor=names[0], count=len(names))


def _q(text: Any) -> str:
    """``text`` quoted as a JSON string (controls escaped)."""
    return json.dumps(text, ensure_ascii=False)


def _names(names: List[str]) -> str:
    shown = ", ".join(_q(n) for n in names[:5])
    return shown + (f" and {len(names) - 5:,} more" if len(names) > 5 else "")


def _n(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _problem_finding(problem: ShardProblem) -> Finding:
    """The finding of a problem the reader's rule set reports."""
    rule, shard, names = problem.rule, problem.shard, list(problem.tensors)
    if shard is None:  # an entry naming no usable shard
        return _cfinding(rule, f"tensor {_q(names[0])}: {problem.why}", tensor=names[0])
    if rule == "shard-missing":
        message = (
            f"shard {_q(shard)} listed in the index is missing "
            f"({_n(len(names), 'tensor')} placed in it)"
        )
        return _cfinding(rule, message, shard=shard, count=len(names))
    if rule == "shard-lacks-tensor":
        are = "are" if len(names) != 1 else "is"
        claim = f"the index places in this shard {are} not in it"
        return _tensors_finding(rule, shard, names, claim)
    if rule == "shard-extra-tensor":
        claim = "in this shard the index does not place in it"
        return _tensors_finding(rule, shard, names, claim)
    message = (
        f"tensor {_q(names[0])} is also stored in {', '.join(_q(o) for o in problem.others)}; "
        f"the index places it in {_q(problem.placed)}"
    )
    return _cfinding(rule, message, shard=shard, tensor=names[0])


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
    A truncated shard's findings are summed up in one, as
    :func:`fastst.tools.inspect.verify_file` does. ``index_path`` may be
    a URL (the shards are then the objects it names under its prefix).
    """
    path = _path(index_path)
    url = _remote.is_url(path)
    findings: List[Finding] = []
    report: Dict[str, Any] = {
        "path": shown(path),
        "kind": "checkpoint",
        "file_len": 0 if url else os.stat(path).st_size,
        "header_len": None,
        "tensors": 0,
        "accepted": False,
        "complete": False,
        "values_checked": 0 if values else None,
        "findings": findings,
        "shards": [],
    }
    try:
        raw, index = _index(path)
    except ShardIndexError as exc:
        text, name = str(exc), f"{exc.filename}: "
        findings.append(_cfinding(str(exc.rule), text.removeprefix(name)))
        return cast(results.CheckpointVerification, report)
    report["file_len"] = len(raw)
    folder = None if url else os.path.dirname(os.path.abspath(path))
    weight_map = index["weight_map"]
    complete = True

    def collect(problem: ShardProblem) -> None:
        nonlocal complete
        findings.append(_problem_finding(problem))
        if problem.shard is None or problem.rule == "shard-missing":
            complete = False  # tensors left unchecked

    def table(shard: str, listed: List[str]) -> Union[Collection[str], Table]:
        nonlocal complete
        shard_path = shard_location(path, shard)
        try:
            sub = (
                _verify_file(
                    shard_path,
                    values=values,
                    header_cap=header_cap,
                    threads=threads,
                    progress=progress,
                )
                if url or os.path.exists(shard_path)
                else None
            )
        except FileNotFoundError:
            if not url:
                raise
            sub = None
        except ValueError as exc:  # a name no object can have (control characters)
            if not url:
                raise
            message = f"shard {_q(shard)} cannot be an object's name: {exc}"
            findings.append(_cfinding("shard-path", message, shard=shard, count=len(listed)))
            complete = False
            return Table.UNREAD
        if sub is None:
            return Table.MISSING
        sub["findings"].sort(key=lambda f: -results.SEVERITIES.index(f["severity"]))
        summarise_truncation(sub["findings"], sub["file_len"])
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
            return Table.UNREAD
        info = _fastst.inspect.inspect_file(shard_path, table=True, header_cap=header_cap)
        return [row[0] for row in info["table"]]

    check_shards(folder, weight_map, table, collect)
    meta = index.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if (
        complete
        and isinstance(total, int)
        and not isinstance(total, bool)
        and all(s["accepted"] for s in report["shards"])
    ):
        tensor_bytes = _tensor_bytes(path, report["shards"], header_cap)
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
        _open_checkpoint(path, header_cap, index)
        report["accepted"] = True
    except (OSError, ValueError, KeyError, SafetensorError):
        report["accepted"] = False
    findings.sort(key=lambda f: -results.SEVERITIES.index(f["severity"]))
    return cast(results.CheckpointVerification, report)


def _tensor_bytes(index_path: str, shards: List[Dict[str, Any]], header_cap: int) -> int:
    total = 0
    for s in shards:
        info = _fastst.inspect.inspect_file(
            shard_location(index_path, s["file"]), table=False, header_cap=header_cap
        )
        total += sum(d["bytes"] for d in info["by_dtype"])
    return total


#: Rules of tensors whose bytes run past the end of the file.
_PAST_END = ("data-too-short", "ghost-tensor")


def summarise_truncation(findings: List[Any], file_len: int) -> None:
    """Replaces, in place, the findings of tensors past the end of a file
    of ``file_len`` bytes by one at the place of the first: the file is
    truncated, and how much of it is there."""
    cut = [f for f in findings if f["rule"] in _PAST_END]
    if not cut:
        return
    end = max((f["offset"] or 0) + (f["length"] or 0) for f in cut)
    rules = {f["rule"] for f in cut}
    summary = dict(
        cut[0],
        rule="data-too-short" if "data-too-short" in rules else "ghost-tensor",
        message=f"truncated: {file_len:,} of {end:,} bytes present; re-download",
        tensor=None,
        offset=file_len,
        length=max(end - file_len, 0),
        count=len(cut),
    )
    gone = {id(f) for f in cut[1:]}
    findings[:] = [summary if f is cut[0] else f for f in findings if id(f) not in gone]
