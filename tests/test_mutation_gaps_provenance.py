"""Signing and verifying: behaviour no other test pinned down, found by the
Python mutation pass (scripts/pymutants.py; the mutant each test kills is
named in its docstring, see docs/python-mutants.md)."""

from __future__ import annotations

import fastst
import fastst.numpy
import numpy as np
import pytest
from fastst.tools import provenance

pytest.importorskip("cryptography")
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from fastst.tools.provenance.hashing import read_regular  # noqa: E402


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


def _sharded_folder(folder):
    folder.mkdir()
    fastst.numpy.save_sharded(
        {"a": np.zeros(16, dtype=np.float32), "b": np.ones(16, dtype=np.float32)},
        folder,
        max_shard_size=100,
    )
    (folder / "config.json").write_text('{"hidden_size": 4}')
    return folder


def test_sbom_counts_every_file_it_describes(tmp_path):
    """``SbomResult.files`` counts the safetensors files, the indexes and the
    other files of the model (mutant: the others subtracted)."""
    folder = _sharded_folder(tmp_path / "llm")
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    assert len(shards) == 2
    whole = provenance.sbom(folder)
    assert (whole.checkpoints, whole.files) == (1, 4)  # 2 shards + index + config.json
    index = provenance.sbom(folder / "model.safetensors.index.json")
    assert (index.checkpoints, index.files) == (1, 3)
    single = provenance.sbom(folder / shards[0])
    assert (single.checkpoints, single.files) == (1, 1)


def test_sbom_model_card_trigger_words_only_when_there_are_some(tmp_path):
    """The model card carries ``fastst:trigger_words`` (comma-separated) when
    the metadata names trigger words, and no such property otherwise
    (mutant: ``or`` -> ``and``, which drops real ones and emits empty ones)."""
    with_words = tmp_path / "lora.safetensors"
    fastst.numpy.save_file(
        {"w": np.zeros(2, dtype=np.float32)},
        with_words,
        metadata={"modelspec.trigger_phrase": "catstyle, sks cat"},
    )
    without = tmp_path / "plain.safetensors"
    fastst.numpy.save_file({"w": np.zeros(2, dtype=np.float32)}, without)

    def card_props(path):
        (component,) = provenance.sbom(path).document["components"]
        return {p["name"]: p["value"] for p in component["modelCard"]["properties"]}

    assert card_props(with_words)["fastst:trigger_words"] == "catstyle, sks cat"
    props = card_props(without)
    assert "fastst:trigger_words" not in props and props["fastst:tensors"] == "1"


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

    now = dt.datetime.now(dt.timezone.utc)

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
