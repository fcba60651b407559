"""The ``fastst`` command: ``inspect``, ``verify``, ``hash`` and ``meta``.

Human-readable text by default, ``--json`` for machines, SARIF 2.1.0 for
``verify --format sarif``. Exit codes: 0 clean, 1 findings at or above
``--fail-on``, 2 an error (unreadable file, bad arguments) or an
inconclusive verification. Folders given as arguments are walked for
``*.safetensors`` files. Nothing in a file is ever executed or unpickled.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import pathlib
import sys
import textwrap
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple

import numpy as np

from . import inspect as fi
from ._errors import SafetensorError
from ._fastst import DEFAULT_HEADER_CAP, __version__
from .provenance import cli as prov

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2

SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)

_LEVELS = {"critical": "error", "high": "error", "medium": "warning", "low": "note", "info": "note"}
#: GitHub code scanning reads a 0-10 "security-severity" property.
_SECURITY_SEVERITY = {
    "critical": "9.5",
    "high": "7.5",
    "medium": "5.0",
    "low": "2.0",
    "info": "0.0",
}


# helpers ---------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    """A one-line message for an error about a file."""
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
        if exc.filename and str(exc.filename) not in text:
            text = f"{exc.filename}: {text}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


class _Out:
    """Where a command writes: stdout for results, stderr for errors."""

    def __init__(self, stdout: TextIO, stderr: TextIO) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.errors = 0

    def print(self, text: str = "") -> None:
        self.stdout.write(text + "\n")

    def error(self, path: str, exc: BaseException) -> str:
        message = _one_line(exc)
        if not message.startswith(path):
            message = f"{path}: {message}"
        self.stderr.write(f"fastst: {message}\n")
        self.errors += 1
        return message


def _files(out: _Out, paths: Sequence[str]) -> List[str]:
    files = []
    for path in paths:
        found = list(fi.iter_safetensors([path]))
        if os.path.isdir(path) and not found:
            out.error(path, FileNotFoundError(f"no .safetensors file under {path}"))
        files.extend(found)
    return files


def _progress(args: argparse.Namespace) -> bool:
    if getattr(args, "no_progress", False):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _dump_json(out: _Out, data: Any) -> None:
    out.print(json.dumps(data, indent=2, ensure_ascii=False))


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{n} B"


def _count(n: int) -> str:
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n:,} ({n / scale:.2f}{unit})"
    return f"{n:,}"


def _fail_threshold(args: argparse.Namespace) -> int:
    return fi.severity_rank(args.fail_on)


def _fails(findings: Sequence[Dict[str, Any]], threshold: int) -> bool:
    return any(fi.severity_rank(f["severity"]) >= threshold for f in findings)


# inspect ---------------------------------------------------------------


def _cmd_inspect(args: argparse.Namespace, out: _Out) -> int:
    results = []
    for path in _files(out, args.files):
        try:
            info = fi.inspect_file(path, tensors=args.tensors, header_cap=args.header_cap)
            shown: Optional[Tuple[str, np.ndarray]] = None
            if args.tensor is not None:
                shown = fi.tensor_values(path, args.tensor)
        except (OSError, SafetensorError, ValueError, KeyError) as exc:
            out.error(path, exc)
            continue
        table = info.get("table")
        if table is not None:
            rows = [r for r in table if not args.filter or fnmatch.fnmatchcase(r[0], args.filter)]
            if args.sort == "name":
                rows.sort(key=lambda r: r[0])
            info["table"] = rows
        if args.json:
            entry = dict(info)
            if table is not None:
                entry["table"] = [
                    {"name": n, "dtype": d, "shape": list(s), "begin": b, "end": e}
                    for n, d, s, b, e in info["table"]
                ]
            if shown is not None:
                entry["tensor"] = {
                    "name": args.tensor,
                    "dtype": shown[0],
                    "shape": list(shown[1].shape),
                    "values": shown[1].tolist(),
                }
            results.append(entry)
        else:
            _print_inspect(out, info, shown, args)
    if args.json:
        _dump_json(out, results)
    return EXIT_ERROR if out.errors else EXIT_OK


def _print_inspect(
    out: _Out,
    info: Dict[str, Any],
    shown: Optional[Tuple[str, np.ndarray]],
    args: argparse.Namespace,
) -> None:
    out.print(info["path"])
    out.print(f"  file size    {_size(info['file_len'])} ({info['file_len']:,} bytes)")
    out.print(f"  header       {info['header_len']:,} bytes, data at offset {info['data_start']:,}")
    out.print(f"  tensors      {info['tensors']:,}")
    out.print(f"  parameters   {_count(info['parameters'])}")
    for i, d in enumerate(info["by_dtype"]):
        label = "  by dtype     " if i == 0 else "               "
        out.print(
            f"{label}{d['dtype']:<12} {d['tensors']:>8,} tensors {d['parameters']:>16,} params"
            f"  {_size(d['bytes'])}"
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


# verify ----------------------------------------------------------------


def _cmd_verify(args: argparse.Namespace, out: _Out) -> int:
    if prov.wants_signature_check(args):
        return prov.run_verify_signature(args, out)
    unchecked = prov.unchecked_signatures(args.files)
    threshold = _fail_threshold(args)
    reports: List[Dict[str, Any]] = []
    errors: List[Tuple[str, str]] = []
    progress = _progress(args)
    for path in _files(out, args.files):
        try:
            report = fi.verify_file(
                path,
                values=args.values,
                header_cap=args.header_cap,
                threads=args.threads,
                progress=progress,
            )
        except (OSError, SafetensorError, ValueError) as exc:
            errors.append((path, out.error(path, exc)))
            continue
        report["fails"] = _fails(report["findings"], threshold)
        report["inconclusive"] = not report["complete"] and not report["fails"]
        reports.append(report)
    fmt = "json" if args.json else args.format
    if fmt == "json":
        _dump_json(
            out,
            {
                "fail_on": args.fail_on,
                "files": reports,
                "errors": [{"path": p, "message": m} for p, m in errors],
                "signatures": unchecked,
            },
        )
    elif fmt == "sarif":
        _dump_json(out, prov.add_sarif_notes(sarif_log(reports, errors), unchecked))
    else:
        for report in reports:
            _print_verify(out, report)
        prov.print_unchecked(out, unchecked)
        if len(reports) + len(errors) > 1:
            failing = sum(1 for r in reports if r["fails"])
            out.print(
                f"{len(reports)} files verified: {failing} with findings at or above "
                f"{args.fail_on}, {len(errors)} unreadable"
            )
    if out.errors or any(r["inconclusive"] for r in reports):
        return EXIT_ERROR
    if any(r["fails"] for r in reports):
        return EXIT_FINDINGS
    return EXIT_OK


def _print_verify(out: _Out, report: Dict[str, Any]) -> None:
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


def _artifact_uri(path: str) -> str:
    if os.path.isabs(path):
        return pathlib.Path(path).as_uri()
    return urllib.parse.quote(path.replace(os.sep, "/"))


def sarif_log(
    reports: Sequence[Dict[str, Any]], errors: Sequence[Tuple[str, str]] = ()
) -> Dict[str, Any]:
    """A SARIF 2.1.0 log of verify reports (from :func:`fastst.inspect.verify_file`)
    and of files that could not be read."""
    catalogue = fi.rules()
    index = {r["id"]: i for i, r in enumerate(catalogue)}
    rules = [
        {
            "id": r["id"],
            "name": "".join(part.capitalize() for part in r["id"].split("-")),
            "shortDescription": {"text": r["summary"]},
            "defaultConfiguration": {"level": _LEVELS[r["severity"]]},
            "properties": {
                "severity": r["severity"],
                "security-severity": _SECURITY_SEVERITY[r["severity"]],
            },
        }
        for r in catalogue
    ]
    results = []
    artifacts = []
    for k, report in enumerate(reports):
        uri = _artifact_uri(report["path"])
        artifacts.append({"location": {"uri": uri}, "length": report["file_len"]})
        for f in report["findings"]:
            location: Dict[str, Any] = {"artifactLocation": {"uri": uri, "index": k}}
            if f.get("offset") is not None:
                region: Dict[str, Any] = {"byteOffset": f["offset"]}
                if f.get("length") is not None:
                    region["byteLength"] = f["length"]
                location["region"] = region
            properties = {
                key: f[key]
                for key in ("severity", "tensor", "key", "count")
                if f.get(key) is not None
            }
            result: Dict[str, Any] = {
                "ruleId": f["rule"],
                "level": _LEVELS[f["severity"]],
                "message": {"text": f["message"]},
                "locations": [{"physicalLocation": location}],
                "properties": properties,
            }
            if f["rule"] in index:
                result["ruleIndex"] = index[f["rule"]]
            results.append(result)
    notifications = [
        {
            "level": "error",
            "message": {"text": message},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": _artifact_uri(path)}}}],
        }
        for path, message in errors
    ]
    notifications += [
        {
            "level": "warning",
            "message": {"text": f"{r['path']}: header unreadable, tensors not examined"},
        }
        for r in reports
        if not r["complete"]
    ]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "fastst",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": rules,
                    }
                },
                "invocations": [
                    {
                        "executionSuccessful": not errors,
                        "toolExecutionNotifications": notifications,
                    }
                ],
                "artifacts": artifacts,
                "results": results,
            }
        ],
    }


# hash ------------------------------------------------------------------


def _cmd_hash(args: argparse.Namespace, out: _Out) -> int:
    threshold = _fail_threshold(args)
    results = []
    failing = False
    progress = _progress(args)
    for path in _files(out, args.files):
        try:
            hashes = fi.hash_file(
                path,
                tensors=args.tensors,
                header_cap=args.header_cap,
                threads=args.threads,
                progress=progress,
            )
            checks = None
            if args.check:
                metadata = fi.read_metadata(path, header_cap=args.header_cap)
                checks = fi.check_hashes(hashes, metadata)
        except (OSError, SafetensorError, ValueError) as exc:
            out.error(path, exc)
            continue
        if checks is not None:
            hashes["check"] = checks
            failing = failing or _fails(checks, threshold)
        if args.json:
            results.append(hashes)
        else:
            _print_hash(out, hashes)
    if args.json:
        _dump_json(out, results)
    if out.errors:
        return EXIT_ERROR
    return EXIT_FINDINGS if failing else EXIT_OK


def _print_hash(out: _Out, h: Dict[str, Any]) -> None:
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


# meta ------------------------------------------------------------------

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


def _cmd_meta(args: argparse.Namespace, out: _Out) -> int:
    results = []
    for path in _files(out, args.files):
        try:
            metadata = fi.read_metadata(path, header_cap=args.header_cap)
        except (OSError, SafetensorError, ValueError) as exc:
            out.error(path, exc)
            continue
        card = fi.metadata_card(metadata)
        decoded = fi.decode_metadata(metadata)
        if args.json:
            results.append({"path": path, "card": card, "metadata": decoded})
        else:
            _print_meta(out, path, metadata, card, decoded, args.raw)
    if args.json:
        _dump_json(out, results)
    return EXIT_ERROR if out.errors else EXIT_OK


def _print_meta(
    out: _Out,
    path: str,
    metadata: Optional[Dict[str, str]],
    card: Dict[str, Any],
    decoded: Dict[str, Any],
    raw_only: bool,
) -> None:
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
        line("thumbnail", f"{thumb['mime']}, {_size(thumb['bytes'])}" if thumb else "none")
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


def _card_line(out: _Out) -> Callable[[str, str], None]:
    def line(label: str, value: str) -> None:
        lines = value.splitlines() or [""]
        out.print(f"  {label:<17} {lines[0]}")
        for more in lines[1:]:
            out.print(f"  {'':<17} {more}")

    return line


# parser ----------------------------------------------------------------


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0 or value >= 1 << 64:
        raise argparse.ArgumentTypeError(f"must be between 0 and 2^64 - 1: {text}")
    return value


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="files or folders (*.safetensors)")
    p.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    p.add_argument(
        "--header-cap",
        type=_non_negative,
        default=DEFAULT_HEADER_CAP,
        metavar="BYTES",
        help=f"largest header accepted (default {DEFAULT_HEADER_CAP})",
    )


def _add_work(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads",
        type=_non_negative,
        default=0,
        metavar="N",
        help="worker threads (default: one per core)",
    )
    p.add_argument("--no-progress", action="store_true", help="never show progress on stderr")


def _add_fail_on(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--fail-on",
        choices=fi.SEVERITIES,
        default=default,
        metavar="SEVERITY",
        help=f"exit 1 when a finding is at least this severe: {', '.join(fi.SEVERITIES)} "
        f"(default {default})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastst",
        description="Inspect, verify, hash and read the metadata of .safetensors files "
        "without running any model code.",
        epilog="exit codes: 0 clean, 1 findings at or above --fail-on, 2 error or inconclusive",
    )
    parser.add_argument("--version", action="version", version=f"fastst {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("inspect", help="header summary, tensor table, tensor values")
    _add_common(p)
    p.add_argument("--tensors", action="store_true", help="list every tensor")
    p.add_argument("--sort", choices=("offset", "name"), default="offset", help="table order")
    p.add_argument("--filter", metavar="GLOB", help="only tensors whose name matches GLOB")
    p.add_argument("--tensor", metavar="NAME", help="print the values of tensor NAME")
    p.add_argument(
        "--max-values",
        type=_non_negative,
        default=1000,
        metavar="N",
        help="summarise arrays with more than N values (default 1000)",
    )
    p.set_defaults(run=_cmd_inspect)

    p = sub.add_parser("verify", help="structural rules and forensic findings")
    _add_common(p)
    _add_work(p)
    p.add_argument(
        "--format",
        choices=("text", "json", "sarif"),
        default="text",
        help="output format: text (default), json (same as --json) or sarif (SARIF 2.1.0)",
    )
    p.add_argument("--values", action="store_true", help="also scan values (NaN/Inf, BOOL bytes)")
    _add_fail_on(p, "low")
    prov.add_verify_signature_args(p)
    p.set_defaults(run=_cmd_verify)

    p = sub.add_parser("hash", help="SHA-256, AutoV1/V2/V3, header and per-tensor hashes")
    _add_common(p)
    _add_work(p)
    p.add_argument("--tensors", action="store_true", help="also hash every tensor")
    p.add_argument(
        "--check",
        action="store_true",
        help="compare with sshs_model_hash / modelspec.hash_sha256 in the metadata",
    )
    _add_fail_on(p, "low")
    p.set_defaults(run=_cmd_hash)

    p = sub.add_parser("meta", help="metadata card and raw metadata")
    _add_common(p)
    p.add_argument("--raw", action="store_true", help="only the raw metadata, no card")
    p.set_defaults(run=_cmd_meta)
    prov.add_sign_parser(sub)
    prov.add_sbom_parser(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code) if isinstance(exc.code, int) else EXIT_ERROR
    out = _Out(sys.stdout, sys.stderr)
    try:
        code: int = args.run(args, out)
    except KeyboardInterrupt:
        sys.stderr.write("fastst: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader of our output went away (e.g. `| head`): point stdout at
        # /dev/null so that the interpreter's final flush does not fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    sys.stdout.flush()
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
