"""Signing and verifying models in the OpenSSF model signing format.

The format (``model_signing`` 1.x, https://github.com/sigstore/model-transparency):
a Sigstore bundle (media type ``application/vnd.dev.sigstore.bundle.v0.3+json``)
whose DSSE envelope holds an in-toto statement (``https://in-toto.io/Statement/v1``,
predicate type ``https://model_signing/signature/v1.0``). The predicate lists
every file of the model with its digest (serialization ``files``; ``shards``
is read too) and the subject carries a SHA-256 over those digests in order.

fastst lists and hashes the model itself (in parallel, see
:mod:`fastst.provenance.hashing`), adds safetensors-aware checks, and leaves
the cryptography to the field's libraries: ``cryptography`` (ECDSA, keys,
X.509), ``pyOpenSSL`` (certificate chains, as ``model_signing`` does),
``sigstore-models`` (the bundle) and ``sigstore`` (keyless bundles). They are
the ``fastst[signing]`` extra and are imported only when used.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import os
import pathlib
import posixpath
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .findings import Finding, ProvenanceError, finding, require
from .hashing import (
    GIT_PATHS,
    ModelFile,
    Piece,
    hash_constructor,
    hash_pieces,
    list_model,
    read_regular,
    shards_of,
    sort_key,
)

PathLike = Union[str, "os.PathLike[str]"]

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
#: The pre-1.0 predicate (every file a subject); still read.
PREDICATE_TYPE_V01 = "https://model_signing/Digests/v0.1"

#: Default signature file name inside a model folder (model_signing's default).
DEFAULT_SIGNATURE_NAME = "model.sig"

#: Largest signature file read (a bundle lists one line per file).
MAX_SIGNATURE_BYTES = 64 << 20

_CURVES = {"secp256r1": "sha256", "secp384r1": "sha384", "secp521r1": "sha512"}


# results ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SignedFile:
    """A file (or shard) of a signed model and its digest (lower-case hex)."""

    name: str
    digest: str
    algorithm: str = "sha256"


@dataclasses.dataclass(frozen=True)
class SignResult:
    """What :func:`sign` wrote."""

    model: str
    signature: str
    model_name: str
    method: str  # "key" or "certificate"
    serialization: Dict[str, Any]
    files: Tuple[SignedFile, ...]
    root_digest: str
    findings: Tuple[Finding, ...] = ()
    seconds: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["files"] = [dataclasses.asdict(f) for f in self.files]
        d["findings"] = [f.to_dict() for f in self.findings]
        return d


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


# small helpers ------------------------------------------------------------


def _fspath(path: PathLike) -> str:
    p = os.fspath(path)
    return os.fsdecode(p) if isinstance(p, bytes) else p


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


def _pae(payload: bytes, payload_type: str = PAYLOAD_TYPE) -> bytes:
    """DSSE pre-authentication encoding (DSSE protocol v1)."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def _pae_v02(payload: bytes) -> bytes:
    """The encoding model_signing 0.2 signed by mistake (it still verifies
    those signatures, so fastst does too)."""
    t = PAYLOAD_TYPE
    return f"DSSEV1 {len(t)} {t} {len(payload)} {payload!r}".encode()


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


# model listing and hashing -------------------------------------------------


def _inside(model: str, path: str) -> Optional[str]:
    """``path`` relative to the folder ``model`` (POSIX), or None if outside."""
    if not os.path.isdir(model):
        return None
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(model))
    if rel == os.curdir or rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return None
    return rel.replace(os.sep, "/")


def _model_root(model: str) -> str:
    """A sharded checkpoint given by its index file is its folder."""
    if os.path.isfile(model) and model.endswith(".safetensors.index.json"):
        return os.path.dirname(os.path.abspath(model))
    return model


def _model_name(root: str) -> str:
    name = os.path.basename(os.path.normpath(root))
    if not name or name == os.pardir:
        name = os.path.basename(os.path.abspath(root))
    return name


