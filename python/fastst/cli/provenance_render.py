"""What the provenance commands print as text.

Findings as lines, a signature check's verdict, signature files left
unchecked. (Their SARIF logs are built in :mod:`fastst.cli.sarif`.)"""

from __future__ import annotations

from typing import Any, Dict, Sequence

from .._text import escape as clean
from ..tools.results import SEVERITIES
from .render import paragraph, plural


def _counts(findings: Sequence[Dict[str, Any]]) -> str:
    counts: Dict[str, int] = {}
    for f in findings:
        counts[f["severity"]] = counts.get(f["severity"], 0) + 1
    return ", ".join(f"{counts[s]} {s}" for s in reversed(SEVERITIES) if s in counts)


def _print_findings(out: Any, findings: Sequence[Dict[str, Any]]) -> None:
    if not findings:
        return
    width = max(len(f["rule"]) for f in findings)
    for f in findings:
        lead = f"  {f['severity'].upper():<8} {f['rule']:<{width}}  "
        paragraph(out, lead, f["message"], len(lead))


def _rank(severity: str) -> int:
    return SEVERITIES.index(severity)


def _print_verify(out: Any, r: Dict[str, Any]) -> None:
    head = f"{clean(r['model'])}: signature {clean(r['signature'])}"
    if r["verified"]:
        signed = (
            f", signed as {clean(repr(r['signed_model_name']))}" if r["signed_model_name"] else ""
        )
        verdict = f"VERIFIED ({r['method']}; {plural(r['files_checked'], 'file')} checked{signed})"
        paragraph(out, "", f"{head}: {verdict}", 2)
        _print_findings(out, r["findings"])
        return
    n = len(r["findings"])
    verdict = f"NOT VERIFIED, {n} finding{'s' if n != 1 else ''} ({_counts(r['findings'])})"
    paragraph(out, "", f"{head}: {verdict}", 2)
    _print_findings(out, r["findings"])


def print_unchecked(out: Any, notes: Sequence[Dict[str, Any]]) -> None:
    """Text lines for :func:`unchecked_signatures`."""
    for n in notes:
        lead = f"  {n['severity'].upper():<8} {n['rule']}  "
        paragraph(out, lead, n["message"], 11)
