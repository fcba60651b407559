"""Sharded checkpoints written whole or not at all: the shards and the index that names them.

A save over an existing checkpoint commits as one, through this sequence
(each step durable before the next):

1. every new shard is written (atomically, flushed) under a staged name,
   ``.<16 hex>.fastst-tmp.<final name>`` (:func:`staged_name`), the 16 hex
   digits this save's token, whose mark ``.<token>.fastst-tmp`` the save
   holds while it lives (:class:`fastst._write.shared_folder.SaveMark`);
   the old index still names the old shards, untouched;
2. under the folder's commit lock (:func:`fastst._write.shared_folder.locked`,
   held to the end of step 5: two saves into one folder commit one after
   the other, the last one wins), the index is replaced by one naming the
   staged shards: from here on a reader sees the new checkpoint (a failure
   of this write removes the staged shards: nothing names them);
3. each staged shard is linked to its final name
   (``{prefix}-00001-of-0000N.safetensors``), replacing an old shard of
   that name in one step (:func:`fastst._fastst.write.link_file`); the
   old shards are held open until step 4 is flushed, then freed by a
   background thread, so that the flush does not wait for their blocks;
4. the index is replaced by one naming the final names;
5. this save's staged names are removed, and what earlier saves of the
   prefix made that the new index does not name: their shards, the staged
   files and marks of saves that were killed (never those of a save still
   alive), and the single file ``{prefix}.safetensors`` (the other layout,
   which loaders that prefer it would load instead).

Killed at any instant, a loader sees the complete old checkpoint (before
step 2) or the complete new one (after it), never a mix and never an index
naming a missing or partial shard. A kill before step 5 ends leaves staged
files and the mark: while an index names them they are the checkpoint;
otherwise they are stale temporaries (``fastst verify``'s
``stale-temp-file`` rule finds them), and the next save under the prefix
removes them (the kernel's lock on the mark died with the process).

A save to a URL prefix of object storage (``s3://bucket/run/``) cannot rename,
so its shards carry a part of their own instead,
``{prefix}-<8 hex>-00001-of-0000N.safetensors``, unique to this save (the
index records the names): each shard is uploaded whole (a multipart upload,
see :mod:`fastst._write.remote`; the sharded writer's shards are uploads of
the streaming writer, completed when it closes), then the index is written
last, in one request, which is the commit (``_RemoteSave`` through :class:`UrlCommit`, for both); an
old index never names a new shard. Then what earlier saves of the prefix made
that the new index does not name is deleted, by the exact naming rule of their
shards (:func:`fastst._layout.own_shard`): never another name the old index
listed (``config.json``), never the shards of another checkpoint whose index is
under the prefix (:meth:`UrlCommit.deletable`). A
failure before the index is written deletes the shards uploaded so far and
leaves the old checkpoint as it was (a failure of the index's own write
leaves them: whether it took effect is not known). A save killed before its index leaves
its shards behind (a killed process deletes nothing; its multipart upload in
flight stays pending until the store's lifecycle rule aborts it): no index
names them and readers of the prefix ignore them (they are named as the
index's own), and the next save under the prefix deletes them. The DCP
writer's saves to object storage commit through the same sequence
(:class:`UrlCommit`), their commit object written once every rank's
uploads completed.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import threading
from collections import abc
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from .._errors import closed_file_error, rule_error, save_errors
from .._fastst.write import link_file
from .._layout import (
    INDEX_SUFFIX,
    WEIGHTS_SUFFIX,
    checkpoint_of,
    index_name,
    own_shard,
    shard_name,
    staged_name,
)
from .._paths import os_path, readable
from .._settings import parse_size
from .._sources.remote import refuse_local_options
from . import remote as _remote
from .atomic import replace_bytes
from .shared_folder import SaveMark, locked, remove_earlier, remove_if_present
from .streaming import (
    Layout,
    TensorWriter,
    WholeOrNothing,
    element_count,
    layout_entries,
    tensor_bytes,
)

__all__ = [
    "plan_shards",
    "write_sharded",
    "commit_staged",
    "ShardedWriter",
    "open_sharded_writer",
    "write_sharded_from",
    "UrlCommit",
    "forget",
]


def plan_shards(sizes: Dict[str, int], max_size: int) -> List[List[str]]:
    """Groups tensor names, in the given order, into shards of at most
    ``max_size`` bytes (a tensor larger than that gets a shard of its own)."""
    shards: List[List[str]] = []
    current: List[str] = []
    used = 0
    for name, size in sizes.items():
        if current and used + size > max_size:
            shards.append(current)
            current, used = [], 0
        current.append(name)
        used += size
    if current or not shards:
        shards.append(current)
    return shards


class _LocalSave:
    """One sharded save into a local folder: the shards' planned names, and
    the commit (steps 2-5 of the module's documentation) once every staged
    shard is written."""

    def __init__(
        self,
        folder: Any,
        groups: List[List[str]],
        sizes: Mapping[str, int],
        prefix: str,
        index_metadata: Optional[Mapping[str, Any]],
    ) -> None:
        self.folder = os.fsdecode(os.fspath(folder))
        self.prefix = prefix
        total = len(groups)
        self.finals = [shard_name(prefix, i, total) for i in range(1, total + 1)]
        self.index_path = os.path.join(self.folder, index_name(prefix))
        self.where = readable(self.index_path)
        self.index_bytes = index_of(groups, sizes, index_metadata)
        with save_errors(self.where):
            os.makedirs(self.folder, exist_ok=True)
            self.mark = SaveMark(self.folder, prefix)
        self.staged = [
            os.path.join(self.folder, staged_name(self.mark.token, n)) for n in self.finals
        ]

    def started(self, path: str) -> None:
        """The staged shard ``path`` is being saved (every staged name is
        removed by :meth:`discard` anyway)."""

    def discard(self) -> None:
        """Removes the staged shards written so far (no index names them), then the mark."""
        for path in self.staged:
            remove_if_present(path)
        self.mark.release()

    def commit(self) -> str:
        """Steps 2-5, once every staged shard is complete; the index's path."""
        staged = [os.path.basename(p) for p in self.staged]
        try:
            with save_errors(self.where):
                return commit_staged(
                    self.folder, self.prefix, staged, self.finals, self.index_bytes
                )
        finally:
            self.mark.release()


class _RemoteSave:
    """One sharded save to a URL prefix of object storage: the shards' names, with a part of
    this save's own, and the commit (the index, written last, then the clean-up; see the
    module's documentation) once every shard is uploaded, through :class:`UrlCommit`, for
    ``save_sharded`` and the sharded writer alike."""

    def __init__(
        self,
        folder: str,
        groups: List[List[str]],
        sizes: Mapping[str, int],
        prefix: str,
        index_metadata: Optional[Mapping[str, Any]],
        storage_options: Optional[Mapping[str, Any]],
    ) -> None:
        self.prefix = prefix
        self._commit = UrlCommit.for_index(folder, prefix, storage_options)
        self.index_path = self._commit.commit_url
        self.where = readable(self.index_path)
        total = len(groups)
        self.names = [shard_name(prefix, i, total, self._commit.part) for i in range(1, 1 + total)]
        self.staged = [self._commit.url(name) for name in self.names]
        self._index_bytes = index_of(groups, sizes, index_metadata)
        self._started: List[str] = []

    def started(self, url: str) -> None:
        """The shard ``url`` is being uploaded: :meth:`discard` deletes it."""
        self._started.append(url)

    def discard(self) -> None:
        """Deletes the shards of this save uploaded so far (named by no index: not part of any
        checkpoint)."""
        for url in self._started:
            forget(url, self._commit.storage_options)

    def commit(self) -> str:
        """Steps 2 and 3, once every shard is uploaded: the index, last, in one request, then
        what no index names any more (:meth:`UrlCommit.commit`); the index's URL."""
        prefixes = {self.prefix}
        return self._commit.commit(
            self._index_bytes(self.names), self.names, lambda n: own_shard(n, prefixes)
        )


class UrlCommit:
    """One save of objects under the URL prefix ``base`` committed by one object,
    ``commit_name``, written last (the sequence of the module's documentation, for the
    sharded saves to object storage and the DCP writer's): :attr:`part` is this save's
    own (8 hex digits in no name the old commit object names, ``old``), which the names
    of the objects it uploads carry; :meth:`commit` writes the commit object, then
    deletes what ``old`` names and the new one does not, and the strays of saves that
    never committed. The uploads may come from other processes (the ranks of a DCP save),
    which learn :attr:`part` from the one that made this."""

    def __init__(
        self,
        base: str,
        commit_name: str,
        old: List[str],
        storage_options: Optional[Mapping[str, Any]],
        part: Optional[str] = None,
    ) -> None:
        self.base = base if base.endswith("/") else base + "/"
        self.commit_name = commit_name
        self.commit_url = _remote.shard_url(self.base, commit_name)
        self.old = list(old)
        self.storage_options = storage_options

        def taken(p: str) -> bool:
            return any(f"-{p}-" in name for name in self.old)

        if part is not None and (len(part) != 8 or taken(part)):
            raise ValueError(f"{part!r} is not a part of a save's own under {self.base}")
        while part is None:  # a part of this save's own: in no name the old commit object holds
            part = os.urandom(4).hex()
            part = None if taken(part) else part
        self.part = part

    @classmethod
    def for_index(
        cls,
        folder: str,
        prefix: str,
        storage_options: Optional[Mapping[str, Any]],
        part: Optional[str] = None,
    ) -> UrlCommit:
        """The commit of a sharded checkpoint under the URL prefix ``folder`` by its index
        ``{prefix}.safetensors.index.json`` (``part``: one another process chose, else a
        new one)."""
        base = folder if folder.endswith("/") else folder + "/"
        index_file = index_name(prefix)
        old = _remote.shards_named(_remote.shard_url(base, index_file), storage_options)
        return cls(base, index_file, old, storage_options, part)

    def url(self, name: str) -> str:
        """The URL of the object ``name`` (a plain file name) under the prefix."""
        return _remote.shard_url(self.base, name)

    def discard(self, names: List[str]) -> None:
        """Deletes the objects ``names`` this save uploaded (no commit object names them)."""
        for name in names:
            forget(self.url(name), self.storage_options)

    def commit(self, body: bytes, names: List[str], stray: Callable[[str], bool]) -> str:
        """Writes the commit object (``body``, naming the objects ``names``), then
        deletes what :meth:`deletable` names (``stray`` recognises the names saves of
        the prefix give their objects: only those are ever deleted);
        returns the commit object's URL. A failure of the write itself leaves the
        uploaded objects (whether the write took effect is not known: if it did not,
        they are strays, which the next save deletes)."""
        _remote.put_bytes(self.commit_url, body, self.storage_options)
        for name in self.deletable(names, stray):
            forget(self.url(name), self.storage_options)
        return self.commit_url

    def deletable(self, names: List[str], own: Callable[[str], bool]) -> List[str]:
        """What the commit of ``names`` deletes: the objects ``old`` named and those
        directly under the prefix that a save of it made (``own``: its exact naming rule),
        less ``names``, and less the shards of another checkpoint whose index is under the
        prefix (``run-20240101-00001-of-00002.safetensors`` beside
        ``run-20240101.safetensors.index.json`` looks like a shard of ``run`` with a
        save's own part). Whatever else an old index named (``config.json``) stays."""
        try:
            listed = _remote.names_under(self.base, self.storage_options)
        except Exception:  # a failed listing leaves the strays: the checkpoint is whole
            listed = []
        indexes = {n for n in listed if n.endswith(INDEX_SUFFIX)} - {self.commit_name}

        def foreign(name: str) -> bool:
            stem = checkpoint_of(name)
            return stem is not None and index_name(stem) in indexes

        candidates = (set(self.old) | set(listed)) - set(names)
        return sorted(n for n in candidates if "/" not in n and own(n) and not foreign(n))


def commit_staged(
    folder: str,
    prefix: str,
    staged: List[str],
    finals: List[str],
    index_bytes: Callable[[List[str]], bytes],
) -> str:
    """Steps 2 to 5 of the sequence (see the module's documentation), once
    the shards ``staged`` (names in ``folder``, each complete and flushed)
    are written: the index ``{prefix}.safetensors.index.json``, whose bytes
    ``index_bytes(shard names)`` gives, commits them under the names
    ``finals``; returns the index's path. Every sharded commit of fastst
    (saves, the sharded writer, consolidation) runs through here, under the
    folder's commit lock. A failure before the index names them (a staged
    shard gone, the index's write failing) removes the staged shards and
    leaves the old checkpoint as it was."""
    total = len(finals)
    index_path = os.path.join(folder, index_name(prefix))
    with locked(folder):
        try:
            gone = [n for n in staged if not os.path.isfile(os.path.join(folder, n))]
            if gone:
                raise FileNotFoundError(
                    errno.ENOENT,
                    f"{readable(index_path)}: the staged shard {gone[0]!r} of this save is gone "
                    "(removed by another program); nothing was saved",
                    os.path.join(folder, gone[0]),
                )
            # 2. The commit: the index names the new shards.
            replace_bytes(index_path, index_bytes(staged))
        except BaseException:
            for name in staged:
                remove_if_present(os.path.join(folder, name))
            raise
        # 3. The ecosystem's names, each replaced in one step; the old shards
        # are held until step 4 is flushed (link_file's ReplacedFile).
        replaced = []
        for at, (name, final) in enumerate(zip(staged, finals, strict=True)):
            target = os.path.join(folder, final)
            replaced.append(
                link_file(os.path.join(folder, name), target, readable(target), at == total - 1)
            )
        # 4. The index names them.
        replace_bytes(index_path, index_bytes(finals))
        # 5. What no index names any more.
        for held in replaced:
            held.release()
        for name in staged:
            remove_if_present(os.path.join(folder, name))
        remove_earlier(folder, prefix, set(finals))
        single = os.path.join(folder, f"{prefix}{WEIGHTS_SUFFIX}")
        if os.path.islink(single) or not os.path.isdir(single):
            remove_if_present(single)
    return index_path


def index_bytes(groups: List[List[str]], metadata: Mapping[str, Any], names: List[str]) -> bytes:
    """The index of a checkpoint whose shard ``names[i]`` holds the tensors
    ``groups[i]``, with ``metadata``."""
    weight_map = {t: names[i] for i, members in enumerate(groups) for t in members}
    index = {"metadata": dict(metadata), "weight_map": dict(sorted(weight_map.items()))}
    return (json.dumps(index, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def index_of(
    groups: List[List[str]], sizes: Mapping[str, int], index_metadata: Optional[Mapping[str, Any]]
) -> Callable[[List[str]], bytes]:
    """The index of a sharded save of the tensors ``groups`` (their byte sizes in ``sizes``),
    as a function of the shards' names: ``total_size`` and ``index_metadata`` as its
    metadata."""
    meta = {"total_size": sum(sizes.values()), **(index_metadata or {})}
    return functools.partial(index_bytes, groups, meta)


def _check_plan(max_shard_size: Any, prefix: Any) -> int:
    """The shard size limit in bytes; ``ValueError`` for a bad limit or prefix."""
    limit = parse_size(max_shard_size, "max_shard_size")
    if limit <= 0:
        raise ValueError(f"max_shard_size must be positive, got {max_shard_size!r}")
    if not isinstance(prefix, str) or not prefix or "/" in prefix or "\0" in prefix:
        raise ValueError(f"prefix must be a non-empty file name without '/', got {prefix!r}")
    return limit


def write_sharded(
    tensors: Dict[str, Any],
    folder: Any,
    sizes: Dict[str, int],
    save_one: Callable[..., None],
    *,
    max_shard_size: Any = "5GB",
    metadata: Optional[Dict[str, str]] = None,
    prefix: str = "model",
    index_metadata: Optional[Dict[str, Any]] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> str:
    """Writes ``tensors`` as shards ``{prefix}-00001-of-0000N.safetensors``
    plus ``{prefix}.safetensors.index.json`` into ``folder``, committed as
    one (see the module's documentation); returns the index's path.
    ``save_one(subset, path, metadata, durable)`` writes one shard;
    ``index_metadata`` joins ``total_size`` in the index's ``metadata``.
    A URL prefix of object storage (configured by ``storage_options``)
    gets shards with names of this save's own and the index last; the
    index's URL is returned."""
    limit = _check_plan(max_shard_size, prefix)
    groups = plan_shards(sizes, limit)
    if _remote.is_url(folder):
        remote = _RemoteSave(str(folder), groups, sizes, prefix, index_metadata, storage_options)
        # 1. The shards, each uploaded whole, under names no index names.
        try:
            for members, url in zip(groups, remote.staged, strict=True):
                remote.started(url)
                save_one({n: tensors[n] for n in members}, url, metadata, None)
        except BaseException:
            remote.discard()
            raise
        return remote.commit()
    refuse_local_options(storage_options, folder)
    save = _LocalSave(folder, groups, sizes, prefix, index_metadata)
    # 1. The new shards, under names no reader knows yet.
    try:
        with save_errors(save.where):
            for members, path in zip(groups, save.staged, strict=True):
                save_one({n: tensors[n] for n in members}, path, metadata, True)
    except BaseException:
        save.discard()
        raise
    return save.commit()


def write_sharded_from(
    items: Any,
    folder: Any,
    layout: Layout,
    *,
    max_shard_size: Any = "5GB",
    metadata: Optional[Mapping[str, str]] = None,
    prefix: str = "model",
    align: Optional[int] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> str:
    """``save_sharded`` fed by ``items`` (a dict, or an iterable of ``(name,
    tensor)`` pairs consumed as they come) with ``layout`` given: written
    through :class:`ShardedWriter` (to a local folder, or a URL prefix configured by
    ``storage_options``); returns the index's path."""
    pairs = items.items() if isinstance(items, abc.Mapping) else items
    with ShardedWriter(
        folder,
        layout,
        max_shard_size=max_shard_size,
        metadata=metadata,
        prefix=prefix,
        align=align,
        storage_options=storage_options,
    ) as writer:
        for pair in pairs:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise TypeError(
                    f"{writer.name}: tensors come as (name, tensor) pairs, got {pair!r:.80}"
                )
            writer.write(pair[0], pair[1])
    return writer.index_path


class ShardedWriter(WholeOrNothing):
    """A sharded checkpoint being written from its layout; made by
    :func:`open_sharded_writer` (see there). Use it as a context manager, or
    call :meth:`close` (or :meth:`abort`) yourself. Safe to share between
    threads."""

    def __init__(
        self,
        folder: Any,
        layout: Layout,
        *,
        max_shard_size: Any = "5GB",
        metadata: Optional[Mapping[str, str]] = None,
        prefix: str = "model",
        align: Optional[int] = None,
        index_metadata: Optional[Mapping[str, Any]] = None,
        storage_options: Optional[Mapping[str, Any]] = None,
    ) -> None:
        url = _remote.is_url(folder)
        if not url:
            refuse_local_options(storage_options, folder)
        limit = _check_plan(max_shard_size, prefix)
        where = readable(str(folder)) if url else readable(os_path(folder))
        entries = layout_entries(where, layout)
        sizes = {name: tensor_bytes(dtype, shape) for name, dtype, shape in entries}
        count = sum(element_count(shape) for _, _, shape in entries)
        groups = plan_shards(sizes, limit)
        index_meta = {"total_parameters": count, **(index_metadata or {})}
        self._save: Union[_LocalSave, _RemoteSave]
        if url:
            self._save = _RemoteSave(
                str(folder), groups, sizes, prefix, index_meta, storage_options
            )
        else:
            self._save = _LocalSave(folder, groups, sizes, prefix, index_meta)
        self._lock = threading.Lock()
        self._closed = False
        # Each shard's file is opened by the first of its tensors and (for a folder)
        # completed by the last: descriptors follow the shards being written, not their
        # number. (An object store's shards appear only when the block ends.)
        self._early = not url
        self._options: Dict[str, Any] = {
            "metadata": metadata,
            "align": align,
            "durable": True,
            "storage_options": storage_options,
        }
        self._parts = [{name: layout[name] for name in members} for members in groups]
        self._writers: List[Optional[TensorWriter]] = [None] * len(groups)
        self._left = [len(members) for members in groups]
        self._done = [False] * len(groups)
        self._shard_of = {name: i for i, members in enumerate(groups) for name in members}

    def _writer(self, shard: int) -> TensorWriter:
        """The writer of ``shard``, opened now if it is not open yet."""
        with self._lock:
            writer = self._writers[shard]
            if writer is None:
                if self._closed:
                    raise closed_file_error(self._save.where)
                target = self._save.staged[shard]
                self._save.started(target)
                with save_errors(self._save.where):
                    writer = TensorWriter(target, self._parts[shard], **self._options)
                self._writers[shard] = writer
            return writer

    def _complete(self, shard: int) -> None:
        """Saves ``shard`` under its staged name once its last tensor was written."""
        with self._lock:
            writer = self._writers[shard]
            if writer is None or self._done[shard]:
                return
            self._done[shard] = True
        with save_errors(self._save.where):
            writer.close()

    @property
    def name(self) -> str:
        """The index, as messages show it."""
        return self._save.where

    @property
    def index_path(self) -> str:
        """Where the index will be (what :func:`fastst.safe_open` opens): a
        path, or the index's URL."""
        return self._save.index_path

    @property
    def closed(self) -> bool:
        """True once the checkpoint was saved (:meth:`close`) or discarded."""
        return self._closed

    def missing(self) -> List[str]:
        """Names of the layout's tensors not written completely yet."""
        names: List[str] = []
        for i, part in enumerate(self._parts):
            writer = self._writers[i]
            if writer is None:
                names.extend(part)
            elif not self._done[i]:
                names.extend(writer.missing())
        return names

    def write(self, name: str, data: Any) -> None:
        """Writes tensor ``name`` of the layout from ``data``, as
        :meth:`fastst.TensorWriter.write` does (any order, any thread, each
        tensor once; the same errors)."""
        shard = self._shard_of.get(name) if isinstance(name, str) else None
        where = self._save.where
        if shard is None:
            if self._closed:
                raise closed_file_error(where)
            if not isinstance(name, str):
                raise TypeError(f"{where}: tensor names must be str, got {type(name).__name__}")
            raise rule_error(
                "tensor-not-in-layout", where, f"tensor {name!r} is not in the layout", name
            )
        writer = self._writer(shard)
        if self._closed:
            raise closed_file_error(where)
        if self._done[shard]:
            raise rule_error(
                "tensor-written-twice", writer.name, f"tensor {name!r} was written already", name
            )
        writer.write(name, data)
        with self._lock:
            self._left[shard] -= 1
            last = self._left[shard] == 0 and not self._closed and self._early
        if last:
            try:
                self._complete(shard)
            except BaseException:
                self.abort()
                raise

    def close(self) -> str:
        """Saves the checkpoint when every tensor was written: each shard is
        completed under its staged name, then the commit makes them the
        checkpoint at once; returns the index's path. Otherwise nothing is
        saved, the old checkpoint stays as it was, and
        :class:`fastst.SerializeError` (rule ``tensors-missing``) names what
        is missing."""
        with self._lock:
            if self._closed:
                raise closed_file_error(self._save.where)
            self._closed = True
        missing = self.missing()
        if missing:
            self._discard()
            shown = ", ".join(repr(n) for n in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise rule_error(
                "tensors-missing",
                self._save.where,
                f"{len(missing)} tensors of the layout were not written: {shown}{more}",
                missing[0],
            )
        try:
            for shard in range(len(self._parts)):
                if self._writers[shard] is None:  # a shard of no tensors
                    self._writers[shard] = TensorWriter(
                        self._save.staged[shard], self._parts[shard], **self._options
                    )
                self._complete(shard)
        except BaseException:
            self._discard()
            raise
        return self._save.commit()

    def abort(self) -> None:
        """Discards the checkpoint being written: the folder keeps what it
        held. Does nothing once closed."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._discard()

    def _discard(self) -> None:
        for writer in self._writers:
            if writer is not None:
                writer.abort()
        self._save.discard()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self.missing())} tensors to write"
        return f"<fastst.ShardedWriter {self._save.where!r}: {state}>"


def open_sharded_writer(
    folder: Any,
    layout: Layout,
    *,
    max_shard_size: Any = "5GB",
    metadata: Optional[Mapping[str, str]] = None,
    prefix: str = "model",
    align: Optional[int] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> ShardedWriter:
    """A writer of a sharded checkpoint in ``folder`` holding the tensors of
    ``layout`` (``name -> (dtype, shape)``, as for :func:`fastst.open_writer`)::

        with fastst.open_sharded_writer("ckpt", layout, max_shard_size="2GB") as w:
            for name, tensor in produce():   # any order, any thread
                w.write(name, tensor)

    The shards are planned from the layout as ``save_sharded`` plans them
    (in the layout's order, at most ``max_shard_size`` bytes each; shards
    ``{prefix}-00001-of-0000N.safetensors`` with ``metadata``, and
    ``{prefix}.safetensors.index.json`` whose metadata has ``total_size``
    and ``total_parameters``), and each tensor is written at its place in
    its shard as it comes, so memory holds only the tensors in hand: a
    checkpoint larger than memory can be written. When the block ends with
    every tensor written, the checkpoint replaces what the folder held as
    one (the commit of ``save_sharded``); an exception, a missing tensor or
    :meth:`ShardedWriter.abort` leave the folder's old checkpoint as it was
    and nothing of the new one.

    A URL prefix of object storage (``s3://bucket/run/``, configured by
    ``storage_options``) is written as ``save_sharded`` writes one: each
    shard is an upload of :func:`fastst.open_writer`'s (parts sent as they
    fill), under a name with a part of this save's own, and the index,
    written last when the block ends cleanly, is the commit; on any failure
    the old checkpoint stays as it was (see ``docs/remote.md``)."""
    return ShardedWriter(
        folder,
        layout,
        max_shard_size=max_shard_size,
        metadata=metadata,
        prefix=prefix,
        align=align,
        storage_options=storage_options,
    )


def forget(url: str, storage_options: Optional[Mapping[str, Any]]) -> None:
    """Deletes the object ``url``, as a clean-up: a failure leaves it (no index names it)."""
    try:
        _remote.delete(url, storage_options)
    except Exception:
        pass
