"""The text of each subcommand's report, laid out for :class:`.render.Out`.

Reports of ``verify``, ``hash``, ``meta``, ``diff`` and ``convert``
(``inspect``'s is in :mod:`.model_text`), with its width, its colours, names
shortened keeping what tells them apart unless ``--wide``."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..tools import inspect as fi
from .model_text import print_config
from .render import (
    Out,
    abbreviate,
    count_text,
    digest_lines,
    paragraph,
    plural,
    room,
    shape_text,
    size_text,
)
from .stats import print_layers_changed
from .text import display_width, escape, json_text, pad, wrap


def _lines(out: Out, label: str, value: str, indent: int) -> None:
    """``label`` then ``value`` (escaped) wrapped to the width with a
    hanging indent of ``indent`` columns."""
    paragraph(out, pad(label, indent), value, indent)


# verify ---------------------------------------------------------------------


def print_verify(out: Out, report: Dict[str, Any]) -> None:
    """The ``verify`` report of one file or checkpoint: the verdict (a red
    flag, malformed and so inconclusive, or neither), then one line per
    finding, most severe first, those saying the file is malformed marked
    so."""
    findings = report["findings"]
    verdict = "accepted by the reader" if report["accepted"] else "REJECTED by the reader"
    if report["kind"] == "folder":
        verdict = "not scanned"
    elif not report["complete"]:
        verdict += "; header unreadable, tensors not examined"
    if report.get("values_checked") is not None:
        verdict += f"; values of {plural(report['values_checked'], 'tensor')} checked"
    if not findings:
        paragraph(out, ("bold", report["path"]), f": OK, no findings ({verdict})", 2)
        return
    counts: Dict[str, int] = {}
    for f in findings:
        counts[f["severity"]] = counts.get(f["severity"], 0) + 1
    by_severity = ", ".join(f"{counts[s]:,} {s}" for s in reversed(fi.SEVERITIES) if s in counts)
    # A red flag at or above --fail-on fails the input; a malformed one
    # without any is inconclusive: the two are never said alike.
    state = ""
    if report.get("fails"):
        state = "RED FLAG: "
    elif report.get("malformed"):
        state = "MALFORMED, inconclusive: "
    elif report.get("inconclusive"):
        state = "INCONCLUSIVE: "
    summary = f": {state}{plural(len(findings), 'finding')} ({by_severity}); {verdict}"
    paragraph(out, ("bold", report["path"]), summary, 2)
    width = max(len(f["rule"]) for f in findings)
    indent = 2 + 8 + 1 + width + 2
    room = None if out.width is None else max(out.width - indent, 20)
    for f in findings:
        sev = f["severity"]
        where = f"{escape(f['shard'])}: " if f.get("shard") else ""
        if f.get("verdict") == "malformed":
            where = "malformed: " + where
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
        tail = f"  ({plural(len(shards), 'shard')})"
        digest_lines(out, "  checkpoint     ", h["checkpoint_sha256"], tail=tail)
        _named_digests(out, [(s["file"], s["sha256"]) for s in shards])
        out.blank()
        return
    digest_lines(out, "  sha256         ", h["sha256"])
    out.print(f"  autov1         {h['autov1']}")
    out.print(f"  autov2         {h['autov2']}")
    if h["autov3"] is not None:
        digest_lines(out, "  autov3         ", h["autov3"])
        out.print(f"  civitai        {h['autov3'][:12]}  (AutoV3 as CivitAI shows it)")
    else:
        out.print("  autov3         (none: the length prefix points past the end of the file)")
    if h["header_sha256"] is not None:
        digest_lines(out, "  header_sha256  ", h["header_sha256"])
    problem = h.get("header_problem")
    if problem:
        _lines(out, "  header", f"not usable: {problem['message']}", 17)
    tensors = h.get("tensors")
    if tensors:
        out.print("  tensors:")
        _named_digests(out, list(tensors.items()))
    for check in h.get("check") or []:
        if check["rule"] == "no-embedded-hash":
            _lines(out, "  check", "nothing to compare: no embedded hash in the metadata", 17)
        else:
            sev = check["severity"]
            _lines(out, "  check", f"{sev.upper()} {check['rule']}: {check['message']}", 17)
    if h.get("check") == []:
        out.print("  check          ", ("ok", "OK"), ": embedded hashes match")
    out.blank()


def _named_digests(out: Out, pairs: List[Tuple[str, str]]) -> None:
    """``digest  name`` per line; where that does not fit, the name
    (shortened) on one line and its whole digest below."""
    limit = room(out)
    for name, digest in pairs:
        safe = escape(name)
        if limit is None or 4 + len(digest) + 2 + min(display_width(safe), 24) <= limit:
            out.print(f"    {digest}  ", abbreviate(safe, None if limit is None else limit - 70))
        else:
            out.print("    ", abbreviate(safe, limit - 4))
            digest_lines(out, "", digest, 6)


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
    config: Optional[Mapping[str, Any]] = None,
) -> None:
    """The ``meta`` report of one file: the ``config.json`` beside it, the
    metadata card (unless ``raw_only``; only the fields the kind of model
    has), then every key with JSON values indented."""
    out.print(("bold", path))
    if config is not None and not raw_only:
        print_config(out, config)
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
        if thumb:
            line("thumbnail", f"{thumb['mime']}, {size_text(thumb['bytes'])}")
        elif _pictures(card):
            line("thumbnail", "none")
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
            paragraph(out, f"    {key}: ", text, 6)
    out.blank()


def _pictures(card: Mapping[str, Any]) -> bool:
    """Whether the card is of a model that makes pictures (where a missing
    thumbnail is worth saying): the facts only image tools record."""
    keys = ("architecture", "resolution", "sd_model_name", "network", "training")
    return any(card[k] for k in keys) or bool(card["trigger_words"])


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


def _profile(t: Mapping[str, Any], with_max: bool = True) -> str:
    """The change profile of a tensor, when its values were compared."""
    parts = []
    if with_max and t.get("max_abs") is not None:
        parts.append(f"max abs {_number(t['max_abs'])}")
    if t.get("rel_l2") is not None:
        parts.append(f"rel L2 {_number(t['rel_l2'])}")
    if t.get("cosine") is not None:
        parts.append(f"cos {t['cosine']:.6g}")
    return (
        "".join(", " + p for p in parts)
        if with_max is False
        else (" (" + ", ".join(parts) + ")" if parts else "")
    )


def print_diff(out: Out, d: Mapping[str, Any], *, ascii: bool = False) -> None:
    """The ``diff`` report: the verdict, counts, then one line per
    difference (the first few of each kind unless ``--wide``), the changes
    per layer (charts in ASCII with ``ascii``)."""
    out.print("A  ", ("bold", d["a"]))
    out.print("B  ", ("bold", d["b"]))
    verdict = ("ok", "identical") if d["identical"] else ("high", "different")
    out.print("  result       ", verdict)
    changed = len(d["dtype_changed"]) + len(d["shape_changed"])
    _lines(
        out,
        "  tensors",
        f"{d['tensors']:,} in both: {d['identical_tensors']:,} identical, "
        f"{len(d['different']):,} with different values, {changed:,} changed in dtype or "
        f"shape; {len(d['only_in_a']):,} only in A, {len(d['only_in_b']):,} only in B",
        15,
    )
    limit = room(out, 15, 16)

    def listing(label: str, lines: List[Tuple[str, str]]) -> None:
        """One line per (name, what changed): the name gives way first."""
        shown = lines if out.full else lines[:_DIFF_LIST]
        for i, (name, rest) in enumerate(shown):
            safe, more = escape(name), escape(rest)
            if limit is not None:
                safe = abbreviate(safe, max(limit - display_width(more), 12))
            out.print(pad(f"  {label}" if i == 0 else "", 15), out.fit(safe + more, limit))
        if len(shown) < len(lines):
            out.print(" " * 15, f"... and {len(lines) - len(shown):,} more (--wide lists all)")

    listing("only in A", [(n, "") for n in d["only_in_a"]])
    listing("only in B", [(n, "") for n in d["only_in_b"]])
    listing(
        "dtype", [(c["name"], f": {c['a']} -> {c['b']}{_profile(c)}") for c in d["dtype_changed"]]
    )
    listing(
        "shape",
        [
            (c["name"], f": {shape_text(c['a'])} -> {shape_text(c['b'])}")
            for c in d["shape_changed"]
        ],
    )
    values = []
    for t in d["different"]:
        text = (
            f" ({t['dtype']} {shape_text(t['shape'])}): "
            f"{t['differing']:,} of {plural(t['elements'], 'element')} differ"
        )
        if t["max_abs"] is not None:
            text += f", max abs {_number(t['max_abs'])}, max rel {_number(t['max_rel'])}"
        text += _profile(t, with_max=False)
        if t["differing"] == 0:
            text += " (only the sign of zeros or NaN payloads changed)"
        values.append((t["name"], text))
    listing("values", values)
    if not d.get("values_compared", True):
        out.print("  values       not compared (--no-values): no tensor data was read")
    print_layers_changed(out, d, ascii=ascii)
    meta = d["metadata"]
    lines = [(k, f": {a!r} -> {b!r}") for k, (a, b) in meta["changed"].items()]
    lines += [("+ " + k, f": {v!r} (only in B)") for k, v in meta["only_in_b"].items()]
    lines += [("- " + k, f": {v!r} (only in A)") for k, v in meta["only_in_a"].items()]
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
