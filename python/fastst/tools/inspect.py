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
- :func:`diff`: two files or checkpoints compared tensor by tensor.
- :func:`identify`: what a file that is not safetensors is (a PyTorch
  checkpoint, a pickle, GGUF, NumPy, HDF5, ONNX, an HTML page...).
- Checkpoints as wholes (an ``*.index.json`` and its shards, or the folder
  holding it): :func:`iter_inputs`, :func:`inspect_checkpoint`,
  :func:`hash_checkpoint` (per-shard hashes and one checkpoint digest),
  :func:`verify_checkpoint` (the index checked against its shards).
- :func:`holds_pickles`, :func:`pickle_files`: files whose content holds
  pickles (which run code when loaded), alone or under a folder.
"""

from __future__ import annotations

import os
import shlex
import stat
import zipfile
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union, cast

import numpy as np

from .. import _fastst
from .._dtypes import NARROW_FLOATS
from .._errors import rule_error
from .._fastst.read import DEFAULT_HEADER_CAP
from .._paths import os_path as _path
from .._paths import readable, shown
from .._read.safe_open import safe_open
from .._sources import identify as _identify
from .._sources.identify import not_safetensors_message
from . import results
from .card import decode_metadata, metadata_card
from .checkpoint import (
    _hash_file,
    _read_metadata,
    _verify_file,
    checkpoint_metadata,
    hash_checkpoint,
    inspect_checkpoint,
    iter_inputs,
)
from .checkpoint_verify import summarise_truncation, verify_checkpoint
from .diff import diff
from .results import SEVERITIES
from .walk import TOO_DEEP, walk

PathLike = Union[str, "os.PathLike[str]"]
Finding = Dict[str, Any]


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
    "diff",
    "holds_pickles",
    "pickle_files",
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
    """The rules ``verify`` reports: dicts with ``id``, ``severity`` (the
    default), ``verdict`` (``malformed`` or ``red-flag``) and ``summary``."""
    return list(_fastst.inspect.verify_rules())


def _given_path(result: Any, path: str) -> Dict[str, Any]:
    """``result`` with ``path`` as given (the core spells paths that are not
    valid UTF-8 lossily)."""
    out = dict(result)
    out["path"] = shown(path)
    return out


def verify_file(
    path: PathLike,
    *,
    values: bool = False,
    header_cap: int = DEFAULT_HEADER_CAP,
    threads: int = 0,
    progress: bool = False,
) -> results.FileVerification:
    """Verifies one file; works on files the reader rejects.

    Returns ``{"path", "file_len", "header_len", "tensors", "accepted",
    "complete", "values_checked", "findings"}``: ``accepted`` says whether
    ``safe_open`` accepts the file, ``complete`` whether the tensor table
    could be examined at all, and each finding is a dict with ``rule``,
    ``severity``, ``message``, ``tensor``, ``key``, ``offset`` (absolute),
    ``length`` and ``count``, most severe first. ``values=True`` also reads
    every tensor (NaN/Inf counts, BOOL bytes). Raises :class:`OSError` only
    when the file cannot be read.

    Two cases get one plain finding instead of many: a file that holds
    pickles (:func:`holds_pickles`), one ``foreign-content`` finding saying
    what it is and how to convert it; a truncated file (tensors running
    past its end), one ``data-too-short`` (or ``ghost-tensor``) finding
    "truncated: N of M bytes present; re-download" whose ``count`` is the
    number of tensors cut off.
    """
    p = _path(path)
    out = _verify_file(p, values=values, header_cap=header_cap, threads=threads, progress=progress)
    found = holds_pickles(p)
    if found is not None:
        out["findings"] = [_pickle_finding(p, found)]
    summarise_truncation(out["findings"], out["file_len"])
    return cast(results.FileVerification, out)


def hash_file(
    path: PathLike,
    *,
    tensors: bool = False,
    header_cap: int = DEFAULT_HEADER_CAP,
    threads: int = 0,
    progress: bool = False,
) -> results.FileHashes:
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
    p = _path(path)
    out = _hash_file(p, tensors=tensors, header_cap=header_cap, threads=threads, progress=progress)
    return cast(results.FileHashes, out)


_HASH_KEYS: Tuple[Tuple[str, str], ...] = (
    ("sshs_model_hash", "autov3"),
    ("modelspec.hash_sha256", "autov3"),
)


def check_hashes(
    hashes: Dict[str, Any], metadata: Optional[Dict[str, str]]
) -> List[results.Finding]:
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
            found.append(results.finding("hash-mismatch", message, key=key))
    if compared == 0:
        found.append(
            results.finding(
                "no-embedded-hash",
                "__metadata__ holds no sshs_model_hash or modelspec.hash_sha256 to check",
            )
        )
    return cast(List[results.Finding], found)


def inspect_file(
    path: PathLike, *, tensors: bool = False, header_cap: int = DEFAULT_HEADER_CAP
) -> results.FileSummary:
    """A summary of a file the reader accepts (raises a
    :class:`fastst.SafetensorError` subclass otherwise).

    ``{"path", "file_len", "tensors", "parameters", "header_len",
    "data_start", "data_alignment", "data_len", "by_dtype", "metadata"}``
    (``data_alignment``: the largest power of two up to 4096 dividing
    ``data_start``, as ``align=`` of the writers sets it); with
    ``tensors=True`` also ``"table"``: ``(name, dtype, shape, begin, end)``
    tuples in file order, offsets relative to the data buffer.
    """
    p = _path(path)
    summary = _given_path(_fastst.inspect.inspect_file(p, table=tensors, header_cap=header_cap), p)
    return cast(results.FileSummary, summary)


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
    return _read_metadata(_path(path), header_cap)


def iter_safetensors(paths: Iterable[PathLike]) -> Iterator[str]:
    """Each path given, with folders replaced by the ``*.safetensors`` files
    under them (recursively, sorted). Paths that do not exist are yielded
    as given, so that opening them reports the error. A folder nested too
    deep to scan (:func:`fastst.tools.walk.walk`) raises
    :class:`fastst.FolderError` (rule ``folder-too-deep``) once the rest is
    yielded."""
    for raw in paths:
        path = _path(raw)
        if not os.path.isdir(path):
            yield path
            continue
        too_deep: List[str] = []
        for root, files in walk(path, too_deep):
            for name in files:
                if name.lower().endswith(".safetensors"):
                    yield os.path.join(root, name)
        if too_deep:
            raise rule_error("folder-too-deep", readable(too_deep[0]), TOO_DEEP)


# what a file is -------------------------------------------------------------


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
    permission, a symlink loop). The reader's errors use the same function.
    """
    return _identify.identify(_path(path))


