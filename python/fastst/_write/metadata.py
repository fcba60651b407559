"""Editing the ``__metadata__`` of a file without touching its tensors.

:func:`update_metadata`, and ``fastst meta --set/--unset`` through it.

The tensors are copied byte for byte from the old file into a new one
written by the atomic writer (temporary file, rename), and the copy is
checked: every tensor's SHA-256 after writing equals its SHA-256 before.
Edited in place, the file keeps who may read it: a symbolic link is
followed (the file it names is rewritten in its own folder), and the new
file gets the old one's owner, group and permission bits (the writer's
rule for every file it replaces); an edit that could not keep the owner and
group is refused before anything is written.
"""

from __future__ import annotations

import errno
import os
import tempfile
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from .._errors import rule_error
from .._fastst import inspect as _fastst_inspect
from .._fastst import write as _fastst_write
from .._fastst.read import DEFAULT_HEADER_CAP
from .._fastst.write import WritePlan
from .._sources.file import open_file

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


def _may_give(folder: str, owner: os.stat_result) -> bool:
    """Whether this process may give a new file in ``folder`` the owner and
    group of ``owner``: tried on a scratch file (unnamed where the system
    allows), so that what rules forbid it (not root, no CAP_CHOWN, a user
    namespace, NFS root squashing) is found before anything is written."""
    if not hasattr(os, "fchown"):  # pragma: no cover - no owners to keep
        return True
    name = None
    try:
        fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o600)
    except (AttributeError, OSError):
        fd, name = tempfile.mkstemp(dir=folder)
    try:
        os.fchown(fd, owner.st_uid, owner.st_gid)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        if name is not None:
            os.unlink(name)


def _in_place(path: str) -> str:
    """The file an in-place edit rewrites: ``path``, or the file a symbolic
    link there names (rewritten in its own folder; the link stays). Raises
    PermissionError, before anything is written, for a file this process
    may not write, or whose owner and group the new file could not keep."""
    target = os.path.realpath(path) if os.path.islink(path) else path
    old = os.stat(target)
    if not os.access(target, os.W_OK):
        raise PermissionError(errno.EACCES, "editing in place needs write permission", target)
    if not _may_give(os.path.dirname(target) or ".", old):
        raise PermissionError(
            errno.EPERM,
            f"editing in place would not keep the owner and group {old.st_uid}:{old.st_gid} "
            "(write the result elsewhere: output=, --output)",
            target,
        )
    return target


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

    In place, a symbolic link is followed: the file it names is rewritten in
    its own folder and keeps its owner, group and permission bits (setuid,
    setgid and sticky dropped); ACLs, extended attributes and other hard
    links do not carry over (a new file replaces the old one). A file the
    process may not write, or whose owner and group it could not keep, is
    refused with PermissionError before anything is written.

    The new header is laid out as the writer lays out every header (keys
    sorted), so the same edit of the same file always gives the same bytes,
    and padded so that the data section keeps its alignment: it starts at a
    multiple of the largest power of two (up to 4096) its old offset was a
    multiple of, as a file written with ``align=`` needs.
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
    if output is None:
        source = _in_place(source)
    target = source if output is None else _path(output)
    changes, removed = _check(updates or {}, remove)
    before = _fastst_inspect.hash_file(source, tensors=True, header_cap=header_cap)
    raw = open_file(source, "mmap", header_cap, source)
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
        # The data section keeps its alignment (up to a page): a file
        # written with align=N stays aligned to N.
        align = _fastst_write.data_alignment(raw.data_start)
        plan = WritePlan(entries, list(metadata.items()) or None, target, header_cap, align)
        plan.write_file(target, target, sources, None)
    finally:
        raw.close()
    after = _fastst_inspect.hash_file(target, tensors=True, header_cap=header_cap)
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
