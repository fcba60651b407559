"""Temporary files an interrupted fastst save left behind, found for ``fastst verify``.

Temporary files an interrupted fastst save left behind, for
``fastst verify`` to report (rule ``stale-temp-file``)."""

from __future__ import annotations

import os
import re
from typing import Iterable, List, Union

from .._paths import os_path as _path
from .walk import walk

PathLike = Union[str, "os.PathLike[str]"]


#: Name of a temporary file a fastst save writes where ``O_TMPFILE`` is not
#: available (rust/fastst-core/src/write/atomic.rs); only a process killed
#: mid-save leaves one behind.
_STALE_TEMP = re.compile(r"\.[0-9a-f]{16}\.fastst-tmp")


def stale_temp_files(paths: Iterable[PathLike]) -> List[str]:
    """Temporary files an interrupted fastst save left behind: those under
    each folder in ``paths`` (recursively, as :func:`fastst.tools.inspect.iter_inputs` scans it:
    folders nested too deep are left out, and the scan of the inputs reports them)
    and those in the folder of each other path given, once each, sorted
    within a folder. Symbolic links and non-files are not listed."""
    found: List[str] = []
    seen = set()

    def scan(root: str, names: Iterable[str]) -> None:
        for name in sorted(names):
            if not _STALE_TEMP.fullmatch(name):
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