def _pieces(files: Sequence[ModelFile], serialization: Dict[str, Any]) -> List[Piece]:
    if serialization["method"] == "shards":
        return shards_of(files, int(serialization["shard_size"]))
    return [Piece(f.name, f.path, 0, None) for f in files]


def _root_digest(items: Sequence[Tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for _, digest in items:
        h.update(bytes.fromhex(digest))
    return h.hexdigest()


def _resource_algorithm(serialization: Dict[str, Any]) -> str:
    """The ``algorithm`` of each resource: the hash name, and for shards
    ``<hash>-sharded-<shard_size>`` (as model_signing writes it)."""
    if serialization["method"] == "shards":
        return f"{serialization['hash_type']}-sharded-{serialization['shard_size']}"
    return str(serialization["hash_type"])


def _statement(
    model_name: str, items: Sequence[Tuple[str, str]], serialization: Dict[str, Any]
) -> Dict[str, Any]:
    algorithm = _resource_algorithm(serialization)
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": model_name, "digest": {"sha256": _root_digest(items)}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "serialization": serialization,
            "resources": [
                {"name": name, "algorithm": algorithm, "digest": digest} for name, digest in items
            ],
        },
    }


def _safetensors_checks(files: Sequence[ModelFile], names: Optional[set] = None) -> List[Finding]:
    """Safetensors-aware checks of the files of a model: every
    ``.safetensors`` file must be accepted by the strict reader (header and
    layout, without reading tensor data), and every shard a
    ``*.safetensors.index.json`` names must be among the (signed) files."""
    from .. import _fastst

    found: List[Finding] = []
    present = {f.name for f in files} if names is None else names
    for f in files:
        lower = f.name.lower()
        if lower.endswith(".safetensors") or (f.name == "." and f.path.endswith(".safetensors")):
            problem = _reader_problem(_fastst, f.path)
            if problem:
                found.append(
                    finding(
                        "signature-safetensors-rejected",
                        f"{f.name}: the strict reader rejects this file: {problem}",
                        f.name,
                    )
                )
        elif lower.endswith(".safetensors.index.json") and f.size <= 64 << 20:
            folder = posixpath.dirname(f.name)
            for shard in _index_shards(f.path):
                full = posixpath.normpath(posixpath.join(folder, shard)) if folder else shard
                if full not in present:
                    found.append(
                        finding(
                            "signature-missing-shard",
                            f"{f.name} names shard {shard!r}, which is not among the signed "
                            "files of the model",
                            f.name,
                        )
                    )
    return found


def _reader_problem(_fastst: Any, path: str) -> Optional[str]:
    from .._errors import SafetensorError

    try:
        _fastst.inspect_file(path, table=False)
    except (SafetensorError, OSError, ValueError) as exc:
        return " ".join(str(exc).split())
    return None


def _index_shards(path: str) -> List[str]:
    try:
        data = json.loads(read_regular(path, 64 << 20, follow=False))
    except (OSError, ValueError, RecursionError):
        return []
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        return []
    return sorted({v for v in weight_map.values() if isinstance(v, str)})


# signing --------------------------------------------------------------------


def _write_atomic(path: str, data: bytes) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".sig-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_signature_path(model: PathLike) -> str:
    """Where :func:`sign` writes by default: ``FOLDER/model.sig`` for a
    folder (or an index file's folder), ``FILE.sig`` for a single file."""
    root = _model_root(_fspath(model))
    if os.path.isdir(root):
        return os.path.join(root, DEFAULT_SIGNATURE_NAME)
    return root + ".sig"


