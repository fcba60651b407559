"""Untrusted text measured for a terminal.

:func:`display_width` counts terminal columns per character (East Asian
wide and fullwidth characters take two, combining marks none), and
:func:`fit` shortens text to a number of columns with an ellipsis in the
middle, keeping both ends of a long name visible. Escaping is
:mod:`fastst._text`'s (re-exported here for the command's modules).
"""

from __future__ import annotations

import json
import unicodedata
from functools import lru_cache
from typing import Any, List, Optional

from .._text import escape, is_unsafe
from ..tools.card import strict_json

__all__ = ["escape", "is_unsafe", "display_width", "fit", "wrap", "json_text", "ELLIPSIS"]

ELLIPSIS = "\u2026"


@lru_cache(maxsize=8192)
def _char_width(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    code = ord(ch)
    if 0x1160 <= code <= 0x11FF:  # Hangul medial vowels and final consonants
        return 0
    if unicodedata.east_asian_width(ch) in ("W", "F"):
        return 2
    return 1


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes (``text`` already escaped)."""
    if text.isascii():
        return len(text)
    return sum(map(_char_width, text))


def _take(text: str, columns: int, from_end: bool = False) -> str:
    """The longest prefix (or suffix) of ``text`` within ``columns``."""
    chars = reversed(text) if from_end else iter(text)
    taken: List[str] = []
    used = 0
    for ch in chars:
        w = _char_width(ch)
        if used + w > columns:
            break
        taken.append(ch)
        used += w
    if from_end:
        taken.reverse()
        # Do not start with a combining mark cut from its base character.
        while taken and _char_width(taken[0]) == 0:
            taken.pop(0)
    return "".join(taken)


def fit(text: str, columns: Optional[int]) -> str:
    """``text`` shortened to ``columns`` terminal columns with an ellipsis
    in the middle (unchanged when it fits or ``columns`` is None)."""
    if columns is None or display_width(text) <= columns:
        return text
    if columns <= 1:
        return ELLIPSIS if columns == 1 else ""
    room = columns - 1
    head = _take(text, (room + 1) // 2)
    tail = _take(text, room - display_width(head), from_end=True)
    return head + ELLIPSIS + tail


def pad(text: str, columns: int, right: bool = False, width: Optional[int] = None) -> str:
    """``text`` (``width`` columns wide, when known) padded with spaces to
    ``columns`` terminal columns."""
    gap = " " * max(0, columns - (display_width(text) if width is None else width))
    return gap + text if right else text + gap


def wrap(text: str, columns: Optional[int]) -> List[str]:
    """``text`` broken into lines of at most ``columns`` terminal columns,
    at spaces where possible (one line when ``columns`` is None)."""
    if columns is None or display_width(text) <= columns:
        return [text]
    columns = max(columns, 8)
    lines: List[str] = []
    line = ""
    for word in text.split(" "):
        candidate = f"{line} {word}" if line else word
        if display_width(candidate) <= columns:
            line = candidate
            continue
        if line:
            lines.append(line)
        while display_width(word) > columns:
            head = _take(word, columns)
            lines.append(head)
            word = word[len(head) :]
        line = word
    if line:
        lines.append(line)
    return lines


def json_text(data: Any) -> str:
    """``data`` as indented JSON that is exact (it loads back to ``data``)
    and safe on a terminal: the characters :func:`is_unsafe` names, C1
    controls included, are written as ``\\uXXXX`` escapes, other non-ASCII
    text stays readable. It is strict JSON: NaN and infinities that a file's
    metadata may hold are written as strings (see :func:`strict_json`)."""
    text = json.dumps(strict_json(data), indent=2, ensure_ascii=False, allow_nan=False)
    if text.isascii() and "\x7f" not in text:  # JSON escapes the other ASCII controls
        return text
    return "\n".join(line if line.isprintable() else _json_line(line) for line in text.split("\n"))


def _json_line(line: str) -> str:
    parts: List[str] = []
    for ch in line:
        if is_unsafe(ch):
            # Outside strings JSON is ASCII and printable, so ch is inside a
            # string, where a \\u escape means the same character.
            code = ord(ch)
            if code > 0xFFFF:
                code -= 0x10000
                parts.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
            else:
                parts.append(f"\\u{code:04x}")
        else:
            parts.append(ch)
    return "".join(parts)
