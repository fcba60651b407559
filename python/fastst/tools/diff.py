"""Comparing two files or checkpoints tensor by tensor, as ``fastst diff`` reports it.

:func:`fastst.tools.inspect.diff` reports the same. The values are compared
by the core (``diff_buffers``: bytes first, then element by element where
they differ, with the change profile, in one pass over both on several
threads, without the GIL) straight from the mapped files; ``values=False``
compares the headers and metadata only."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple, Union, cast

from .. import _fastst
from .._fastst.read import DEFAULT_HEADER_CAP
from .._paths import os_path as _path
from .._paths import shown
from .._sources.opener import open_source
from . import results
from .stats import layer_of

__all__ = ["diff"]

PathLike = Union[str, "os.PathLike[str]"]


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
    values: bool = True,
) -> results.DiffReport:
    """Compares ``a`` and ``b`` (files, index files or folders holding one).

    Returns ``{"a", "b", "identical", "tensors", "only_in_a", "only_in_b",
    "dtype_changed", "shape_changed", "identical_tensors", "different",
    "metadata"}``:

    - ``tensors``: how many names both hold; ``only_in_a``/``only_in_b``:
      names one side lacks (sorted);
    - ``dtype_changed``/``shape_changed``: ``{"name", "a", "b"}`` for names
      whose dtype (or, same dtype, shape) differs; a dtype change of the
      same shape also has the values compared as float64: ``differing``,
      ``max_abs``, ``rel_l2`` and ``cosine`` (below);
    - ``identical_tensors``: how many tensors of the same dtype and shape
      hold byte-identical data;
    - ``different``: for the others, ``{"name", "dtype", "shape",
      "elements", "differing", "max_abs", "max_rel"}``: elements whose
      values differ (NaN against NaN and -0 against +0 count as equal, so
      ``differing`` can be 0 when only such bits changed), the largest
      absolute difference and the largest ``|a-b| / max(|a|, |b|)``
      (None for BOOL, C64 and 8/6/4-bit floats, compared bit for bit), and
      the change profile over the pairs of finite values: ``rel_l2``
      (``||a - b|| / ||a||``, None when ``||a||`` is 0) and ``cosine``
      (``a . b / (||a|| ||b||)``, None when a norm is 0), summed in float64;
    - ``layers``: per numbered block (``model.layers.N``, in order)
      ``{"layer", "tensors", "changed", "max_rel_l2"}``: names both hold,
      how many differ in any way, the largest ``rel_l2`` among them;
    - ``metadata``: ``only_in_a``, ``only_in_b`` and ``changed`` (``[a, b]``)
      keys of ``__metadata__`` (the first shard's for a checkpoint);
    - ``identical``: nothing above differs (the files may still differ in
      layout: tensor order, padding, header spelling);
    - ``values_compared``: ``values``. Without values no tensor data is
      read: ``identical_tensors`` is 0, ``different`` empty, and
      ``identical`` speaks of names, dtypes, shapes and metadata only.
    """
    pa, pb = _path(a), _path(b)
    fa = open_source(pa, "mmap", header_cap)
    try:
        fb = open_source(pb, "mmap", header_cap)
        try:
            return _compare(pa, pb, fa, fb, threads, values)
        finally:
            fb.close()
    finally:
        fa.close()


def _compare(pa: str, pb: str, fa: Any, fb: Any, threads: int, values: bool) -> results.DiffReport:
    keys_a, keys_b = set(fa.keys()), set(fb.keys())
    common = [n for n in fa.offset_keys() if n in keys_b]
    dtype_changed: List[Dict[str, Any]] = []
    shape_changed: List[Dict[str, Any]] = []
    different: List[Dict[str, Any]] = []
    same = 0
    for name in common:
        dtype_a, shape_a, _, _ = fa.info(name)
        dtype_b, shape_b, _, _ = fb.info(name)
        if tuple(shape_a) != tuple(shape_b) and dtype_a == dtype_b:
            shape_changed.append({"name": name, "a": list(shape_a), "b": list(shape_b)})
            continue
        if dtype_a != dtype_b:
            change: Dict[str, Any] = {"name": name, "a": dtype_a, "b": dtype_b}
            dtype_changed.append(change)
            if values and tuple(shape_a) == tuple(shape_b):
                found = _values(fa, fb, name, dtype_a, dtype_b, threads)
                if found is not None:
                    change.update({k: found[k] for k in _PROFILE})
            continue
        if not values:
            continue
        found = _values(fa, fb, name, dtype_a, dtype_b, threads)
        if found is not None and found["identical"]:
            same += 1
            continue
        elements = 1
        for d in shape_a:
            elements *= d
        got = found or {}
        different.append(
            {
                "name": name,
                "dtype": dtype_a,
                "shape": list(shape_a),
                "elements": elements,
                "differing": got.get("differing", 0),
                "max_abs": got.get("max_abs"),
                "max_rel": got.get("max_rel"),
                "rel_l2": got.get("rel_l2"),
                "cosine": got.get("cosine"),
            }
        )
    metadata = _metadata_diff(fa.metadata(), fb.metadata())
    only_a = sorted(keys_a - keys_b)
    only_b = sorted(keys_b - keys_a)
    identical = not (
        only_a or only_b or dtype_changed or shape_changed or different or any(metadata.values())
    )
    report = {
        "a": shown(pa),
        "b": shown(pb),
        "identical": identical,
        "values_compared": values,
        "tensors": len(common),
        "only_in_a": only_a,
        "only_in_b": only_b,
        "dtype_changed": dtype_changed,
        "shape_changed": shape_changed,
        "identical_tensors": same,
        "different": different,
        "layers": _layers(common, dtype_changed + shape_changed + different),
        "metadata": metadata,
    }
    return cast(results.DiffReport, report)


_PROFILE = ("differing", "max_abs", "rel_l2", "cosine")


def _values(
    fa: Any, fb: Any, name: str, dtype_a: str, dtype_b: str, threads: int
) -> Optional[Dict[str, Any]]:
    """The core's comparison of one tensor's values (None when the two sides
    cannot be compared value by value: C64 against another kind)."""
    buf_a = fa.tensor(name)[0]
    buf_b = fb.tensor(name)[0]
    try:
        return _fastst.inspect.diff_buffers(
            buf_a, buf_b, dtype_a, threads, dtype_b=dtype_b, profile=True
        )
    except ValueError:
        return None


def _layers(common: List[str], changed: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per numbered block: names both hold, how many changed, the largest
    relative L2 change among them."""
    by_name = {c["name"]: c for c in changed}
    layers: Dict[Tuple[str, int], Dict[str, Any]] = {}
    for name in common:
        found = layer_of(name)
        if found is None:
            continue
        block, n, _ = found
        layer = layers.setdefault(
            (block, n), {"layer": f"{block}.{n}", "tensors": 0, "changed": 0, "max_rel_l2": None}
        )
        layer["tensors"] += 1
        change = by_name.get(name)
        if change is not None:
            layer["changed"] += 1
            rel = change.get("rel_l2")
            if rel is not None and (layer["max_rel_l2"] is None or rel > layer["max_rel_l2"]):
                layer["max_rel_l2"] = rel
    return [layers[k] for k in sorted(layers)]
