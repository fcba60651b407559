"""The model a signature covers: its root, its name, its pieces and the checks of its files.

The root is a file, a folder, or an index file's folder; the pieces are
hashed for a serialization; the default signature path is here too; the
checks are safetensors-aware."""

from __future__ import annotations

import json
import os
import posixpath
from typing import Any, Dict, List, Optional, Sequence, Union

from ..._layout import INDEX_SUFFIX
from ..._settings import DEFAULT_INDEX_CAP
from .findings import Finding, ProvenanceError, finding
from .hashing import ModelFile, Piece, read_regular, shards_of

PathLike = Union[str, "os.PathLike[str]"]

#: Default signature file name inside a model folder (model_signing's default).
DEFAULT_SIGNATURE_NAME = "model.sig"


def _fspath(path: PathLike) -> str:
    p = os.fspath(path)
    return os.fsdecode(p) if isinstance(p, bytes) else p


def _inside(model: str, path: str) -> Optional[str]:
    """``path`` relative to the folder ``model`` (POSIX), both resolved as
    ``model_signing`` resolves the ignore paths it is given (symbolic links
    followed), or None if it is not inside (or is the folder itself)."""
    if not os.path.isdir(model):
        return None
    rel = os.path.relpath(os.path.realpath(path), os.path.realpath(model))
    if rel == os.curdir or rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return None
    return rel.replace(os.sep, "/")


def given_ignores(root: str, paths: Sequence[PathLike]) -> List[str]:
    """The ignore paths a caller gave (relative to the current folder) as
    paths relative to the model folder ``root``. One that is not inside the
    folder raises :class:`ProvenanceError`: leaving it out would do nothing
    (or, for the folder itself, leave out the whole model), never what was
    asked."""
    found = []
    for p in paths:
        rel = _inside(root, _fspath(p))
        if rel is None:
            raise ProvenanceError(
                f"{_fspath(p)}: an ignore path must lie inside the model folder {root}",
                filename=_fspath(p),
            )
        found.append(rel)
    return found


def _model_root(model: str) -> str:
    """A sharded checkpoint given by its index file is its folder."""
    if os.path.isfile(model) and model.endswith(INDEX_SUFFIX):
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


def _safetensors_checks(files: Sequence[ModelFile], names: Optional[set] = None) -> List[Finding]:
    """Safetensors-aware checks of the files of a model: every
    ``.safetensors`` file must be accepted by the strict reader (header and
    layout, without reading tensor data), and every shard a
    ``*.safetensors.index.json`` names must be among the (signed) files."""
    from ... import _fastst

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
        elif lower.endswith(INDEX_SUFFIX) and f.size <= DEFAULT_INDEX_CAP:
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
    from ..._errors import SafetensorError

    try:
        _fastst.inspect.inspect_file(path, table=False)
    except (SafetensorError, OSError, ValueError) as exc:
        return " ".join(str(exc).split())
    return None


def _index_shards(path: str) -> List[str]:
    try:
        data = json.loads(read_regular(path, DEFAULT_INDEX_CAP, follow=False))
    except (OSError, ValueError, RecursionError):
        return []
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        return []
    return sorted({v for v in weight_map.values() if isinstance(v, str)})


def default_signature_path(model: PathLike) -> str:
    """Where :func:`sign` writes by default: ``FOLDER/model.sig`` for a
    folder (or an index file's folder), ``FILE.sig`` for a single file."""
    root = _model_root(_fspath(model))
    if os.path.isdir(root):
        return os.path.join(root, DEFAULT_SIGNATURE_NAME)
    return root + ".sig"
