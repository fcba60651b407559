"""The text of each subcommand's report (``inspect``, ``verify``,
``hash``, ``meta``), laid out for :class:`.render.Out`: its width, its
colours, names shortened in the middle in tables unless ``--full``."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..tools import inspect as fi
from .render import Out, count_text, plural, shape_text, size_text
from .text import display_width, escape, fit, json_text, pad, wrap


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
    fixed = 2 + 2 + dw + 2 + sw + 2 + bw + 2 + ew + ((2 + fw) if sharded else 0)
    nw = max([4] + [display_width(n) for n in names])
    if out.width is not None and not out.full:
        nw = min(nw, max(out.width - fixed, 16))
    head = [
        "  ",
        pad("name", nw),
        "  ",
        pad("dtype", dw),
        "  ",
        pad("shape", sw),
        "  ",
        pad("begin", bw, right=True),
        "  ",
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
            "  ",
            pad(shapes[i], sw),
            "  ",
            pad(begins[i], bw, right=True),
            "  ",
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
    if report["kind"] == "folder":
        verdict = "not scanned"
    elif not report["complete"]:
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
    card: Mapping[str, Any],
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
        for note in card["notes"]:
            line("not understood", note)
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


def print_written(out: Out, path: str, written: Dict[str, Any]) -> None:
    """What ``meta --set/--unset`` wrote."""
    out.print("wrote ", ("bold", path))
    if written["set"]:
        _lines(out, "  set", ", ".join(written["set"]), 14)
    if written["removed"]:
        _lines(out, "  removed", ", ".join(written["removed"]), 14)
    data = (
        "data section byte-identical"
        if written["data_unchanged"]
        else "tensors reordered as the writer lays them out"
    )
    out.print(
        f"  tensors     {plural(written['tensors'], 'tensor')} copied unchanged "
        f"(SHA-256 checked); {data}"
    )


#: Names listed per kind of difference unless ``--full``.
_DIFF_LIST = 20


def _number(x: Any) -> str:
    if x is None:
        return "n/a"
    if x == float("inf"):
        return "inf"
    return f"{x:.3g}" if x else "0"


def print_diff(out: Out, d: Mapping[str, Any]) -> None:
    """The ``diff`` report: the verdict, counts, then one line per
    difference (the first few of each kind unless ``--full``)."""
    out.print("A  ", ("bold", d["a"]))
    out.print("B  ", ("bold", d["b"]))
    verdict = ("ok", "identical") if d["identical"] else ("high", "different")
    out.print("  result       ", verdict)
    changed = len(d["dtype_changed"]) + len(d["shape_changed"])
    out.print(
        f"  tensors      {d['tensors']:,} in both: {d['identical_tensors']:,} identical, "
        f"{len(d['different']):,} with different values, {changed:,} changed in dtype or "
        f"shape; {len(d['only_in_a']):,} only in A, {len(d['only_in_b']):,} only in B"
    )
    room = None if out.width is None else max(out.width - 15, 16)

    def listing(label: str, lines: List[str]) -> None:
        shown = lines if out.full else lines[:_DIFF_LIST]
        for i, line in enumerate(shown):
            out.print(pad(f"  {label}" if i == 0 else "", 15), out.fit(line, room))
        if len(shown) < len(lines):
            out.print(" " * 15, f"... and {len(lines) - len(shown):,} more (--full lists all)")

    listing("only in A", d["only_in_a"])
    listing("only in B", d["only_in_b"])
    listing("dtype", [f"{c['name']}: {c['a']} -> {c['b']}" for c in d["dtype_changed"]])
    listing(
        "shape",
        [f"{c['name']}: {shape_text(c['a'])} -> {shape_text(c['b'])}" for c in d["shape_changed"]],
    )
    values = []
    for t in d["different"]:
        text = (
            f"{t['name']} ({t['dtype']} {shape_text(t['shape'])}): "
            f"{t['differing']:,} of {plural(t['elements'], 'element')} differ"
        )
        if t["max_abs"] is not None:
            text += f", max abs {_number(t['max_abs'])}, max rel {_number(t['max_rel'])}"
        if t["differing"] == 0:
            text += " (only the sign of zeros or NaN payloads changed)"
        values.append(text)
    listing("values", values)
    meta = d["metadata"]
    lines = [f"{k}: {a!r} -> {b!r}" for k, (a, b) in meta["changed"].items()]
    lines += [f"+ {k}: {v!r} (only in B)" for k, v in meta["only_in_b"].items()]
    lines += [f"- {k}: {v!r} (only in A)" for k, v in meta["only_in_a"].items()]
    listing("metadata", lines)
    out.blank()


def print_converted(out: Out, c: Mapping[str, Any]) -> None:
    """What ``convert`` did."""
    out.print("converted ", ("bold", c["source"]), " -> ", ("bold", c["output"]))
    loaded = "loaded with torch.load(weights_only=True)"
    out.print(f"  source       {c['format']}, {loaded}")
    if c["picked"] is not None:
        out.print("  state dict   entry ", repr(c["picked"]))
    out.print(
        f"  tensors      {plural(c['tensors'], 'tensor')}, {count_text(c['parameters'])} "
        f"parameters, {size_text(c['bytes'])}"
    )
    if c["dtype"] is not None:
        out.print(f"  dtype        {plural(c['converted'], 'tensor')} converted to {c['dtype']}")
    shared = [f"{dropped} -> {kept}" for dropped, kept in c["removed_shared"].items()]
    if shared:
        _lines(out, "  shared", "stored once (recorded in the metadata): " + ", ".join(shared), 15)
    if c["skipped"]:
        _lines(out, "  skipped", "not tensors: " + ", ".join(c["skipped"]), 15)
    if len(c["files"]) > 1:
        out.print(f"  written      {plural(len(c['files']) - 1, 'shard')} and the index")
    out.print("  check        ", ("ok", "OK"), ": every tensor read back bit for bit equal")
    out.blank()
