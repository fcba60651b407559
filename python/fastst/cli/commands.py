"""The ``fastst`` command's entry point and its subcommands that inspect, verify, hash and diff.

:func:`main` parses, dispatches and exits with a code :mod:`.exits` lists;
``meta`` is in :mod:`.meta`, ``convert`` in :mod:`.convert`, the provenance
commands in :mod:`.provenance`."""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np

from .. import _settings
from .._dropin.hook import run as run_with_hook
from .._layout import names_an_index
from .._sources.identify import NOT_FILES
from .._sources.remote import is_url
from ..tools import inspect as fi
from ..tools.checkpoint import shard_location
from ..tools.diff import diff
from ..tools.layers import layer_view
from ..tools.stale_temp import stale_temp_files
from ..tools.walk import too_deep_report
from . import charts, html, model_text, render, report
from . import provenance as prov
from .exits import EXIT_ERROR, EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPE
from .inputs import READ_ERRORS, inputs, model_config, not_safetensors
from .meta import cmd_meta
from .parser import build_parser, check_conflicts
from .sarif import add_notes, sarif_log
from .stats import cmd_stats

#: Version of the shape of ``--json`` output (see docs/cli-schema.json).
JSON_SCHEMA_VERSION = render.JSON_SCHEMA_VERSION


def _progress(args: argparse.Namespace) -> bool:
    if args.no_progress:
        return False
    return render.stderr_is_terminal()


def _envelope(command: str, results: List[Any], out: render.Out, **extra: Any) -> Dict[str, Any]:
    """The one JSON shape of every subcommand."""
    return render.envelope(command, results, out, **extra)


def _loose(result: Any) -> Dict[str, Any]:
    """A result of the wing (a TypedDict of :mod:`fastst.tools.results`) as
    the plain dict the command adds its keys to (``kind``, ``fails``...)."""
    return cast(Dict[str, Any], result)


def _fail_threshold(args: argparse.Namespace) -> int:
    return fi.severity_rank(args.fail_on)


def _fails(findings: Sequence[Dict[str, Any]], threshold: int) -> bool:
    """Whether a red flag is at or above the threshold: a finding that the
    input is malformed fails nothing (it makes the verdict inconclusive)."""
    return any(
        fi.severity_rank(f["severity"]) >= threshold and f.get("verdict") != "malformed"
        for f in findings
    )


def _malformed(findings: Sequence[Dict[str, Any]]) -> bool:
    return any(f.get("verdict") == "malformed" for f in findings)


# inspect -------------------------------------------------------------------


_SORTS: Dict[str, Callable[[Any], Any]] = {
    "name": lambda r: r[0],
    "size": lambda r: (-(r[4] - r[3]), r[0]),
}


def _cmd_inspect(args: argparse.Namespace, out: render.Out) -> int:
    results = []
    pages: List[str] = []
    for kind, path in inputs(out, args.files):
        try:
            if kind == "checkpoint":
                info = _loose(fi.inspect_checkpoint(path, tensors=True, header_cap=args.header_cap))
            else:
                if not_safetensors(out, path):
                    continue
                info = _loose(fi.inspect_file(path, tensors=True, header_cap=args.header_cap))
                info["kind"] = "file"
            info["layers"] = layer_view((r[0], r[1], r[2], r[4] - r[3]) for r in info["table"])
            info["config"] = model_config(path, info)
            if not args.tensors:
                del info["table"]
            shown: Optional[Tuple[str, np.ndarray]] = None
            if args.tensor is not None:
                shown = fi.tensor_values(path, args.tensor)
        except READ_ERRORS as exc:
            out.error(path, exc)
            continue
        table = info.get("table")
        if table is not None:
            rows = [r for r in table if not args.filter or fnmatch.fnmatchcase(r[0], args.filter)]
            if args.sort in _SORTS:
                rows.sort(key=_SORTS[args.sort])
            info["table"] = rows
        if args.html:
            pages.append(html.inspect_section(info))
        if args.json:
            entry = dict(info)
            if table is not None:
                entry["table"] = [_row(r) for r in info["table"]]
            if shown is not None:
                entry["tensor"] = {
                    "name": args.tensor,
                    "dtype": shown[0],
                    "shape": list(shown[1].shape),
                    "values": shown[1].tolist(),
                }
            results.append(entry)
        else:
            model_text.print_inspect(out, info, shown, args)
    if args.json:
        out.json(_envelope("inspect", results, out))
    if args.html:
        html.report(out, args.html, "inspect", pages, args.files)
    return EXIT_ERROR if out.errors else EXIT_OK


def _row(r: Sequence[Any]) -> Dict[str, Any]:
    row = {"name": r[0], "dtype": r[1], "shape": list(r[2]), "begin": r[3], "end": r[4]}
    if len(r) > 5:
        row["shard"] = r[5]
    return row


