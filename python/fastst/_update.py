"""Editing the ``__metadata__`` of a file without touching its tensors:
:func:`update_metadata` (and ``fastst meta --set/--unset``).

The tensors are copied byte for byte from the old file into a new one
written by the atomic writer (temporary file, rename), and the copy is
checked: every tensor's SHA-256 after writing equals its SHA-256 before.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from . import _fastst
from ._errors import rule_error
from ._fastst import DEFAULT_HEADER_CAP, RawFile, WritePlan

__all__ = ["update_metadata"]

PathLike = Union[str, "os.PathLike[str]"]


def _path(path: PathLike) -> str:
    p = os.fspath(path)
    return os.fsdecode(p) if isinstance(p, bytes) else p


def _check(updates: Mapping[str, str], remove: Iterable[str]) -> Tuple[Dict[str, str], List[str]]:
    if not isinstance(updates, Mapping):
        raise TypeError(f"updates must be a dict of str to str, got {type(updates).__name__}")
    for key, value in updates.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(
                f"metadata keys and values must be str, got {type(key).__name__} "
                f"-> {type(value).__name__}"
            )
    removed = list(remove)
    for key in removed:
        if not isinstance(key, str):
            raise TypeError(f"keys to remove must be str, got {type(key).__name__}")
    both = sorted(set(updates) & set(removed))
    if both:
        raise ValueError(f"keys both set and removed: {', '.join(map(repr, both))}")
    return dict(updates), removed


def update_metadata(
    path: PathLike,
    updates: Optional[Mapping[str, str]] = None,
    *,
    remove: Iterable[str] = (),
    output: Optional[PathLike] = None,
    header_cap: int = DEFAULT_HEADER_CAP,
) -> Dict[str, Any]:
    """Sets the ``__metadata__`` keys of ``updates`` and removes those of
    ``remove`` in the file ``path`` (or writes the result to ``output``,
    leaving ``path`` alone).

    The new header is laid out as the writer lays out every header (keys
    sorted), so the same edit of the same file always gives the same bytes.
    The tensors are copied unchanged; after writing,
    every tensor's SHA-256 is compared with the original's and a mismatch
    raises (the original is never touched before the new file is complete:
    the writer renames a finished temporary file into place).

    Returns ``{"path", "metadata", "set", "removed", "tensors",
    "data_unchanged"}``: the file written, its metadata, the keys set and
    removed (a key to remove that is absent is not listed), the number of
    tensors verified, and whether the whole data section is byte-identical
    too (true unless the writer's tensor order differs from the file's, in
    which case only the tensors' order changed).
    """
    source = _path(path)
    target = source if output is None else _path(output)
    changes, removed = _check(updates or {}, remove)
    before = _fastst.hash_file(source, tensors=True, header_cap=header_cap)
    raw = RawFile(source, source, "mmap", header_cap)
    try:
        old = raw.metadata() or {}
        metadata = {k: v for k, v in old.items() if k not in removed}
        metadata.update(changes)
        order = raw.offset_keys()
        entries = []
        sources = []
        for name in order:
            buffer, dtype, shape = raw.tensor(name)
            entries.append((name, dtype, list(shape)))
            sources.append(memoryview(buffer))
        plan = WritePlan(entries, list(metadata.items()) or None, target, header_cap)
        plan.write_file(target, target, sources, None)
    finally:
        raw.close()
    after = _fastst.hash_file(target, tensors=True, header_cap=header_cap)
    if after["tensors"] != before["tensors"]:
        changed = sorted(
            n for n in before["tensors"] if after["tensors"].get(n) != before["tensors"][n]
        )
        raise rule_error(
            "rewrite-mismatch",
            target,
            f"tensor data changed while rewriting the metadata: {changed[:5]}",
        )
    return {
        "path": target,
        "metadata": metadata,
        "set": list(changes),
        "removed": [k for k in removed if k in old],
        "tensors": len(order),
        "data_unchanged": after["autov3"] == before["autov3"],
    }
