"""What each tensor's values look like, as ``fastst stats`` prints them.

Min, max, mean, std, abs-max, NaN/Inf/zero counts and a histogram.

The core computes them (``stats_file``) in one pass over each file's bytes,
on every core, without the GIL, with positioned reads (a file that shrinks
underneath gives an error, never a crash). Kinds of at most 16 bits (BOOL,
8/16-bit integers, F16, BF16, the F8/F6/F4 kinds) are counted value by
value, so every statistic and the histogram are exact; F32/F64/C64 are summed
in float64 (blocks two-pass, merged with Chan's formula) and the 32/64-bit
integers exactly in 128 bits, their histogram binned by each value cut to 8
significant bits (``histogram["exact"]`` is then False)."""

from __future__ import annotations

import fnmatch
import json
import os
import re
from typing import Dict, List, Optional, Tuple, Union, cast

from .. import _fastst
from .._fastst.read import DEFAULT_HEADER_CAP
from .._paths import os_path as _path
from .._paths import progress_label
from . import results
from .checkpoint import _strict_index, iter_inputs, shard_location
from .layers import DIGITS

__all__ = ["tensor_stats", "stats_file", "stats_checkpoint", "layer_of", "MAX_BINS"]

PathLike = Union[str, "os.PathLike[str]"]

#: Most histogram bins (``bins`` outside ``1..MAX_BINS`` is a ValueError).
MAX_BINS = 4096


#: A numbered block's name: its first number between dots of at most
#: :data:`fastst.tools.layers.DIGITS` digits (a longer one is text).
_LAYER = re.compile(rf"(.*?)\.(\d{{1,{DIGITS}}})\.(.+)", re.DOTALL)


def layer_of(name: str) -> Optional[Tuple[str, int, str]]:
    """``(block, n, rest)`` for a tensor of a numbered block, split at its
    first numeric component: ``model.layers.3.mlp.weight`` ->
    ``("model.layers", 3, "mlp.weight")``; None for other names."""
    m = _LAYER.fullmatch(name)
    return (m[1], int(m[2]), m[3]) if m else None


def _file(
    path: str,
    names: Optional[List[str]],
    shard: Optional[str],
    bins: int,
    threads: int,
    header_cap: int,
    progress: bool,
) -> List[results.TensorStats]:
    if not 1 <= bins <= MAX_BINS:
        raise ValueError(f"bins must be 1 to {MAX_BINS:,}, not {bins!r}")
    rows = _fastst.inspect.stats_file(
        path,
        names=names,
        bins=bins,
        threads=threads,
        header_cap=header_cap,
        progress=progress_label(path, progress),
    )
    for row in rows:
        row["shard"] = shard
    return cast(List[results.TensorStats], rows)


def stats_file(
    path: PathLike,
    pattern: Optional[str] = None,
    *,
    bins: int = 32,
    threads: int = 0,
    header_cap: int = DEFAULT_HEADER_CAP,
    progress: bool = False,
) -> List[results.TensorStats]:
    """The statistics of one file's tensors whose names match the glob
    ``pattern`` (case-sensitive; every tensor when None), in file order."""
    p = _path(path)
    names = None
    if pattern is not None:
        table = _fastst.inspect.inspect_file(p, table=True, header_cap=header_cap)["table"]
        names = [row[0] for row in table if fnmatch.fnmatchcase(row[0], pattern)]
    return _file(p, names, None, bins, threads, header_cap, progress)


def stats_checkpoint(
    index_path: PathLike,
    pattern: Optional[str] = None,
    *,
    bins: int = 32,
    threads: int = 0,
    header_cap: int = DEFAULT_HEADER_CAP,
    progress: bool = False,
) -> List[results.TensorStats]:
    """:func:`stats_file` over a sharded checkpoint (its ``*.index.json``),
    shard after shard (sorted by name); ``shard`` names each tensor's file.
    Raises the reader's errors when the index and its shards disagree."""
    path = _path(index_path)
    shards, _meta, raw = _strict_index(path, header_cap)
    weight_map: Dict[str, str] = json.loads(raw)["weight_map"]
    out: List[results.TensorStats] = []
    for shard in shards:
        names = [
            n
            for n, f in weight_map.items()
            if f == shard and (pattern is None or fnmatch.fnmatchcase(n, pattern))
        ]
        if names:
            where = shard_location(path, shard)
            out += _file(where, names, shard, bins, threads, header_cap, progress)
    return out


def tensor_stats(
    path_or_folder: PathLike,
    pattern: Optional[str] = None,
    *,
    bins: int = 32,
    threads: int = 0,
    header_cap: int = DEFAULT_HEADER_CAP,
    progress: bool = False,
) -> List[results.TensorStats]:
    """The statistics of every tensor matching ``pattern`` in a file, a
    checkpoint (``*.index.json``) or the files and checkpoints under a folder
    (:func:`fastst.tools.inspect.iter_inputs`), one list in input order.

    Each item is a :class:`fastst.tools.results.TensorStats`. Raises what
    opening the inputs raises (``fastst.SafetensorError`` subclasses,
    ``OSError``)."""
    out: List[results.TensorStats] = []
    top = _path(path_or_folder)
    for kind, path in iter_inputs([top]):
        if kind not in ("checkpoint", "file"):
            continue
        read = stats_checkpoint if kind == "checkpoint" else stats_file
        rows = read(
            path, pattern, bins=bins, threads=threads, header_cap=header_cap, progress=progress
        )
        if kind == "file":
            if path != top:
                for row in rows:
                    row["shard"] = os.path.relpath(path, top)
        out += rows
    return out