# pickles and truncation -----------------------------------------------------

#: Kinds :func:`identify` gives files that hold pickles (a "zip" holds them
#: when a member is a ``.pkl``).
_PICKLE_KINDS = ("pickle", "pytorch-zip")

#: Why a file that holds pickles matters.
PICKLE_RISK = "loading it can run code"


def _zip_has_pickle(path: str) -> bool:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            with zipfile.ZipFile(fh) as archive:
                return any(name.endswith(".pkl") for name in archive.namelist())
        except (zipfile.BadZipFile, ValueError, EOFError):
            return False  # no loader can open it either


def holds_pickles(path: PathLike) -> Optional[Dict[str, Any]]:
    """What ``path`` is (:func:`identify`'s dict) when its content holds
    pickles, which run code when loaded: a raw pickle (legacy ``torch.save``,
    ``.pkl``), a PyTorch zip checkpoint, any zip with a ``.pkl`` member
    (only its member names are read); else None. Decided by content, not by
    the file's name. Raises :class:`OSError` when ``path`` cannot be
    examined."""
    p = _path(path)
    found = identify(p)
    if found is None or found["kind"] not in (*_PICKLE_KINDS, "zip"):
        return None
    return found if found["kind"] != "zip" or _zip_has_pickle(p) else None


def pickle_files(folder: PathLike) -> Iterator[str]:
    """The files under ``folder`` (as :func:`fastst.tools.walk.walk` goes)
    that :func:`holds_pickles`, whatever their names (``.bin``, ``.pt``,
    ``.pth``, ``.ckpt``, ``.pkl``...); ``*.safetensors`` files are left to
    :func:`verify_file`, files that cannot be examined are passed over."""
    for root, files in walk(_path(folder), []):
        for name in files:
            path = os.path.join(root, name)
            try:
                if not name.lower().endswith(".safetensors") and holds_pickles(path):
                    yield path
            except OSError:
                continue


def _pickle_finding(path: str, found: Dict[str, Any]) -> Finding:
    target = os.path.splitext(path)[0] + ".safetensors"
    hint = f"fastst convert {shlex.quote(path)} {shlex.quote(target)}"
    return results.finding(
        "foreign-content",
        f"{not_safetensors_message(found)}: {PICKLE_RISK}; convert it with `{hint}`",
        severity="critical" if found["executable"] else "high",
        offset=0,
    )
