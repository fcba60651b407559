"""Provenance rule ids, findings and errors.

Every problem a signature check can find is a :class:`Finding` with a stable
rule id from :data:`RULES` (``signature-*``) and a severity from
:data:`fastst.tools.inspect.SEVERITIES`. Problems that stop the work before there
is anything to judge (a key that cannot be read, a model path that does not
exist) are raised as :class:`ProvenanceError`, rooted at
:class:`fastst.SafetensorError`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from ... import _fastst
from ..._errors import MissingExtraError, ProvenanceError  # noqa: F401 (re-exported)

#: ``rule id -> (severity, one-line summary)``: the provenance family of the
#: core's rule catalogue (``_fastst.catalogue.rule_catalogue()``), its one home.
RULES: Dict[str, Tuple[str, str]] = {
    r["id"]: (r["severity"], r["summary"])
    for r in _fastst.catalogue.rule_catalogue()
    if r["family"] == "ProvenanceError"
}


def rules() -> List[Dict[str, str]]:
    """The provenance rules: dicts with ``id``, ``severity`` and ``summary``."""
    return [{"id": k, "severity": s, "summary": m} for k, (s, m) in RULES.items()]


@dataclasses.dataclass(frozen=True)
class Finding:
    """One problem found while checking a signature.

    ``path`` is the file inside the model the finding is about (POSIX,
    relative to the model), or None when it is about the signature itself.
    """

    rule: str
    severity: str
    message: str
    path: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def finding(rule: str, message: str, path: Optional[str] = None) -> Finding:
    """A finding for ``rule`` with its catalogue severity."""
    return Finding(rule=rule, severity=RULES[rule][0], message=message, path=path)


def require(module: str) -> Any:
    """Imports ``module`` or raises :class:`MissingExtraError` naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module} is needed for model signing and SBOMs: pip install 'fastst[signing]' ({exc})"
        ) from None
