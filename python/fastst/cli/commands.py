"""Argument parsing, the subcommands (``inspect``, ``verify``, ``hash``,
``meta``), the JSON envelope and the exit codes: 0 clean, 1 findings at or
above ``--fail-on`` (or, for ``meta --set``, nothing), 2 an error
(unreadable or non-safetensors input, bad arguments) or an inconclusive
verification; 130 interrupted; 141 when the reader of the output went away
(a closed pipe, as a process killed by SIGPIPE)."""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, cast

import numpy as np

from .._errors import SafetensorError
from .._hook import run as run_with_hook
from .._identify import NOT_FILES
from .._update import update_metadata
from ..tools import inspect as fi
from ..tools.card import strict_json
from ..tools.diff import diff
from ..tools.stale_temp import stale_temp_files
from ..tools.walk import TOO_DEEP, too_deep_report
from . import provenance as prov
from . import render, report
from .parser import build_parser, check_conflicts
from .sarif import add_notes, sarif_log

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_PIPE = 141

#: Version of the shape of ``--json`` output (see docs/cli-schema.json).
JSON_SCHEMA_VERSION = render.JSON_SCHEMA_VERSION

#: Errors reading an input is expected to raise (anything else is a bug).
_READ_ERRORS = (OSError, SafetensorError, ValueError, KeyError, MemoryError)


# inputs --------------------------------------------------------------------


def _inputs(
    out: render.Out, paths: Sequence[str], too_deep: bool = False, pickles: bool = False
) -> Iterator[Tuple[str, str]]:
    """``(kind, path)`` for each input (see :func:`fastst.tools.inspect.iter_inputs`);
    a folder without any is an error, and so is a folder nested too deep to
    scan unless ``too_deep`` asks for its ``("too-deep", folder)`` item.
    ``pickles`` adds ``("file", path)`` for each file under a folder that
    holds pickles (:func:`fastst.tools.inspect.pickle_files`)."""
    for path in paths:
        found = False
        try:
            for kind, item in fi.iter_inputs([path]):
                found = True
                if kind == "too-deep" and not too_deep:
                    out.error(item, TOO_DEEP, rule="folder-too-deep")
                    continue
                yield kind, item
            for item in fi.pickle_files(path) if pickles and os.path.isdir(path) else ():
                found = True
                yield "file", item
        except OSError as exc:  # pragma: no cover - os.walk reports through onerror
            out.error(path, exc)
            found = True
        if not found:
            out.error(path, f"no .safetensors file or checkpoint index under {path}")


def _not_safetensors(out: render.Out, path: str) -> bool:
    """Records an error and returns True when ``path`` cannot be read or is
    not a safetensors file (a pickle, a FIFO, an HTML page...)."""
    try:
        found = fi.identify(path)
    except OSError as exc:
        out.error(path, exc)
        return True
    if found is None:
        return False
    out.error(path, fi.not_safetensors_message(found), fmt=found["kind"])
    return True


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
    return any(fi.severity_rank(f["severity"]) >= threshold for f in findings)


# inspect -------------------------------------------------------------------


_SORTS: Dict[str, Callable[[Any], Any]] = {
    "name": lambda r: r[0],
    "size": lambda r: (-(r[4] - r[3]), r[0]),
}


