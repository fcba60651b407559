"""What the provenance commands print: terminal-safe text, findings as
text lines, and SARIF 2.1.0 logs of a signature check and of signature
files left unchecked. Only the standard library is imported here."""

from __future__ import annotations

import os
import pathlib
import urllib.parse
from typing import Any, Dict, Optional, Sequence

_SEVERITIES = ("info", "low", "medium", "high", "critical")
_LEVELS = {"critical": "error", "high": "error", "medium": "warning", "low": "note", "info": "note"}
_SECURITY = {"critical": "9.5", "high": "7.5", "medium": "5.0", "low": "2.0", "info": "0.0"}
_SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)


def clean(text: str) -> str:
    """``text`` safe for a terminal: :func:`fastst._text.escape`, the one
    escaping rule of every command's text output, so one item stays on one
    line and cannot rewrite the screen."""
    # Imported on use: fastst.cli's package imports this module's callers.
    from .text import escape

    return escape(text)


def _counts(findings: Sequence[Dict[str, Any]]) -> str:
    counts: Dict[str, int] = {}
    for f in findings:
        counts[f["severity"]] = counts.get(f["severity"], 0) + 1
    return ", ".join(f"{counts[s]} {s}" for s in reversed(_SEVERITIES) if s in counts)


def _print_findings(out: Any, findings: Sequence[Dict[str, Any]]) -> None:
    if not findings:
        return
    width = max(len(f["rule"]) for f in findings)
    for f in findings:
        out.print(f"  {f['severity'].upper():<8} {f['rule']:<{width}}  {clean(f['message'])}")


def _rank(severity: str) -> int:
    return _SEVERITIES.index(severity)


def _print_verify(out: Any, r: Dict[str, Any]) -> None:
    head = f"{clean(r['model'])}: signature {clean(r['signature'])}"
    if r["verified"]:
        signed = (
            f", signed as {clean(repr(r['signed_model_name']))}" if r["signed_model_name"] else ""
        )
        out.print(f"{head}: VERIFIED ({r['method']}; {r['files_checked']} files checked{signed})")
        _print_findings(out, r["findings"])
        return
    n = len(r["findings"])
    out.print(
        f"{head}: NOT VERIFIED, {n} finding{'s' if n != 1 else ''} ({_counts(r['findings'])})"
    )
    _print_findings(out, r["findings"])


def _uri(path: str) -> str:
    if os.path.isabs(path):
        return pathlib.Path(path).as_uri()
    return urllib.parse.quote(path.replace(os.sep, "/"))


def sarif_log(result: Optional[Dict[str, Any]], model: str, error: Optional[str]) -> Dict[str, Any]:
    """A SARIF 2.1.0 log of one signature check (:meth:`VerifyResult.to_dict`)."""
    from .._fastst import __version__
    from ..tools.provenance.findings import RULES

    ids = list(RULES)
    rules = [
        {
            "id": rid,
            "name": "".join(part.capitalize() for part in rid.split("-")),
            "shortDescription": {"text": summary},
            "defaultConfiguration": {"level": _LEVELS[sev]},
            "properties": {"severity": sev, "security-severity": _SECURITY[sev]},
        }
        for rid, (sev, summary) in RULES.items()
    ]
    results = []
    artifacts = []
    if result is not None:
        base = result["model"]
        artifacts.append({"location": {"uri": _uri(base)}})
        artifacts.append({"location": {"uri": _uri(result["signature"])}})
        for f in result["findings"]:
            if f["path"] and f["path"] != ".":
                uri = _uri(os.path.join(base, f["path"]))
            elif f["path"] == ".":
                uri = _uri(base)
            else:
                uri = _uri(result["signature"])
            results.append(
                {
                    "ruleId": f["rule"],
                    "ruleIndex": ids.index(f["rule"]),
                    "level": _LEVELS[f["severity"]],
                    "message": {"text": f["message"]},
                    "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri}}}],
                    "properties": {"severity": f["severity"]},
                }
            )
    notifications = []
    if error:
        notifications.append(
            {
                "level": "error",
                "message": {"text": error},
                "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(model)}}}],
            }
        )
    return {
        "$schema": _SARIF_SCHEMA,
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
                    {"executionSuccessful": not error, "toolExecutionNotifications": notifications}
                ],
                "artifacts": artifacts,
                "results": results,
            }
        ],
    }


def print_unchecked(out: Any, notes: Sequence[Dict[str, Any]]) -> None:
    """Text lines for :func:`unchecked_signatures`."""
    for n in notes:
        out.print(f"  {n['severity'].upper():<8} {n['rule']}  {clean(n['message'])}")


def add_sarif_notes(log: Dict[str, Any], notes: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Adds :func:`unchecked_signatures` to a SARIF log as notifications."""
    for run in log.get("runs", []):
        for inv in run.get("invocations", []):
            inv.setdefault("toolExecutionNotifications", []).extend(
                {
                    "level": "note",
                    "message": {"text": n["message"]},
                    "descriptor": {"id": n["rule"]},
                    "locations": [
                        {"physicalLocation": {"artifactLocation": {"uri": _uri(n["path"])}}}
                    ],
                }
                for n in notes
            )
    return log