def sign(
    model: PathLike,
    private_key: PathLike,
    *,
    signature: Optional[PathLike] = None,
    certificate: Optional[PathLike] = None,
    certificate_chain: Sequence[PathLike] = (),
    password: Optional[Union[str, bytes]] = None,
    ignore_paths: Sequence[PathLike] = (),
    ignore_git_paths: bool = True,
    allow_symlinks: bool = False,
    shard_size: Optional[int] = None,
    threads: int = 0,
) -> SignResult:
    """Signs the model at ``model`` (a ``.safetensors`` file, a folder, or a
    sharded checkpoint's ``*.safetensors.index.json``, meaning its folder)
    with an elliptic-curve ``private_key`` (PEM), in the OpenSSF model
    signing format; ``model_signing verify key`` accepts the result.

    With ``certificate`` (PEM, for the same key) the bundle carries the
    certificate and ``certificate_chain`` (intermediates) instead of a key
    hint, as ``model_signing sign certificate`` does. The signature goes to
    ``signature`` (default :func:`default_signature_path`), written
    atomically; a signature file inside the model folder is left out of the
    signed files, and so are ``ignore_paths`` and (by default) git files.
    ``shard_size`` selects the ``shards`` serialization (files cut into
    pieces of that many bytes, hashed in parallel even for one big file).

    Raises :class:`ProvenanceError` when the key cannot be used or the model
    holds a symbolic link (unless ``allow_symlinks``) or a special file.
    The result's ``findings`` list safetensors-aware warnings (a file the
    strict reader rejects, an index naming a missing shard).
    """
    t0 = time.perf_counter()
    model_s = _fspath(model)
    root = _model_root(model_s)
    key = _load_private_key(_fspath(private_key), password)
    hash_alg = _ec_hash(key.public_key())
    ec = require("cryptography.hazmat.primitives.asymmetric.ec")

    if certificate is not None:
        method = "certificate"
        material = _certificate_material(key, _fspath(certificate), certificate_chain)
    else:
        method = "key"
        material = {"publicKey": {"hint": key_hint(key.public_key())}, "tlogEntries": []}

    sig_path = _fspath(signature) if signature is not None else default_signature_path(model_s)
    ignored: List[str] = []
    rel_sig = _inside(root, sig_path)
    if rel_sig:
        ignored.append(rel_sig)
    for p in ignore_paths:
        rel = _inside(root, _fspath(p))
        if rel and rel not in ignored:
            ignored.append(rel)
    if ignore_git_paths and os.path.isdir(root):
        ignored.extend(g for g in GIT_PATHS if g not in ignored)

    files, problems = list_model(root, ignore=ignored, allow_symlinks=allow_symlinks)
    if problems:
        raise ProvenanceError(
            f"{root}: cannot sign: " + "; ".join(p.message for p in problems),
            rule=problems[0].rule,
            filename=root,
        )
    serialization: Dict[str, Any] = {
        "method": "files",
        "hash_type": "sha256",
        "allow_symlinks": bool(allow_symlinks),
    }
    if shard_size is not None:
        if shard_size <= 0:
            raise ValueError(f"shard_size must be positive, got {shard_size}")
        serialization = {
            "method": "shards",
            "hash_type": "sha256",
            "shard_size": int(shard_size),
            "allow_symlinks": bool(allow_symlinks),
        }
    if ignored:
        serialization["ignore_paths"] = ignored
    pieces = _pieces(files, serialization)
    digests, errors = hash_pieces(
        pieces,
        "sha256",
        threads=threads,
        follow=allow_symlinks,
        sizes={f.name: f.size for f in files},
    )
    if errors:
        name, message = sorted(errors.items())[0]
        raise ProvenanceError(
            f"{root}: cannot sign: {name}: {message}", rule="signature-special-file", filename=root
        )
    shards = serialization["method"] == "shards"
    items = sorted(digests.items(), key=lambda kv: sort_key(kv[0], shards))
    model_name = _model_name(root)
    statement = _statement(model_name, items, serialization)
    payload = json.dumps(statement, separators=(",", ":")).encode("utf-8")
    raw_sig = key.sign(_pae(payload), ec.ECDSA(hash_alg))

    bundle = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": material,
        "dsseEnvelope": {
            "payload": base64.b64encode(payload).decode("ascii"),
            "payloadType": PAYLOAD_TYPE,
            "signatures": [{"sig": base64.b64encode(raw_sig).decode("ascii"), "keyid": ""}],
        },
    }
    _write_atomic(sig_path, _bundle_json(bundle))
    return SignResult(
        model=model_s,
        signature=sig_path,
        model_name=model_name,
        method=method,
        serialization=serialization,
        files=tuple(SignedFile(n, d, "sha256") for n, d in items),
        root_digest=statement["subject"][0]["digest"]["sha256"],
        findings=tuple(_safetensors_checks(files)),
        seconds=time.perf_counter() - t0,
    )


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


