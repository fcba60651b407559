"""Paths in model signatures read exactly as OpenSSF ``model_signing`` reads
them (resource names, ignore paths: ``./``, ``..``, duplicates, absolute
paths, case, backslashes, trailing slashes, symbolic links), checked rule by
rule against ``model_signing``'s own code and by signing with one tool and
verifying with the other; and model folders nested too deep to walk."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import pathlib
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import pytest
from fastst.tools import provenance
from fastst.tools.provenance import ProvenanceError
from fastst.tools.provenance.hashing import MAX_DEPTH, ignore_parts, list_model, resource_key
from helpers.raw_files import raw_file

pytestmark = pytest.mark.slow

for _package in ("cryptography", "model_signing"):
    if importlib.util.find_spec(_package) is None:
        pytest.skip(f"could not import {_package!r}", allow_module_level=True)

# Imported by the fixture below when the module's first test runs, not at
# collection: model_signing brings sigstore and boto3, which every pytest-xdist
# worker would pay for, whether or not it runs this module.
ec: Any = None
serialization: Any = None
hashes: Any = None
ms_hashing: Any = None
ms_manifest: Any = None
ms_verifying: Any = None
ms_signing: Any = None
ms_ec_key: Any = None


@pytest.fixture(scope="module", autouse=True)
def _model_signing() -> None:
    global ec, serialization, hashes, ms_hashing, ms_manifest, ms_verifying, ms_signing, ms_ec_key
    ec = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ec")
    serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    hashes = pytest.importorskip("cryptography.hazmat.primitives.hashes")
    ms_hashing = pytest.importorskip("model_signing.hashing")
    ms_manifest = pytest.importorskip("model_signing.manifest")
    ms_verifying = pytest.importorskip("model_signing.verifying")
    ms_signing = pytest.importorskip("model_signing._signing.signing")
    ms_ec_key = pytest.importorskip("model_signing._signing.sign_ec_key")


@pytest.fixture()
def key(tmp_path: Path) -> Tuple[Path, Path]:
    k = ec.generate_private_key(ec.SECP256R1())
    priv, pub = tmp_path / "key.pem", tmp_path / "key.pub"
    priv.write_bytes(
        k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pub.write_bytes(
        k.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return priv, pub


@pytest.fixture()
def model(tmp_path: Path, monkeypatch: Any) -> Path:
    """``tmp_path/m``, with the current folder at ``tmp_path`` so that the
    model can be named relatively (``m``) too."""
    m = tmp_path / "m"
    (m / "sub" / "deeper").mkdir(parents=True)
    (m / "back").mkdir()
    (m / "model.safetensors").write_bytes(raw_file({"w": ("F32", [2], b"\0" * 8)}))
    (m / "notes.txt").write_text("notes")
    (m / "Notes.txt").write_text("other notes")  # differs only in case
    (m / "sub" / "a.bin").write_bytes(b"a")
    (m / "sub" / "deeper" / "b.bin").write_bytes(b"b")
    (m / "back\\slash").write_bytes(b"one name")
    (m / "back" / "slash").write_bytes(b"a file in a folder")
    monkeypatch.chdir(tmp_path)
    return m


def fastst_names(root: str, ignore: Sequence[str] = (), allow_symlinks: bool = False) -> List[str]:
    files, problems = list_model(root, ignore=ignore, allow_symlinks=allow_symlinks)
    assert not problems, problems
    return sorted(f.name for f in files)


def ms_names(root: str, ignore: Sequence[str] = (), allow_symlinks: bool = False) -> List[str]:
    """The resource names model_signing hashes for ``root`` after reading
    ``ignore`` as a signature's ignore paths (git paths not left out)."""
    config = ms_hashing.Config().set_ignored_paths(paths=[], ignore_git_paths=False)
    config.set_allow_symlinks(allow_symlinks)
    config.add_ignored_paths(model_path=root, paths=list(ignore))
    return sorted(r.identifier for r in config.hash(root).resource_descriptors())


# the rules, one by one, against model_signing's own code --------------------------------

