"""Forensics, hashes and metadata of ``.safetensors`` files, as plain data.

Everything here returns dicts, lists, strings and numbers (JSON-ready), and
nothing ever executes or unpickles file content: foreign content is
recognised by its magic number only, and JSON found inside metadata values
is parsed with :mod:`json`, never evaluated.

- :func:`verify_file`: every structural rule plus forensic findings, each
  with a stable rule id and a severity (see :func:`rules`).
- :func:`hash_file`: SHA-256, AutoV1/V2/V3, canonical header and
  per-tensor hashes in one pass; :func:`check_hashes` compares them with the
  hashes embedded in the metadata.
- :func:`inspect_file`: counts, parameters, bytes by dtype, the tensor table.
- :func:`read_metadata`, :func:`decode_metadata`, :func:`metadata_card`:
  the ``__metadata__`` map, its JSON-in-string values decoded, and the facts
  a person wants (title, trigger words, base model, network, training...).
- :func:`identify`: what a file that is not safetensors is (a PyTorch
  checkpoint, a pickle, GGUF, NumPy, HDF5, ONNX, an HTML page...).
- Checkpoints as wholes (an ``*.index.json`` and its shards, or the folder
  holding it): :func:`iter_inputs`, :func:`inspect_checkpoint`,
  :func:`hash_checkpoint` (per-shard hashes and one checkpoint digest),
  :func:`verify_checkpoint` (the index checked against its shards).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np

from . import _fastst
from ._card import decode_metadata, metadata_card
from ._dtypes import NARROW_FLOATS
from ._errors import rule_error
from ._fastst import DEFAULT_HEADER_CAP
from ._open import safe_open
from ._sharded import INDEX_SUFFIX, ShardedFile

PathLike = Union[str, "os.PathLike[str]"]
Finding = Dict[str, Any]

#: Severities, lowest first.
SEVERITIES: Tuple[str, ...] = ("info", "low", "medium", "high", "critical")

__all__ = [
    "SEVERITIES",
    "severity_rank",
    "rules",
    "verify_file",
    "hash_file",
    "check_hashes",
    "inspect_file",
    "tensor_values",
    "read_metadata",
    "decode_metadata",
    "metadata_card",
    "iter_safetensors",
    "iter_inputs",
    "identify",
    "not_safetensors_message",
    "inspect_checkpoint",
    "hash_checkpoint",
    "verify_checkpoint",
    "checkpoint_metadata",
]


def severity_rank(severity: str) -> int:
    """Position of ``severity`` in :data:`SEVERITIES` (ValueError if unknown)."""
    try:
        return SEVERITIES.index(severity)
    except ValueError:
        raise ValueError(
            f"unknown severity {severity!r}; expected one of {', '.join(SEVERITIES)}"
        ) from None


def rules() -> List[Dict[str, str]]:
    """The catalogue of rules: dicts with ``id``, ``severity`` (the default)
    and ``summary``."""
    return list(_fastst.verify_rules())


def _path(path: PathLike) -> str:
    p = os.fspath(path)
    return os.fsdecode(p) if isinstance(p, bytes) else p


def verify_file(
    path: PathLike,
    *,
    values: bool = False,
    header_cap: int = DEFAULT_HEADER_CAP,
    threads: int = 0,
    progress: bool = False,
) -> Dict[str, Any]:
    """Verifies one file; works on files the reader rejects.

    Returns ``{"path", "file_len", "header_len", "tensors", "accepted",
    "complete", "values_checked", "findings"}``: ``accepted`` says whether
    ``safe_open`` accepts the file, ``complete`` whether the tensor table
    could be examined at all, and each finding is a dict with ``rule``,
    ``severity``, ``message``, ``tensor``, ``key``, ``offset`` (absolute),
    ``length`` and ``count``, most severe first. ``values=True`` also reads
    every tensor (NaN/Inf counts, BOOL bytes). Raises :class:`OSError` only
    when the file cannot be read.
    """
    return dict(
        _fastst.verify_file(
            _path(path), values=values, header_cap=header_cap, threads=threads, progress=progress
        )
    )


def hash_file(
    path: PathLike,
    *,
    tensors: bool = False,
    header_cap: int = DEFAULT_HEADER_CAP,
    threads: int = 0,
    progress: bool = False,
) -> Dict[str, Any]:
    """Every hash of one file, in one pass over it.

    ``sha256`` (whole file), ``autov1`` (8 hex digits of the SHA-256 of the
    0x10000 bytes at 0x100000), ``autov2`` (first 10 hex digits of
    ``sha256``), ``autov3`` (SHA-256 of the bytes after the header: kohya's
    ``sshs_model_hash``, ModelSpec's ``modelspec.hash_sha256`` without its
    ``0x``), ``header_sha256`` (of the canonical header: compact JSON, keys
    sorted at every level, entries reduced to ``data_offsets``/``dtype``/
    ``shape``, empty metadata omitted) and, with ``tensors=True``, a dict of
    per-tensor SHA-256 in file order.
    """
    return dict(
        _fastst.hash_file(
            _path(path), tensors=tensors, header_cap=header_cap, threads=threads, progress=progress
        )
    )


_HASH_KEYS: Tuple[Tuple[str, str], ...] = (
    ("sshs_model_hash", "autov3"),
    ("modelspec.hash_sha256", "autov3"),
)


def check_hashes(hashes: Dict[str, Any], metadata: Optional[Dict[str, str]]) -> List[Finding]:
    """Compares computed ``hashes`` (from :func:`hash_file`) with the hashes
    embedded in ``metadata`` (``sshs_model_hash``, ``modelspec.hash_sha256``).

    Returns findings: ``hash-mismatch`` (high) for each embedded hash that
    differs, ``no-embedded-hash`` (info) when there is none to compare; an
    embedded hash that matches yields no finding.
    """
    found: List[Finding] = []
    compared = 0
    for key, field in _HASH_KEYS:
        if not metadata or key not in metadata:
            continue
        embedded = metadata[key].strip().lower()
        if embedded.startswith("0x"):
            embedded = embedded[2:]
        computed = hashes.get(field)
        compared += 1
        if computed is None:
            message = (
                f"__metadata__ {key} is {metadata[key]!r} but the tensor data cannot be "
                "hashed: the length prefix points past the end of the file"
            )
        else:
            message = (
                f"__metadata__ {key} is {metadata[key]!r} but the tensor data "
                f"(bytes after the header) hashes to {computed}"
            )
        if computed is None or embedded != computed:
            found.append(_finding("hash-mismatch", "high", message, key=key))
    if compared == 0:
        found.append(
            _finding(
                "no-embedded-hash",
                "info",
                "__metadata__ holds no sshs_model_hash or modelspec.hash_sha256 to check",
            )
        )
    return found


def _finding(rule: str, severity: str, message: str, *, key: Optional[str] = None) -> Finding:
    return {
        "rule": rule,
        "severity": severity,
        "message": message,
        "tensor": None,
        "key": key,
        "offset": None,
        "length": None,
        "count": None,
    }


def inspect_file(
    path: PathLike, *, tensors: bool = False, header_cap: int = DEFAULT_HEADER_CAP
) -> Dict[str, Any]:
    """A summary of a file the reader accepts (raises a
    :class:`fastst.SafetensorError` subclass otherwise).

    ``{"path", "file_len", "tensors", "parameters", "header_len",
    "data_start", "data_len", "by_dtype", "metadata"}``; with
    ``tensors=True`` also ``"table"``: ``(name, dtype, shape, begin, end)``
    tuples in file order, offsets relative to the data buffer.
    """
    return dict(_fastst.inspect_file(_path(path), table=tensors, header_cap=header_cap))


def tensor_values(path: PathLike, name: str) -> Tuple[str, np.ndarray]:
    """``(dtype, array)`` of tensor ``name``; 16-, 8-, 6- and 4-bit floats
    are converted to float32 so that numpy prints their values."""
    with safe_open(_path(path), "numpy") as f:
        dtype = f.get_slice(name).get_dtype()
        array = f.get_tensor(name)
    if dtype in NARROW_FLOATS:
        array = array.astype(np.float32)
    return dtype, array


def read_metadata(
    path: PathLike, *, header_cap: int = DEFAULT_HEADER_CAP
) -> Optional[Dict[str, str]]:
    """The ``__metadata__`` map, read without validating the tensor table
    (so it works on files the reader rejects); None when there is none.
    A key repeated in the header keeps its first value."""
    pairs = _fastst.read_metadata(_path(path), header_cap=header_cap)
    if pairs is None:
        return None
    out: Dict[str, str] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def iter_safetensors(paths: Iterable[PathLike]) -> Iterator[str]:
    """Each path given, with folders replaced by the ``*.safetensors`` files
    under them (recursively, sorted). Paths that do not exist are yielded
    as given, so that opening them reports the error."""
    for raw in paths:
        path = _path(raw)
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    if name.lower().endswith(".safetensors"):
                        yield os.path.join(root, name)
        else:
            yield path


# what a file is -------------------------------------------------------------

_SPECIAL = (
    (stat.S_ISFIFO, "fifo", "a FIFO (named pipe), not a regular file"),
    (stat.S_ISSOCK, "socket", "a socket, not a regular file"),
    (stat.S_ISCHR, "char-device", "a character device, not a regular file"),
    (stat.S_ISBLK, "block-device", "a block device, not a regular file"),
)


def identify(path: PathLike) -> Optional[Dict[str, Any]]:
    """What ``path`` is when it is not a safetensors file, else None.

    Returns ``{"kind", "description", "executable"}``: ``kind`` is a stable
    short name (``pytorch-zip``, ``pickle``, ``zip``, ``npz``, ``npy``,
    ``gguf``, ``hdf5``, ``onnx``, ``git-lfs-pointer``, ``html``, ``json``,
    ``text``, ``empty``, ``other``; ``directory``, ``fifo``, ``socket``,
    ``char-device``, ``block-device`` for what is not a regular file), and
    ``description`` completes "this is ..., not a safetensors file". Only
    the first bytes are read, never blocking (a FIFO is recognised from its
    type, not opened for reading). A file that starts like safetensors gives
    None even if its header is broken (:func:`verify_file` says how). Raises
    :class:`OSError` when ``path`` cannot be examined (missing, no
    permission, a symlink loop).
    """
    p = _path(path)
    st = os.stat(p)
    if stat.S_ISDIR(st.st_mode):
        return {"kind": "directory", "description": "a folder", "executable": False}
    for test, kind, description in _SPECIAL:
        if test(st.st_mode):
            return {"kind": kind, "description": description, "executable": False}
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since the stat above
            return {"kind": "other", "description": "not a regular file", "executable": False}
        head = os.pread(fd, _fastst.IDENTIFY_LEN, 0)
    finally:
        os.close(fd)
    found = _fastst.identify(head, st.st_size)
    return dict(found) if found is not None else None


def not_safetensors_message(found: Dict[str, Any]) -> str:
    """The sentence for a file :func:`identify` recognised."""
    if found["kind"] in ("directory", "fifo", "socket", "char-device", "block-device", "other"):
        return f"this is {found['description']}"
    return f"this is {found['description']}, not a safetensors file"


# checkpoints ----------------------------------------------------------------


def _referenced_shards(index_path: str) -> List[str]:
    try:
        with open(index_path, "rb") as fh:
            index = json.loads(fh.read(64 << 20).decode("utf-8"))
        weight_map = index["weight_map"]
        return [v for v in weight_map.values() if isinstance(v, str)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def iter_inputs(paths: Iterable[PathLike]) -> Iterator[Tuple[str, str]]:
    """``(kind, path)`` for each input: ``("checkpoint", index)`` for an
    ``*.index.json`` file and for each index found in a folder (the shards
    it names are then not listed on their own), ``("file", path)`` for
    every other ``*.safetensors`` file under a folder (recursively, sorted)
    and for every other path given (missing ones included, so that opening
    them reports the error)."""
    for raw in paths:
        path = _path(raw)
        if not os.path.isdir(path):
            kind = "checkpoint" if path.endswith(".index.json") else "file"
            yield kind, path
            continue
        for root, dirs, files in os.walk(path):
            dirs.sort()
            files.sort()
            taken = set()
            for name in files:
                if name.endswith(INDEX_SUFFIX):
                    index = os.path.join(root, name)
                    yield "checkpoint", index
                    for shard in _referenced_shards(index):
                        taken.add(os.path.normpath(os.path.join(root, shard)))
            for name in files:
                full = os.path.join(root, name)
                if name.lower().endswith(".safetensors") and os.path.normpath(full) not in taken:
                    yield "file", full


def _strict_index(
    index_path: str, header_cap: int
) -> Tuple[List[str], Dict[str, str], Dict[str, Any]]:
    """Shard names (in order of first mention), the weight map and the
    index's metadata, after the reader checked the index against its shards
    (raising its errors, with their rule ids, when they disagree)."""
    ShardedFile(index_path, "mmap", header_cap).close()
    with open(index_path, "rb") as fh:
        index = json.loads(fh.read().decode("utf-8"))
    weight_map: Dict[str, str] = index["weight_map"]
    meta = index.get("metadata")
    return (
        list(dict.fromkeys(weight_map.values())),
        weight_map,
        meta if isinstance(meta, dict) else {},
    )


def _merge_by_dtype(parts: List[List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    merged: Dict[str, Dict[str, Any]] = {}
    for part in parts:
        for d in part:
            m = merged.setdefault(
                d["dtype"], {"dtype": d["dtype"], "tensors": 0, "parameters": 0, "bytes": 0}
            )
            for k in ("tensors", "parameters", "bytes"):
                m[k] += d[k]
    return sorted(merged.values(), key=lambda d: (-d["bytes"], d["dtype"]))


def inspect_checkpoint(
    index_path: PathLike, *, tensors: bool = False, header_cap: int = DEFAULT_HEADER_CAP
) -> Dict[str, Any]:
    """A summary of a sharded checkpoint (its ``*.index.json``) as a whole.

    Like :func:`inspect_file`, with totals over the shards (``file_len``,
    ``tensors``, ``parameters``, ``data_len``, ``by_dtype``), ``kind``
    ``"checkpoint"``, ``shards`` (``file``, ``file_len``, ``tensors``,
    ``parameters`` each), ``index_metadata`` and ``metadata`` (the first
    shard's ``__metadata__``); with ``tensors=True`` the ``table`` rows
    carry the shard file as a sixth item. ``header_len`` and ``data_start``
    are None. Raises the reader's errors when the index and shards disagree.
    """
    path = _path(index_path)
    names, _weights, index_meta = _strict_index(path, header_cap)
    folder = os.path.dirname(os.path.abspath(path))
    shards = []
    table: List[Tuple[str, str, List[int], int, int, str]] = []
    parts = []
    metadata = None
    file_len = os.stat(path).st_size
    for i, name in enumerate(names):
        info = _fastst.inspect_file(
            os.path.join(folder, name), table=tensors, header_cap=header_cap
        )
        if i == 0:
            metadata = info["metadata"]
        file_len += info["file_len"]
        parts.append(info["by_dtype"])
        shards.append(
            {
                "file": name,
                "file_len": info["file_len"],
                "tensors": info["tensors"],
                "parameters": info["parameters"],
            }
        )
        for row in info.get("table") or []:
            table.append((*row, name))
    result: Dict[str, Any] = {
        "path": path,
        "kind": "checkpoint",
        "file_len": file_len,
        "tensors": sum(s["tensors"] for s in shards),
        "parameters": sum(s["parameters"] for s in shards),
        "header_len": None,
        "data_start": None,
        "data_len": sum(d["bytes"] for d in _merge_by_dtype(parts)),
        "by_dtype": _merge_by_dtype(parts),
        "metadata": metadata,
        "index_metadata": index_meta,
        "shards": shards,
    }
    if tensors:
        result["table"] = table
    return result


def _digest_listing(entries: List[Tuple[str, str]]) -> str:
    lines = "".join(
        f"{digest}  {name}\n"
        for name, digest in sorted(entries, key=lambda e: e[0].encode("utf-8", "surrogateescape"))
    )
    return hashlib.sha256(lines.encode("utf-8", "surrogateescape")).hexdigest()


def hash_checkpoint(
    index_path: PathLike,
    *,
    tensors: bool = False,
    header_cap: int = DEFAULT_HEADER_CAP,
    threads: int = 0,
    progress: bool = False,
) -> Dict[str, Any]:
    """Per-shard hashes of a sharded checkpoint and one digest for it all.

    ``{"path", "kind": "checkpoint", "checkpoint_sha256", "index_sha256",
    "shards", "tensors"}``: ``shards`` holds :func:`hash_file`'s result for
    each shard plus its ``file`` name; ``checkpoint_sha256`` is the SHA-256
    of the listing ``sha256sum`` would print for the index file and every
    shard (``<hex>  <file name>\\n`` per file, sorted by name), so it
    changes when any byte of any file or any file name does;
    ``tensors`` (with ``tensors=True``) maps every tensor to its SHA-256.
    """
    path = _path(index_path)
    names, _weights, _meta = _strict_index(path, header_cap)
    folder = os.path.dirname(os.path.abspath(path))
    with open(path, "rb") as fh:
        index_sha = hashlib.sha256(fh.read()).hexdigest()
    shards = []
    per_tensor: Optional[Dict[str, str]] = {} if tensors else None
    for name in names:
        h = hash_file(
            os.path.join(folder, name),
            tensors=tensors,
            header_cap=header_cap,
            threads=threads,
            progress=progress,
        )
        h["file"] = name
        shards.append(h)
        if per_tensor is not None and h.get("tensors"):
            per_tensor.update(h["tensors"])
    listing = [(os.path.basename(path), index_sha)] + [(s["file"], s["sha256"]) for s in shards]
    return {
        "path": path,
        "kind": "checkpoint",
        "checkpoint_sha256": _digest_listing(listing),
        "index_sha256": index_sha,
        "shards": shards,
        "tensors": per_tensor,
    }


def checkpoint_metadata(
    index_path: PathLike, *, header_cap: int = DEFAULT_HEADER_CAP
) -> Tuple[Optional[Dict[str, str]], Dict[str, Any]]:
    """The first shard's ``__metadata__`` (read leniently, as
    :func:`read_metadata`) and the index's own ``metadata`` object."""
    path = _path(index_path)
    index = _load_index(path)
    if isinstance(index, str):
        raise rule_error("index-json", path, index)
    shape = _index_shape_problem(index)
    if shape:
        raise rule_error("index-shape", path, shape)
    folder = os.path.dirname(os.path.abspath(path))
    names = list(dict.fromkeys(index["weight_map"].values()))
    meta = index.get("metadata")
    index_meta = meta if isinstance(meta, dict) else {}
    if not names:
        return None, index_meta
    return read_metadata(os.path.join(folder, names[0]), header_cap=header_cap), index_meta


