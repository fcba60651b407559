"""Temporary files an interrupted fastst save left behind, found for ``fastst verify``.

``fastst verify`` reports them (rule ``stale-temp-file``)."""

from __future__ import annotations

import os
from typing import Iterable, List, Optional, Set, Union

from .._errors import SafetensorError
from .._layout import INDEX_SUFFIX, UNFINISHED
from .._paths import os_path as _path
from .._sources.folders import claimed_shards
from .walk import walk

PathLike = Union[str, "os.PathLike[str]"]


def stale_temp_files(paths: Iterable[PathLike]) -> List[str]:
    """Temporary files an interrupted fastst save left behind: those under
    each folder in ``paths`` (recursively, as :func:`fastst.tools.inspect.iter_inputs` scans it:
    folders nested too deep are left out, and the scan of the inputs reports them)
    and those in the folder of each other path given, once each, sorted
    within a folder. Symbolic links and non-files are not listed."""
    found: List[str] = []
    seen = set()

    def scan(root: str, names: Iterable[str]) -> None:
        named: Optional[Set[str]] = None
        for name in sorted(names):
            match = UNFINISHED.fullmatch(name)
            if not match:
                continue
            if match.group(1) is not None:
                # A staged shard is the checkpoint while an index names it.
                if named is None:
                    named = _named_by_indexes(root, names)
                if os.path.normpath(os.path.join(root, name)) in named:
                    continue
            full = os.path.join(root, name)
            key = os.path.normpath(os.path.abspath(full))
            if key in seen or os.path.islink(full) or not os.path.isfile(full):
                continue
            seen.add(key)
            found.append(full)

    for raw in paths:
        path = _path(raw)
        if os.path.isdir(path):
            for root, files in walk(path, []):
                scan(root, files)
        else:
            folder = os.path.dirname(path) or "."
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            scan(folder, names)
    return found


def _named_by_indexes(root: str, names: Iterable[str]) -> Set[str]:
    """The files the index files among ``names`` (in ``root``) name."""
    named: Set[str] = set()
    for name in names:
        if name.endswith(INDEX_SUFFIX):
            try:
                named |= claimed_shards(os.path.join(root, name))
            except (OSError, ValueError, SafetensorError):
                continue
    return named