IGNORE_RULES = {
    "plain": ["notes.txt"],
    "absolute-outside": ["/model.safetensors"],
    "absolute-under-root": ["{abs}/notes.txt"],
    "absolute-root": ["{abs}"],
    "dot-slash": ["./notes.txt"],
    "dot-slash-folder": ["./sub/./deeper"],
    "dot-dot-inside": ["sub/../notes.txt"],
    "dot-dot-outside": ["../m/notes.txt"],
    "dot-dot-alone": [".."],
    "dot-dot-last": ["sub/.."],
    "duplicates": ["notes.txt", "./notes.txt", "notes.txt/", "notes.txt"],
    "case": ["NOTES.TXT", "notes.TXT"],
    "backslash-name": ["back\\slash"],
    "slash-path": ["back/slash"],
    "trailing-slash": ["sub/"],
    "repeated-slashes": ["sub//deeper///b.bin"],
    "prefix-is-not-a-folder": ["su", "sub/deep"],
    "dot-means-all": ["."],
    "empty-means-all": [""],
    "dot-slash-means-all": ["./"],
    "root-slash": ["/"],
}


@pytest.mark.parametrize("rule", list(IGNORE_RULES))
@pytest.mark.parametrize("absolute", [False, True], ids=["relative-root", "absolute-root"])
def test_ignore_paths_leave_out_what_model_signing_leaves_out(
    model: Path, rule: str, absolute: bool
) -> None:
    root = str(model) if absolute else "m"
    ignore = [e.format(abs=model) for e in IGNORE_RULES[rule]]
    assert fastst_names(root, ignore) == ms_names(root, ignore)


def test_the_ignore_rules_cases() -> None:
    """What the rules above come to, spelled out."""
    assert ignore_parts("m", "./a//b/") == ("a", "b")
    assert ignore_parts("m", "/m/a") is None  # absolute under a relative root: nothing
    assert ignore_parts("/x/m", "/x/m/a") == ("a",)
    assert ignore_parts("m", "../m/a") == ("..", "m", "a")  # matches no file
    assert ignore_parts("m", ".") == () and ignore_parts("m", "") == ()  # the whole model
    assert ignore_parts("m", "A\\b") == ("A\\b",)


RESOURCE_NAMES = [
    "a", "./a", "a/", "a//b", "a/./b", "../a", "a/../b", "/a", "//a", "///a", "", ".",
    "A", "a\\b", "a:0:8", " a",
]  # fmt: skip
SHARD_NAMES = [
    "a:0:8", "./a:0:8", "a/:0:8", "a:00:8", "a:+0:8", "a: 0:8", "a:0:8:9", "a:b:0:8", "a:x:8",
    "a:0", "", "/a:0:8", "A\\b:0:8",
]  # fmt: skip


def _ms_key(name: str, shards: bool) -> Optional[str]:
    digest = ms_hashing.hashing.Digest("sha256", b"\0" * 32)
    ser = (
        ms_manifest._ShardSerialization("sha256", 8)
        if shards
        else ms_manifest._FileSerialization("sha256")
    )
    try:
        return str(ser.new_item(name, digest).key)
    except ValueError:
        return None


def _key(name: str, shards: bool) -> Optional[str]:
    try:
        return resource_key(name, shards)
    except ValueError:
        return None


@pytest.mark.parametrize("name", RESOURCE_NAMES)
def test_resource_names_read_as_model_signing_reads_them(name: str) -> None:
    assert _key(name, False) == _ms_key(name, False)


@pytest.mark.parametrize("name", SHARD_NAMES)
def test_shard_names_read_as_model_signing_reads_them(name: str) -> None:
    assert _key(name, True) == _ms_key(name, True)


