"""Untrusted text made safe for a terminal: the one escaping rule.

Everything a file controls (tensor names, metadata keys and values, paths,
messages quoting them) goes through :func:`escape` before it reaches a
terminal: control characters (C0, DEL, C1), bidirectional overrides and
isolates, zero-width and other invisible format characters, line and
paragraph separators and unpaired surrogates are shown as visible escapes,
so no byte from a file can move the cursor, retitle a window, reorder the
text around it or start a new output line. :func:`escape` leaves printable
text alone (and so is idempotent), and the backslash is kept as is. Used by
the library (progress labels) and the command alike.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import Any

__all__ = ["escape", "is_unsafe"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}


@lru_cache(maxsize=4096)
def is_unsafe(ch: str) -> bool:
    """Whether ``ch`` must not reach a terminal raw: a control (Cc), a format
    character (Cf: bidi controls, zero-width characters, BOM, soft hyphen,
    tags), a line or paragraph separator (Zl, Zp) or a surrogate (Cs)."""
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs")


def _escape_char(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:
        # A byte of a path that is not valid UTF-8 (surrogate-escaped).
        return f"\\x{code - 0xDC00:02X}"
    return f"\\u{{{code:x}}}"


def escape(text: Any) -> str:
    """``text`` with every character that could act on a terminal (see
    :func:`is_unsafe`) replaced by a visible escape: ``\\n``, ``\\r``,
    ``\\t``, ``\\0``, ``\\u{1b}``, ``\\u{202e}``; undecodable path bytes
    (surrogate-escaped) as ``\\xFF``."""
    if not isinstance(text, str):
        text = str(text)
    if text.isprintable():  # fast path: no Cc/Cf/Zl/Zp/Cs (nor any Z but space)
        return text
    return "".join(_escape_char(ch) if is_unsafe(ch) else ch for ch in text)
