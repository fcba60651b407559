"""``fastst stats``: what each tensor's values look like, as tables and charts.

A table with a sparkline of each histogram, a per-layer profile, and a bar
chart when one tensor is shown (``--json`` for the numbers)."""

from __future__ import annotations

import argparse
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .._paths import shown
from ..tools.stats import layer_of, stats_checkpoint, stats_file
from . import charts, html, render
from .exits import EXIT_ERROR, EXIT_OK
from .inputs import READ_ERRORS, inputs, not_safetensors
from .text import display_width, pad

__all__ = ["cmd_stats", "print_stats", "print_layers_changed"]

#: Columns of the histogram sparkline in the table (bins are merged to fit).
_SPARK = 16
#: Narrowest the name column gets before other columns are dropped.
_NAME_MIN = 24


def cmd_stats(args: argparse.Namespace, out: render.Out) -> int:
    results = []
    sections: List[str] = []
    progress = not args.no_progress and render.stderr_is_terminal()
    options = dict(bins=args.bins, threads=args.threads, header_cap=args.header_cap)
    for kind, path in inputs(out, args.files):
        try:
            if kind == "checkpoint":
                rows = stats_checkpoint(path, args.tensor, progress=progress, **options)
            else:
                if not_safetensors(out, path):
                    continue
                rows = stats_file(path, args.tensor, progress=progress, **options)
        except READ_ERRORS as exc:
            out.error(path, exc)
            continue
        report = {"path": shown(path), "kind": kind, "tensors": rows}
        if args.html:
            sections.append(html.stats_section(shown(path), rows))
        if args.json:
            results.append(report)
        else:
            print_stats(out, report, ascii=args.ascii or not charts.unicode_ok(out.stdout))
    if args.json:
        out.json(render.envelope("stats", results, out))
    if args.html:
        html.report(out, args.html, "stats", sections, args.files)
    return EXIT_ERROR if out.errors else EXIT_OK


def number(x: Any) -> str:
    """A statistic in at most 10 columns (``-`` when there is none)."""
    if x is None:
        return "-"
    if isinstance(x, int):
        return f"{x:,}" if abs(x) < 10**7 else f"{x:.3e}"
    return f"{x:.4g}"


def _zeros(t: Dict[str, Any]) -> str:
    if not t["values"]:
        return "-"
    share = 100 * t["zero"] / t["values"]
    return f"{share:.0f}%" if share >= 1 or not t["zero"] else "<1%"


#: Columns after the name: (title, value of a row), in the order they are
#: left out when the width is short (after the name has shrunk to 24 columns).
_COLUMNS: Tuple[Tuple[str, Any], ...] = (
    ("shape", lambda t: render.shape_text(t["shape"])),
    ("zeros", _zeros),
    ("mean", lambda t: number(t["mean"])),
    ("nan+inf", lambda t: f"{t['nan'] + t['inf']:,}"),
    ("dtype", lambda t: t["dtype"]),
    ("std", lambda t: number(t["std"])),
    ("min", lambda t: number(t["min"])),
    ("max", lambda t: number(t["max"])),
)
_ORDER = ("dtype", "shape", "min", "max", "mean", "std", "nan+inf", "zeros")


def print_stats(out: render.Out, report: Dict[str, Any], *, ascii: bool = False) -> None:
    """The ``stats`` report of one file or checkpoint: one row per tensor
    (:func:`fastst.cli.render.table`: the name shrinks first, keeping layer
    numbers and leaves, then columns are left out), the per-layer profile, and
    the bars of a lone tensor's histogram."""
    tensors: List[Dict[str, Any]] = report["tensors"]
    count = f"  ({render.plural(len(tensors), 'tensor')})"
    room = None if out.width is None else max(8, out.width - len(count))
    out.print(("bold", out.fit(report["path"], room)), count)
    if not tensors:
        out.blank()
        return
    names = [t["name"] if t["shard"] is None else f"{t['shard']}: {t['name']}" for t in tensors]
    give = {title: i + 1 for i, (title, _) in enumerate(_COLUMNS)}
    values = dict(_COLUMNS)
    spark = min(
        _SPARK, max((len(t["histogram"]["counts"]) for t in tensors if t["histogram"]), default=0)
    )
    columns = [
        render.Column(
            "name",
            [render.escape(n) for n in names],
            least=_NAME_MIN,
            shorten=render.abbreviate,
        )
    ]
    for title in _ORDER:
        cells = [values[title](t) for t in tensors]
        columns.append(render.Column(title, cells, title != "dtype", 0, give[title]))
    if spark:
        sparks = [
            charts.sparkline(t["histogram"]["counts"], spark, ascii=ascii) if t["histogram"] else ""
            for t in tensors
        ]
        columns.append(render.Column("histogram", sparks, give=len(_COLUMNS) + 1))
    render.table(out, columns)
    _print_layers(out, tensors, ascii)
    if len(tensors) == 1 and tensors[0]["histogram"]:
        _print_bars(out, tensors[0], ascii)
    out.blank()


