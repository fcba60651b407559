"""Consolidation: a DCP-sharded Hugging Face checkpoint becomes whole tensors in index + shards.

:func:`consolidate` reads the headers of the checkpoint's rank files
(:func:`fastst._dcp.files.chunk_table`), plans the output files
(``model-00001-of-0000N.safetensors``, grouped by ``fqn_to_index_mapping``, by
``max_shard_size``, or all in one) and writes each whole tensor with the
streaming writer from its chunks: rows one chunk holds whole are given to the
writer as ranges of that chunk's file (:class:`fastst.TensorRange`, through
:meth:`fastst.TensorWriter.write_parts`), which it reads, for a local file,
straight into the aligned buffer of its direct writes (each byte copied once,
by the read), and for an object of a store through a buffer of its own; other
rows (chunks that split rows) are read :data:`BLOCK` bytes of rows at a time
into a buffer, gathered from each chunk's part of them through a second one.
Several tensors are written at once, each by one thread: one thread per
:data:`THREAD_BYTES` of output, at most :data:`THREADS`, no more than tensors
(or ``thread_count``), and each output file is flushed and closed as soon as
its last tensor is written. Memory is bounded by the threads: each holds the
writer's aligned buffer of direct writes (4 MiB; a range of an object of a
store, or one written to an upload, is read 8 MiB at a time) and, for rows
split between chunks only, two buffers of :data:`BLOCK` bytes, or of one row
where a row is larger (a tensor of 64 MiB rows split by columns takes two such
rows per thread), never more than the tensor. Every chunk byte is read once.
The output is committed as a sharded save commits (staged shards, then the
index, :func:`fastst._write.sharded.commit_staged`), so it appears whole or
not at all; its tensors, metadata (none) and index equal what torch's
``consolidate_safetensors_files`` makes of the same input.
:func:`consolidate_on_every_rank` splits the output files among the ranks of a
process group, as torch's ``consolidate_safetensors_files_on_every_rank``
does, and commits once all ranks wrote theirs. The input may be a URL prefix a
DCP save to object storage wrote (its files those its commit objects name,
:mod:`fastst._dcp.remote`), read with ranged reads. The output may be a URL
prefix too: its files then carry a part of this consolidation's own
(``model-<part>-00001-of-0000N.safetensors``), each uploaded as the streaming
writer uploads, and the index is written last
(:class:`fastst._write.sharded.UrlCommit`, as a sharded save to a prefix
commits).
"""

from __future__ import annotations

import math
import os
import threading
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import numpy as np

from .._dtypes import FACTS
from .._errors import rule_error
from .._fastst.read import RawFile
from .._layout import output_name, own_shard, staged_name
from .._paths import readable
from .._settings import parse_size
from .._sources.ranges import TensorRange
from .._sources.remote import refuse_local_options
from .._write.remote import is_url
from .._write.sharded import UrlCommit, commit_staged, index_of, plan_shards
from .._write.streaming import TensorWriter, open_writer
from . import remote as dcp_remote
from .files import Tensor, check_mapping, chunk_table, run_all

__all__ = [
    "consolidate",
    "consolidate_on_every_rank",
    "Output",
    "Part",
    "parts",
    "pieces",
    "plan_outputs",
]

PathLike = Union[str, "os.PathLike[str]"]

#: Bytes of rows gathered at a time for a chunk that does not hold whole rows.
BLOCK = 8 << 20
#: Tensors written at once at most when no ``thread_count`` is given, whatever the cores: each
#: thread mostly waits on a read or a durable write, so more threads than cores keep more of both
#: in flight on the disk (benches/README.md, "torch.distributed.checkpoint").
THREADS = 8
#: Bytes of output per thread at least when no ``thread_count`` is given: a smaller job runs
#: fewer threads (one up to this size), so threads and their buffers follow the job.
THREAD_BYTES = 16 << 20
_PREFIX = "model"


def _folder(path: PathLike, what: str) -> str:
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"{what} must be a path, got {type(path).__name__}")
    if is_url(path):
        return str(path)
    return os.fsdecode(os.fspath(path))


class Output:
    """One output file: its final name (file ``number`` of ``total``) and its tensors, in
    file order."""

    def __init__(self, number: int, total: int, tensors: List[Tensor]) -> None:
        self.number = number
        self.total = total
        self.name = output_name(number, total)
        self.tensors = tensors


