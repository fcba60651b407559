"""Paths as fastst takes them (``str``, ``bytes``, ``os.PathLike``) and their readable form.

Paths as fastst takes them: ``str`` (surrogate-escaped where the name is
not valid UTF-8, as Python decodes POSIX file names), ``bytes`` and
``os.PathLike`` alike, and their readable form for messages."""

from __future__ import annotations

import os
from typing import Optional, Union

from . import _fastst
from ._text import escape

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def os_path(path: PathLike) -> str:
    """``path`` as the ``str`` the operating system functions take: bytes
    are decoded as Python decodes file names (invalid UTF-8 bytes become
    surrogate escapes), so every name the filesystem holds round-trips; a
    ``str`` no file can be named (a lone surrogate) is the
    ``UnicodeEncodeError`` Python's own file functions raise."""
    return os.fsdecode(os.fsencode(path))


def progress_label(path: str, progress: bool) -> Optional[str]:
    """The label of the core's progress line for ``path`` (None: no line):
    the name with every character that could act on a terminal escaped
    (:func:`fastst._text.escape`, the one escaping rule), since a file's
    name may be hostile."""
    return escape(path) if progress else None


def readable(path: str) -> str:
    """``path`` (a file or a URL) as every message shows it, the core's
    errors included (one rule, the core's): a URL without user, password,
    query or fragment; a file name as it is when it is valid text, else with
    each byte that is not UTF-8 shown as ``\\xNN`` (``model\\xff.st``)."""
    return _fastst.display_path(os.fsencode(path))
