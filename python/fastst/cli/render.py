"""Human-readable output of the ``fastst`` command: where text goes and how it is formatted.

:class:`Out` does escaping, width and colour; terminal detection, number
and plural formatting are here too (the reports themselves are in
:mod:`.report`; ``--json`` and SARIF output are built elsewhere).

Every line goes through :meth:`Out.print`, which escapes what a file controls
(:func:`fastst._text.escape`): one item per line always holds and no byte
from a file reaches the terminal raw. Colour is added after escaping, only
on a terminal, never with ``NO_COLOR`` or ``--color never``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, TextIO, Tuple, Union

from .._fastst import __version__
from .._paths import readable_text, shown
from .text import ELLIPSIS, _take, display_width, escape, fit, json_text, pad, wrap

__all__ = [
    "Out",
    "one_line",
    "escape",
    "size_text",
    "count_text",
    "plural",
    "terminal_width",
    "use_color",
    "Column",
    "table",
    "room",
    "abbreviate",
    "clip",
    "paragraph",
    "digest_lines",
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
        ``(style, text)`` is coloured after escaping. A line wider than
        ``width`` is cut with an ellipsis at the end (unless ``--wide``): the
        layouts fit the width themselves, this keeps anything from wrapping."""
        styled = [p if isinstance(p, tuple) else ("", p) for p in pieces]
        safe = [(name, escape(text)) for name, text in styled]
        if self.width is not None and not self.full:
            safe = _clip_pieces(safe, self.width)
        self.stdout.write("".join(self.style(name, text) for name, text in safe) + "\n")

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
        (``fastst: PATH: why``); returns the message (not escaped). The path
        and every URL in the message are shown by the one display rule
        (:func:`fastst._paths.shown`, :func:`fastst._paths.readable_text`):
        what goes to stderr, ``--json`` and SARIF holds no credential."""
        path = shown(path)
        message = readable_text(exc if isinstance(exc, str) else one_line(exc))
        if rule is None and not isinstance(exc, str):
            rule = getattr(exc, "rule", None)
        if not message.startswith(path):
            message = f"{path}: {message}"
        label = self.style("error", "fastst:") if self.color else "fastst:"
        self.stderr.write(f"{label} {escape(message)}\n")
        self.errors.append({"path": path, "message": message, "rule": rule, "format": fmt})
        return message

    def warn(self, message: str) -> None:
        self.stderr.write(f"fastst: {escape(readable_text(message))}\n")


def _clip_pieces(pieces: List[Tuple[str, str]], columns: int) -> List[Tuple[str, str]]:
    if sum(display_width(text) for _, text in pieces) <= columns:
        return pieces
    kept: List[Tuple[str, str]] = []
    left = columns - 1
    for name, text in pieces:
        if display_width(text) > left:
            kept.append((name, clip(text, left + 1)))
            break
        kept.append((name, text))
        left -= display_width(text)
    return kept


# layout ----------------------------------------------------------------------


def room(out: Out, used: int = 0, least: int = 0) -> Optional[int]:
    """Columns left on a line of ``out`` once ``used`` are taken (at least
    ``least``); None: no limit (piped output, ``--wide``)."""
    if out.width is None or out.full:
        return None
    return max(out.width - used, least)


def paragraph(out: Out, lead: Piece, text: str, indent: int) -> None:
    """``lead`` (a piece: text, or (style, text)) then ``text``, both escaped
    here, wrapped to ``out``'s width with a hanging indent of ``indent``."""
    style, words = lead if isinstance(lead, tuple) else ("", lead)
    words, safe = escape(words), escape(text)
    limit = room(out)
    if limit is not None and limit - display_width(words) < 8:
        out.print((style, words))  # too long a lead: the text goes below it
        words = " " * indent
    first = safe if limit is None else wrap(safe, max(limit - display_width(words), 8))[0]
    out.print((style, words), first)
    rest = safe[len(first) :]
    rest = rest[1:] if rest.startswith(" ") else rest
    for line in wrap(rest, max((limit or 0) - indent, 8)) if rest else []:
        out.print(" " * indent, line)


def digest_lines(out: Out, lead: str, digest: str, indent: int = 4, tail: str = "") -> None:
    """``lead``, a hex digest and ``tail`` on one line when they fit; else
    the digest alone on the lines below, split where it must be: a digest is
    never cut short."""
    limit = room(out)
    if limit is None or display_width(lead + tail) + len(digest) <= limit:
        out.print(lead, digest, tail)
        return
    if (lead + tail).strip():
        out.print(lead.rstrip(), tail)
    step = max(limit - indent, 8)
    for i in range(0, len(digest), step):
        out.print(" " * indent, digest[i : i + step])


def clip(text: str, columns: Optional[int]) -> str:
    """``text`` (escaped) cut to ``columns`` with an ellipsis at the end."""
    if columns is None or display_width(text) <= columns:
        return text
    return _take(text, columns - 1) + ELLIPSIS if columns > 0 else ""


