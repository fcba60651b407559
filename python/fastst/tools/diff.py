"""Comparing two files or checkpoints tensor by tensor: what ``fastst diff``
and :func:`fastst.tools.inspect.diff` report. The values are compared by the core
(``diff_buffers``: bytes first, then element by element where they differ,
on several threads, without the GIL) straight from the mapped files."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Union, cast

from .. import _fastst
from .._fastst import DEFAULT_HEADER_CAP
from .._source import open_raw
from . import results

__all__ = ["diff"]

PathLike = Union[str, "os.PathLike[str]"]


def _path(path: PathLike) -> str:
    p = os.fspath(path)
    return os.fsdecode(p) if isinstance(p, bytes) else p


def _metadata_diff(a: Optional[Dict[str, str]], b: Optional[Dict[str, str]]) -> Dict[str, Any]:
    a, b = a or {}, b or {}
    return {
        "only_in_a": {k: a[k] for k in a if k not in b},
        "only_in_b": {k: b[k] for k in b if k not in a},
        "changed": {k: [a[k], b[k]] for k in a if k in b and a[k] != b[k]},
    }


def diff(
    a: PathLike,
    b: PathLike,
    *,
    threads: int = 0,
    header_cap: int = DEFAULT_HEADER_CAP,
) -> results.DiffReport:
    """Compares ``a`` and ``b`` (files, index files or folders holding one).

    Returns ``{"a", "b", "identical", "tensors", "only_in_a", "only_in_b",
    "dtype_changed", "shape_changed", "identical_tensors", "different",
    "metadata"}``:

    - ``tensors``: how many names both hold; ``only_in_a``/``only_in_b``:
      names one side lacks (sorted);
    - ``dtype_changed``/``shape_changed``: ``{"name", "a", "b"}`` for names
      whose dtype (or, same dtype, shape) differs;
    - ``identical_tensors``: how many tensors of the same dtype and shape
      hold byte-identical data;
    - ``different``: for the others, ``{"name", "dtype", "shape",
      "elements", "differing", "max_abs", "max_rel"}``: elements whose
      values differ (NaN against NaN and -0 against +0 count as equal, so
      ``differing`` can be 0 when only such bits changed), the largest
      absolute difference and the largest ``|a-b| / max(|a|, |b|)``
      (None for BOOL, C64 and 8/6/4-bit floats, compared bit for bit);
    - ``metadata``: ``only_in_a``, ``only_in_b`` and ``changed`` (``[a, b]``)
      keys of ``__metadata__`` (the first shard's for a checkpoint);
    - ``identical``: nothing above differs (the files may still differ in
      layout: tensor order, padding, header spelling).
    """
    pa, pb = _path(a), _path(b)
    fa = open_raw(pa, "mmap", header_cap)
    try:
        fb = open_raw(pb, "mmap", header_cap)
        try:
            return _compare(pa, pb, fa, fb, threads)
        finally:
            fb.close()
    finally:
        fa.close()


def _compare(pa: str, pb: str, fa: Any, fb: Any, threads: int) -> results.DiffReport:
    keys_a, keys_b = set(fa.keys()), set(fb.keys())
    common = [n for n in fa.offset_keys() if n in keys_b]
    dtype_changed: List[Dict[str, Any]] = []
    shape_changed: List[Dict[str, Any]] = []
    different: List[Dict[str, Any]] = []
    same = 0
    for name in common:
        dtype_a, shape_a, _, _ = fa.info(name)
        dtype_b, shape_b, _, _ = fb.info(name)
        if dtype_a != dtype_b:
            dtype_changed.append({"name": name, "a": dtype_a, "b": dtype_b})
            continue
        if tuple(shape_a) != tuple(shape_b):
            shape_changed.append({"name": name, "a": list(shape_a), "b": list(shape_b)})
            continue
        buf_a = fa.tensor(name)[0]
        buf_b = fb.tensor(name)[0]
        found = _fastst.diff_buffers(buf_a, buf_b, dtype_a, threads)
        if found["identical"]:
            same += 1
            continue
        elements = 1
        for d in shape_a:
            elements *= d
        different.append(
            {
                "name": name,
                "dtype": dtype_a,
                "shape": list(shape_a),
                "elements": elements,
                "differing": found["differing"],
                "max_abs": found["max_abs"],
                "max_rel": found["max_rel"],
            }
        )
    metadata = _metadata_diff(fa.metadata(), fb.metadata())
    only_a = sorted(keys_a - keys_b)
    only_b = sorted(keys_b - keys_a)
    identical = not (
        only_a or only_b or dtype_changed or shape_changed or different or any(metadata.values())
    )
    report = {
        "a": pa,
        "b": pb,
        "identical": identical,
        "tensors": len(common),
        "only_in_a": only_a,
        "only_in_b": only_b,
        "dtype_changed": dtype_changed,
        "shape_changed": shape_changed,
        "identical_tensors": same,
        "different": different,
        "metadata": metadata,
    }
    return cast(results.DiffReport, report)