def plan_outputs(
    table: Dict[str, Tensor],
    mapping: Optional[Mapping[str, int]],
    max_shard_size: Any,
    where: str,
) -> List[Output]:
    """The output files of ``table``'s tensors: by ``mapping`` (tensor name
    -> file index from 1, every tensor named), else in shards of at most
    ``max_shard_size`` (tensors by name), else one file."""
    names = sorted(table)
    mapping = check_mapping(mapping)
    if mapping is not None:
        if max_shard_size is not None:
            raise ValueError("give fqn_to_index_mapping or max_shard_size, not both")
        missing = [n for n in mapping if n not in table]
        if missing:
            raise ValueError(
                f"{where}: fqn_to_index_mapping names tensors the checkpoint lacks: "
                f"{missing[:5]!r}{' ...' if len(missing) > 5 else ''}"
            )
        unplaced = [n for n in names if n not in mapping]
        if unplaced:
            raise ValueError(
                f"{where}: tensors not in fqn_to_index_mapping: "
                f"{unplaced[:5]!r}{' ...' if len(unplaced) > 5 else ''}"
            )
        last = max(mapping.values(), default=1)
        by_index: Dict[int, List[Tensor]] = {}
        for n in names:
            by_index.setdefault(mapping[n], []).append(table[n])
        return [Output(i, last, by_index[i]) for i in sorted(by_index)]
    if max_shard_size is not None:
        limit = parse_size(max_shard_size, "max_shard_size")
        if limit <= 0:
            raise ValueError(f"max_shard_size must be positive, got {max_shard_size!r}")
        groups = plan_shards({n: table[n].nbytes for n in names}, limit)
    else:
        groups = [names]
    return [Output(i, len(groups), [table[n] for n in g]) for i, g in enumerate(groups, start=1)]


