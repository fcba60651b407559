"""Argument parsing, the subcommands (``inspect``, ``verify``, ``hash``,
``meta``) and their exit codes: 0 clean, 1 findings at or above
``--fail-on``, 2 an error (unreadable file, bad arguments) or an
inconclusive verification."""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import inspect as fi
from .._errors import SafetensorError
from .._fastst import DEFAULT_HEADER_CAP, __version__
from ..provenance import cli as prov
from . import render
from .sarif import sarif_log

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2


# helpers ---------------------------------------------------------------


def _files(out: render.Out, paths: Sequence[str]) -> List[str]:
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
    return render.stderr_is_terminal()


def _dump_json(out: render.Out, data: Any) -> None:
    out.print(json.dumps(data, indent=2, ensure_ascii=False))


def _fail_threshold(args: argparse.Namespace) -> int:
    return fi.severity_rank(args.fail_on)


def _fails(findings: Sequence[Dict[str, Any]], threshold: int) -> bool:
    return any(fi.severity_rank(f["severity"]) >= threshold for f in findings)


# inspect ---------------------------------------------------------------


def _cmd_inspect(args: argparse.Namespace, out: render.Out) -> int:
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
            render.print_inspect(out, info, shown, args)
    if args.json:
        _dump_json(out, results)
    return EXIT_ERROR if out.errors else EXIT_OK


# verify ----------------------------------------------------------------


def _cmd_verify(args: argparse.Namespace, out: render.Out) -> int:
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
            render.print_verify(out, report)
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


# hash ------------------------------------------------------------------


def _cmd_hash(args: argparse.Namespace, out: render.Out) -> int:
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
            render.print_hash(out, hashes)
    if args.json:
        _dump_json(out, results)
    if out.errors:
        return EXIT_ERROR
    return EXIT_FINDINGS if failing else EXIT_OK


# meta ------------------------------------------------------------------


def _cmd_meta(args: argparse.Namespace, out: render.Out) -> int:
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
            render.print_meta(out, path, metadata, card, decoded, args.raw)
    if args.json:
        _dump_json(out, results)
    return EXIT_ERROR if out.errors else EXIT_OK


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
    out = render.Out(sys.stdout, sys.stderr)
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
