"""The Sigstore bundle of a model signature: written, read back strictly, found in folders.

DSSE pre-authentication encoding, the bundle written through
``sigstore-models`` with its certificate material, read back strictly
(every malformed part is a ``signature-malformed`` finding), and bundle
files noticed in a folder."""

from __future__ import annotations

import base64
import binascii
import json
import os
from typing import Any, Dict, List, Sequence, Tuple

from .findings import ProvenanceError, finding, require
from .hashing import read_regular
from .keys import _load_certificates, _public_pem
from .model import PathLike, _fspath

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"

#: Largest signature file read (a bundle lists one line per file).
MAX_SIGNATURE_BYTES = 64 << 20


def _bad(rule: str, message: str) -> ProvenanceError:
    """The error that ends the check of a signature with a finding: a
    :class:`ProvenanceError` for ``rule`` whose ``finding`` attribute is the
    :class:`Finding` that :func:`verify_signature` reports instead of
    raising."""
    error = ProvenanceError(message, rule=rule)
    error.finding = finding(rule, message)  # type: ignore[attr-defined]
    return error


def _pae(payload: bytes, payload_type: str = PAYLOAD_TYPE) -> bytes:
    """DSSE pre-authentication encoding (DSSE protocol v1)."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def _pae_v02(payload: bytes) -> bytes:
    """The encoding model_signing 0.2 signed by mistake (it still verifies
    those signatures, so fastst does too)."""
    t = PAYLOAD_TYPE
    return f"DSSEV1 {len(t)} {t} {len(payload)} {payload!r}".encode()


def _bundle_json(bundle: Dict[str, Any]) -> bytes:
    """The bundle, passed through the Sigstore bundle model (sigstore-models)
    so that what is written is what the ecosystem's parser produces."""
    models = require("sigstore_models.bundle.v1")
    return models.Bundle.from_dict(bundle).to_json().encode("utf-8")


def _certificate_material(key: Any, certificate: str, chain: Sequence[PathLike]) -> Dict[str, Any]:
    serialization = require("cryptography.hazmat.primitives.serialization")
    leaf = _load_certificates([certificate])
    if not leaf:
        raise ProvenanceError(f"{certificate}: holds no certificate", filename=certificate)
    if _public_pem(leaf[0].public_key()) != _public_pem(key.public_key()):
        raise ProvenanceError(
            f"{certificate}: the certificate is for another key than the private key given",
            rule="signature-wrong-key",
            filename=certificate,
        )
    certs = leaf[:1] + _load_certificates([_fspath(c) for c in chain])
    return {
        "x509CertificateChain": {
            "certificates": [
                {
                    "rawBytes": base64.b64encode(c.public_bytes(serialization.Encoding.DER)).decode(
                        "ascii"
                    )
                }
                for c in certs
            ]
        },
        "tlogEntries": [],
    }


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise _bad("signature-malformed", f"{what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _bad("signature-malformed", f"{what} is not valid base64") from None


def _obj(value: Any, what: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad("signature-malformed", f"{what} is missing or not a JSON object")
    return value


def _read_bundle(path: str) -> Dict[str, Any]:
    try:
        data = read_regular(path, MAX_SIGNATURE_BYTES)
    except OSError as exc:
        raise ProvenanceError(
            f"{path}: cannot read the signature: {exc.strerror or exc}", filename=path
        ) from None
    if len(data) > MAX_SIGNATURE_BYTES:
        raise _bad("signature-malformed", f"the signature is larger than {MAX_SIGNATURE_BYTES} B")
    try:
        bundle = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise _bad("signature-malformed", f"the signature is not JSON ({exc})") from None
    return _obj(bundle, "the signature (a Sigstore bundle)")


def _envelope(bundle: Dict[str, Any]) -> Tuple[bytes, str, bytes]:
    env = _obj(bundle.get("dsseEnvelope"), "dsseEnvelope")
    payload = _b64(env.get("payload"), "dsseEnvelope.payload")
    ptype = env.get("payloadType")
    sigs = env.get("signatures")
    if not isinstance(sigs, list) or not sigs:
        raise _bad("signature-malformed", "dsseEnvelope.signatures is missing or empty")
    sig = _b64(_obj(sigs[0], "dsseEnvelope.signatures[0]").get("sig"), "the signature value")
    if not isinstance(ptype, str):
        raise _bad("signature-malformed", "dsseEnvelope.payloadType is missing")
    return payload, ptype, sig


_SIG_SUFFIXES = (".sig", ".sigstore", ".sigstore.json", ".bundle", ".bundle.json")


def find_signature_files(folder: PathLike) -> List[str]:
    """Signature files at the top of ``folder``: files named ``*.sig``,
    ``*.sigstore``, ``*.sigstore.json`` or ``*.bundle[.json]`` whose
    beginning is a JSON object naming a Sigstore bundle media type."""
    root = _fspath(folder)
    found: List[str] = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return found
    for entry in entries:
        if not entry.name.lower().endswith(_SIG_SUFFIXES):
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            head = read_regular(entry.path, 4095, follow=False)
        except OSError:
            continue
        if head.lstrip().startswith(b"{") and b"application/vnd.dev.sigstore.bundle" in head:
            found.append(entry.path)
    return found
