"""DCP checkpoints saved whole or not at all: staging folder, commit record, recovery, listing.

A checkpoint of ``torch.distributed.checkpoint`` in the Hugging Face layout
is the set of ``.safetensors`` files in one folder (torch's own reader and
consolidation list the folder; no index names them), so a save cannot
switch one index to commit, as :mod:`fastst._write.sharded` does. It
commits through this sequence instead:

1. every rank writes its files (each complete and flushed to disk, see
   :func:`fastst.open_writer`) into a staging folder of this save,
   ``.<16 hex>.fastst-tmp/`` inside the checkpoint's folder, under staged
   names (``.<16 hex>.fastst-tmp.<final name>``); nothing a reader lists
   changes, so a rank that fails or is killed here leaves the previous
   checkpoint as it was (the staging folder is removed by the next save;
   ``fastst verify`` reports its files as stale temporaries);
2. once every rank's files are written (``finish`` runs on the
   coordinator only after all ranks' writes succeeded), the coordinator
   writes the commit record, ``commit.json`` in the staging folder, naming
   the new files (atomically, flushed): from here on the new checkpoint
   is the saved one;
3. each staged file is given its final name in the folder (replacing the
   old file of that name in one step: :func:`fastst._fastst.write.link_file`,
   the commit every sharded save uses), its staged name is removed, the files of the previous save
   of the same kind that the new one does not have are removed, the
   index (when the layout has one) is replaced, the folder is flushed,
   and the staging folder removed.

fastst's reader and consolidation take the checkpoint's files from
:func:`checkpoint_files`, which follows a commit record while one exists:
killed at any instant, they see the whole previous checkpoint (before
step 2) or the whole new one (after it). A coordinator killed during
step 3 leaves the record, and the next save into the folder completes
that step first (:func:`recover`). A reader that lists the folder itself
(torch's) sees the new files appear one at a time during step 3: naming
them is all that step does, no data is written there.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any, Dict, List, Optional, Tuple

from .._errors import rule_error
from .._fastst.read import DEFAULT_HEADER_CAP, RawFile
from .._fastst.write import link_file
from .._layout import MODEL_FILE, RANK_FILE, UNFINISHED, index_name, staged_name
from .._paths import readable
from .._sources.file import open_file
from .._sources.folders import shard_problem
from .._write.atomic import replace_bytes
from .._write.shared_folder import remove_if_present

__all__ = [
    "INDEX_NAME",
    "staging_dir",
    "staged_path",
    "commit",
    "recover",
    "checkpoint_files",
    "open_files",
    "plain_name",
]

#: The index torch writes beside files of a single-writer save.
INDEX_NAME = index_name("model")
_STAGING = re.compile(r"\.([0-9a-f]{16})\.fastst-tmp")
_RECORD = "commit.json"
#: A commit record larger than this is not one of ours.
_RECORD_CAP = 64 << 20


def staging_dir(folder: str, token: str) -> str:
    """The staging folder of the save ``token`` (16 hex) in ``folder``."""
    return os.path.join(folder, f".{token}.fastst-tmp")


def staged_path(folder: str, token: str, final: str) -> str:
    """Where the save ``token`` writes the file to be named ``final``."""
    return os.path.join(staging_dir(folder, token), staged_name(token, final))


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: The kinds of save, and the names of their files a new save of the kind replaces.
FAMILIES = {"rank": RANK_FILE, "model": MODEL_FILE}


def commit(
    folder: str,
    token: str,
    finals: List[str],
    kind: str,
    index: Optional[bytes] = None,
) -> None:
    """Steps 2 and 3 (see the module's documentation): the save ``token``
    of the files ``finals`` becomes the checkpoint in ``folder``; files of
    the previous save of the same ``kind`` (a key of :data:`FAMILIES`) not
    in ``finals`` are removed; ``index`` (bytes) replaces
    :data:`INDEX_NAME`. Raises ``FileNotFoundError`` naming a staged file
    that is missing, before anything changes."""
    if kind not in FAMILIES:
        raise ValueError(f"kind must be one of {sorted(FAMILIES)}, got {kind!r}")
    stage = staging_dir(folder, token)
    for final in finals:
        path = staged_path(folder, token, final)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{folder}: the file {final!r} of this save was not written (no {path!r}); "
                "the previous checkpoint is kept"
            )
    _fsync_dir(stage)
    record = {
        "token": token,
        "files": list(finals),
        "kind": kind,
        "index": None if index is None else index.decode("utf-8"),
    }
    replace_bytes(os.path.join(stage, _RECORD), json.dumps(record).encode("utf-8"))
    _complete(folder, stage, record)


def _complete(folder: str, stage: str, record: Dict[str, Any]) -> None:
    """Step 3, which may be repeated (after an interruption) from anywhere in it."""
    token = record["token"]
    finals: List[str] = record["files"]
    replaced = []  # held until the folder is flushed (link_file's ReplacedFile)
    for final in finals:
        staged = staged_path(folder, token, final)
        if os.path.exists(staged):  # else moved by the interrupted pass
            target = os.path.join(folder, final)
            replaced.append(link_file(staged, target, readable(target), False))
            remove_if_present(staged)
    family = FAMILIES[record["kind"]]
    keep = set(finals)
    for entry in os.listdir(folder):
        if family.fullmatch(entry) and entry not in keep:
            remove_if_present(os.path.join(folder, entry))
    if record["index"] is not None:
        replace_bytes(os.path.join(folder, INDEX_NAME), record["index"].encode("utf-8"))
    _fsync_dir(folder)
    for held in replaced:
        held.release()
    remove_if_present(os.path.join(stage, _RECORD))
    _remove_stage(stage)


def _remove_stage(stage: str) -> None:
    """Removes a staging folder: its files (never following a link), then it."""
    try:
        entries = os.listdir(stage)
    except FileNotFoundError:
        return
    for entry in entries:
        remove_if_present(os.path.join(stage, entry))
    try:
        os.rmdir(stage)
    except FileNotFoundError:
        pass


def _stages(folder: str) -> List[str]:
    """The staging folders in ``folder`` (real folders, not links)."""
    out = []
    for entry in sorted(os.listdir(folder)):
        if _STAGING.fullmatch(entry):
            path = os.path.join(folder, entry)
            if stat.S_ISDIR(os.lstat(path).st_mode):
                out.append(path)
    return out


def _record(folder: str, stage: str) -> Optional[Dict[str, Any]]:
    """The commit record of the staging folder ``stage``, if it holds a
    well-formed one of its own save."""
    token = os.path.basename(stage)[1:17]
    path = os.path.join(stage, _RECORD)
    try:
        fd = os.open(
            path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
        )
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:  # a link in its place (O_NOFOLLOW): not one of ours
        raise rule_error(
            "dcp-sharding-info", folder, f"the commit record {path!r} is not one fastst wrote"
        ) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, _RECORD_CAP + 1)
    finally:
        os.close(fd)
    try:
        record = json.loads(raw.decode("utf-8")) if len(raw) <= _RECORD_CAP else None
    except ValueError:
        record = None
    ok = (
        isinstance(record, dict)
        and record.get("token") == token
        and isinstance(record.get("files"), list)
        and all(plain_name(f) for f in record["files"])
        and record.get("kind") in FAMILIES
        and (record.get("index") is None or isinstance(record.get("index"), str))
    )
    if not ok:
        raise rule_error(
            "dcp-sharding-info", folder, f"the commit record {path!r} is not one fastst wrote"
        )
    return record


def plain_name(name: Any) -> bool:
    """Whether ``name`` is a plain ``.safetensors`` file name: no folder, not hidden."""
    return (
        isinstance(name, str)
        and name.endswith(".safetensors")
        and "/" not in name
        and "\0" not in name
        and not name.startswith(".")
    )


def recover(folder: str) -> None:
    """Before a new save into ``folder``: completes a commit a killed
    coordinator left half done, and removes the staging folders of saves
    that never committed."""
    if not os.path.isdir(folder):
        return
    for stage in _stages(folder):
        record = _record(folder, stage)
        if record is not None:
            _complete(folder, stage, record)
        else:
            _remove_stage(stage)


def _committing(folder: str) -> Optional[Tuple[str, Dict[str, Any]]]:
    for stage in _stages(folder):
        record = _record(folder, stage)
        if record is not None:
            return stage, record
    return None


def checkpoint_files(folder: str) -> List[str]:
    """Paths of the ``.safetensors`` files making up the checkpoint in
    ``folder``, sorted by name: the folder's own (temporaries aside), or,
    while a commit is under way, the files it commits (each where it is
    now) and the folder's files it leaves alone."""
    names = sorted(
        e
        for e in os.listdir(folder)
        if e.endswith(".safetensors")
        and not UNFINISHED.fullmatch(e)
        and os.path.isfile(os.path.join(folder, e))
    )
    for name in names:
        problem = shard_problem(folder, name)
        if problem is not None:
            raise rule_error(problem[0], os.path.join(folder, name), problem[1])
    found = _committing(folder)
    if found is None:
        return [os.path.join(folder, n) for n in names]
    stage, record = found
    family = FAMILIES[record["kind"]]
    ours: Dict[str, str] = {n: os.path.join(folder, n) for n in names if not family.fullmatch(n)}
    for final in record["files"]:
        staged = os.path.join(stage, staged_name(record["token"], final))
        path = staged if os.path.exists(staged) else os.path.join(folder, final)
        # The record's files are held to the rule every file of the folder is.
        problem = shard_problem(folder, os.path.relpath(path, folder))
        if problem is not None:
            raise rule_error(problem[0], path, problem[1])
        ours[final] = path
    return [ours[n] for n in sorted(ours)]


def open_files(paths: List[str], backend: str = "mmap") -> Dict[str, RawFile]:
    """The files ``paths`` opened and validated (read with ``backend``), by path; a file
    staged by a commit that moved it meanwhile is opened at its final name."""
    out: Dict[str, RawFile] = {}
    try:
        for path in paths:
            try:
                out[path] = open_file(path, backend, DEFAULT_HEADER_CAP)
            except FileNotFoundError:
                stage = os.path.dirname(path)
                match = UNFINISHED.fullmatch(os.path.basename(path))
                if not _STAGING.fullmatch(os.path.basename(stage)) or not match:
                    raise
                final = os.path.join(os.path.dirname(stage), match.group(1))
                out[path] = open_file(final, backend, DEFAULT_HEADER_CAP)
    except BaseException:
        for raw in out.values():
            raw.close()
        raise
    return out
