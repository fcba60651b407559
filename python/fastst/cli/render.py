"""Human-readable output of the ``fastst`` command: where text goes
(:class:`Out`), terminal detection, number formatting, and the text of each
subcommand's report (``--json`` and SARIF output are built elsewhere)."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any, Callable, Dict, Optional, TextIO, Tuple

import numpy as np

from .. import inspect as fi

# where text goes --------------------------------------------------------


def one_line(exc: BaseException) -> str:
    """A one-line message for an error about a file."""
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
        if exc.filename and str(exc.filename) not in text:
            text = f"{exc.filename}: {text}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


class Out:
    """Where a command writes: stdout for results, stderr for errors."""

    def __init__(self, stdout: TextIO, stderr: TextIO) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.errors = 0

    def print(self, text: str = "") -> None:
        self.stdout.write(text + "\n")

    def error(self, path: str, exc: BaseException) -> str:
        message = one_line(exc)
        if not message.startswith(path):
            message = f"{path}: {message}"
        self.stderr.write(f"fastst: {message}\n")
        self.errors += 1
        return message


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (where progress may be shown)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


# numbers ----------------------------------------------------------------


def size_text(n: int) -> str:
    """``n`` bytes in binary units: ``"512 B"``, ``"1.50 KiB"``..."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{n} B"


def count_text(n: int) -> str:
    """``n`` with thousands separators, and in K/M/B/T from a thousand up."""
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n:,} ({n / scale:.2f}{unit})"
    return f"{n:,}"


# inspect ----------------------------------------------------------------


def print_inspect(
    out: Out,
    info: Dict[str, Any],
    shown: Optional[Tuple[str, np.ndarray]],
    args: argparse.Namespace,
) -> None:
    """The ``inspect`` report of one file (``info`` from
    :func:`fastst.inspect.inspect_file`, its table already filtered and
    sorted; ``shown``: the values asked for with ``--tensor``)."""
    out.print(info["path"])
    out.print(f"  file size    {size_text(info['file_len'])} ({info['file_len']:,} bytes)")
    out.print(f"  header       {info['header_len']:,} bytes, data at offset {info['data_start']:,}")
    out.print(f"  tensors      {info['tensors']:,}")
    out.print(f"  parameters   {count_text(info['parameters'])}")
    for i, d in enumerate(info["by_dtype"]):
        label = "  by dtype     " if i == 0 else "               "
        out.print(
            f"{label}{d['dtype']:<12} {d['tensors']:>8,} tensors {d['parameters']:>16,} params"
            f"  {size_text(d['bytes'])}"
        )
    metadata = info.get("metadata")
    if metadata:
        plural = "s" if len(metadata) != 1 else ""
        keys = f"{len(metadata)} key{plural}: " + ", ".join(sorted(metadata))
        for line in textwrap.wrap(
            keys, width=100, initial_indent="  metadata     ", subsequent_indent=" " * 15
        ):
            out.print(line)
    else:
        out.print("  metadata     (none)")
    table = info.get("table")
    if table is not None:
        out.print()
        width = max([len("name")] + [len(r[0]) for r in table])
        out.print(f"  {'name':<{width}}  {'dtype':<11} {'shape':<20} {'begin':>14} {'end':>14}")
        for name, dtype, shape, begin, end in table:
            shape_text = "[" + ", ".join(str(d) for d in shape) + "]"
            out.print(f"  {name:<{width}}  {dtype:<11} {shape_text:<20} {begin:>14,} {end:>14,}")
        if args.filter:
            out.print(f"  ({len(table)} of {info['tensors']} tensors match {args.filter!r})")
    if shown is not None:
        dtype, array = shown
        note = " (shown as float32)" if array.dtype == np.float32 and dtype != "F32" else ""
        out.print()
        out.print(f"  {args.tensor}: {dtype} {list(array.shape)}{note}")
        with np.printoptions(threshold=args.max_values, linewidth=100):
            text = np.array2string(array, separator=" ")
        for line in text.splitlines():
            out.print(f"    {line}")
    out.print()


# verify -----------------------------------------------------------------


