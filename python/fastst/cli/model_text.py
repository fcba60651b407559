"""The text of what a checkpoint holds, laid out for :class:`.render.Out`.

That is ``inspect``'s summary, its layer view or tensor table, and the
``config.json`` beside the weights (``meta`` shows that too)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from .render import (
    Column,
    Out,
    abbreviate,
    affixes,
    count_text,
    paragraph,
    plural,
    room,
    shape_text,
    size_text,
    table,
)
from .text import display_width, escape, pad


def _lines(out: Out, label: str, value: str, indent: int) -> None:
    """``label`` then ``value`` (escaped) wrapped to the width with a
    hanging indent of ``indent`` columns."""
    paragraph(out, pad(label, indent), value, indent)


def print_inspect(
    out: Out,
    info: Dict[str, Any],
    shown: Optional[Tuple[str, np.ndarray]],
    args: Any,
) -> None:
    """The ``inspect`` report of one file or checkpoint (``info`` from
    :func:`fastst.tools.inspect.inspect_file` or
    :func:`fastst.tools.inspect.inspect_checkpoint`, its table already filtered
    and sorted; ``shown``: the values asked for with ``--tensor``)."""
    out.print(("bold", info["path"]))
    shards = info.get("shards")
    if shards is not None:
        out.print(f"  checkpoint   {plural(len(shards), 'shard')} and an index")
    out.print(f"  file size    {size_text(info['file_len'])} ({plural(info['file_len'], 'byte')})")
    if shards is None:
        out.print(
            f"  header       {plural(info['header_len'], 'byte')}, "
            f"data at offset {info['data_start']:,} (aligned to {info['data_alignment']:,})"
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
        files = [escape(s["file"]) for s in shards]
        shorten = affixes(files)
        nw = max(display_width(f) for f in files) if files else 0
        limit = room(out, 15 + 30, 12)
        nw = nw if limit is None else min(nw, limit)
        for i, s in enumerate(shards):
            label = "  shards       " if i == 0 else " " * 15
            out.print(
                label,
                pad(shorten(files[i], nw), nw),
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
    if info.get("config") is not None:
        print_config(out, info["config"])
    rows = info.get("table")
    if rows is not None:
        out.blank()
        _print_table(out, info, rows, args)
    elif info.get("layers") is not None:
        _print_layers(out, info["layers"])
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


def print_config(out: Out, config: Mapping[str, Any]) -> None:
    """The ``config.json`` beside the weights: what it declares, then where
    the weights disagree with it."""
    if config["problem"] is not None:
        _lines(out, "  config", f"{config['path']} not read: {config['problem']}", 15)
        return
    facts = [", ".join(config["architectures"]) or config["class_name"] or "config.json"]
    if config["model_type"]:
        facts.append(f"model_type {config['model_type']}")
    if config["num_hidden_layers"] is not None:
        facts.append(plural(config["num_hidden_layers"], "layer"))
    if config["hidden_size"] is not None:
        facts.append(f"hidden size {config['hidden_size']:,}")
    if config["dtype"]:
        facts.append(config["dtype"])
    _lines(out, "  config", ", ".join(facts), 15)
    for note in config["notes"]:
        _lines(out, "", note, 15)
    for i, mismatch in enumerate(config["mismatches"]):
        paragraph(out, ("medium", pad("  mismatch" if i == 0 else "", 15)), mismatch, 15)


#: Tensors outside any repeated block listed by the layer view unless ``--wide``.
_SINGLE_LIST = 20


def _print_layers(out: Out, layers: Mapping[str, Any]) -> None:
    """The layer view: one row per repeated block, then the other tensors."""
    blocks, single = layers["blocks"], layers["single"]
    if blocks:
        out.blank()
        table(
            out,
            [
                Column("block", [escape(b["pattern"]) for b in blocks], least=20),
                Column("repeats", [f"{b['repeats']:,}" for b in blocks], True, 7, 5),
                Column("tensors", [f"{b['tensors']:,}" for b in blocks], True, 0, 3),
                Column("parameters", [f"{b['parameters']:,}" for b in blocks], True, 0, 2),
                Column("size", [size_text(b["bytes"]) for b in blocks], True, 10, 4),
                Column("dtype", [", ".join(b["dtypes"]) for b in blocks], give=1),
            ],
        )
    shown = single if out.full else single[:_SINGLE_LIST]
    if shown:
        out.blank()
        table(
            out,
            [
                Column(
                    "other tensors" if blocks else "tensors",
                    [escape(t["name"]) for t in shown],
                    least=20,
                    give=1,
                    shorten=abbreviate,
                ),
                Column("dtype", [t["dtype"] for t in shown], least=5, give=5),
                Column("shape", [shape_text(t["shape"]) for t in shown], least=9, give=3),
                Column("parameters", [f"{t['parameters']:,}" for t in shown], True, 0, 2),
                Column("size", [size_text(t["bytes"]) for t in shown], True, 10, 4),
            ],
        )
    if len(shown) < len(single):
        out.print(f"  ... and {len(single) - len(shown):,} more (--tensors lists every tensor)")


def _print_table(out: Out, info: Dict[str, Any], rows: List[Any], args: Any) -> None:
    """The flat tensor table (``--tensors``): the shard column gives way
    first, then the name (shortened keeping layer numbers and the leaf),
    then the shape; the offsets are left out when even that is not enough."""
    columns = [
        Column("name", [escape(r[0]) for r in rows], least=24, give=1, shorten=abbreviate),
        Column("dtype", [r[1] for r in rows], least=5, give=5),
        Column("shape", [shape_text(r[2]) for r in rows], least=9, give=2),
        Column("begin", [f"{r[3]:,}" for r in rows], right=True, give=4),
        Column("end", [f"{r[4]:,}" for r in rows], right=True, give=3),
    ]
    if info.get("shards") is not None:
        shards = [escape(r[5]) for r in rows]
        columns.append(Column("shard", shards, least=7, give=0, shorten=affixes(shards)))
    table(out, columns)
    if args.filter:
        out.print(
            f"  ({len(rows):,} of {plural(info['tensors'], 'tensor')} match ",
            repr(args.filter),
            ")",
        )
