"""``--html REPORT.html``: one self-contained static page to share in a review or as a CI artefact.

The page holds everything it shows: inline CSS, charts as inline SVG, no
script, no font, no image, no link to anything outside it; its
Content-Security-Policy (``default-src 'none'``) tells a browser to fetch
nothing even if something slipped in. Every text a file controls (names,
metadata, paths, config values) goes through the terminal escaping rule
(:func:`fastst._text.escape`: controls and bidi overrides made visible)
and then HTML escaping, so a hostile name can neither add markup nor
reorder the text around it. The page is written atomically.

Sections: :func:`inspect_section` (summary, config.json, dtype breakdown,
layer view), :func:`stats_section` (per-tensor statistics with histograms)
and :func:`diff_section` (what differs between two checkpoints);
:func:`page` puts sections together, :func:`write` writes the page.
"""

from __future__ import annotations

import html
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple

from .._fastst import __version__
from .._paths import shown
from .._text import escape
from .._write.atomic import replace_bytes
from .render import Out, count_text, plural, shape_text, size_text

__all__ = [
    "page",
    "write",
    "report",
    "inspect_section",
    "stats_section",
    "diff_section",
    "text",
]

#: Rows of a table shown before the rest is summarised in one line.
ROWS = 500

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#222}
h1{font-size:1.4em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}
h3{font-size:1em;margin-top:1.5em}
table{border-collapse:collapse;margin:.5em 0}
th,td{padding:.15em .8em .15em 0;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
code,td.c{font-family:ui-monospace,monospace;font-size:.92em;overflow-wrap:anywhere}
tr:nth-child(even) td{background:#f6f6f6}
.bad{color:#a40000}.note{color:#666}
svg{display:block;margin:.3em 0}svg text{font:11px system-ui,sans-serif;fill:#222}
svg .bar{fill:#4a78b5}
"""


def text(value: Any) -> str:
    """Untrusted ``value`` as HTML text: escaped for the terminal's sake
    (invisible and bidi characters made visible), then for HTML."""
    return html.escape(escape(value), quote=True)


def _table(
    head: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Sequence[bool], code: int = 0
) -> str:
    """A table; cells are escaped; column ``code`` is set in monospace."""
    cls = ["n" if n else "" for n in numeric]
    out = ["<table>"]
    if any(head):
        out += [
            "<tr>",
            *(f'<th class="{c}">{text(h)}</th>' for h, c in zip(head, cls, strict=False)),
            "</tr>",
        ]
    rows = list(rows)
    for row in rows[:ROWS]:
        out.append("<tr>")
        for i, cell in enumerate(row):
            kind = "c" if i == code and not numeric[i] else cls[i]
            out.append(f'<td class="{kind}">{text(cell)}</td>')
        out.append("</tr>")
    out.append("</table>")
    if len(rows) > ROWS:
        out.append(f'<p class="note">... and {len(rows) - ROWS:,} more rows (see --json)</p>')
    return "".join(out)


def _bars(items: Sequence[Tuple[str, float]], unit: str = "", width: int = 640) -> str:
    """A horizontal bar chart (inline SVG) of ``(label, value)`` pairs."""
    if not items:
        return ""
    top = max(v for _, v in items) or 1.0
    label_w, row_h = 230, 18
    parts = [f'<svg width="{width}" height="{row_h * len(items) + 4}" role="img">']
    for i, (label, value) in enumerate(items):
        y = i * row_h + 2
        w = max(1.0, (width - label_w - 110) * value / top) if value else 0
        short = label if len(label) <= 36 else label[:17] + "\u2026" + label[-18:]
        parts.append(
            f'<text x="0" y="{y + 12}">{text(short)}<title>{text(label)}</title></text>'
            f'<rect class="bar" x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row_h - 5}"/>'
            f'<text x="{label_w + w + 6:.1f}" y="{y + 12}">{text(unit_text(value, unit))}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def unit_text(value: float, unit: str) -> str:
    if unit == "bytes":
        return size_text(int(value))
    if unit == "params":
        return count_text(int(value))
    return f"{value:.4g}"


def _histogram(hist: Mapping[str, Any], width: int = 240, height: int = 48) -> str:
    """A histogram's bins as columns (inline SVG), its range below."""
    counts = hist["counts"]
    if not counts:
        return ""
    top = max(counts) or 1
    step = width / len(counts)
    parts = [f'<svg width="{width}" height="{height + 14}" role="img">']
    for i, c in enumerate(counts):
        h = height * c / top
        parts.append(
            f'<rect class="bar" x="{i * step:.2f}" y="{height - h:.2f}" '
            f'width="{max(step - 1, 0.5):.2f}" height="{h:.2f}"><title>{c:,}</title></rect>'
        )
    parts.append(
        f'<text x="0" y="{height + 12}">{text(_num(hist["lo"]))}</text>'
        f'<text x="{width}" y="{height + 12}" text-anchor="end">{text(_num(hist["hi"]))}</text>'
        "</svg>"
    )
    return "".join(parts)


def _num(x: Any) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.6g}"
    return f"{x:,}" if isinstance(x, int) else str(x)


# sections ---------------------------------------------------------------------------


def inspect_section(info: Mapping[str, Any]) -> str:
    """An ``inspect`` result (with ``layers``, ``config``; ``table`` when
    listed): summary, config.json, dtype breakdown, layer view."""
    out = [f"<h2>{text(info['path'])}</h2>"]
    facts: List[Tuple[str, str]] = [
        ("kind", info.get("kind") or "file"),
        ("file size", f"{size_text(info['file_len'])} ({plural(info['file_len'], 'byte')})"),
        ("tensors", f"{info['tensors']:,}"),
        ("parameters", count_text(info["parameters"])),
    ]
    if info.get("shards") is not None:
        facts.append(("shards", f"{len(info['shards']):,}"))
    metadata = info.get("metadata") or {}
    facts.append(("metadata", ", ".join(sorted(metadata)) or "(none)"))
    out.append(_table(["", ""], facts, [False, False]))
    config = info.get("config")
    if config is not None:
        out.append(_config(config))
    by_dtype = info["by_dtype"]
    if by_dtype:
        out.append("<h3>By dtype</h3>")
        out.append(
            _table(
                ["dtype", "tensors", "parameters", "size"],
                [
                    (d["dtype"], f"{d['tensors']:,}", f"{d['parameters']:,}", size_text(d["bytes"]))
                    for d in by_dtype
                ],
                [False, True, True, True],
            )
        )
        out.append(_bars([(d["dtype"], d["bytes"]) for d in by_dtype], "bytes"))
    layers = info.get("layers")
    if layers is not None:
        out.append(_layers(layers))
    rows = info.get("table")
    if rows is not None:
        out.append("<h3>Tensors</h3>")
        out.append(
            _table(
                ["name", "dtype", "shape", "begin", "end"]
                + (["shard"] if info.get("shards") is not None else []),
                [(r[0], r[1], shape_text(r[2]), f"{r[3]:,}", f"{r[4]:,}", *r[5:]) for r in rows],
                [False, False, False, True, True, False],
            )
        )
    return "".join(out)


def _config(config: Mapping[str, Any]) -> str:
    out = ["<h3>config.json</h3>"]
    if config["problem"] is not None:
        out.append(f'<p class="bad">{text(config["path"])} not read: {text(config["problem"])}</p>')
        return "".join(out)
    keys = ("architectures", "class_name", "model_type", "num_hidden_layers", "hidden_size")
    facts = [(k, config[k]) for k in keys if config[k] not in (None, [])]
    facts = [(k, ", ".join(v) if isinstance(v, list) else v) for k, v in facts]
    if config["dtype"]:
        facts.append(("dtype", config["dtype"]))
    out.append(_table(["", ""], facts, [False, False]))
    for line in config["notes"]:
        out.append(f'<p class="note">{text(line)}</p>')
    for line in config["mismatches"]:
        out.append(f'<p class="bad">mismatch: {text(line)}</p>')
    return "".join(out)


def _layers(layers: Mapping[str, Any]) -> str:
    out = []
    blocks, single = layers["blocks"], layers["single"]
    if blocks:
        out.append("<h3>Layer view: repeated blocks</h3>")
        out.append(
            _table(
                ["block", "repeats", "tensors", "parameters", "size", "dtype"],
                [
                    (
                        b["pattern"],
                        f"{b['repeats']:,}",
                        f"{b['tensors']:,}",
                        f"{b['parameters']:,}",
                        size_text(b["bytes"]),
                        ", ".join(b["dtypes"]),
                    )
                    for b in blocks
                ],
                [False, True, True, True, True, False],
            )
        )
    parts = [(b["pattern"], b["parameters"]) for b in blocks]
    parts += [(t["name"], t["parameters"]) for t in single]
    parts.sort(key=lambda p: -p[1])
    if parts:
        out.append("<h3>Parameters by block and tensor</h3>")
        out.append(_bars(parts[:40], "params"))
    if single:
        out.append("<h3>Other tensors</h3>" if blocks else "<h3>Tensors</h3>")
        out.append(
            _table(
                ["name", "dtype", "shape", "parameters", "size"],
                [
                    (
                        t["name"],
                        t["dtype"],
                        shape_text(t["shape"]),
                        f"{t['parameters']:,}",
                        size_text(t["bytes"]),
                    )
                    for t in single
                ],
                [False, False, False, True, True],
            )
        )
    return "".join(out)


def stats_section(path: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """Per-tensor statistics (``fastst.tools.stats.tensor_stats`` rows) of
    ``path``, each with its histogram."""
    out = [f"<h2>Values of {text(path)}</h2>"]
    out.append(
        '<table><tr><th>name</th><th>dtype</th><th class="n">min</th><th class="n">max</th>'
        '<th class="n">mean</th><th class="n">std</th><th class="n">NaN</th>'
        '<th class="n">Inf</th><th class="n">zeros</th><th>histogram</th></tr>'
    )
    for r in rows[:ROWS]:
        cells = [r["min"], r["max"], r["mean"], r["std"], r["nan"], r["inf"], r["zero"]]
        out.append(f'<tr><td class="c">{text(r["name"])}</td><td>{text(r["dtype"])}</td>')
        for i, v in enumerate(cells):
            cls = "n bad" if i in (4, 5) and v else "n"  # NaN and Inf counts stand out
            out.append(f'<td class="{cls}">{text(_num(v))}</td>')
        hist = r.get("histogram")
        out.append(f"<td>{_histogram(hist) if hist else ''}</td></tr>")
    out.append("</table>")
    if len(rows) > ROWS:
        out.append(f'<p class="note">... and {len(rows) - ROWS:,} more tensors (see --json)</p>')
    return "".join(out)


def diff_section(d: Mapping[str, Any]) -> str:
    """A ``diff`` result: the verdict, what is only in one side, what
    changed, and the value differences as bars."""
    verdict = "identical" if d["identical"] else "different"
    out = [f"<h2>{text(d['a'])} vs {text(d['b'])}: {verdict}</h2>"]
    out.append(
        _table(
            ["", ""],
            [
                ("tensors in both", f"{d['tensors']:,}"),
                ("identical", f"{d['identical_tensors']:,}"),
                ("different values", f"{len(d['different']):,}"),
                ("only in A", f"{len(d['only_in_a']):,}"),
                ("only in B", f"{len(d['only_in_b']):,}"),
            ],
            [False, True],
        )
    )
    for label, names in (("Only in A", d["only_in_a"]), ("Only in B", d["only_in_b"])):
        if names:
            out.append(f"<h3>{label}</h3>" + _table(["name"], [(n,) for n in names], [False]))
    changes = [(c["name"], "dtype", c["a"], c["b"]) for c in d["dtype_changed"]]
    changes += [
        (c["name"], "shape", shape_text(c["a"]), shape_text(c["b"])) for c in d["shape_changed"]
    ]
    if changes:
        out.append("<h3>Changed</h3>")
        out.append(_table(["name", "what", "A", "B"], changes, [False] * 4))
    if d["different"]:
        out.append("<h3>Value differences</h3>")
        out.append(
            _table(
                ["name", "dtype", "shape", "differing", "max abs", "max rel", "rel L2", "cosine"],
                [
                    (
                        t["name"],
                        t["dtype"],
                        shape_text(t["shape"]),
                        f"{t['differing']:,} of {t['elements']:,}",
                        _num(t["max_abs"]),
                        _num(t["max_rel"]),
                        _num(t.get("rel_l2")),
                        _num(t.get("cosine")),
                    )
                    for t in d["different"]
                ],
                [False, False, False, True, True, True, True, True],
            )
        )
        finite = [
            (t["name"], float(t["max_abs"]))
            for t in d["different"]
            if t["max_abs"] is not None and t["max_abs"] != float("inf")
        ]
        finite.sort(key=lambda p: -p[1])
        out.append(_bars(finite[:40]))
    layers = [c for c in d.get("layers") or [] if c["max_rel_l2"] is not None]
    if layers:
        out.append("<h3>Largest relative L2 change per layer</h3>")
        out.append(_bars([(c["layer"], c["max_rel_l2"]) for c in layers]))
    return "".join(out)


# the page ---------------------------------------------------------------------------

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def page(title: str, sections: Sequence[str], command: Optional[str] = None) -> str:
    """The whole page: ``sections`` (HTML made by the functions above)
    under a title (escaped here)."""
    made = f"fastst {__version__}" + (f", fastst {command}" if command else "")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{text(title)}</title><style>{_CSS}</style></head>\n<body>"
        f"<h1>{text(title)}</h1>"
        + "\n".join(sections)
        + f'<p class="note">Made by {text(made)}; the page loads nothing.</p></body></html>\n'
    )


def report(out: Out, path: str, command: str, sections: List[str], inputs: Sequence[str]) -> None:
    """Writes the ``--html`` page of ``command`` over ``inputs`` to ``path``
    when it has something to show; a run that read nothing writes no page
    (its errors say why). Inputs are named as results name them
    (:func:`fastst._paths.shown`: a URL without its user part, query or
    fragment). Failing to write is an error recorded on ``out`` like an
    unreadable input (exit 2)."""
    if not sections:
        out.warn(f"{path}: no report written: no input was read")
        return
    title = f"fastst {command}: " + ", ".join(shown(i) for i in inputs)
    try:
        write(path, page(title, sections, command))
    except OSError as exc:
        out.error(path, exc)


def write(path: str, content: str) -> None:
    """Writes ``content`` to ``path`` whole or not at all
    (:func:`fastst._write.atomic.replace_bytes`)."""
    replace_bytes(path, content.encode("utf-8"))