# verify --------------------------------------------------------------------


def _cmd_verify(args: argparse.Namespace, out: render.Out) -> int:
    if prov.wants_signature_check(args):
        return prov.run_verify_signature(args, out)
    local = [p for p in args.files if not is_url(p)]  # nothing beside a URL is looked for
    unchecked = prov.unchecked_signatures(local)
    stale = _stale_temp_notes(local)
    threshold = _fail_threshold(args)
    reports: List[Dict[str, Any]] = []
    progress = _progress(args)
    options = dict(
        values=args.values, header_cap=args.header_cap, threads=args.threads, progress=progress
    )
    for kind, path in inputs(out, args.files, too_deep=True, pickles=True):
        try:
            if kind == "too-deep":
                result = too_deep_report(path)
            elif kind == "checkpoint":
                result = _loose(fi.verify_checkpoint(path, **options))
            else:
                found = fi.identify(path)
                if found is not None and found["kind"] in NOT_FILES:
                    out.error(path, fi.not_safetensors_message(found), fmt=found["kind"])
                    continue
                result = _loose(fi.verify_file(path, **options))
                result["kind"] = "file"
                if found is not None:
                    _add_foreign(result, found)
        except READ_ERRORS as exc:
            out.error(path, exc)
            continue
        # A red flag fails the input (exit 1); a malformed input without one
        # is inconclusive (exit 2): broken is not the same as malicious.
        result["fails"] = _fails(result["findings"], threshold)
        result["malformed"] = _malformed(result["findings"])
        broken = result["malformed"] or not result["complete"]
        result["inconclusive"] = broken and not result["fails"]
        reports.append(result)
    if args.format == "json":
        out.json(
            _envelope(
                "verify",
                reports,
                out,
                fail_on=args.fail_on,
                signatures=unchecked,
                stale_temp_files=stale,
            )
        )
    elif args.format == "sarif":
        errors = [(e["path"], e["message"]) for e in out.errors]
        out.json(add_notes(sarif_log(reports, errors), unchecked + stale))
    else:
        for one in reports:
            report.print_verify(out, one)
        prov.print_unchecked(out, unchecked)
        prov.print_unchecked(out, stale)
        if len(reports) + len(out.errors) > 1:
            failing = sum(1 for r in reports if r["fails"])
            inconclusive = sum(1 for r in reports if r["inconclusive"])
            render.paragraph(
                out,
                "",
                f"{render.plural(len(reports), 'input')} verified: {failing:,} with red flags at "
                f"or above {args.fail_on}, {inconclusive:,} malformed (inconclusive), "
                f"{len(out.errors):,} unreadable",
                2,
            )
    if out.errors or any(r["inconclusive"] for r in reports):
        return EXIT_ERROR
    if any(r["fails"] for r in reports):
        return EXIT_FINDINGS
    return EXIT_OK


def _stale_temp_notes(paths: Sequence[str]) -> List[Dict[str, Any]]:
    """Temporary files an interrupted save left in the folders verified (and
    beside the files verified), as notices shaped like
    :func:`fastst.cli.provenance.unchecked_signatures`: ``rule``
    (``stale-temp-file``), ``severity``, ``path`` and ``message``. They are
    reported, not counted against ``--fail-on``: they are not part of any
    input."""
    severity = next(r["severity"] for r in fi.rules() if r["id"] == "stale-temp-file")
    return [
        {
            "rule": "stale-temp-file",
            "severity": severity,
            "path": p,
            "message": f"{p}: temporary file left behind by an interrupted fastst save; "
            "safe to delete",
        }
        for p in stale_temp_files(paths)
    ]


def _add_foreign(result: Dict[str, Any], found: Dict[str, Any]) -> None:
    """Makes sure a file :func:`fastst.tools.inspect.identify` recognised carries a
    ``foreign-content`` finding saying what it is (the core's own finding
    covers executable formats; text, HTML, ONNX... are added here)."""
    message = fi.not_safetensors_message(found)
    for f in result["findings"]:
        if f["rule"] == "foreign-content":
            return
    result["findings"].insert(
        0,
        {
            "rule": "foreign-content",
            "severity": "critical" if found["executable"] else "high",
            "verdict": "red-flag",
            "message": message,
            "tensor": None,
            "key": None,
            "offset": 0,
            "length": None,
            "count": None,
        },
    )


# hash ----------------------------------------------------------------------


