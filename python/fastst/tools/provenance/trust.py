"""Whether a bundle is authentic: its DSSE signature checked against a key, chain or trust root.

A chain is checked with ``pyOpenSSL``, as ``model_signing`` does; a
Sigstore trust root offline with ``sigstore``. Each returns the signed
payload type and payload, or raises the finding that ends the check."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

from .bundle import (
    BUNDLE_MEDIA_TYPE,
    MAX_SIGNATURE_BYTES,
    _b64,
    _bad,
    _envelope,
    _obj,
    _pae,
    _pae_v02,
)
from .findings import ProvenanceError, require
from .keys import _ec_hash, _load_certificates, _load_public_key, _read_small, key_hint


def _check_sig(
    public_key: Any,
    sig: bytes,
    payload: bytes,
    ptype: str,
    v02_sha256: bool,
    key_matches: bool = False,
) -> None:
    exceptions = require("cryptography.exceptions")
    ec = require("cryptography.hazmat.primitives.asymmetric.ec")
    hashes = require("cryptography.hazmat.primitives.hashes")
    try:
        alg = _ec_hash(public_key)
    except ProvenanceError as exc:
        raise _bad("signature-key-type", str(exc)) from None
    try:
        public_key.verify(sig, _pae(payload, ptype), ec.ECDSA(alg))
        return
    except exceptions.InvalidSignature:
        pass
    try:  # signatures made by model_signing 0.2
        v02 = ec.ECDSA(hashes.SHA256()) if v02_sha256 else ec.ECDSA(alg)
        public_key.verify(sig, _pae_v02(payload), v02)
        return
    except exceptions.InvalidSignature:
        pass
    if key_matches:
        raise _bad(
            "signature-invalid",
            "the signature does not verify although the bundle names this key: the signed "
            "statement or the signature value was altered after signing",
        )
    raise _bad(
        "signature-wrong-key",
        "the signature does not verify with this key: it was made with another key, "
        "or the signed statement was altered",
    )


def _verify_key(bundle: Dict[str, Any], public_key_path: str) -> Tuple[str, bytes]:
    public_key = _load_public_key(public_key_path)
    try:
        _ec_hash(public_key)
    except ProvenanceError as exc:
        raise _bad("signature-key-type", f"{public_key_path}: {exc}") from None
    if bundle.get("mediaType") != BUNDLE_MEDIA_TYPE:
        raise _bad(
            "signature-malformed",
            f"mediaType is {bundle.get('mediaType')!r}, expected {BUNDLE_MEDIA_TYPE}",
        )
    material = _obj(bundle.get("verificationMaterial"), "verificationMaterial")
    payload, ptype, sig = _envelope(bundle)
    pk = material.get("publicKey")
    if pk is not None and not isinstance(pk, dict):
        raise _bad("signature-malformed", "verificationMaterial.publicKey is not a JSON object")
    hint = (pk or {}).get("hint")
    if hint is not None and not isinstance(hint, str):
        raise _bad("signature-malformed", "verificationMaterial.publicKey.hint is not a string")
    if hint:
        mine = key_hint(public_key)
        if hint != mine:
            raise _bad(
                "signature-wrong-key",
                f"the signature was made with another key (key hint {str(hint)[:16]}..., "
                f"the given public key is {mine[:16]}...)",
            )
    elif "x509CertificateChain" in material or "certificate" in material:
        raise _bad(
            "signature-wrong-key",
            "the signature was made with a certificate; verify it with a certificate chain "
            "(or a Sigstore trust root), not a public key",
        )
    _check_sig(public_key, sig, payload, ptype, v02_sha256=False, key_matches=bool(hint))
    return ptype, payload


def _verify_certificate(bundle: Dict[str, Any], chain_paths: Sequence[str]) -> Tuple[str, bytes]:
    x509 = require("cryptography.x509")
    crypto = require("OpenSSL.crypto")
    oid = require("cryptography.x509.oid")
    roots = _load_certificates(chain_paths)
    if bundle.get("mediaType") != BUNDLE_MEDIA_TYPE:
        raise _bad(
            "signature-malformed",
            f"mediaType is {bundle.get('mediaType')!r}, expected {BUNDLE_MEDIA_TYPE}",
        )
    material = _obj(bundle.get("verificationMaterial"), "verificationMaterial")
    payload, ptype, sig = _envelope(bundle)
    chain = material.get("x509CertificateChain")
    if chain is None:
        raise _bad(
            "signature-wrong-key",
            "the signature holds no certificate chain (it was made with a bare key or "
            "through Sigstore); verify it with the matching public key or trust root",
        )
    certs_json = _obj(chain, "x509CertificateChain").get("certificates")
    if not isinstance(certs_json, list) or not certs_json:
        raise _bad("signature-malformed", "x509CertificateChain.certificates is empty")
    certs = []
    for i, c in enumerate(certs_json):
        der = _b64(_obj(c, f"certificate {i}").get("rawBytes"), f"certificate {i}")
        try:
            certs.append(x509.load_der_x509_certificate(der))
        except ValueError as exc:
            raise _bad("signature-malformed", f"certificate {i} is not DER X.509 ({exc})") from None
    leaf = certs[0]
    store = crypto.X509Store()
    for root in roots:
        store.add_cert(crypto.X509.from_cryptography(root))
    store.set_time(leaf.not_valid_before_utc)
    try:
        crypto.X509StoreContext(
            store,
            crypto.X509.from_cryptography(leaf),
            [crypto.X509.from_cryptography(c) for c in certs[1:]],
        ).verify_certificate()
    except (crypto.X509StoreContextError, crypto.Error) as exc:
        raise _bad(
            "signature-untrusted-certificate",
            f"the signing certificate ({leaf.subject.rfc4514_string()}) does not chain to the "
            f"given roots: {exc}",
        ) from None
    can_sign = False
    try:
        can_sign = bool(
            leaf.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature
        )
    except x509.ExtensionNotFound:
        pass
    if not can_sign:
        try:
            eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
            can_sign = oid.ExtendedKeyUsageOID.CODE_SIGNING in eku
        except x509.ExtensionNotFound:
            pass
    if not can_sign:
        raise _bad(
            "signature-untrusted-certificate",
            "the signing certificate is not for signing (no digitalSignature key usage, "
            "no codeSigning extended key usage)",
        )
    _check_sig(leaf.public_key(), sig, payload, ptype, v02_sha256=True, key_matches=True)
    return ptype, payload


def _verify_sigstore(path: str, trust_root: str, identity: str, issuer: str) -> Tuple[str, bytes]:
    """Keyless (Sigstore) bundles, verified offline against ``trust_root``
    (a ``TrustedRoot`` or ``ClientTrustConfig`` JSON file) by sigstore-python:
    certificate chain to the Fulcio roots, SCTs, transparency log inclusion
    proof and signed timestamps, identity policy, DSSE signature."""
    models = require("sigstore.models")
    verify = require("sigstore.verify")
    policy_mod = require("sigstore.verify.policy")
    errors = require("sigstore.errors")
    raw = _read_small(trust_root, "trust root", 16 << 20)
    # The parsers below (pydantic models) raise many kinds of errors on
    # hostile input; any of them means "not a trust root" / "not a bundle".
    try:
        try:
            trusted = models.ClientTrustConfig.from_json(raw.decode("utf-8")).trusted_root
        except Exception:
            trusted = models.TrustedRoot.from_file(trust_root)
    except Exception as exc:
        raise ProvenanceError(
            f"{trust_root}: not a Sigstore trusted root or client trust config ({exc})",
            filename=trust_root,
        ) from None
    data = _read_small(path, "signature", MAX_SIGNATURE_BYTES)
    try:
        bundle = models.Bundle.from_json(data)
    except Exception as exc:
        raise _bad("signature-malformed", f"not a Sigstore bundle ({exc})") from None
    verifier = verify.Verifier(trusted_root=trusted)
    policy = _DeferredPolicy(policy_mod.Identity(identity=identity, issuer=issuer), errors)
    try:
        result = verifier.verify_dsse(bundle, policy)
    except errors.VerificationError as exc:
        text = " ".join(str(exc).split())
        raise _bad(
            "signature-untrusted-certificate", f"Sigstore verification failed: {text}"
        ) from None
    except (ValueError, TypeError, KeyError, IndexError, errors.Error) as exc:
        # malformed contents met by sigstore-python while checking
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise _bad(
            "signature-malformed", f"the Sigstore bundle cannot be checked: {text}"
        ) from None
    if policy.error is not None:
        text = " ".join(str(policy.error).split())
        raise _bad(
            "signature-identity-mismatch",
            f"the Sigstore signature is valid but not by {identity!r} from {issuer!r}: {text}",
        )
    return result


class _DeferredPolicy:
    """Runs an identity policy inside sigstore's verification but keeps its
    failure until the rest (chain, SCTs, log, signature) has been checked,
    so that a wrong identity is told apart from an untrusted bundle. The
    verification fails either way."""

    def __init__(self, inner: Any, errors: Any) -> None:
        self.inner = inner
        self.errors = errors
        self.error: Optional[BaseException] = None

    def verify(self, cert: Any) -> None:
        try:
            self.inner.verify(cert)
        except self.errors.VerificationError as exc:
            self.error = exc