def _cmd_inspect(args: argparse.Namespace, out: render.Out) -> int:
    results = []
    for kind, path in _inputs(out, args.files):
        try:
            if kind == "checkpoint":
                info = _loose(
                    fi.inspect_checkpoint(path, tensors=args.tensors, header_cap=args.header_cap)
                )
            else:
                if _not_safetensors(out, path):
                    continue
                info = _loose(
                    fi.inspect_file(path, tensors=args.tensors, header_cap=args.header_cap)
                )
                info["kind"] = "file"
            shown: Optional[Tuple[str, np.ndarray]] = None
            if args.tensor is not None:
                shown = fi.tensor_values(path, args.tensor)
        except _READ_ERRORS as exc:
            out.error(path, exc)
            continue
        table = info.get("table")
        if table is not None:
            rows = [r for r in table if not args.filter or fnmatch.fnmatchcase(r[0], args.filter)]
            if args.sort in _SORTS:
                rows.sort(key=_SORTS[args.sort])
            info["table"] = rows
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
            report.print_inspect(out, info, shown, args)
    if args.json:
        out.json(_envelope("inspect", results, out))
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
    unchecked = prov.unchecked_signatures(args.files)
    stale = _stale_temp_notes(args.files)
    threshold = _fail_threshold(args)
    reports: List[Dict[str, Any]] = []
    progress = _progress(args)
    options = dict(
        values=args.values, header_cap=args.header_cap, threads=args.threads, progress=progress
    )
    for kind, path in _inputs(out, args.files, too_deep=True, pickles=True):
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
        except _READ_ERRORS as exc:
            out.error(path, exc)
            continue
        result["fails"] = _fails(result["findings"], threshold)
        result["inconclusive"] = not result["complete"] and not result["fails"]
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
            out.print(
                f"{render.plural(len(reports), 'input')} verified: {failing:,} with findings at "
                f"or above {args.fail_on}, {len(out.errors):,} unreadable"
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
    for kind, path in _inputs(out, args.files):
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
                if _not_safetensors(out, path):
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
                folder = os.path.dirname(os.path.abspath(path))
                for h in checked:
                    where = os.path.join(folder, h["file"]) if "file" in h else path
                    metadata = fi.read_metadata(where, header_cap=args.header_cap)
                    h["check"] = fi.check_hashes(h, metadata)
                    failing = failing or _fails(h["check"], threshold)
        except _READ_ERRORS as exc:
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


def _cmd_meta(args: argparse.Namespace, out: render.Out) -> int:
    if args.set or args.unset:
        return _edit_meta(args, out)
    results = []
    for kind, path in _inputs(out, args.files):
        index_metadata = None
        try:
            if kind == "checkpoint":
                metadata, index_metadata = fi.checkpoint_metadata(path, header_cap=args.header_cap)
            else:
                if _not_safetensors(out, path):
                    continue
                metadata = fi.read_metadata(path, header_cap=args.header_cap)
        except _READ_ERRORS as exc:
            out.error(path, exc)
            continue
        card = fi.metadata_card(metadata)
        decoded = fi.decode_metadata(metadata)
        if args.json:
            entry = {"path": path, "kind": kind, "card": card, "metadata": decoded}
            if index_metadata is not None:
                entry["index_metadata"] = strict_json(index_metadata)
            results.append(entry)
        else:
            report.print_meta(out, path, metadata, card, decoded, args.raw)
    if args.json:
        out.json(_envelope("meta", results, out))
    return EXIT_ERROR if out.errors else EXIT_OK


def _edit_meta(args: argparse.Namespace, out: render.Out) -> int:
    """``meta --set/--unset``: rewrites each file (or ``--output``)."""
    results = []
    updates = dict(args.set)
    for kind, path in _inputs(out, args.files):
        if kind == "checkpoint":
            out.error(path, "metadata editing takes single files, not a checkpoint index")
            continue
        if _not_safetensors(out, path):
            continue
        try:
            written = update_metadata(
                path,
                updates,
                remove=args.unset,
                output=args.output,
                header_cap=args.header_cap,
            )
        except (*_READ_ERRORS, TypeError) as exc:
            out.error(path, exc)
            continue
        metadata = written.pop("metadata") or None
        target = written.pop("path")
        written["source"] = path
        if args.json:
            results.append(
                {
                    "path": target,
                    "kind": "file",
                    "card": fi.metadata_card(metadata),
                    "metadata": fi.decode_metadata(metadata),
                    "written": written,
                }
            )
        else:
            report.print_written(out, target, written)
    if args.json:
        out.json(_envelope("meta", results, out))
    return EXIT_ERROR if out.errors else EXIT_OK


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
        if not (os.path.isdir(path) or path.endswith(".index.json")):
            _not_safetensors(out, path)
    result = None
    if not out.errors:
        try:
            result = diff(args.a, args.b, threads=args.threads, header_cap=args.header_cap)
        except _READ_ERRORS as exc:
            message = render.one_line(exc)
            where = getattr(exc, "filename", None) or args.a
            out.error(str(where), message, rule=getattr(exc, "rule", None))
    if args.json:
        results = []
        if result is not None:
            entry = dict(result)
            entry["different"] = [
                {k: _finite(v) for k, v in d.items()} for d in result["different"]
            ]
            results.append(entry)
        out.json(_envelope("diff", results, out))
    elif result is not None:
        report.print_diff(out, result)
    if out.errors or result is None:
        return EXIT_ERROR
    return EXIT_OK if result["identical"] else EXIT_FINDINGS


def _cmd_convert(args: argparse.Namespace, out: render.Out) -> int:
    from . import convert

    return convert.run(args, out, _envelope, _progress(args))


_COMMANDS: Dict[str, Callable[[argparse.Namespace, render.Out], int]] = {
    "inspect": _cmd_inspect,
    "verify": _cmd_verify,
    "hash": _cmd_hash,
    "meta": _cmd_meta,
    "diff": _cmd_diff,
    "convert": _cmd_convert,
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
        width=render.terminal_width(sys.stdout, args.width),
        color=render.use_color(sys.stdout, args.color),
        full=args.full,
    )
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
    return code
