"""What a file that is not safetensors is: the one recogniser, from its first bytes.

It is the core's ``identify``, behind the reader's errors and every
subcommand of the ``fastst`` command. Only the first bytes are read, never
blocking; nothing is parsed beyond fixed fields, nothing is executed."""

from __future__ import annotations

import os
import stat
from typing import Any, Dict, Optional

from .._errors import rule_error
from .._fastst import inspect as _fastst_inspect
from .._paths import is_url, readable

__all__ = ["identify", "not_safetensors_message", "explain"]

_SPECIAL = (
    (stat.S_ISDIR, "directory", "a folder"),
    (stat.S_ISFIFO, "fifo", "a FIFO (named pipe), not a regular file"),
    (stat.S_ISSOCK, "socket", "a socket, not a regular file"),
    (stat.S_ISCHR, "char-device", "a character device, not a regular file"),
    (stat.S_ISBLK, "block-device", "a block device, not a regular file"),
)

#: Kinds that are not regular files at all.
NOT_FILES = ("directory", "fifo", "socket", "char-device", "block-device", "other")

#: Rules of a file whose framing is not safetensors' (the length prefix or
#: the header's start): the reader's errors for them say what the file is.
_FRAMING = frozenset(
    {
        "file-too-short",
        "header-length-zero",
        "header-too-large",
        "header-past-end",
        "header-not-utf8",
        "header-start",
    }
)


def identify(path: str) -> Optional[Dict[str, Any]]:
    """What ``path`` is when it is not a safetensors file, else None (see
    :func:`fastst.tools.inspect.identify`). Raises :class:`OSError` when ``path``
    cannot be examined. A URL gives None: its object is read by the
    reader, whose errors say what is wrong."""
    if is_url(path):
        return None
    st = os.stat(path)
    for test, kind, description in _SPECIAL:
        if test(st.st_mode):
            return {"kind": kind, "description": description, "executable": False}
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since the stat above
            return {"kind": "other", "description": "not a regular file", "executable": False}
        head = os.pread(fd, _fastst_inspect.IDENTIFY_LEN, 0)
    finally:
        os.close(fd)
    found = _fastst_inspect.identify(head, st.st_size)
    return dict(found) if found is not None else None


def not_safetensors_message(found: Dict[str, Any]) -> str:
    """The sentence for a file :func:`identify` recognised."""
    if found["kind"] in NOT_FILES:
        return f"this is {found['description']}"
    return f"this is {found['description']}, not a safetensors file"


def explain(exc: BaseException, path: str) -> BaseException:
    """``exc``, a reader's error about ``path``, with what the file is added
    when its framing is not safetensors' and the file is recognised (e.g.
    "this is a PyTorch checkpoint (zip with pickles), not a safetensors
    file"); the same rule, class and attributes. Else ``exc`` itself."""
    rule = getattr(exc, "rule", None)
    if rule not in _FRAMING:
        return exc
    try:
        found = identify(path)
    except OSError:
        return exc
    if found is None:
        return exc
    text = str(exc)
    shown = getattr(exc, "filename", None) or readable(path)
    prefix = f"{shown}: "
    detail = text[len(prefix) :] if text.startswith(prefix) else text
    return rule_error(rule, shown, f"{not_safetensors_message(found)} ({detail})")
