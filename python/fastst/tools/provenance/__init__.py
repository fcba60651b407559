"""Provenance: model signatures (OpenSSF model signing format) and CycloneDX 1.6 ML-BOMs.

``sign``, ``verify_signature`` and ``sbom`` are the
public entry points; the cryptography and bundle libraries come with the
``fastst[signing]`` extra and are imported only when used.
"""

from __future__ import annotations

from .findings import RULES, Finding, MissingExtraError, ProvenanceError, rules
from .sbom import SbomResult, sbom
from .signing import (
    SignedFile,
    SignResult,
    VerifyResult,
    default_signature_path,
    find_signature_files,
    sign,
    verify_signature,
)

__all__ = [
    "RULES",
    "rules",
    "Finding",
    "ProvenanceError",
    "MissingExtraError",
    "SignedFile",
    "SignResult",
    "VerifyResult",
    "sign",
    "verify_signature",
    "default_signature_path",
    "find_signature_files",
    "SbomResult",
    "sbom",
]
