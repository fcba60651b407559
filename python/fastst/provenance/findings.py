"""Provenance rule ids, findings and errors.

Every problem a signature check can find is a :class:`Finding` with a stable
rule id from :data:`RULES` (``signature-*``) and a severity from
:data:`fastst.inspect.SEVERITIES`. Problems that stop the work before there
is anything to judge (a key that cannot be read, a model path that does not
exist) are raised as :class:`ProvenanceError`, rooted at
:class:`fastst.SafetensorError`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from .._errors import SafetensorError

#: ``rule id -> (severity, one-line summary)``.
RULES: Dict[str, Tuple[str, str]] = {
    "signature-file-changed": (
        "critical",
        "a file covered by the signature has a different digest now",
    ),
    "signature-file-added": (
        "high",
        "the model holds a file that the signature does not cover",
    ),
    "signature-file-missing": (
        "high",
        "a file covered by the signature is missing from the model",
    ),
    "signature-wrong-model": (
        "critical",
        "the signature was made over a different model: none of its files match",
    ),
    "signature-wrong-key": (
        "critical",
        "the signature does not verify with the given key or certificate",
    ),
    "signature-invalid": (
        "critical",
        "the signature value does not verify although the key matches: the bundle was altered",
    ),
    "signature-untrusted-certificate": (
        "critical",
        "the signing certificate does not chain to the given roots or may not sign",
    ),
    "signature-identity-mismatch": (
        "critical",
        "a Sigstore signature was made by another identity or issuer than expected",
    ),
    "signature-malformed": (
        "high",
        "the signature file is not a valid Sigstore bundle of a model signing statement",
    ),
    "signature-key-type": (
        "high",
        "the key is not an elliptic-curve key on P-256, P-384 or P-521",
    ),
    "signature-unsupported": (
        "high",
        "the signature uses a hash or serialization method fastst cannot check",
    ),
    "signature-symlink": (
        "high",
        "the model folder holds a symbolic link, which the signature format refuses",
    ),
    "signature-special-file": (
        "high",
        "the model folder holds something that is not a regular file or a folder, "
        "or that cannot be read",
    ),
    "signature-safetensors-rejected": (
        "high",
        "a signed .safetensors file is rejected by the strict reader (corrupt or truncated)",
    ),
    "signature-missing-shard": (
        "high",
        "a sharded checkpoint's index names a shard that the signature does not cover",
    ),
    "signature-not-checked": (
        "info",
        "the model folder holds a signature file that was not checked",
    ),
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


class ProvenanceError(SafetensorError, ValueError):
    """Signing, verifying or describing a model could not be done at all
    (unreadable key, model path that is not a file or a folder, symbolic
    link met while signing...). ``rule`` names the rule when one applies."""

    def __init__(self, message: str, *, rule: Optional[str] = None, filename: Optional[str] = None):
        super().__init__(message)
        self.rule = rule
        self.filename = filename


class MissingExtraError(ProvenanceError, ImportError):
    """A package of the ``fastst[signing]`` extra is not installed."""


def require(module: str) -> Any:
    """Imports ``module`` or raises :class:`MissingExtraError` naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module} is needed for model signing and SBOMs: pip install 'fastst[signing]' ({exc})"
        ) from None
