"""Folders walked without recursion, to a depth limit, for every folder scan.

The tools and the command (inputs, stale temporary files) go through a
tree this way, so that a hostile tree nested thousands of levels deep costs
a finding or a one-line error (rule ``folder-too-deep``), not a crash."""

from __future__ import annotations

import errno
import os
from typing import Any, Dict, Iterator, List, Tuple

from . import results

#: How many levels below the folder given a scan enters.
MAX_DEPTH = 256


def walk(top: str, too_deep: List[str]) -> Iterator[Tuple[str, List[str]]]:
    """``(folder, file names)`` for ``top`` and each folder under it, as
    ``os.walk`` goes top-down: names sorted, a folder's files before its
    sub-folders, links to folders not followed, folders that cannot be
    listed passed over. Folders more than :data:`MAX_DEPTH` levels below
    ``top``, or whose path is longer than the system allows, are not
    entered: the first one met is put in ``too_deep``."""
    stack = [(top, 0)]
    while stack:
        folder, depth = stack.pop()
        files: List[str] = []
        subs: List[str] = []
        try:
            if depth > MAX_DEPTH:
                raise OSError(errno.ENAMETOOLONG, "nested too deep", folder)
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir()
                        enter = is_dir and not entry.is_symlink()
                    except OSError:
                        is_dir = enter = False
                    if enter:
                        subs.append(entry.name)
                    elif not is_dir:
                        files.append(entry.name)
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG and not too_deep:
                too_deep.append(folder)
            continue
        yield folder, sorted(files)
        stack.extend((os.path.join(folder, name), depth + 1) for name in sorted(subs, reverse=True))


#: What is said of the first folder a scan did not enter.
TOO_DEEP = (
    f"folder nested more than {MAX_DEPTH} levels deep (or past the longest path the "
    "system allows); neither it nor any folder as deep was scanned"
)


def too_deep_report(folder: str) -> Dict[str, Any]:
    """The ``verify`` report of a folder a scan did not enter: kind
    ``"folder"``, one ``folder-too-deep`` finding, ``complete`` false."""
    return {
        "path": folder,
        "kind": "folder",
        "file_len": 0,
        "header_len": None,
        "tensors": None,
        "accepted": False,
        "complete": False,
        "values_checked": None,
        "findings": [results.finding("folder-too-deep", TOO_DEEP)],
    }
