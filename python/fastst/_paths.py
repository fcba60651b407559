"""Paths as fastst takes them (``str``, ``bytes``, ``os.PathLike``) and their readable form.

``str`` is surrogate-escaped where the name is not valid UTF-8, as Python
decodes POSIX file names; the readable form is for messages."""

from __future__ import annotations

import os
from typing import Optional, Union

from ._fastst import remote as _fastst_remote
from ._fastst import text as _fastst_text
from ._settings import reads_urls
from ._text import escape

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def os_path(path: PathLike) -> str:
    """``path`` as the ``str`` the operating system functions take: bytes
    are decoded as Python decodes file names (invalid UTF-8 bytes become
    surrogate escapes), so every name the filesystem holds round-trips; a
    ``str`` no file can be named (a lone surrogate) is the
    ``UnicodeEncodeError`` Python's own file functions raise."""
    return os.fsdecode(os.fsencode(path))


def is_url(name: object) -> bool:
    """True for a ``str`` naming an object store or HTTP(S) URL that fastst
    reads as a URL: under the drop-in switch, unless the user opted in,
    names are paths (:func:`fastst._settings.reads_urls`)."""
    return isinstance(name, str) and _fastst_remote.is_remote_url(name) and reads_urls()


def progress_label(path: str, progress: bool) -> Optional[str]:
    """The label of a progress line for ``path`` (None: no line): its
    :func:`readable` form (a URL without its user part, query or fragment)
    with every character that could act on a terminal escaped
    (:func:`fastst._text.escape`, the one escaping rule), since a file's
    name may be hostile."""
    return escape(readable(path)) if progress else None


def readable(path: str) -> str:
    """``path`` (a file or a URL) as every message shows it, the core's
    errors included (one rule, the core's): a file name as it is when it is
    valid text, else with each byte that is not UTF-8 shown as ``\\xNN``
    (``model\\xff.st``); anything from a ``scheme://`` on as a URL without
    user, password, query or fragment, whether it parses or not (a bad
    port, a broken IPv6 host)."""
    return _fastst_text.display_path(os.fsencode(path))


def readable_text(text: str) -> str:
    """``text`` (a message) with every URL in it, from its ``scheme://`` to
    the next blank, shown by :func:`readable`'s rule."""
    return _fastst_text.display_text(text) if "://" in text else text


def shown(path: str) -> str:
    """``path`` as results (``--json``, SARIF, reports) show it: a name that
    might be a URL (it holds ``scheme://``) by :func:`readable`'s rule, any
    other file name exactly as given (it round-trips through JSON)."""
    return readable(path) if "://" in path else path
