"""The in-toto statement of a model signature: built, parsed strictly, and compared.

It is built from the model's digests; a signed one is parsed strictly (every
problem is a finding), and what it lists compared with the model's files."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Dict, List, Sequence, Tuple

from .bundle import PAYLOAD_TYPE, _bad, _obj
from .findings import Finding, finding
from .hashing import ModelFile, resource_key, sort_key
from .model import _model_name, _reader_problem

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
#: The pre-1.0 predicate (every file a subject); still read.
PREDICATE_TYPE_V01 = "https://model_signing/Digests/v0.1"


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


@dataclasses.dataclass
class _Manifest:
    model_name: str
    serialization: Dict[str, Any]
    items: Dict[str, Tuple[str, str]]  # name -> (algorithm, hex digest)


def _parse_statement(ptype: str, payload: bytes) -> _Manifest:
    if ptype != PAYLOAD_TYPE:
        raise _bad("signature-malformed", f"payloadType is {ptype!r}, expected {PAYLOAD_TYPE}")
    try:
        st = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise _bad("signature-malformed", f"the signed payload is not JSON ({exc})") from None
    st = _obj(st, "the signed statement")
    if st.get("_type") != STATEMENT_TYPE:
        raise _bad("signature-malformed", f"statement _type is {st.get('_type')!r}")
    subjects = st.get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise _bad("signature-malformed", "the statement has no subject")
    ptype_ = st.get("predicateType")
    items: Dict[str, Tuple[str, str]] = {}

    def add(name: Any, algorithm: Any, digest: Any, shards: bool) -> None:
        if not isinstance(name, str) or not isinstance(algorithm, str):
            raise _bad("signature-malformed", "a resource has no name or algorithm")
        if not isinstance(digest, str) or not digest or len(digest) % 2:
            raise _bad("signature-malformed", f"resource {name!r} has no hex digest")
        try:
            bytes.fromhex(digest)
            key = resource_key(name, shards)
        except ValueError as exc:
            raise _bad("signature-malformed", f"resource {name!r}: {exc}") from None
        # a name listed twice: the last entry counts, as in model_signing
        items[key] = (algorithm, digest.lower())

    if ptype_ == PREDICATE_TYPE_V01:
        for s in subjects:
            s = _obj(s, "a subject")
            digest = _obj(s.get("digest"), "a subject digest").get("sha256")
            add(s.get("name"), "sha256", digest, False)
        ser = {"method": "files", "hash_type": "sha256", "allow_symlinks": False}
        return _Manifest("compat-undefined-not-present", ser, items)
    if ptype_ != PREDICATE_TYPE:
        raise _bad(
            "signature-malformed",
            f"predicateType is {ptype_!r}, expected {PREDICATE_TYPE} (not a model signature)",
        )
    if len(subjects) != 1:
        raise _bad("signature-malformed", f"the statement has {len(subjects)} subjects, expected 1")
    subject = _obj(subjects[0], "the subject")
    name = subject.get("name")
    root = _obj(subject.get("digest"), "the subject digest").get("sha256")
    predicate = _obj(st.get("predicate"), "the predicate")
    ser = _obj(predicate.get("serialization"), "predicate.serialization")
    method = ser.get("method")
    if method not in ("files", "shards"):
        raise _bad("signature-unsupported", f"serialization method {method!r} is not supported")
    if not isinstance(ser.get("hash_type"), str):
        raise _bad("signature-malformed", "serialization.hash_type is missing")
    if method == "shards":
        size = ser.get("shard_size")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise _bad("signature-malformed", "serialization.shard_size is not a positive integer")
    ignore = ser.get("ignore_paths", [])
    if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
        raise _bad("signature-malformed", "serialization.ignore_paths is not a list of paths")
    resources = predicate.get("resources")
    if not isinstance(resources, list):
        raise _bad("signature-malformed", "predicate.resources is missing")
    ordered = []
    for r in resources:
        r = _obj(r, "a resource")
        add(r.get("name"), r.get("algorithm"), r.get("digest"), method == "shards")
        ordered.append(r["digest"])
    h = hashlib.sha256()
    for digest in ordered:
        h.update(bytes.fromhex(digest))
    if not isinstance(root, str) or h.hexdigest() != root.lower():
        raise _bad(
            "signature-malformed",
            "the statement is inconsistent: the subject digest does not match its resources",
        )
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
            from ... import _fastst

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