def print_verify(out: Out, report: Dict[str, Any]) -> None:
    """The ``verify`` report of one file: the verdict, then one line per
    finding, most severe first."""
    findings = report["findings"]
    verdict = "accepted by the reader" if report["accepted"] else "REJECTED by the reader"
    if not report["complete"]:
        verdict += "; header unreadable, tensors not examined"
    if report.get("values_checked") is not None:
        n = report["values_checked"]
        verdict += f"; values of {n} tensor{'s' if n != 1 else ''} checked"
    if not findings:
        out.print(f"{report['path']}: OK, no findings ({verdict})")
        return
    counts: Dict[str, int] = {}
    for f in findings:
        counts[f["severity"]] = counts.get(f["severity"], 0) + 1
    by_severity = ", ".join(f"{counts[s]} {s}" for s in reversed(fi.SEVERITIES) if s in counts)
    plural = "s" if len(findings) != 1 else ""
    out.print(f"{report['path']}: {len(findings)} finding{plural} ({by_severity}); {verdict}")
    width = max(len(f["rule"]) for f in findings)
    for f in findings:
        out.print(f"  {f['severity'].upper():<8} {f['rule']:<{width}}  {f['message']}")


# hash -------------------------------------------------------------------


def print_hash(out: Out, h: Dict[str, Any]) -> None:
    """The ``hash`` report of one file, with the ``--check`` results."""
    out.print(h["path"])
    out.print(f"  sha256         {h['sha256']}")
    out.print(f"  autov1         {h['autov1']}")
    out.print(f"  autov2         {h['autov2']}")
    if h["autov3"] is not None:
        civitai = h["autov3"][:12]
        out.print(f"  autov3         {h['autov3']}  (sshs_model_hash; CivitAI shows {civitai})")
    else:
        out.print("  autov3         (none: the length prefix points past the end of the file)")
    if h["header_sha256"] is not None:
        out.print(f"  header_sha256  {h['header_sha256']}  (canonical header)")
    problem = h.get("header_problem")
    if problem:
        out.print(f"  header         not usable: {problem['message']}")
    tensors = h.get("tensors")
    if tensors:
        out.print("  tensors:")
        for name, digest in tensors.items():
            out.print(f"    {digest}  {name}")
    for check in h.get("check") or []:
        if check["rule"] == "no-embedded-hash":
            out.print("  check          nothing to compare: no embedded hash in the metadata")
        else:
            level = check["severity"].upper()
            out.print(f"  check          {level} {check['rule']}: {check['message']}")
    if h.get("check") == []:
        out.print("  check          OK: embedded hashes match")
    out.print()


# meta -------------------------------------------------------------------

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
    out.print(path)
    if metadata is None:
        out.print("  (no __metadata__)")
        out.print()
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
            line("top tags", ", ".join(f"{t} ({c})" for t, c in card["top_tags"]))
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
                facts.append(f"{steps} steps")
            if training["epochs"] is not None:
                facts.append(f"{training['epochs']} epochs")
            if training["images"] is not None:
                facts.append(f"{training['images']} images")
            if training["duration_s"] is not None:
                facts.append(f"{training['duration_s'] / 3600:.2f} h")
            if facts:
                line("training", ", ".join(facts))
        thumb = card["thumbnail"]
        line("thumbnail", f"{thumb['mime']}, {size_text(thumb['bytes'])}" if thumb else "none")
        if card["cover_images"]:
            line("cover images", str(card["cover_images"]))
        for key, value in card["embedded_hashes"].items():
            line(key, value)
        out.print()
    out.print("  raw metadata:")
    for key, value in sorted(decoded.items()):
        if isinstance(value, (dict, list)):
            out.print(f"    {key}:")
            for text in json.dumps(value, indent=2, ensure_ascii=False).splitlines():
                out.print(f"      {text}")
        else:
            text = str(value)
            if len(text) > 2000:
                text = text[:2000] + f"... ({len(value)} characters)"
            out.print(f"    {key}: {text}")
    out.print()


def _card_line(out: Out) -> Callable[[str, str], None]:
    def line(label: str, value: str) -> None:
        lines = value.splitlines() or [""]
        out.print(f"  {label:<17} {lines[0]}")
        for more in lines[1:]:
            out.print(f"  {'':<17} {more}")

    return line