def _cmd_hash(args: argparse.Namespace, out: render.Out) -> int:
    threshold = _fail_threshold(args)
    results = []
    failing = False
    progress = _progress(args)
    for kind, path in inputs(out, args.files):
        try:
            if kind == "checkpoint":
                hashes = _loose(
                    fi.hash_checkpoint(
                        path,
                        tensors=args.tensors,
                        header_cap=args.header_cap,
                        threads=args.threads,
                        progress=progress,
                    )
                )
                checked = hashes["shards"]
            else:
                if not_safetensors(out, path):
                    continue
                hashes = _loose(
                    fi.hash_file(
                        path,
                        tensors=args.tensors,
                        header_cap=args.header_cap,
                        threads=args.threads,
                        progress=progress,
                    )
                )
                hashes["kind"] = "file"
                checked = [hashes]
            if args.check:
                for h in checked:
                    where = shard_location(path, h["file"]) if "file" in h else path
                    metadata = fi.read_metadata(where, header_cap=args.header_cap)
                    h["check"] = fi.check_hashes(h, metadata)
                    failing = failing or _fails(h["check"], threshold)
        except READ_ERRORS as exc:
            out.error(path, exc)
            continue
        if args.json:
            results.append(hashes)
        else:
            report.print_hash(out, hashes)
    if args.json:
        out.json(_envelope("hash", results, out))
    if out.errors:
        return EXIT_ERROR
    return EXIT_FINDINGS if failing else EXIT_OK


# meta ----------------------------------------------------------------------


# diff ----------------------------------------------------------------------


def _finite(value: Any) -> Any:
    """JSON has no infinity: an infinite difference is written "inf"."""
    if isinstance(value, float) and value != value:  # pragma: no cover - never NaN
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf"
    return value


def _cmd_diff(args: argparse.Namespace, out: render.Out) -> int:
    for path in (args.a, args.b):
        if not (os.path.isdir(path) or names_an_index(path)):
            not_safetensors(out, path)
    result = None
    if not out.errors:
        try:
            result = diff(
                args.a,
                args.b,
                threads=args.threads,
                header_cap=args.header_cap,
                values=not args.no_values,
            )
        except READ_ERRORS as exc:
            message = render.one_line(exc)
            where = getattr(exc, "filename", None) or args.a
            out.error(str(where), message, rule=getattr(exc, "rule", None))
    if args.json:
        results = []
        if result is not None:
            entry: Dict[str, Any] = dict(result)
            for key in ("different", "dtype_changed"):
                entry[key] = [{k: _finite(v) for k, v in d.items()} for d in entry[key]]
            results.append(entry)
        out.json(_envelope("diff", results, out))
    elif result is not None:
        ascii = args.ascii or not charts.unicode_ok(out.stdout)
        report.print_diff(out, result, ascii=ascii)
    if args.html and result is not None:
        html.report(out, args.html, "diff", [html.diff_section(result)], [args.a, args.b])
    if out.errors or result is None:
        return EXIT_ERROR
    return EXIT_OK if result["identical"] else EXIT_FINDINGS


def _cmd_convert(args: argparse.Namespace, out: render.Out) -> int:
    from . import convert

    return convert.run(args, out, _envelope, _progress(args))


def _cmd_consolidate(args: argparse.Namespace, out: render.Out) -> int:
    from . import consolidate

    return consolidate.run(args, out)


_COMMANDS: Dict[str, Callable[[argparse.Namespace, render.Out], int]] = {
    "inspect": _cmd_inspect,
    "verify": _cmd_verify,
    "hash": _cmd_hash,
    "meta": cmd_meta,
    "diff": _cmd_diff,
    "stats": cmd_stats,
    "convert": _cmd_convert,
    "consolidate": _cmd_consolidate,
    "sign": prov.run_sign,
    "sbom": prov.run_sbom,
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns the exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:  # `fastst run ...` is `python -m fastst run ...`
        return run_with_hook(argv[1:])
    if not argv:
        # Bare `fastst`: the help, as a usage error (exit 2).
        parser.print_help(sys.stdout)
        return EXIT_ERROR
    try:
        args = parser.parse_args(argv)
        check_conflicts(parser, args)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code) if isinstance(exc.code, int) else EXIT_ERROR
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # pragma: no cover - detached stream
                pass
    out = render.Out(
        sys.stdout,
        sys.stderr,
        width=None if args.full else render.terminal_width(sys.stdout, args.width),
        color=render.use_color(sys.stdout, args.color),
        full=args.full,
    )
    # The URLs on the command line are its user's own: read as URLs even
    # under the drop-in switch (see fastst._settings.reads_urls).
    running, _settings.command_running = _settings.command_running, True
    try:
        code: int = _COMMANDS[args.command](args, out)
        sys.stdout.flush()
    except KeyboardInterrupt:
        sys.stderr.write("fastst: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of our output went away (e.g. `| head`): point stdout at
        # /dev/null so that the interpreter's final flush does not fail too,
        # and end as a process killed by SIGPIPE would be seen by a shell.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # pragma: no cover
            pass
        return EXIT_PIPE
    finally:
        _settings.command_running = running
    return code