# verification ---------------------------------------------------------------


class _Bad(Exception):
    """A finding that ends the check of the signature."""

    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.finding = finding(rule, message)


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise _Bad("signature-malformed", f"{what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _Bad("signature-malformed", f"{what} is not valid base64") from None


def _obj(value: Any, what: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad("signature-malformed", f"{what} is missing or not a JSON object")
    return value


def _read_bundle(path: str) -> Dict[str, Any]:
    try:
        data = read_regular(path, MAX_SIGNATURE_BYTES)
    except OSError as exc:
        raise ProvenanceError(
            f"{path}: cannot read the signature: {exc.strerror or exc}", filename=path
        ) from None
    if len(data) > MAX_SIGNATURE_BYTES:
        raise _Bad("signature-malformed", f"the signature is larger than {MAX_SIGNATURE_BYTES} B")
    try:
        bundle = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise _Bad("signature-malformed", f"the signature is not JSON ({exc})") from None
    return _obj(bundle, "the signature (a Sigstore bundle)")


def _envelope(bundle: Dict[str, Any]) -> Tuple[bytes, str, bytes]:
    env = _obj(bundle.get("dsseEnvelope"), "dsseEnvelope")
    payload = _b64(env.get("payload"), "dsseEnvelope.payload")
    ptype = env.get("payloadType")
    sigs = env.get("signatures")
    if not isinstance(sigs, list) or not sigs:
        raise _Bad("signature-malformed", "dsseEnvelope.signatures is missing or empty")
    sig = _b64(_obj(sigs[0], "dsseEnvelope.signatures[0]").get("sig"), "the signature value")
    if not isinstance(ptype, str):
        raise _Bad("signature-malformed", "dsseEnvelope.payloadType is missing")
    return payload, ptype, sig


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
        raise _Bad("signature-key-type", str(exc)) from None
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
        raise _Bad(
            "signature-invalid",
            "the signature does not verify although the bundle names this key: the signed "
            "statement or the signature value was altered after signing",
        )
    raise _Bad(
        "signature-wrong-key",
        "the signature does not verify with this key: it was made with another key, "
        "or the signed statement was altered",
    )


def _verify_key(bundle: Dict[str, Any], public_key_path: str) -> Tuple[str, bytes]:
    public_key = _load_public_key(public_key_path)
    try:
        _ec_hash(public_key)
    except ProvenanceError as exc:
        raise _Bad("signature-key-type", f"{public_key_path}: {exc}") from None
    if bundle.get("mediaType") != BUNDLE_MEDIA_TYPE:
        raise _Bad(
            "signature-malformed",
            f"mediaType is {bundle.get('mediaType')!r}, expected {BUNDLE_MEDIA_TYPE}",
        )
    material = _obj(bundle.get("verificationMaterial"), "verificationMaterial")
    payload, ptype, sig = _envelope(bundle)
    pk = material.get("publicKey")
    if pk is not None and not isinstance(pk, dict):
        raise _Bad("signature-malformed", "verificationMaterial.publicKey is not a JSON object")
    hint = (pk or {}).get("hint")
    if hint is not None and not isinstance(hint, str):
        raise _Bad("signature-malformed", "verificationMaterial.publicKey.hint is not a string")
    if hint:
        mine = key_hint(public_key)
        if hint != mine:
            raise _Bad(
                "signature-wrong-key",
                f"the signature was made with another key (key hint {str(hint)[:16]}..., "
                f"the given public key is {mine[:16]}...)",
            )
    elif "x509CertificateChain" in material or "certificate" in material:
        raise _Bad(
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
        raise _Bad(
            "signature-malformed",
            f"mediaType is {bundle.get('mediaType')!r}, expected {BUNDLE_MEDIA_TYPE}",
        )
    material = _obj(bundle.get("verificationMaterial"), "verificationMaterial")
    payload, ptype, sig = _envelope(bundle)
    chain = material.get("x509CertificateChain")
    if chain is None:
        raise _Bad(
            "signature-wrong-key",
            "the signature holds no certificate chain (it was made with a bare key or "
            "through Sigstore); verify it with the matching public key or trust root",
        )
    certs_json = _obj(chain, "x509CertificateChain").get("certificates")
    if not isinstance(certs_json, list) or not certs_json:
        raise _Bad("signature-malformed", "x509CertificateChain.certificates is empty")
    certs = []
    for i, c in enumerate(certs_json):
        der = _b64(_obj(c, f"certificate {i}").get("rawBytes"), f"certificate {i}")
        try:
            certs.append(x509.load_der_x509_certificate(der))
        except ValueError as exc:
            raise _Bad("signature-malformed", f"certificate {i} is not DER X.509 ({exc})") from None
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
        raise _Bad(
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
        raise _Bad(
            "signature-untrusted-certificate",
            "the signing certificate is not for signing (no digitalSignature key usage, "
            "no codeSigning extended key usage)",
        )
    _check_sig(leaf.public_key(), sig, payload, ptype, v02_sha256=True, key_matches=True)
    return ptype, payload


def _verify_sigstore(
    path: str, trust_root: str, identity: Optional[str], issuer: Optional[str]
) -> Tuple[str, bytes]:
    """Keyless (Sigstore) bundles, verified offline against ``trust_root``
    (a ``TrustedRoot`` or ``ClientTrustConfig`` JSON file) by sigstore-python:
    certificate chain to the Fulcio roots, SCTs, transparency log inclusion
    proof and signed timestamps, identity policy, DSSE signature."""
    models = require("sigstore.models")
    verify = require("sigstore.verify")
    policy_mod = require("sigstore.verify.policy")
    errors = require("sigstore.errors")
    if not identity or not issuer:
        raise ProvenanceError(
            "verifying a Sigstore bundle needs the expected identity and OIDC issuer"
        )
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
        raise _Bad("signature-malformed", f"not a Sigstore bundle ({exc})") from None
    verifier = verify.Verifier(trusted_root=trusted)
    policy = _DeferredPolicy(policy_mod.Identity(identity=identity, issuer=issuer), errors)
    try:
        result = verifier.verify_dsse(bundle, policy)
    except errors.VerificationError as exc:
        text = " ".join(str(exc).split())
        raise _Bad(
            "signature-untrusted-certificate", f"Sigstore verification failed: {text}"
        ) from None
    except (ValueError, TypeError, KeyError, IndexError, errors.Error) as exc:
        # malformed contents met by sigstore-python while checking
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise _Bad(
            "signature-malformed", f"the Sigstore bundle cannot be checked: {text}"
        ) from None
    if policy.error is not None:
        text = " ".join(str(policy.error).split())
        raise _Bad(
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


@dataclasses.dataclass
class _Manifest:
    model_name: str
    serialization: Dict[str, Any]
    items: Dict[str, Tuple[str, str]]  # name -> (algorithm, hex digest)


def _parse_statement(ptype: str, payload: bytes) -> _Manifest:
    if ptype != PAYLOAD_TYPE:
        raise _Bad("signature-malformed", f"payloadType is {ptype!r}, expected {PAYLOAD_TYPE}")
    try:
        st = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise _Bad("signature-malformed", f"the signed payload is not JSON ({exc})") from None
    st = _obj(st, "the signed statement")
    if st.get("_type") != STATEMENT_TYPE:
        raise _Bad("signature-malformed", f"statement _type is {st.get('_type')!r}")
    subjects = st.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise _Bad("signature-malformed", "the statement has no subject")
    ptype_ = st.get("predicateType")
    items: Dict[str, Tuple[str, str]] = {}

    def add(name: Any, algorithm: Any, digest: Any) -> None:
        if not isinstance(name, str) or not isinstance(algorithm, str):
            raise _Bad("signature-malformed", "a resource has no name or algorithm")
        if not isinstance(digest, str) or not digest or len(digest) % 2:
            raise _Bad("signature-malformed", f"resource {name!r} has no hex digest")
        try:
            bytes.fromhex(digest)
        except ValueError:
            raise _Bad("signature-malformed", f"resource {name!r} has no hex digest") from None
        key = str(pathlib.PurePosixPath(name))  # model_signing's normalisation
        if key in items:
            raise _Bad("signature-malformed", f"resource {name!r} is listed twice")
        items[key] = (algorithm, digest.lower())

    if ptype_ == PREDICATE_TYPE_V01:
        for s in subjects:
            s = _obj(s, "a subject")
            add(s.get("name"), "sha256", _obj(s.get("digest"), "a subject digest").get("sha256"))
        ser = {"method": "files", "hash_type": "sha256", "allow_symlinks": False}
        return _Manifest("compat-undefined-not-present", ser, items)
    if ptype_ != PREDICATE_TYPE:
        raise _Bad(
            "signature-malformed",
            f"predicateType is {ptype_!r}, expected {PREDICATE_TYPE} (not a model signature)",
        )
    if len(subjects) != 1:
        raise _Bad("signature-malformed", f"the statement has {len(subjects)} subjects, expected 1")
    subject = _obj(subjects[0], "the subject")
    name = subject.get("name")
    root = _obj(subject.get("digest"), "the subject digest").get("sha256")
    predicate = _obj(st.get("predicate"), "the predicate")
    ser = _obj(predicate.get("serialization"), "predicate.serialization")
    resources = predicate.get("resources")
    if not isinstance(resources, list):
        raise _Bad("signature-malformed", "predicate.resources is missing")
    ordered = []
    for r in resources:
        r = _obj(r, "a resource")
        add(r.get("name"), r.get("algorithm"), r.get("digest"))
        ordered.append(r["digest"])
    h = hashlib.sha256()
    for digest in ordered:
        h.update(bytes.fromhex(digest))
    if not isinstance(root, str) or h.hexdigest() != root.lower():
        raise _Bad(
            "signature-malformed",
            "the statement is inconsistent: the subject digest does not match its resources",
        )
    method = ser.get("method")
    if method not in ("files", "shards"):
        raise _Bad("signature-unsupported", f"serialization method {method!r} is not supported")
    if not isinstance(ser.get("hash_type"), str):
        raise _Bad("signature-malformed", "serialization.hash_type is missing")
    if method == "shards":
        size = ser.get("shard_size")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise _Bad("signature-malformed", "serialization.shard_size is not a positive integer")
    ignore = ser.get("ignore_paths", [])
    if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
        raise _Bad("signature-malformed", "serialization.ignore_paths is not a list of paths")
    return _Manifest(str(name) if isinstance(name, str) else "", ser, items)


def _file_of(name: str, shards: bool) -> str:
    if not shards:
        return name
    return name.rsplit(":", 2)[0]


def _compare(
    root: str,
    manifest: _Manifest,
    files: Sequence[ModelFile],
    actual: Dict[str, str],
    unreadable: Dict[str, str],
) -> List[Finding]:
    shards = manifest.serialization["method"] == "shards"
    expected = {k: v[1] for k, v in manifest.items.items()}
    model_name = _model_name(root)
    matching = [n for n, d in actual.items() if expected.get(n) == d]
    common = set(expected) & (set(actual) | set(unreadable))
    if expected and (actual or unreadable) and not matching:
        other_name = manifest.model_name not in ("", model_name, "compat-undefined-not-present")
        if not common or other_name:
            return [
                finding(
                    "signature-wrong-model",
                    f"the signature is over another model ({manifest.model_name!r}, "
                    f"{len({_file_of(n, shards) for n in expected})} files): none of its files "
                    f"matches this model ({model_name!r}, {len(files)} files)",
                )
            ]
    by_file: Dict[str, ModelFile] = {f.name: f for f in files}
    found: List[Finding] = []
    changed: Dict[str, List[str]] = {}
    missing: Dict[str, int] = {}
    for name, digest in expected.items():
        fname = _file_of(name, shards)
        if name in unreadable:
            found.append(
                finding(
                    "signature-special-file",
                    f"{fname}: cannot be read: {unreadable[name]}",
                    fname,
                )
            )
        elif name not in actual:
            if fname in by_file:
                changed.setdefault(fname, []).append(name)
            else:
                missing[fname] = missing.get(fname, 0) + 1
        elif actual[name] != digest:
            changed.setdefault(fname, []).append(name)
    added = sorted({_file_of(n, shards) for n in actual if n not in expected})
    for fname in sorted(changed, key=lambda n: sort_key(n)):
        f = by_file.get(fname)
        detail = ""
        if f is not None and (fname.endswith(".safetensors") or f.path.endswith(".safetensors")):
            from .. import _fastst

            problem = _reader_problem(_fastst, f.path)
            detail = (
                f"; the strict reader now rejects it: {problem}"
                if problem
                else "; it is still a well-formed .safetensors file, so its tensors or "
                "metadata were altered"
            )
        label = "." if fname == "." else fname
        found.append(
            finding(
                "signature-file-changed",
                f"{label}: contents differ from the signed digest{detail}",
                fname,
            )
        )
    for fname in sorted(missing, key=lambda n: sort_key(n)):
        found.append(
            finding("signature-file-missing", f"{fname}: signed, but missing from the model", fname)
        )
    for fname in added:
        if fname in changed:
            continue
        found.append(
            finding(
                "signature-file-added",
                f"{fname}: in the model, but not covered by the signature",
                fname,
            )
        )
    return found


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
    Raises :class:`ProvenanceError` only when the check cannot start (no
    key given, unreadable key, model path that does not exist).
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
    if not os.path.lexists(root):
        raise ProvenanceError(f"{root}: no such file or folder", filename=root)

    def result(findings: List[Finding], **kw: Any) -> VerifyResult:
        order = ("critical", "high", "medium", "low", "info")
        findings = sorted(findings, key=lambda f: order.index(f.severity))
        base = dict(
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
        base.update(kw)
        return VerifyResult(**base)

    crypto_ok = False
    try:
        if method == "sigstore":
            ptype, payload = _verify_sigstore(
                sig_path,
                _fspath(trust_root),
                identity,
                issuer,  # type: ignore[arg-type]
            )
        else:
            bundle = _read_bundle(sig_path)
            if method == "key":
                ptype, payload = _verify_key(bundle, _fspath(public_key))  # type: ignore[arg-type]
            else:
                ptype, payload = _verify_certificate(
                    bundle, [_fspath(c) for c in certificate_chain]
                )
        crypto_ok = True
        manifest = _parse_statement(ptype, payload)
    except _Bad as bad:
        return result([bad.finding], signature_valid=crypto_ok)

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
    ignored: List[str] = [p.strip("/") for p in ser.get("ignore_paths", []) if p.strip("/")]
    if ignore_git_paths:
        ignored.extend(GIT_PATHS)
    rel_sig = _inside(root, sig_path)
    if rel_sig:
        ignored.append(rel_sig)
    for p in ignore_paths:
        rel = _inside(root, _fspath(p))
        if rel:
            ignored.append(rel)
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


# noticing signature files --------------------------------------------------------

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
