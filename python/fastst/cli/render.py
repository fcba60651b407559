"""Human-readable output of the ``fastst`` command: where text goes
(:class:`Out`: escaping, width, colour), terminal detection, number and
plural formatting (the reports themselves are in :mod:`.report`; ``--json``
and SARIF output are built elsewhere).

Every line goes through :meth:`Out.print`, which escapes what a file controls
(:func:`fastst._text.escape`): one item per line always holds and no byte
from a file reaches the terminal raw. Colour is added after escaping, only
on a terminal, never with ``NO_COLOR`` or ``--color never``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple, Union

from .._fastst import __version__
from .text import escape, fit, json_text

__all__ = [
    "Out",
    "one_line",
    "escape",
    "size_text",
    "count_text",
    "plural",
    "terminal_width",
    "use_color",
]

# terminal -----------------------------------------------------------------


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (where progress may be shown)."""
    return _isatty(sys.stderr)


def terminal_width(stream: Any, requested: Optional[int] = None) -> Optional[int]:
    """Columns to lay text out in: ``requested`` (``--width``; 0 means no
    limit), else the terminal's width when ``stream`` is a terminal
    (``COLUMNS`` wins, as for other tools), else None: no limit, full width
    when piped."""
    if requested is not None:
        return requested or None
    if not _isatty(stream):
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns or None
    except (AttributeError, ValueError, OSError):
        return 80


def use_color(stream: Any, mode: str = "auto") -> bool:
    """Colour on ``stream``: ``always``, ``never``, or ``auto``: only on a
    terminal, and never when ``NO_COLOR`` is set to a non-empty value."""
    if mode == "always":
        return True
    if mode == "never" or os.environ.get("NO_COLOR"):
        return False
    return _isatty(stream) and os.environ.get("TERM") != "dumb"


_SGR = {
    "bold": "1",
    "dim": "2",
    "critical": "1;31",
    "high": "31",
    "medium": "33",
    "low": "36",
    "info": "2",
    "ok": "32",
    "error": "1;31",
}

#: A piece of a line: plain text, or (style, text) to colour.
Piece = Union[str, Tuple[str, str]]


def one_line(exc: BaseException) -> str:
    """A one-line message for an error about a file (not yet escaped)."""
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
        if exc.filename is not None:
            name = os.fsdecode(exc.filename) if isinstance(exc.filename, bytes) else exc.filename
            if str(name) not in text:
                text = f"{name}: {text}"
    else:
        text = str(exc) or type(exc).__name__
    return text.strip()


class Out:
    """Where a command writes: stdout for results, stderr for errors.

    ``width``: columns for tables and wrapped text (None: no limit);
    ``color``: whether to colour; ``full``: never shorten names.
    """

    def __init__(
        self,
        stdout: TextIO,
        stderr: TextIO,
        *,
        width: Optional[int] = None,
        color: bool = False,
        full: bool = False,
    ) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.width = width
        self.color = color
        self.full = full
        self.errors: List[Dict[str, Any]] = []

    def style(self, name: str, text: str) -> str:
        """``text`` (already escaped) in style ``name`` when colouring."""
        code = _SGR.get(name)
        if not self.color or code is None or not text:
            return text
        return f"\x1b[{code}m{text}\x1b[0m"

    def print(self, *pieces: Piece) -> None:
        """Writes one line made of ``pieces``, each escaped; a piece
        ``(style, text)`` is coloured after escaping."""
        parts = []
        for piece in pieces:
            if isinstance(piece, tuple):
                parts.append(self.style(piece[0], escape(piece[1])))
            else:
                parts.append(escape(piece))
        self.stdout.write("".join(parts) + "\n")

    def blank(self) -> None:
        self.stdout.write("\n")

    def json(self, data: Any) -> None:
        """``data`` as exact, terminal-safe JSON."""
        self.stdout.write(json_text(data) + "\n")

    def fit(self, text: str, columns: Optional[int]) -> str:
        """``text`` escaped and shortened in the middle to ``columns``
        (unless ``--full``)."""
        safe = escape(text)
        return safe if self.full else fit(safe, columns)

    def error(
        self,
        path: str,
        exc: Union[BaseException, str],
        *,
        rule: Optional[str] = None,
        fmt: Optional[str] = None,
    ) -> str:
        """Records an error about ``path`` and writes it as one line on stderr
        (``fastst: PATH: why``); returns the message (not escaped)."""
        message = exc if isinstance(exc, str) else one_line(exc)
        if rule is None and not isinstance(exc, str):
            rule = getattr(exc, "rule", None)
        if not message.startswith(path):
            message = f"{path}: {message}"
        label = self.style("error", "fastst:") if self.color else "fastst:"
        self.stderr.write(f"{label} {escape(message)}\n")
        self.errors.append({"path": path, "message": message, "rule": rule, "format": fmt})
        return message

    def warn(self, message: str) -> None:
        self.stderr.write(f"fastst: {escape(message)}\n")


# numbers --------------------------------------------------------------------


def size_text(n: int) -> str:
    """``n`` bytes in binary units: ``"512 B"``, ``"1.50 KiB"``..."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n:,} B" if unit == "B" else f"{value:,.2f} {unit}"
        value /= 1024
    return f"{n:,} B"  # pragma: no cover


def count_text(n: int) -> str:
    """``n`` with thousands separators, and in K/M/B/T from a thousand up."""
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n:,} ({n / scale:.2f}{unit})"
    return f"{n:,}"


def plural(n: int, word: str, words: Optional[str] = None) -> str:
    """``"1 tensor"``, ``"2 tensors"``, ``"1,000 tensors"``."""
    if n == 1:
        return f"1 {word}"
    return f"{n:,} {words or word + 's'}"


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


#: Version of the JSON envelope every ``--json`` output shares
#: (``output.schema.json``).
JSON_SCHEMA_VERSION = 1


def envelope(command: str, results: List[Any], out: Out, **extra: Any) -> Dict[str, Any]:
    """The one JSON shape of every subcommand: producer, command, any
    command-specific fields, one result per input, the errors recorded on
    ``out``."""
    doc: Dict[str, Any] = {
        "fastst": {"version": __version__, "schema": JSON_SCHEMA_VERSION},
        "command": command,
    }
    doc.update(extra)
    doc["results"] = results
    doc["errors"] = list(out.errors)
    return doc