def _print_layers(out: render.Out, tensors: Sequence[Dict[str, Any]], ascii: bool) -> None:
    """For each tensor repeated in numbered blocks (``model.layers.N.``),
    its std across the blocks as a sparkline, with the range."""
    by_pattern: Dict[str, Dict[int, Optional[float]]] = {}
    for t in tensors:
        found = layer_of(t["name"])
        if found is not None:
            block, n, rest = found
            by_pattern.setdefault(f"{block}.*.{rest}", {})[n] = t["std"]
    rows = [(p, layers) for p, layers in by_pattern.items() if len(layers) > 1]
    if not rows:
        return
    out.print(("dim", "  std by layer (each block, lowest to highest)"))
    name_w = max(display_width(render.escape(p)) for p, _ in rows)
    for pattern, layers in rows:
        values = _by_layer(layers)
        present = [v for v in values if v is not None]
        lo, hi = (min(present), max(present)) if present else (None, None)
        span = f"  {number(lo)} .. {number(hi)}"
        room = None if out.width is None else out.width - 4 - len(span)
        columns = len(values) if room is None else max(0, min(len(values), room // 3))
        name_room = name_w if room is None else max(8, min(name_w, room - columns))
        line = charts.sparkline(values, columns, ascii=ascii, merge="max", relative=True)
        out.print("  ", pad(out.fit(pattern, name_room), name_room), "  ", line, span)


def _by_layer(layers: Mapping[int, Optional[float]]) -> List[Optional[float]]:
    """``layers``' values from the lowest layer to the highest, a gap (None)
    for each number missing between them, unless the numbers (from names,
    so data) spread over more than a few times their count: then the
    values in order, without gaps."""
    low, high = min(layers), max(layers)
    if high - low < 4 * len(layers):
        return [layers.get(n) for n in range(low, high + 1)]
    return [layers[n] for n in sorted(layers)]


def _print_bars(out: render.Out, t: Dict[str, Any], ascii: bool) -> None:
    """One tensor's histogram as horizontal bars, one line per bin."""
    h = t["histogram"]
    counts = h["counts"]
    step = (h["hi"] - h["lo"]) / len(counts)
    lefts = [number(h["lo"] + i * step) for i in range(len(counts))]
    label_w = max(len(x) for x in lefts)
    count_w = max(len(f"{c:,}") for c in counts)
    room = 40 if out.width is None else max(1, out.width - 4 - label_w - 2 - count_w - 1)
    note = "" if h["exact"] else " (values cut to 8 bits)"
    title = f"  {len(counts)} bins of {number(step)}{note}"
    out.print(("dim", out.fit(title, out.width)))
    top = max(counts)
    for left, c in zip(lefts, counts, strict=True):
        bar = charts.bar(c, top, room, ascii=ascii)
        out.print("    ", pad(left, label_w, right=True), "  ", pad(bar, room), " ", f"{c:,}")


#: Layers listed one by one in a diff (all with ``--full``).
_LAYER_LIST = 20


def print_layers_changed(out: render.Out, d: Mapping[str, Any], *, ascii: bool = False) -> None:
    """The per-layer summary of a diff: for each numbered block, a sparkline
    of each layer's largest relative L2 change (blank: unchanged), then the
    layers that changed, the first few unless ``--full``."""
    layers: List[Dict[str, Any]] = list(d.get("layers") or [])
    if not any(layer["changed"] for layer in layers):
        return
    blocks: Dict[str, List[Dict[str, Any]]] = {}
    for layer in layers:
        blocks.setdefault(layer["layer"].rsplit(".", 1)[0], []).append(layer)
    label = "  layers       "
    for block, rows in blocks.items():
        changed = [r for r in rows if r["changed"]]
        rels = [r["max_rel_l2"] for r in rows]
        summary = f"  {len(changed):,} of {render.plural(len(rows), 'layer')} changed"
        known = [r for r in rows if r["max_rel_l2"] is not None]
        if known:
            worst = max(known, key=lambda r: r["max_rel_l2"])
            summary += f", max rel L2 {number(worst['max_rel_l2'])} ({worst['layer']})"
        room = None if out.width is None else max(8, out.width - len(label))
        name = out.fit(block + ".N", None if room is None else max(4, room // 2))
        columns = len(rows) if room is None else max(0, min(len(rows), room - len(name) - 2))
        spark = charts.sparkline(rels, columns, ascii=ascii, merge="max")
        out.print(label, name, "  " if columns else "", spark.rstrip())
        out.print(" " * len(label), out.fit(summary.strip(), room))
        label = " " * len(label)
    lines = []
    for r in (r for rows in blocks.values() for r in rows if r["changed"]):
        text = f"{r['layer']}: {r['changed']:,}/{render.plural(r['tensors'], 'tensor')}"
        if r["max_rel_l2"] is not None:
            text += f", max rel L2 {number(r['max_rel_l2'])}"
        lines.append(text)
    shown = lines if out.full else lines[:_LAYER_LIST]
    room = None if out.width is None else max(out.width - 15, 16)
    for text in shown:
        out.print(" " * 15, out.fit(text, room))
    if len(shown) < len(lines):
        out.print(" " * 15, f"... and {len(lines) - len(shown):,} more (--full lists all)")
