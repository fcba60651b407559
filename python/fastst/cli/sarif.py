"""SARIF logs of ``fastst verify`` reports and signature checks, as SARIF viewers read them.

The logs are SARIF 2.1.0, as GitHub code scanning reads them:
``--format sarif`` of ``verify``, and notes (signature files left unchecked,
stale temporary files) added to either.

A red flag is a result of kind ``fail`` at its severity's level; a finding
that the file is malformed is of kind ``review`` (SARIF's "not enough
information to decide": the verdict is inconclusive), level ``none``, and
the log says which inputs are malformed in a warning notification. Each
result and rule carries the catalogue's ``verdict`` as a property."""

from __future__ import annotations

import os
import pathlib
import urllib.parse
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .._fastst import __version__
from ..tools import inspect as fi

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


def _artifact_uri(path: str) -> str:
    if os.path.isabs(path):
        return pathlib.Path(path).as_uri()
    return urllib.parse.quote(path.replace(os.sep, "/"), errors="surrogateescape")


def _rule(rule: str, severity: str, summary: str, verdict: Optional[str] = None) -> Dict[str, Any]:
    properties = {"severity": severity, "security-severity": _SECURITY_SEVERITY[severity]}
    if verdict is not None:
        properties["verdict"] = verdict
    return {
        "id": rule,
        "name": "".join(part.capitalize() for part in rule.split("-")),
        "shortDescription": {"text": summary},
        "defaultConfiguration": {"level": _LEVELS[severity]},
        "properties": properties,
    }


def _at(uri: str) -> Dict[str, Any]:
    return {"physicalLocation": {"artifactLocation": {"uri": uri}}}


def _log(
    rules: List[Dict[str, Any]],
    artifacts: List[Dict[str, Any]],
    results: List[Dict[str, Any]],
    notifications: List[Dict[str, Any]],
    successful: bool,
) -> Dict[str, Any]:
    driver = {"name": "fastst", "version": __version__, "semanticVersion": __version__}
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {**driver, "rules": rules}},
                "invocations": [
                    {"executionSuccessful": successful, "toolExecutionNotifications": notifications}
                ],
                "artifacts": artifacts,
                "results": results,
            }
        ],
    }


def sarif_log(
    reports: Sequence[Dict[str, Any]], errors: Sequence[Tuple[str, str]] = ()
) -> Dict[str, Any]:
    """A SARIF 2.1.0 log of verify reports (from :func:`fastst.tools.inspect.verify_file`)
    and of files that could not be read."""
    catalogue = fi.rules()
    index = {r["id"]: i for i, r in enumerate(catalogue)}
    rules = [_rule(r["id"], r["severity"], r["summary"], r.get("verdict")) for r in catalogue]
    results = []
    artifacts: List[Dict[str, Any]] = []
    for report in reports:
        uri = _artifact_uri(report["path"])
        k = len(artifacts)
        artifacts.append({"location": {"uri": uri}, "length": report["file_len"]})
        # A checkpoint: each shard is an artifact of its own, and a finding
        # about a shard points at it.
        shards: Dict[str, Tuple[str, int]] = {}
        folder = os.path.dirname(report["path"])
        for shard in report.get("shards") or []:
            shard_uri = _artifact_uri(os.path.join(folder, shard["file"]))
            shards[shard["file"]] = (shard_uri, len(artifacts))
            artifacts.append({"location": {"uri": shard_uri}})
        for f in report["findings"]:
            where_uri, where = shards.get(f.get("shard") or "", (uri, k))
            location: Dict[str, Any] = {"artifactLocation": {"uri": where_uri, "index": where}}
            if f.get("offset") is not None:
                region: Dict[str, Any] = {"byteOffset": f["offset"]}
                if f.get("length") is not None:
                    region["byteLength"] = f["length"]
                location["region"] = region
            properties = {
                key: f[key]
                for key in ("severity", "verdict", "tensor", "key", "count", "shard")
                if f.get(key) is not None
            }
            malformed = f.get("verdict") == "malformed"
            result: Dict[str, Any] = {
                "ruleId": f["rule"],
                "kind": "review" if malformed else "fail",
                "level": "none" if malformed else _LEVELS[f["severity"]],
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
            "locations": [_at(_artifact_uri(path))],
        }
        for path, message in errors
    ]
    notifications += [
        {
            "level": "warning",
            "message": {"text": f"{r['path']}: header unreadable, tensors not examined"},
        }
        for r in reports
        if not r["complete"] and r.get("kind") != "folder"
    ]
    notifications += [
        {
            "level": "warning",
            "message": {
                "text": f"{r['path']}: malformed (it breaks the format): the verdict is "
                "inconclusive, not a red flag"
            },
            "locations": [_at(_artifact_uri(r["path"]))],
        }
        for r in reports
        if r.get("inconclusive") and r.get("malformed")
    ]
    return _log(rules, artifacts, results, notifications, not errors)


def signature_sarif_log(
    result: Optional[Dict[str, Any]], model: str, error: Optional[str]
) -> Dict[str, Any]:
    """A SARIF 2.1.0 log of one signature check (:meth:`VerifyResult.to_dict`)."""
    from ..tools.provenance.findings import RULES

    ids = list(RULES)
    rules = [_rule(rule, severity, summary) for rule, (severity, summary) in RULES.items()]
    results = []
    artifacts = []
    if result is not None:
        base = result["model"]
        artifacts.append({"location": {"uri": _artifact_uri(base)}})
        artifacts.append({"location": {"uri": _artifact_uri(result["signature"])}})
        for f in result["findings"]:
            if f["path"] and f["path"] != ".":
                uri = _artifact_uri(os.path.join(base, f["path"]))
            elif f["path"] == ".":
                uri = _artifact_uri(base)
            else:
                uri = _artifact_uri(result["signature"])
            results.append(
                {
                    "ruleId": f["rule"],
                    "ruleIndex": ids.index(f["rule"]),
                    "level": _LEVELS[f["severity"]],
                    "message": {"text": f["message"]},
                    "locations": [_at(uri)],
                    "properties": {"severity": f["severity"]},
                }
            )
    notifications = []
    if error:
        notifications.append(
            {"level": "error", "message": {"text": error}, "locations": [_at(_artifact_uri(model))]}
        )
    return _log(rules, artifacts, results, notifications, not error)


def add_notes(log: Dict[str, Any], notes: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Adds notes (``{"rule", "message", "path"}``: signature files left
    unchecked, stale temporary files) to a SARIF log as notifications."""
    for run in log.get("runs", []):
        for inv in run.get("invocations", []):
            inv.setdefault("toolExecutionNotifications", []).extend(
                {
                    "level": "note",
                    "message": {"text": n["message"]},
                    "descriptor": {"id": n["rule"]},
                    "locations": [_at(_artifact_uri(n["path"]))],
                }
                for n in notes
            )
    return log