def abbreviate(name: str, columns: Optional[int]) -> str:
    """A dotted name (escaped) shortened to ``columns`` keeping what tells it
    apart: whole components are left out (one ellipsis per run) first from
    the middle of the part after the last number, then from the part before
    the first, so the layer numbers and the leaf stay:
    ``model.layers.31…q_proj.weight``; what is left is shortened in the
    middle (:func:`fit`) when that is not enough."""
    if columns is None or display_width(name) <= columns:
        return name
    parts = name.split(".")
    if len(parts) > 64:  # no real name; keep the work linear for a hostile one
        return fit(name, columns)
    numbers = [i for i, p in enumerate(parts) if p.isdigit()]
    last = len(parts) - 1
    after = numbers[-1] + 1 if numbers else 0
    before = numbers[0] if numbers else 0
    # The order components go in: right after the last number towards the
    # leaf's parent, then from the start up to the first number.
    order = list(range(after, last - 1)) + list(range(0, before))
    dropped: Set[int] = set()
    text = name
    for i in order:
        dropped.add(i)
        text = _join_kept(parts, dropped)
        if display_width(text) <= columns:
            return _give_back(parts, dropped, i, columns) or text
    return fit(text, columns)


def _give_back(parts: List[str], dropped: Set[int], last: int, columns: int) -> Optional[str]:
    """The component dropped ``last`` put back, shortened in the middle to
    the room left, when at least a few of its characters fit."""
    dropped.discard(last)
    whole = parts[last]
    best = None
    low, high = 5, display_width(whole) - 1
    while low <= high:  # the widest shortening that fits
        mid = (low + high) // 2
        parts[last] = fit(whole, mid)
        text = _join_kept(parts, dropped)
        if display_width(text) <= columns:
            best, low = text, mid + 1
        else:
            high = mid - 1
    parts[last] = whole
    return best


def _join_kept(parts: List[str], dropped: Set[int]) -> str:
    text = ""
    gap = False
    for i, part in enumerate(parts):
        if i in dropped:
            gap = True
            continue
        if text or gap:
            text += ELLIPSIS if gap else "."
        text += part
        gap = False
    return text + (ELLIPSIS if gap else "")


def affixes(cells: Sequence[str]) -> Callable[[str, int], str]:
    """An abbreviator for a column whose cells share a start and an end
    (shard files: ``model-00001-of-00004.safetensors``): what differs stays,
    the shared parts give way first."""
    if len(cells) < 2:
        return fit
    start = len(os.path.commonprefix(list(cells)))
    end = len(os.path.commonprefix([c[::-1] for c in cells]))
    shortest = min(len(c) for c in cells)
    end = min(end, shortest - start)

    def shorten(text: str, columns: int) -> str:
        if display_width(text) <= columns:
            return text
        core = text[start : len(text) - end]
        spare = columns - display_width(core) - 2
        if spare < 0:
            return fit(core, columns)
        head = text[:start][len(text[:start]) - spare // 2 :] if spare // 2 else ""
        tail = text[len(text) - end :][: spare - len(head)]
        return ELLIPSIS + head + core + tail + ELLIPSIS

    return shorten


@dataclass
class Column:
    """A column of :func:`table`: its header and cells (escaped), whether
    it is right-aligned, how narrow it may get (``least``; 0: it may be left
    out), its place in the order columns give way (``give``: lower first),
    and how a cell is shortened."""

    header: str
    cells: List[str]
    right: bool = False
    least: int = 0
    give: int = 0
    shorten: Callable[[str, int], str] = field(default=fit)


def table(out: Out, columns: Sequence[Column], indent: int = 2) -> None:
    """Prints ``columns`` as a table that fits ``out``'s width: columns give
    way in ``give`` order, each shrinking down to its ``least`` before the
    next one gives, or left out when its ``least`` is 0. ``--wide`` (or
    piped output) shows every column in full."""
    cell_widths = [[display_width(x) for x in c.cells] for c in columns]
    natural = [
        max([display_width(c.header), *w]) for c, w in zip(columns, cell_widths, strict=True)
    ]
    widths = list(natural)
    shown = list(range(len(columns)))
    limit = room(out, indent)
    if limit is not None:
        order = sorted(shown, key=lambda i: columns[i].give)

        def total() -> int:
            return sum(widths[i] for i in shown) + 2 * (len(shown) - 1)

        for i in order:
            excess = total() - limit
            if excess <= 0:
                break
            if columns[i].least == 0 and len(shown) > 1:
                shown.remove(i)
                continue
            floor = max(columns[i].least, display_width(columns[i].header))
            widths[i] = max(floor, widths[i] - excess)
        # Room that columns left out gave back goes to those that shrank.
        for i in reversed(order):
            spare = limit - total()
            if i in shown and spare > 0:
                widths[i] = min(natural[i], widths[i] + spare)
    head = [pad(columns[i].header, widths[i], columns[i].right) for i in shown]
    out.print(" " * indent, ("dim", "  ".join(head).rstrip()))
    for row in range(len(columns[0].cells) if columns else 0):
        cells = []
        for i in shown:
            cell, width = columns[i].cells[row], cell_widths[i][row]
            if width > widths[i]:
                cell = columns[i].shorten(cell, widths[i])
                width = display_width(cell)
            cells.append(pad(cell, widths[i], columns[i].right, width))
        out.print(" " * indent, "  ".join(cells).rstrip())


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
JSON_SCHEMA_VERSION = 2


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
