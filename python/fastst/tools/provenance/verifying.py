"""Verifying a model against its signature, every problem a finding.

The bundle's authenticity (:mod:`fastst.tools.provenance.trust`), its
statement (:mod:`fastst.tools.provenance.statement`), then every file of
the model hashed and compared, with safetensors-aware checks."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .bundle import _read_bundle
from .findings import Finding, ProvenanceError, finding
from .hashing import GIT_PATHS, hash_constructor, hash_pieces, list_model
from .model import (
    PathLike,
    _fspath,
    _inside,
    _model_root,
    _pieces,
    _safetensors_checks,
    default_signature_path,
    given_ignores,
)
from .statement import _compare, _file_of, _parse_statement, _resource_algorithm
from .trust import _verify_certificate, _verify_key, _verify_sigstore


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    """What :func:`verify_signature` found. ``verified`` is True only when
    the signature is authentic and every file matches, with no finding above
    ``info``."""

    model: str
    signature: str
    method: str  # "key", "certificate" or "sigstore"
    verified: bool
    signature_valid: bool
    signed_model_name: Optional[str]
    serialization: Optional[Dict[str, Any]]
    files_checked: int
    findings: Tuple[Finding, ...]
    seconds: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["findings"] = [f.to_dict() for f in self.findings]
        return d


def verify_signature(
    model: PathLike,
    signature: Optional[PathLike] = None,
    *,
    public_key: Optional[PathLike] = None,
    certificate_chain: Sequence[PathLike] = (),
    trust_root: Optional[PathLike] = None,
    identity: Optional[str] = None,
    issuer: Optional[str] = None,
    ignore_paths: Sequence[PathLike] = (),
    ignore_git_paths: bool = True,
    allow_symlinks: bool = False,
    threads: int = 0,
) -> VerifyResult:
    """Verifies the model at ``model`` against ``signature`` (default
    :func:`default_signature_path`), made by ``model_signing`` or
    :func:`sign`.

    Exactly one kind of trust: ``public_key`` (PEM EC public key),
    ``certificate_chain`` (PEM roots and intermediates for certificate
    signatures) or ``trust_root`` (a Sigstore trusted root file, offline)
    with the expected ``identity`` and ``issuer``.

    Never raises for what a signature or model holds: every problem is a
    :class:`Finding` (``signature-*`` rule ids) and ``verified`` is False.
    Raises :class:`ProvenanceError` only when the check cannot start or an
    argument would go unused: no kind of trust or more than one, a trust
    root without both ``identity`` and ``issuer`` or those two without a
    trust root, an ignore path outside the model folder, an unreadable key,
    a model path that does not exist.
    """
    t0 = time.perf_counter()
    model_s = _fspath(model)
    root = _model_root(model_s)
    sig_path = _fspath(signature) if signature is not None else default_signature_path(model_s)
    kinds = [public_key is not None, bool(certificate_chain), trust_root is not None]
    if sum(kinds) != 1:
        raise ProvenanceError(
            "give exactly one of: a public key, a certificate chain, a Sigstore trust root"
        )
    method = "key" if kinds[0] else "certificate" if kinds[1] else "sigstore"
    if method == "sigstore" and (not identity or not issuer):
        raise ProvenanceError(
            "verifying a Sigstore bundle needs the expected identity and OIDC issuer"
        )
    if method != "sigstore" and (identity is not None or issuer is not None):
        raise ProvenanceError(
            "an expected identity and issuer apply to Sigstore bundles (a trust root) only"
        )
    if not os.path.lexists(root):
        raise ProvenanceError(f"{root}: no such file or folder", filename=root)
    given = given_ignores(root, ignore_paths)

    def result(findings: List[Finding], **kw: Any) -> VerifyResult:
        order = ("critical", "high", "medium", "low", "info")
        findings = sorted(findings, key=lambda f: order.index(f.severity))
        base = VerifyResult(
            model=model_s,
            signature=sig_path,
            method=method,
            verified=False,
            signature_valid=False,
            signed_model_name=None,
            serialization=None,
            files_checked=0,
            findings=tuple(findings),
            seconds=time.perf_counter() - t0,
        )
        return dataclasses.replace(base, **kw)

    crypto_ok = False
    try:
        # Exactly one kind of trust was given (checked above), so these
        # tests pick the same branch as ``method``.
        if trust_root is not None:  # method == "sigstore"
            ptype, payload = _verify_sigstore(
                sig_path, _fspath(trust_root), identity or "", issuer or ""
            )
        else:
            bundle = _read_bundle(sig_path)
            if public_key is not None:  # method == "key"
                ptype, payload = _verify_key(bundle, _fspath(public_key))
            else:
                ptype, payload = _verify_certificate(
                    bundle, [_fspath(c) for c in certificate_chain]
                )
        crypto_ok = True
        manifest = _parse_statement(ptype, payload)
    except ProvenanceError as exc:
        bad = getattr(exc, "finding", None)
        if bad is None:  # the check cannot start (unreadable key or file...)
            raise
        return result([bad], signature_valid=crypto_ok)

    ser = manifest.serialization
    for name, (algorithm, _) in sorted(manifest.items.items()):
        if algorithm not in (ser["hash_type"], _resource_algorithm(ser)):
            return result(
                [
                    finding(
                        "signature-malformed",
                        f"resource {name!r} is hashed with {algorithm!r}, but the statement's "
                        f"serialization says {_resource_algorithm(ser)!r}",
                    )
                ],
                signature_valid=True,
                signed_model_name=manifest.model_name,
                serialization=ser,
            )
    for algorithm in [ser["hash_type"]]:
        if hash_constructor(algorithm) is None:
            return result(
                [
                    finding(
                        "signature-unsupported",
                        f"the signature uses hash {algorithm!r}, which fastst cannot compute",
                    )
                ],
                signature_valid=True,
                signed_model_name=manifest.model_name,
                serialization=ser,
            )
    # what model_signing leaves out: the signed ignore paths, git files, the
    # signature and the caller's paths, each read by hashing.ignore_parts
    ignored: List[str] = list(ser.get("ignore_paths", [])) + given
    if ignore_git_paths:
        ignored.extend(GIT_PATHS)
    rel_sig = _inside(root, sig_path)
    if rel_sig:
        ignored.append(rel_sig)
    try:
        files, problems = list_model(root, ignore=ignored, allow_symlinks=allow_symlinks)
    except ProvenanceError as exc:
        if exc.rule:
            return result(
                [finding(exc.rule, str(exc))],
                signature_valid=True,
                signed_model_name=manifest.model_name,
                serialization=ser,
            )
        raise
    pieces = _pieces(files, ser)
    digests, unreadable = hash_pieces(
        pieces,
        ser["hash_type"],
        threads=threads,
        follow=allow_symlinks,
        sizes={f.name: f.size for f in files},
    )
    findings = list(problems)
    # a symlink or special file reported by the listing is not also "missing"
    reported = {p.path for p in problems}
    shards = ser["method"] == "shards"
    cmp = _compare(root, manifest, files, digests, unreadable)
    findings.extend(
        f
        for f in cmp
        if not (f.rule == "signature-file-missing" and f.path in reported)
        and not (f.rule == "signature-file-added" and f.path in reported)
    )
    if not any(f.rule == "signature-wrong-model" for f in findings):
        signed_files = {_file_of(n, shards) for n in manifest.items}
        checked = [f for f in files if f.name in signed_files]
        changed = {f.path for f in findings if f.rule == "signature-file-changed"}
        findings.extend(
            f
            for f in _safetensors_checks(
                [f for f in checked if f.name not in changed], names=signed_files
            )
        )
    verified = not any(f.severity != "info" for f in findings)
    return result(
        findings,
        verified=verified,
        signature_valid=True,
        signed_model_name=manifest.model_name,
        serialization=ser,
        files_checked=len(files),
    )
