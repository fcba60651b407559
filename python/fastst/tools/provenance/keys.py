"""Keys and certificates for model signatures, read through ``cryptography``.

PEM private keys, public keys and X.509 certificates, the hash paired with
an elliptic curve, and the key hint bundles carry."""

from __future__ import annotations

import hashlib
from typing import Any, List, Optional, Sequence, Union

from .findings import ProvenanceError, require
from .hashing import read_regular

_CURVES = {"secp256r1": "sha256", "secp384r1": "sha384", "secp521r1": "sha512"}


def _read_small(path: str, what: str, limit: int = 1 << 20) -> bytes:
    try:
        data = read_regular(path, limit)
    except OSError as exc:
        raise ProvenanceError(
            f"{path}: cannot read the {what}: {exc.strerror or exc}", filename=path
        ) from None
    if len(data) > limit:
        raise ProvenanceError(f"{path}: the {what} is larger than {limit} bytes", filename=path)
    return data


def _ec_hash(public_key: Any) -> Any:
    """The hash paired with an EC key's curve (the format's rule), or raises
    :class:`ProvenanceError` with rule ``signature-key-type``."""
    hashes = require("cryptography.hazmat.primitives.hashes")
    ec = require("cryptography.hazmat.primitives.asymmetric.ec")
    if not isinstance(public_key, ec.EllipticCurvePublicKey):
        kind = type(public_key).__name__.replace("_", "")
        raise ProvenanceError(
            f"the key is a {kind}, but model signatures use elliptic-curve keys "
            "(P-256, P-384 or P-521)",
            rule="signature-key-type",
        )
    name = _CURVES.get(public_key.curve.name)
    if name is None:
        raise ProvenanceError(
            f"the key is on curve {public_key.curve.name}, but model signatures use "
            "P-256, P-384 or P-521",
            rule="signature-key-type",
        )
    return {"sha256": hashes.SHA256, "sha384": hashes.SHA384, "sha512": hashes.SHA512}[name]()


def _public_pem(public_key: Any) -> bytes:
    serialization = require("cryptography.hazmat.primitives.serialization")
    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def key_hint(public_key: Any) -> str:
    """The key identifier model_signing writes in bundles: SHA-256 (hex) of
    the public key's PEM SubjectPublicKeyInfo."""
    return hashlib.sha256(_public_pem(public_key)).hexdigest()


def _load_private_key(path: str, password: Optional[Union[str, bytes]]) -> Any:
    serialization = require("cryptography.hazmat.primitives.serialization")
    data = _read_small(path, "private key")
    unsupported = require("cryptography.exceptions").UnsupportedAlgorithm
    pw = password.encode() if isinstance(password, str) else password
    try:
        key = serialization.load_pem_private_key(data, pw)
    except TypeError as exc:  # password missing or not expected
        raise ProvenanceError(f"{path}: {exc}", filename=path) from None
    except (ValueError, unsupported) as exc:
        raise ProvenanceError(
            f"{path}: not a PEM private key that can be loaded ({exc})", filename=path
        ) from None
    try:
        _ec_hash(key.public_key())
    except ProvenanceError as exc:
        raise ProvenanceError(f"{path}: {exc}", rule=exc.rule, filename=path) from None
    return key


def _load_public_key(path: str) -> Any:
    serialization = require("cryptography.hazmat.primitives.serialization")
    x509 = require("cryptography.x509")
    unsupported = require("cryptography.exceptions").UnsupportedAlgorithm
    data = _read_small(path, "public key")
    try:
        return serialization.load_pem_public_key(data)
    except (ValueError, unsupported):
        pass
    try:  # a certificate works as a public key too
        return x509.load_pem_x509_certificate(data).public_key()
    except (ValueError, unsupported) as exc:
        raise ProvenanceError(
            f"{path}: not a PEM public key or certificate ({exc})", filename=path
        ) from None


def _load_certificates(paths: Sequence[str]) -> List[Any]:
    x509 = require("cryptography.x509")
    certs: List[Any] = []
    for path in paths:
        data = _read_small(path, "certificate file", 16 << 20)
        try:
            certs.extend(x509.load_pem_x509_certificates(data))
        except ValueError as exc:
            raise ProvenanceError(
                f"{path}: not a file of PEM certificates ({exc})", filename=path
            ) from None
    return certs
