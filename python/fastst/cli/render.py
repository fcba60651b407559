"""Human-readable output of the ``fastst`` command: where text goes
(:class:`Out`: escaping, width, colour), number and plural formatting, and
the text of each subcommand's report (``--json`` and SARIF output are built
elsewhere).

Every line goes through :meth:`Out.print`, which escapes what a file controls
(:func:`fastst.cli.text.escape`): one item per line always holds and no byte
from a file reaches the terminal raw. Colour is added after escaping, only
on a terminal, never with ``NO_COLOR`` or ``--color never``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple, Union

import numpy as np

from .. import inspect as fi
from .text import display_width, escape, fit, json_text, pad, wrap

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


def _lines(out: Out, label: str, value: str, indent: int) -> None:
    """``label`` then ``value`` (escaped) wrapped to the width with a
    hanging indent of ``indent`` columns."""
    safe = escape(value)
    room = None if out.width is None else max(out.width - indent, 20)
    for i, line in enumerate(wrap(safe, room)):
        out.print(pad(label, indent) if i == 0 else " " * indent, line)


# inspect --------------------------------------------------------------------


def print_inspect(
    out: Out,
    info: Dict[str, Any],
    shown: Optional[Tuple[str, np.ndarray]],
    args: Any,
) -> None:
    """The ``inspect`` report of one file or checkpoint (``info`` from
    :func:`fastst.inspect.inspect_file` or
    :func:`fastst.inspect.inspect_checkpoint`, its table already filtered
    and sorted; ``shown``: the values asked for with ``--tensor``)."""
    out.print(("bold", info["path"]))
    shards = info.get("shards")
    if shards is not None:
        out.print(f"  checkpoint   {plural(len(shards), 'shard')} ({info['kind']})")
    out.print(f"  file size    {size_text(info['file_len'])} ({plural(info['file_len'], 'byte')})")
    if shards is None:
        out.print(
            f"  header       {plural(info['header_len'], 'byte')}, "
            f"data at offset {info['data_start']:,}"
        )
    out.print(f"  tensors      {info['tensors']:,}")
    out.print(f"  parameters   {count_text(info['parameters'])}")
    by_dtype = info["by_dtype"]
    if by_dtype:
        dw = max(display_width(d["dtype"]) for d in by_dtype)
        tw = max(len(plural(d["tensors"], "tensor")) for d in by_dtype)
        pw = max(len(f"{d['parameters']:,}") for d in by_dtype)
        for i, d in enumerate(by_dtype):
            label = "  by dtype     " if i == 0 else " " * 15
            out.print(
                label,
                pad(d["dtype"], dw),
                "  ",
                pad(plural(d["tensors"], "tensor"), tw, right=True),
                "  ",
                pad(f"{d['parameters']:,}", pw, right=True),
                " params  ",
                size_text(d["bytes"]),
            )
    if shards is not None:
        nw = max(display_width(escape(s["file"])) for s in shards) if shards else 0
        room = None if out.width is None else max(out.width - 15 - 30, 12)
        nw = nw if room is None or out.full else min(nw, room)
        for i, s in enumerate(shards):
            label = "  shards       " if i == 0 else " " * 15
            out.print(
                label,
                pad(out.fit(s["file"], nw), nw),
                "  ",
                plural(s["tensors"], "tensor"),
                ", ",
                size_text(s["file_len"]),
            )
    metadata = info.get("metadata")
    if metadata:
        keys = plural(len(metadata), "key") + ": " + ", ".join(sorted(metadata))
        _lines(out, "  metadata", keys, 15)
    else:
        out.print("  metadata     (none)")
    table = info.get("table")
    if table is not None:
        out.blank()
        _print_table(out, info, table, args)
    if shown is not None:
        dtype, array = shown
        note = " (shown as float32)" if array.dtype == np.float32 and dtype != "F32" else ""
        out.blank()
        out.print("  ", args.tensor, f": {dtype} {shape_text(array.shape)}{note}")
        linewidth = max((out.width or 100) - 4, 40)
        with np.printoptions(threshold=args.max_values, linewidth=linewidth):
            text = np.array2string(array, separator=" ")
        for line in text.splitlines():
            out.print("    ", line)
    out.blank()


def _print_table(out: Out, info: Dict[str, Any], table: List[Any], args: Any) -> None:
    sharded = info.get("shards") is not None
    names = [escape(r[0]) for r in table]
    dtypes = [r[1] for r in table]
    shapes = [shape_text(r[2]) for r in table]
    begins = [f"{r[3]:,}" for r in table]
    ends = [f"{r[4]:,}" for r in table]
    files = [escape(r[5]) for r in table] if sharded else []
    dw = max([5] + [len(d) for d in dtypes])
    sw = max([5] + [len(s) for s in shapes])
    bw = max([5] + [len(b) for b in begins])
    ew = max([3] + [len(e) for e in ends])
    fw = max([5] + [display_width(f) for f in files]) if sharded else 0
    fixed = 2 + 2 + dw + 1 + sw + 1 + bw + 1 + ew + ((2 + fw) if sharded else 0)
    nw = max([4] + [display_width(n) for n in names])
    if out.width is not None and not out.full:
        nw = min(nw, max(out.width - fixed, 16))
    head = [
        "  ",
        pad("name", nw),
        "  ",
        pad("dtype", dw),
        " ",
        pad("shape", sw),
        " ",
        pad("begin", bw, right=True),
        " ",
        pad("end", ew, right=True),
    ]
    if sharded:
        head += ["  ", "shard"]
    out.print(*[("dim", h) if h.strip() else h for h in head])
    for i, name in enumerate(names):
        shown = name if out.full else fit(name, nw)
        row = [
            "  ",
            pad(shown, nw),
            "  ",
            pad(dtypes[i], dw),
            " ",
            pad(shapes[i], sw),
            " ",
            pad(begins[i], bw, right=True),
            " ",
            pad(ends[i], ew, right=True),
        ]
        if sharded:
            row += ["  ", files[i]]
        out.print(*row)
    if args.filter:
        out.print(
            f"  ({len(table):,} of {plural(info['tensors'], 'tensor')} match ",
            repr(args.filter),
            ")",
        )


# verify ---------------------------------------------------------------------


def print_verify(out: Out, report: Dict[str, Any]) -> None:
    """The ``verify`` report of one file or checkpoint: the verdict, then
    one line per finding, most severe first."""
    findings = report["findings"]
    verdict = "accepted by the reader" if report["accepted"] else "REJECTED by the reader"
    if not report["complete"]:
        verdict += "; header unreadable, tensors not examined"
    if report.get("values_checked") is not None:
        verdict += f"; values of {plural(report['values_checked'], 'tensor')} checked"
    if not findings:
        out.print(("bold", report["path"]), ": ", ("ok", "OK"), f", no findings ({verdict})")
        return
    counts: Dict[str, int] = {}
    for f in findings:
        counts[f["severity"]] = counts.get(f["severity"], 0) + 1
    by_severity = ", ".join(f"{counts[s]:,} {s}" for s in reversed(fi.SEVERITIES) if s in counts)
    out.print(
        ("bold", report["path"]),
        f": {plural(len(findings), 'finding')} ({by_severity}); {verdict}",
    )
    width = max(len(f["rule"]) for f in findings)
    indent = 2 + 8 + 1 + width + 2
    room = None if out.width is None else max(out.width - indent, 20)
    for f in findings:
        sev = f["severity"]
        where = f"{escape(f['shard'])}: " if f.get("shard") else ""
        lines = wrap(where + escape(f["message"]), room)
        out.print("  ", (sev, pad(sev.upper(), 8)), " ", pad(f["rule"], width), "  ", lines[0])
        for more in lines[1:]:
            out.print(" " * indent, more)


# hash -----------------------------------------------------------------------


def print_hash(out: Out, h: Dict[str, Any]) -> None:
    """The ``hash`` report of one file or checkpoint, with the ``--check``
    results."""
    out.print(("bold", h["path"]))
    shards = h.get("shards")
    if shards is not None:
        out.print(f"  checkpoint     {h['checkpoint_sha256']}  ({plural(len(shards), 'shard')})")
        for s in shards:
            out.print(f"    {s['sha256']}  ", out.fit(s["file"], _rest(out, 4 + 64 + 2)))
        out.blank()
        return
    out.print(f"  sha256         {h['sha256']}")
    out.print(f"  autov1         {h['autov1']}")
    out.print(f"  autov2         {h['autov2']}")
    if h["autov3"] is not None:
        out.print(f"  autov3         {h['autov3']}")
        out.print(f"  civitai        {h['autov3'][:12]}  (AutoV3 as CivitAI shows it)")
    else:
        out.print("  autov3         (none: the length prefix points past the end of the file)")
    if h["header_sha256"] is not None:
        out.print(f"  header_sha256  {h['header_sha256']}")
    problem = h.get("header_problem")
    if problem:
        _lines(out, "  header", f"not usable: {problem['message']}", 17)
    tensors = h.get("tensors")
    if tensors:
        out.print("  tensors:")
        room = _rest(out, 4 + 64 + 2)
        for name, digest in tensors.items():
            out.print(f"    {digest}  ", out.fit(name, room))
    for check in h.get("check") or []:
        if check["rule"] == "no-embedded-hash":
            out.print("  check          nothing to compare: no embedded hash in the metadata")
        else:
            sev = check["severity"]
            _lines(out, "  check", f"{sev.upper()} {check['rule']}: {check['message']}", 17)
    if h.get("check") == []:
        out.print("  check          ", ("ok", "OK"), ": embedded hashes match")
    out.blank()


def _rest(out: Out, used: int) -> Optional[int]:
    return None if out.width is None else max(out.width - used, 16)


# meta -----------------------------------------------------------------------

_CARD_LABELS: Tuple[Tuple[str, str], ...] = (
    ("title", "title"),
    ("name", "name"),
    ("author", "author"),
    ("description", "description"),
    ("license", "license"),
    ("date", "date"),
    ("format", "format"),
    ("architecture", "architecture"),
    ("base_model", "base model"),
    ("sd_model_name", "trained on"),
    ("resolution", "resolution"),
    ("merged_from", "merged from"),
    ("source_url", "source"),
    ("civitai_model_id", "civitai model"),
    ("civitai_version_id", "civitai version"),
)


def print_meta(
    out: Out,
    path: str,
    metadata: Optional[Dict[str, str]],
    card: Dict[str, Any],
    decoded: Dict[str, Any],
    raw_only: bool,
) -> None:
    """The ``meta`` report of one file: the metadata card (unless
    ``raw_only``), then every key with JSON values indented."""
    out.print(("bold", path))
    if metadata is None:
        out.print("  (no __metadata__)")
        out.blank()
        return
    if not raw_only:
        line = _card_line(out)
        for key, label in _CARD_LABELS:
            if card[key] is not None:
                value = str(card[key])
                if key == "description" and len(value) > 400:
                    value = value[:400] + "..."
                line(label, value)
        if card["trigger_words"]:
            line("trigger words", ", ".join(card["trigger_words"]))
        if card["top_tags"]:
            line("top tags", ", ".join(f"{t} ({c:,})" for t, c in card["top_tags"]))
        network = card["network"]
        if network:
            parts = [str(network["type"] or network["module"] or "network")]
            if network["dim"] is not None:
                parts.append(f"dim {network['dim']}")
            if network["alpha"] is not None:
                parts.append(f"alpha {network['alpha']}")
            line("network", ", ".join(parts))
        training = card["training"]
        if training:
            when = " -> ".join(t for t in (training["started"], training["finished"]) if t)
            if when:
                line("trained", when)
            steps = training["steps"]
            if steps is None:
                steps = training["max_train_steps"]
            facts = []
            if steps is not None:
                facts.append(_count(steps, "step"))
            if training["epochs"] is not None:
                facts.append(_count(training["epochs"], "epoch"))
            if training["images"] is not None:
                facts.append(_count(training["images"], "image"))
            if training["duration_s"] is not None:
                facts.append(f"{training['duration_s'] / 3600:.2f} h")
            if facts:
                line("training", ", ".join(facts))
        thumb = card["thumbnail"]
        line("thumbnail", f"{thumb['mime']}, {size_text(thumb['bytes'])}" if thumb else "none")
        if card["cover_images"]:
            line("cover images", f"{card['cover_images']:,}")
        for key, value in card["embedded_hashes"].items():
            line(key, value)
        out.blank()
    out.print("  raw metadata:")
    for key, value in sorted(decoded.items()):
        if isinstance(value, (dict, list)):
            out.print("    ", key, ":")
            for text in json_text(value).splitlines():
                out.print("      ", text)
        else:
            text = str(value)
            if len(text) > 2000:
                text = text[:2000] + f"... ({plural(len(text), 'character')})"
            label = f"    {escape(key)}: "
            room = None if out.width is None else max(out.width - 6, 20)
            lines = wrap(label + escape(text), room)
            out.print(lines[0])
            for more in lines[1:]:
                out.print("      ", more)
    out.blank()


def _count(value: Any, word: str) -> str:
    return plural(value, word) if isinstance(value, int) else f"{value} {word}s"


def _card_line(out: Out) -> Callable[[str, str], None]:
    def line(label: str, value: str) -> None:
        _lines(out, f"  {label}", value, 20)

    return line
