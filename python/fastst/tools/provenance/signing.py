"""Signing and verifying models in the OpenSSF model signing format.

The format (``model_signing`` 1.x, https://github.com/sigstore/model-transparency):
a Sigstore bundle (media type ``application/vnd.dev.sigstore.bundle.v0.3+json``)
whose DSSE envelope holds an in-toto statement (``https://in-toto.io/Statement/v1``,
predicate type ``https://model_signing/signature/v1.0``). The predicate lists
every file of the model with its digest (serialization ``files``; ``shards``
is read too) and the subject carries a SHA-256 over those digests in order.

fastst lists and hashes the model itself (in parallel, see
:mod:`fastst.tools.provenance.hashing`), adds safetensors-aware checks, and leaves
the cryptography to the field's libraries: ``cryptography`` (ECDSA, keys,
X.509), ``pyOpenSSL`` (certificate chains, as ``model_signing`` does),
``sigstore-models`` (the bundle) and ``sigstore`` (keyless bundles). They are
the ``fastst[signing]`` extra and are imported only when used.

This module signs (:func:`sign`); the other jobs have their own modules:
:mod:`~fastst.tools.provenance.keys` (keys and certificates),
:mod:`~fastst.tools.provenance.model` (what is signed),
:mod:`~fastst.tools.provenance.bundle` (the Sigstore bundle),
:mod:`~fastst.tools.provenance.statement` (the in-toto statement),
:mod:`~fastst.tools.provenance.trust` (a bundle's authenticity) and
:mod:`~fastst.tools.provenance.verifying` (:func:`verify_signature`). Their
public names are importable from here too.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import time
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from ..._write.atomic import replace_bytes
from .bundle import (
    BUNDLE_MEDIA_TYPE,
    MAX_SIGNATURE_BYTES,
    PAYLOAD_TYPE,
    _bundle_json,
    _certificate_material,
    _pae,
    find_signature_files,
)
from .findings import Finding, ProvenanceError, require
from .hashing import GIT_PATHS, hash_pieces, list_model, sort_key
from .keys import _ec_hash, _load_private_key, key_hint
from .model import (
    DEFAULT_SIGNATURE_NAME,
    PathLike,
    _fspath,
    _inside,
    _model_name,
    _model_root,
    _pieces,
    _safetensors_checks,
    default_signature_path,
    given_ignores,
)
from .statement import PREDICATE_TYPE, PREDICATE_TYPE_V01, STATEMENT_TYPE, _statement
from .verifying import VerifyResult, verify_signature

__all__ = [
    "BUNDLE_MEDIA_TYPE",
    "DEFAULT_SIGNATURE_NAME",
    "MAX_SIGNATURE_BYTES",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "PREDICATE_TYPE_V01",
    "STATEMENT_TYPE",
    "PathLike",
    "SignResult",
    "SignedFile",
    "VerifyResult",
    "default_signature_path",
    "find_signature_files",
    "key_hint",
    "sign",
    "verify_signature",
]


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

    Raises :class:`ProvenanceError` when the key cannot be used, the model
    holds a symbolic link (unless ``allow_symlinks``), a special file or a
    folder nested too deep, an ignore path is not inside the model folder,
    or a ``certificate_chain`` comes without a ``certificate``.
    The result's ``findings`` list safetensors-aware warnings (a file the
    strict reader rejects, an index naming a missing shard).
    """
    t0 = time.perf_counter()
    model_s = _fspath(model)
    root = _model_root(model_s)
    key = _load_private_key(_fspath(private_key), password)
    hash_alg = _ec_hash(key.public_key())
    ec = require("cryptography.hazmat.primitives.asymmetric.ec")

    if certificate is None and certificate_chain:
        raise ProvenanceError("a certificate chain goes with a signing certificate; none given")
    if certificate is not None:
        method = "certificate"
        material = _certificate_material(key, _fspath(certificate), certificate_chain)
    else:
        method = "key"
        material = {"publicKey": {"hint": key_hint(key.public_key())}, "tlogEntries": []}

    sig_path = _fspath(signature) if signature is not None else default_signature_path(model_s)
    rel_sig = _inside(root, sig_path)
    ignored = ([rel_sig] if rel_sig else []) + given_ignores(root, ignore_paths)
    if ignore_git_paths and os.path.isdir(root):
        ignored.extend(GIT_PATHS)
    ignored = list(dict.fromkeys(ignored))  # normalised relative paths: equal ones are one

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
    colon = [f.name for f in files if ":" in f.name] if shard_size is not None else []
    if colon:  # model_signing reads shard names PATH:START:END, split at every ':'
        raise ProvenanceError(
            f"{root}: cannot sign with shards: {colon[0]!r} has a ':' in its name",
            filename=root,
        )
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
    replace_bytes(sig_path, _bundle_json(bundle))
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