def _load_index(path: str) -> Any:
    """The parsed index, or a string saying why it is not JSON."""
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return f"index is not valid UTF-8 JSON: {exc}"


def _index_shape_problem(index: Any) -> Optional[str]:
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        return 'index must be an object with a "weight_map" object'
    return None


def _severity(rule: str) -> str:
    for r in _fastst.rule_catalogue():
        if r["id"] == rule:
            return r["severity"]
    raise ValueError(f"no rule {rule!r} in the catalogue")


def _cfinding(
    rule: str,
    message: str,
    *,
    shard: Optional[str] = None,
    tensor: Optional[str] = None,
    count: Optional[int] = None,
) -> Finding:
    f = _finding(rule, _severity(rule), message)
    f["tensor"] = tensor
    f["count"] = count
    f["shard"] = shard
    return f


def _q(text: Any) -> str:
    """``text`` quoted as a JSON string (controls escaped)."""
    return json.dumps(text, ensure_ascii=False)


def _names(names: List[str]) -> str:
    shown = ", ".join(_q(n) for n in names[:5])
    return shown + (f" and {len(names) - 5:,} more" if len(names) > 5 else "")


def _n(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def verify_checkpoint(
    index_path: PathLike,
    *,
    values: bool = False,
    header_cap: int = DEFAULT_HEADER_CAP,
    threads: int = 0,
    progress: bool = False,
) -> Dict[str, Any]:
    """Verifies a sharded checkpoint as a whole: the index, every shard
    (:func:`verify_file`, each finding tagged with its ``shard``) and the
    index against the shards: ``index-json``, ``index-shape``,
    ``shard-path``, ``shard-missing``, ``shard-lacks-tensor``,
    ``shard-extra-tensor``, ``shard-duplicate-tensor`` and
    ``index-total-size`` findings.

    Returns the keys of :func:`verify_file` (``file_len`` and ``tensors``
    summed, ``header_len`` None) plus ``kind`` (``"checkpoint"``) and
    ``shards`` (``file``, ``accepted``, ``complete``, ``findings`` count
    each); ``accepted`` says whether ``safe_open`` accepts the checkpoint.
    """
    path = _path(index_path)
    findings: List[Finding] = []
    index = _load_index(path)
    report: Dict[str, Any] = {
        "path": path,
        "kind": "checkpoint",
        "file_len": os.stat(path).st_size,
        "header_len": None,
        "tensors": 0,
        "accepted": False,
        "complete": False,
        "values_checked": 0 if values else None,
        "findings": findings,
        "shards": [],
    }
    if isinstance(index, str):
        findings.append(_cfinding("index-json", index))
        return report
    shape = _index_shape_problem(index)
    if shape:
        findings.append(_cfinding("index-shape", shape))
        return report
    folder = os.path.dirname(os.path.abspath(path))
    placed: Dict[str, List[str]] = {}
    complete = True
    for tensor, shard in index["weight_map"].items():
        if not isinstance(shard, str) or not shard:
            findings.append(
                _cfinding(
                    "index-shape",
                    f"tensor {_q(tensor)}: shard must be a file name",
                    tensor=tensor,
                )
            )
            complete = False
            continue
        if os.path.isabs(shard) or os.path.normpath(shard).startswith(".."):
            findings.append(
                _cfinding(
                    "shard-path",
                    f"tensor {_q(tensor)}: shard {_q(shard)} is outside the index's folder",
                    tensor=tensor,
                )
            )
            complete = False
            continue
        placed.setdefault(shard, []).append(tensor)
    holders: Dict[str, List[str]] = {}
    data_bytes = 0
    for shard, listed in placed.items():
        shard_path = os.path.join(folder, shard)
        if not os.path.exists(shard_path):
            findings.append(
                _cfinding(
                    "shard-missing",
                    f"shard {_q(shard)} listed in the index is missing "
                    f"({_n(len(listed), 'tensor')} placed in it)",
                    shard=shard,
                    count=len(listed),
                )
            )
            complete = False
            continue
        sub = verify_file(
            shard_path, values=values, header_cap=header_cap, threads=threads, progress=progress
        )
        for f in sub["findings"]:
            f["shard"] = shard
            findings.append(f)
        report["file_len"] += sub["file_len"]
        report["tensors"] += sub["tensors"] or 0
        if values and sub["values_checked"] is not None:
            report["values_checked"] += sub["values_checked"]
        report["shards"].append(
            {
                "file": shard,
                "accepted": sub["accepted"],
                "complete": sub["complete"],
                "findings": len(sub["findings"]),
            }
        )
        if not sub["accepted"]:
            complete = complete and sub["complete"]
            continue
        info = _fastst.inspect_file(shard_path, table=True, header_cap=header_cap)
        present = [row[0] for row in info["table"]]
        data_bytes += info["data_len"] - 0
        for name in present:
            holders.setdefault(name, []).append(shard)
        lacking = sorted(set(listed) - set(present))
        if lacking:
            findings.append(
                _cfinding(
                    "shard-lacks-tensor",
                    f"{_n(len(lacking), 'tensor')} the index places in this shard "
                    f"{'are' if len(lacking) != 1 else 'is'} not in it: {_names(lacking)}",
                    shard=shard,
                    tensor=lacking[0],
                    count=len(lacking),
                )
            )
    weight_map = index["weight_map"]
    for shard_entry in report["shards"]:
        shard = shard_entry["file"]
        extra = sorted(
            n for n, where in holders.items() if shard in where and weight_map.get(n) != shard
        )
        duplicated = [n for n in extra if len(holders[n]) > 1]
        only_here = [n for n in extra if len(holders[n]) == 1]
        if only_here:
            findings.append(
                _cfinding(
                    "shard-extra-tensor",
                    f"{_n(len(only_here), 'tensor')} in this shard the index does not place "
                    f"in it: {_names(only_here)}",
                    shard=shard,
                    tensor=only_here[0],
                    count=len(only_here),
                )
            )
        for name in duplicated:
            others = [s for s in holders[name] if s != shard]
            findings.append(
                _cfinding(
                    "shard-duplicate-tensor",
                    f"tensor {_q(name)} is also stored in {', '.join(_q(o) for o in others)}; "
                    f"the index places it in {_q(weight_map.get(name))}",
                    shard=shard,
                    tensor=name,
                )
            )
    meta = index.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if (
        complete
        and isinstance(total, int)
        and not isinstance(total, bool)
        and all(s["accepted"] for s in report["shards"])
    ):
        tensor_bytes = _tensor_bytes(folder, report["shards"], header_cap)
        if total != tensor_bytes:
            findings.append(
                _cfinding(
                    "index-total-size",
                    f"the index's metadata.total_size is {total:,} but the shards' tensors "
                    f"hold {_n(tensor_bytes, 'byte')}",
                )
            )
    report["complete"] = complete
    try:
        ShardedFile(path, "mmap", header_cap).close()
        report["accepted"] = True
    except (OSError, ValueError, KeyError):
        report["accepted"] = False
    findings.sort(key=lambda f: -severity_rank(f["severity"]))
    return report


def _tensor_bytes(folder: str, shards: List[Dict[str, Any]], header_cap: int) -> int:
    total = 0
    for s in shards:
        info = _fastst.inspect_file(
            os.path.join(folder, s["file"]), table=False, header_cap=header_cap
        )
        total += sum(d["bytes"] for d in info["by_dtype"])
    return total