def _byte_shape(t: Tensor, shape: Tuple[int, ...], where: str) -> Tuple[int, ...]:
    """``shape`` of ``t``'s dtype with its last dimension counted in bytes."""
    bits = FACTS[t.dtype]["bits"]
    if not shape:
        return (bits // 8,)
    if shape[-1] * bits % 8:
        raise rule_error(
            "dcp-chunks",
            where,
            f"tensor {t.name!r}: a chunk of {t.dtype} does not start or end on a byte",
            t.name,
        )
    return tuple(shape[:-1]) + (shape[-1] * bits // 8,)


class Part:
    """A non-empty chunk of a tensor as the assembly reads it: its open file,
    its shape and offsets in bytes (:func:`_byte_shape`)."""

    def __init__(self, raw: Any, name: str, shape: Tuple[int, ...], offsets: Tuple[int, ...]):
        self.raw = raw
        self.name = name
        self.shape = shape
        self.offsets = offsets
        self.row = math.prod(shape[1:])
        # An open file's rows go to the writer as ranges of it: it reads a local file's in
        # place, an object's through its own buffer (TensorWriter.write_parts).
        self.ranged = isinstance(raw, RawFile)

    def read_rows(self, first: int, out: np.ndarray) -> None:
        """Reads the chunk's rows from ``first`` (of its own) into ``out``,
        as many as it holds bytes for."""
        self.raw.read_range_into(self.name, first * self.row, out.reshape(-1))

    def rows(self, first: int, count: int) -> TensorRange:
        """``count`` of the chunk's rows from ``first`` (of its own) as a
        range of its file, a part of :meth:`fastst.TensorWriter.write_parts`."""
        return TensorRange(self.raw, self.name, first * self.row, count * self.row)


def parts(t: Tensor, files: Dict[str, Any]) -> List[Part]:
    """The non-empty chunks of ``t`` as :class:`Part` s."""
    out = []
    for c in t.chunks:
        if math.prod(c.shape) == 0:
            continue
        raw = files[c.file]
        shape = _byte_shape(t, c.shape, raw.name)
        offsets = _byte_shape(t, c.offsets, raw.name) if c.offsets else (0,)
        out.append(Part(raw, t.name, shape, offsets))
    return out


def pieces(t: Tensor, chunks: List[Part]) -> Iterator[Any]:
    """The bytes of the whole tensor ``t``, in order, from its ``chunks``
    (which tile it), as :meth:`fastst.TensorWriter.write_parts` takes them:
    rows one chunk of an open file holds whole as ranges of it (a local
    file's read by the writer straight into its own aligned buffer, no
    buffer here); others :data:`BLOCK` bytes of rows at a time (one row
    where a row is larger), read into a buffer reused for each, straight
    or gathered from each chunk's part of those rows through a second
    buffer of the same size."""
    full = _byte_shape(t, t.shape, t.name)
    if not t.shape:
        if chunks:
            out = np.empty(full[0], dtype=np.uint8)
            chunks[0].read_rows(0, out)
            yield out
        return
    rows, row_shape = full[0], full[1:]
    row_bytes = math.prod(row_shape)
    if rows == 0 or row_bytes == 0:
        return
    cuts = sorted(
        {0, rows} | {c.offsets[0] for c in chunks} | {c.offsets[0] + c.shape[0] for c in chunks}
    )
    step = max(1, BLOCK // row_bytes)
    buf: Optional[np.ndarray] = None
    spare: Optional[np.ndarray] = None
    for a, b in zip(cuts, cuts[1:], strict=False):
        band = [c for c in chunks if c.offsets[0] <= a < c.offsets[0] + c.shape[0]]
        whole = len(band) == 1 and band[0].shape[1:] == row_shape
        if whole and band[0].ranged:
            yield band[0].rows(a - band[0].offsets[0], b - a)
            continue
        for x in range(a, b, step):
            y = min(x + step, b)
            if buf is None:
                buf = np.empty(min(step, rows) * row_bytes, dtype=np.uint8)
            out = buf[: (y - x) * row_bytes]
            if whole:
                band[0].read_rows(x - band[0].offsets[0], out)
                yield out
                continue
            if spare is None:
                spare = np.empty_like(buf)
            grid = out.reshape((y - x,) + row_shape)
            for c in band:
                part = spare[: (y - x) * c.row].reshape((y - x,) + c.shape[1:])
                c.read_rows(x - c.offsets[0], part)
                region = tuple(
                    slice(o, o + n) for o, n in zip(c.offsets[1:], c.shape[1:], strict=True)
                )
                grid[(slice(None),) + region] = part
            yield out


def _index_bytes(outputs: List[Output]) -> Callable[[List[str]], bytes]:
    """The consolidated index as a function of the output files' names."""
    groups = [[t.name for t in o.tensors] for o in outputs]
    return index_of(groups, {t.name: t.nbytes for o in outputs for t in o.tensors}, None)


def threads(jobs: List[Tuple[Any, Tensor]], thread_count: Optional[int]) -> int:
    """Tensors written at once: ``thread_count``, or else one thread per
    :data:`THREAD_BYTES` of output, at most :data:`THREADS` and no more
    than tensors."""
    if thread_count is not None:
        return thread_count
    total = sum(t.nbytes for _w, t in jobs)
    return max(1, min(THREADS, len(jobs), -(-total // THREAD_BYTES)))


def _write_outputs(
    outputs: List[Output],
    paths: List[str],
    files: Dict[str, RawFile],
    thread_count: Optional[int],
    storage_options: Optional[Mapping[str, Any]] = None,
) -> None:
    """Writes each output to its path (the staged name; or the URL of an object of this
    save's own, a multipart upload completed at the end), whole or not at all."""
    writers: List[TensorWriter] = []
    try:
        for o, path in zip(outputs, paths, strict=True):
            layout = {t.name: (t.dtype, t.shape) for t in o.tensors}
            if is_url(path):
                writers.append(open_writer(path, layout, storage_options=storage_options))
            else:
                writers.append(open_writer(path, layout, durable=True))
        # The files' tensors taken in turn: writes into a file's holes hold its inode's lock on
        # some file systems (ext4), so threads on different files keep more writes in flight.
        jobs = [
            (w, o.tensors[i])
            for i in range(max((len(o.tensors) for o in outputs), default=0))
            for w, o in zip(writers, outputs, strict=True)
            if i < len(o.tensors)
        ]
        left = {id(w): len(o.tensors) for w, o in zip(writers, outputs, strict=True)}
        lock = threading.Lock()

        def write(job: Tuple[TensorWriter, Tensor]) -> None:
            w, t = job
            w.write_parts(t.name, pieces(t, parts(t, files)))
            with lock:
                left[id(w)] -= 1
                last = left[id(w)] == 0
            if last:
                # Its file flushed, and its buffers given back, while the next files are written.
                w.close()

        run_all(write, jobs, threads(jobs, thread_count), "fastst-consolidate")
        for w in writers:
            if not w.closed:  # a file of no tensors
                w.close()
    except BaseException:
        for w in writers:
            w.abort()
        for path in paths:
            if is_url(path):
                continue  # an aborted upload leaves no object
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
        raise


def _open_input(
    input_dir: str, output_dir: str, storage_options: Optional[Mapping[str, Any]]
) -> Tuple[Dict[str, RawFile], Dict[str, Tensor]]:
    if not is_url(input_dir) and not is_url(output_dir):
        refuse_local_options(storage_options, input_dir)
    files = dcp_remote.open_checkpoint(input_dir, storage_options, "pread")
    try:
        table = chunk_table(files)
    except BaseException:
        for raw in files.values():
            raw.close()
        raise
    return files, table


def consolidate(
    input_dir: PathLike,
    output_dir: PathLike,
    fqn_to_index_mapping: Optional[Mapping[str, int]] = None,
    *,
    max_shard_size: Any = None,
    thread_count: Optional[int] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> str:
    """Turns the DCP-sharded Hugging Face checkpoint in ``input_dir`` (as
    :class:`fastst.torch.dcp.StorageWriter` or torch's
    ``HuggingFaceStorageWriter(save_distributed=True)`` write it) into whole
    tensors in ``output_dir``: ``model-00001-of-0000N.safetensors`` files and
    ``model.safetensors.index.json``, whose path is returned. ``input_dir``
    may be the URL prefix of a save to object storage (``storage_options``
    configure the store, else the environment); so may ``output_dir``, whose
    files then carry a part of this consolidation's own in their names, the
    index written last (as ``save_sharded`` to a prefix; docs/remote.md).

    ``fqn_to_index_mapping`` (tensor name -> file index from 1, naming every
    tensor) places the tensors as torch's ``consolidate_safetensors_files``
    does; without it, ``max_shard_size`` (bytes or a size such as ``"5GB"``)
    cuts shards of tensors in name order, and without either all tensors
    go to one file. ``thread_count`` tensors are written at once (None: one
    per :data:`THREAD_BYTES` of output, at most :data:`THREADS` whatever the
    cores, as the work waits on the disk). The
    output appears whole or not at all: a failure leaves ``output_dir``'s
    previous checkpoint as it was. Input whose sharding metadata or chunks do not add up raises
    :class:`fastst.ShardIndexError` (rules ``dcp-sharding-info``,
    ``dcp-chunks``)."""
    src = _folder(input_dir, "input_dir")
    dst = _folder(output_dir, "output_dir")
    files, table = _open_input(src, dst, storage_options)
    remote = UrlCommit.for_index(dst, _PREFIX, storage_options) if is_url(dst) else None
    try:
        outputs = plan_outputs(table, fqn_to_index_mapping, max_shard_size, readable(src))
        if remote is not None:
            names = [output_name(o.number, o.total, remote.part) for o in outputs]
            try:
                urls = [remote.url(n) for n in names]
                _write_outputs(outputs, urls, files, thread_count, storage_options)
            except BaseException:
                remote.discard(names)  # objects of this save's own: no index names them
                raise
        else:
            os.makedirs(dst, exist_ok=True)
            token = os.urandom(8).hex()
            staged = [staged_name(token, o.name) for o in outputs]
            _write_outputs(outputs, [os.path.join(dst, s) for s in staged], files, thread_count)
    finally:
        for raw in files.values():
            raw.close()
    if remote is not None:
        return _commit_remote(remote, outputs, names)
    return commit_staged(dst, _PREFIX, staged, [o.name for o in outputs], _index_bytes(outputs))


def _commit_remote(remote: UrlCommit, outputs: List[Output], names: List[str]) -> str:
    """The commit of a consolidation to a URL prefix: the index naming ``names`` (objects of
    this save's own, every one uploaded), last, then what no index names any more."""
    prefixes = {_PREFIX}
    return remote.commit(_index_bytes(outputs)(names), names, lambda n: own_shard(n, prefixes))


def consolidate_on_every_rank(
    input_dir: PathLike,
    output_dir: PathLike,
    fqn_to_index_mapping: Optional[Mapping[str, int]] = None,
    *,
    max_shard_size: Any = None,
    thread_count: Optional[int] = None,
    process_group: Any = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> Optional[str]:
    """:func:`consolidate` with the output files split among the ranks of
    ``process_group`` (the default group when None): every rank calls it,
    rank ``r`` writes the files whose position in the plan is ``r`` modulo
    the group's size, and rank 0 commits once every rank wrote its files
    (the index path is returned there, None elsewhere). A rank that fails
    makes every rank raise, and nothing is committed. ``storage_options``
    as for :func:`consolidate` (a URL input or output). Outside a process
    group it is :func:`consolidate`."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return consolidate(
            input_dir,
            output_dir,
            fqn_to_index_mapping,
            max_shard_size=max_shard_size,
            thread_count=thread_count,
            storage_options=storage_options,
        )
    src = _folder(input_dir, "input_dir")
    dst = _folder(output_dir, "output_dir")
    rank = dist.get_rank(process_group)
    world = dist.get_world_size(process_group)
    nccl = dist.get_backend(process_group) == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    error: Optional[BaseException] = None
    remote: Optional[UrlCommit] = None
    seed = os.urandom(8)
    if is_url(dst) and rank == 0:  # rank 0 chooses the part of this save's own, for all
        try:
            remote = UrlCommit.for_index(dst, _PREFIX, storage_options)
            seed = bytes.fromhex(remote.part) + seed[4:]
        except Exception as exc:  # every rank learns of it below
            error = exc
    token_bytes = torch.tensor(list(seed), dtype=torch.uint8, device=device)
    dist.broadcast(token_bytes, group=process_group, group_src=0)
    token = bytes(token_bytes.cpu().tolist()).hex()
    staged: List[str] = []
    names: List[str] = []
    outputs: List[Output] = []
    mine: List[str] = []
    try:
        if error is not None:
            raise error
        if is_url(dst) and remote is None:
            remote = UrlCommit.for_index(dst, _PREFIX, storage_options, part=token[:8])
        files, table = _open_input(src, dst, storage_options)
        try:
            outputs = plan_outputs(table, fqn_to_index_mapping, max_shard_size, readable(src))
            share = [i for i in range(len(outputs)) if i % world == rank]
            if remote is not None:
                names = [output_name(o.number, o.total, remote.part) for o in outputs]
                mine = [remote.url(names[i]) for i in share]
            else:
                staged = [staged_name(token, o.name) for o in outputs]
                os.makedirs(dst, exist_ok=True)
                mine = [os.path.join(dst, staged[i]) for i in share]
            _write_outputs([outputs[i] for i in share], mine, files, thread_count, storage_options)
        finally:
            for raw in files.values():
                raw.close()
    except Exception as exc:  # every rank learns of it below
        error = exc
    failed = torch.tensor([0 if error is None else 1], dtype=torch.int32, device=device)
    dist.all_reduce(failed, group=process_group)
    if failed.item():
        # Another rank failed (or this one): this rank's files are not wanted.
        if remote is not None:
            remote.discard([names[i] for i in range(len(names)) if i % world == rank])
        else:
            for path in mine:
                try:
                    os.remove(path)
                except FileNotFoundError:
                    pass
        if error is not None:
            raise error
        raise RuntimeError(f"{dst}: consolidation failed on another rank; nothing was committed")
    result: Optional[str] = None
    if rank == 0:
        try:
            if remote is not None:
                result = _commit_remote(remote, outputs, names)
            else:
                final = [o.name for o in outputs]
                result = commit_staged(dst, _PREFIX, staged, final, _index_bytes(outputs))
        except Exception as exc:
            error = exc
    committed = torch.tensor([0 if error is None else 1], dtype=torch.int32, device=device)
    dist.all_reduce(committed, group=process_group)
    if error is not None:
        raise error
    if committed.item():
        raise RuntimeError(f"{dst}: the commit on rank 0 failed")
    return result