def test_symlink_names_are_model_signings(model: Path, tmp_path: Path) -> None:
    """With links allowed, a link to a file is a file under the link's name
    and a link to a folder is not entered, as in model_signing."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "g.bin").write_bytes(b"g")
    (model / "linked-folder").symlink_to(outside)
    (model / "linked-file").symlink_to(model / "sub" / "a.bin")
    names = fastst_names("m", allow_symlinks=True)
    assert "linked-file" in names and not any(n.startswith("linked-folder") for n in names)
    assert names == ms_names("m", allow_symlinks=True)


# signed by one tool, verified by both --------------------------------------------------


def ms_verifies(root: str, sig: Path, pub: Path, allow_symlinks: bool = False) -> bool:
    config = ms_verifying.Config().use_elliptic_key_verifier(public_key=pub)
    if allow_symlinks:  # its guessed configuration drops the signed allow_symlinks
        config.set_hashing_config(ms_hashing.Config().set_allow_symlinks(True))
    try:
        config.verify(root, sig)
    except ValueError:
        return False
    return True


def ms_sign(root: str, priv: Path, sig: Path, leave_out: Sequence[str], ignore: Sequence[str]):
    """Signs with model_signing a manifest of the files it hashes when
    ``leave_out`` is ignored, recording ``ignore`` as the signed ignore
    paths."""
    hashed = ms_hashing.Config().set_ignored_paths(paths=list(leave_out)).hash(root)
    items = [
        ms_manifest.FileManifestItem(path=pathlib.PurePosixPath(r.identifier), digest=r.digest)
        for r in hashed.resource_descriptors()
    ]
    ser = ms_manifest._FileSerialization("sha256", False, list(ignore))
    payload = ms_signing.Payload(ms_manifest.Manifest(hashed.model_name, items, ser))
    ms_ec_key.Signer(priv).sign(payload).write(sig)


# rule -> (files left out of the signed resources, signed ignore paths, verified)
SIGNED_BY_MODEL_SIGNING = {
    # the issue: an absolute entry leaves out nothing, so the unsigned file is added
    "absolute-outside": (["model.safetensors"], ["/model.safetensors"], False),
    "absolute-outside-all-signed": ([], ["/model.safetensors"], True),
    "absolute-under-absolute-root": (["notes.txt"], ["{abs}/notes.txt"], True),
    "dot-slash": (["notes.txt"], ["./notes.txt"], True),
    "dot-dot-inside": (["notes.txt"], ["sub/../notes.txt"], False),
    "dot-dot-outside": (["notes.txt"], ["../m/notes.txt"], False),
    "duplicates": (["notes.txt"], ["notes.txt", "./notes.txt", "notes.txt/"], True),
    "case": (["notes.txt"], ["NOTES.TXT"], False),
    "backslash": (["sub/a.bin"], ["sub\\a.bin"], False),
    "trailing-slash": (["sub"], ["sub/"], True),
    # "." leaves out the whole model: a signature over no file verifies any
    # folder, in model_signing and so in fastst
    "dot-means-all": (["."], ["."], True),
}


@pytest.mark.parametrize("rule", list(SIGNED_BY_MODEL_SIGNING))
def test_signed_by_model_signing_verified_alike(
    model: Path, key: Tuple[Path, Path], tmp_path: Path, rule: str
) -> None:
    priv, pub = key
    leave_out, ignore, verified = SIGNED_BY_MODEL_SIGNING[rule]
    ignore = [e.format(abs=model) for e in ignore]
    root = str(model) if "absolute-root" in rule else "m"
    sig = tmp_path / "ms.sig"
    ms_sign(root, priv, sig, leave_out, ignore)
    result = provenance.verify_signature(root, sig, public_key=pub)
    assert (result.verified, ms_verifies(root, sig, pub)) == (verified, verified), result.findings
    if "absolute-root" in rule:  # the same entry under the model named relatively
        assert not provenance.verify_signature("m", sig, public_key=pub).verified
        assert not ms_verifies("m", sig, pub)


def _resign(sig: Path, priv: Path, edit: Any) -> None:
    """Replaces the statement of ``sig`` by ``edit(statement)``, signed
    properly with ``priv``, its subject digest recomputed."""
    key = serialization.load_pem_private_key(priv.read_bytes(), None)
    bundle = json.loads(sig.read_text())
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    edit(statement["predicate"]["resources"])
    digests = b"".join(bytes.fromhex(r["digest"]) for r in statement["predicate"]["resources"])
    statement["subject"][0]["digest"]["sha256"] = hashlib.sha256(digests).hexdigest()
    payload = json.dumps(statement).encode()
    ptype = b"application/vnd.in-toto+json"
    pae = b"DSSEv1 %d %s %d %s" % (len(ptype), ptype, len(payload), payload)
    bundle["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(
        key.sign(pae, ec.ECDSA(hashes.SHA256()))
    ).decode()
    sig.write_text(json.dumps(bundle))


def _rename(old: str, new: str) -> Any:
    def edit(resources: List[dict]) -> None:
        for r in resources:
            if r["name"] == old:
                r["name"] = new

    return edit


def _twice(name: str, first: Optional[str]) -> Any:
    """``name`` listed twice: ``first`` (or the right digest) then the right one."""

    def edit(resources: List[dict]) -> None:
        r = next(r for r in resources if r["name"] == name)
        resources.insert(0, dict(r, digest=first or r["digest"]))

    return edit


def _twice_wrong_last(name: str) -> Any:
    def edit(resources: List[dict]) -> None:
        r = next(r for r in resources if r["name"] == name)
        resources.append(dict(r, digest="00" * 32))

    return edit


# rule -> (statement edit, verified)
SIGNED_STATEMENTS = {
    "dot-slash": (_rename("notes.txt", "./notes.txt"), True),
    "trailing-slash": (_rename("notes.txt", "notes.txt/"), True),
    "repeated-slashes": (_rename("sub/deeper/b.bin", "sub//deeper/b.bin"), True),
    "dot-dot": (_rename("sub/a.bin", "sub/../sub/a.bin"), False),
    "absolute": (_rename("notes.txt", "/notes.txt"), False),
    "case": (_rename("notes.txt", "NOTES.txt"), False),
    "backslash": (_rename("sub/a.bin", "sub\\a.bin"), False),
    "duplicate-same-digest": (_twice("notes.txt", None), True),
    "duplicate-last-counts": (_twice("notes.txt", "11" * 32), True),
    "duplicate-last-wrong": (_twice_wrong_last("notes.txt"), False),
}


@pytest.mark.parametrize("rule", list(SIGNED_STATEMENTS))
def test_resource_names_in_a_signed_statement_verified_alike(
    model: Path, key: Tuple[Path, Path], tmp_path: Path, rule: str
) -> None:
    priv, pub = key
    edit, verified = SIGNED_STATEMENTS[rule]
    sig = tmp_path / "edited.sig"
    provenance.sign("m", priv, signature=sig)
    _resign(sig, priv, edit)
    result = provenance.verify_signature("m", sig, public_key=pub)
    assert (result.verified, ms_verifies("m", sig, pub)) == (verified, verified), result.findings


@pytest.mark.parametrize(
    "name, verified",
    [("./notes.txt:00:4", True), ("notes.txt:0:+4", True), ("notes.txt:0:4:", False)],
)
def test_shard_names_in_a_signed_statement_verified_alike(
    model: Path, key: Tuple[Path, Path], tmp_path: Path, name: str, verified: bool
) -> None:
    priv, pub = key
    sig = tmp_path / "shards.sig"
    provenance.sign("m", priv, signature=sig, shard_size=4)
    _resign(sig, priv, _rename("notes.txt:0:4", name))
    result = provenance.verify_signature("m", sig, public_key=pub)
    assert (result.verified, ms_verifies("m", sig, pub)) == (verified, verified), result.findings


# rule -> (ignore paths given to fastst sign, relative to the current folder;
# the ignore paths it writes; a file changed after signing; still verified)
SIGNED_BY_FASTST = {
    "absolute": (["{abs}/notes.txt"], ["notes.txt"], "notes.txt", True),
    "dot-slash": (["./m/./notes.txt"], ["notes.txt"], "notes.txt", True),
    "dot-dot": (["m/sub/../notes.txt"], ["notes.txt"], "notes.txt", True),
    "duplicates": (
        ["m/notes.txt", "./m/notes.txt", "{abs}/notes.txt"],
        ["notes.txt"],
        "notes.txt",
        True,
    ),  # fmt: skip
    "case": (["m/NOTES.TXT"], ["NOTES.TXT"], "notes.txt", False),
    "trailing-slash": (["m/sub/"], ["sub"], "sub/a.bin", True),
}


@pytest.mark.parametrize("rule", list(SIGNED_BY_FASTST))
def test_signed_by_fastst_verified_by_model_signing(
    model: Path, key: Tuple[Path, Path], tmp_path: Path, rule: str
) -> None:
    priv, pub = key
    given, written, changed, verified = SIGNED_BY_FASTST[rule]
    sig = tmp_path / "fastst.sig"
    signed = provenance.sign(
        "m", priv, signature=sig, ignore_paths=[e.format(abs=model) for e in given]
    )
    assert [p for p in signed.serialization["ignore_paths"] if ".git" not in p] == written
    assert provenance.verify_signature("m", sig, public_key=pub).verified
    assert ms_verifies("m", sig, pub)
    (model / changed).write_text("changed")
    assert provenance.verify_signature("m", sig, public_key=pub).verified == verified
    assert ms_verifies("m", sig, pub) == verified


def test_fastst_signs_links_as_model_signing_verifies_them(
    model: Path, key: Tuple[Path, Path], tmp_path: Path
) -> None:
    priv, pub = key
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "g.bin").write_bytes(b"g")
    (model / "linked-folder").symlink_to(outside)
    (model / "linked-file").symlink_to(model / "sub" / "a.bin")
    sig = tmp_path / "links.sig"
    provenance.sign("m", priv, signature=sig, allow_symlinks=True)
    assert provenance.verify_signature("m", sig, public_key=pub, allow_symlinks=True).verified
    assert ms_verifies("m", sig, pub, allow_symlinks=True)


def test_ignore_paths_outside_the_model_are_refused(model: Path, key: Tuple[Path, Path]) -> None:
    """A given ignore path that is not inside the model would leave out
    nothing (or, for the model itself, everything): an error, not a no-op."""
    priv, pub = key
    provenance.sign("m", priv)
    for outside in ("key.pem", "m", ".", "/model.safetensors"):
        with pytest.raises(ProvenanceError, match="inside the model folder"):
            provenance.sign("m", priv, ignore_paths=[outside])
        with pytest.raises(ProvenanceError, match="inside the model folder"):
            provenance.verify_signature("m", public_key=pub, ignore_paths=[outside])


# folders nested too deep -----------------------------------------------------------------


def _deep_tree(base: Path, levels: int) -> Path:
    """``base/d/d/.../d`` (``levels`` folders), each made from inside its
    parent (the current folder moves down and back: no long path, no
    recursion)."""
    here = os.getcwd()
    os.chdir(base)
    try:
        for _ in range(levels):
            os.mkdir("d")
            os.chdir("d")
    finally:
        os.chdir(here)
    return base.joinpath(*["d"] * levels)


def _remove_deep_tree(base: Path, levels: int) -> None:
    here = os.getcwd()
    os.chdir(base.joinpath(*["d"] * levels))
    try:
        for _ in range(levels):
            os.chdir("..")
            os.rmdir("d")
    finally:
        os.chdir(here)


@pytest.fixture()
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A scratch folder in memory (``/dev/shm``) where there is one: making
    and removing a thousand folders on a journaling disk takes seconds."""
    if not (os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="fastst-test-", dir="/dev/shm"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def test_a_tree_1200_levels_deep_is_a_finding_not_a_crash(
    key: Tuple[Path, Path], scratch: Path
) -> None:
    priv, pub = key
    model = scratch / "m"
    model.mkdir()
    (model / "model.safetensors").write_bytes(raw_file({"w": ("F32", [2], b"\0" * 8)}))
    sig = scratch / "deep.sig"
    provenance.sign(model, priv, signature=sig)
    _deep_tree(model, 1200)
    try:
        files, problems = list_model(str(model))
        assert [f.name for f in files] == ["model.safetensors"]
        assert [(p.rule, p.path) for p in problems] == [
            ("signature-special-file", "/".join(["d"] * (MAX_DEPTH + 1)))
        ]
        assert f"more than {MAX_DEPTH} levels deep" in problems[0].message
        result = provenance.verify_signature(model, sig, public_key=pub)
        assert not result.verified
        assert [f.rule for f in result.findings] == ["signature-special-file"]
        with pytest.raises(ProvenanceError, match="levels deep"):
            provenance.sign(model, priv, signature=scratch / "again.sig")
        with pytest.raises(ProvenanceError, match="levels deep"):
            provenance.sbom(model)
    finally:
        _remove_deep_tree(model, 1200)


def test_the_depth_limit_is_exact(tmp_path: Path) -> None:
    (_deep_tree(tmp_path, 3) / "f").write_bytes(b"x")
    files, problems = list_model(str(tmp_path), max_depth=3)
    assert not problems and [f.name for f in files] == ["d/d/d/f"]
    files, problems = list_model(str(tmp_path), max_depth=2)
    assert not files and [p.path for p in problems] == ["d/d/d"]


def test_shards_refuse_a_colon_in_a_file_name(
    model: Path, key: Tuple[Path, Path], tmp_path: Path
) -> None:
    """model_signing splits shard names at every ':', so a file name with
    one cannot be signed in shards (it can in files)."""
    (model / "a:b").write_bytes(b"x")
    with pytest.raises(ProvenanceError, match="':'"):
        provenance.sign("m", key[0], signature=tmp_path / "s.sig", shard_size=4)
    assert "a:b" in [
        f.name for f in provenance.sign("m", key[0], signature=tmp_path / "f.sig").files
    ]
