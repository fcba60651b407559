"""Basic indexes of ``get_slice``: which are accepted, and what part of a tensor one reads.

An index is built of ints, slices, ``...`` and ``None``."""

from __future__ import annotations

import operator
from typing import Any, List, Optional, Tuple

_SPECIAL = (slice, type(Ellipsis), type(None))


def check_index(index: Any) -> Any:
    """``index``, or TypeError for anything but basic indexing (the empty
    list, the reference's one list form, is ``slice(0, 0)``)."""
    if isinstance(index, list) and not index:
        # The reference's one list form: selects nothing along dimension 0.
        return slice(0, 0)
    items = index if isinstance(index, tuple) else (index,)
    for item in items:
        if isinstance(item, _SPECIAL):
            continue
        try:
            # Ints and what stands for one (numpy's integer scalars); not
            # arrays of several, which the frameworks take as fancy indexes.
            if isinstance(item, bool):
                raise TypeError
            operator.index(item)
        except TypeError:
            raise TypeError(
                "get_slice supports basic indexing only (ints, slices, ..., None); "
                f"got {type(item).__name__}"
            ) from None
    return index


def read_plan(
    index: Any, shape: Tuple[int, ...], packed_bits: int
) -> Optional[Tuple[List[Tuple[int, int, int]], Tuple[int, ...], Tuple[Any, ...]]]:
    """What a basic index reads: per dimension ``(start, count, step)``
    with a positive step, the shape of what is read, and the index that
    takes the result out of it (ints drop their dimension, ``None`` adds
    one, a negative step reverses). Packed dtypes (``packed_bits`` per
    element, else 0) read their innermost dimension whole. None for what the whole-tensor
    path must refuse: more indices than dimensions, several ``...``, ints
    out of range, zero steps, packed rows that are not whole bytes."""
    items = index if isinstance(index, tuple) else (index,)
    ellipses = sum(item is Ellipsis for item in items)
    taken = sum(item is not None and item is not Ellipsis for item in items)
    if ellipses > 1 or taken > len(shape):
        return None
    if shape and shape[-1] * packed_bits % 8:
        return None
    fill = [slice(None)] * (len(shape) - taken)
    full: List[Any] = []
    for item in items:
        full += fill if item is Ellipsis else [item]
    if not ellipses:
        full += fill
    dims: List[Tuple[int, int, int]] = []
    read: List[int] = []
    key: List[Any] = []
    axis = 0
    for item in full:
        if item is None:
            key.append(None)
            continue
        n = shape[axis]
        axis += 1
        if isinstance(item, slice):
            if item.step == 0:
                return None
            start, stop, step = item.indices(n)
            count = len(range(start, stop, step))
            whole = packed_bits and axis == len(shape)
            if whole:
                dims.append((0, n, 1))
                key.append(item)
            elif step > 0:
                dims.append((start, count, step))
                key.append(slice(None))
            else:
                dims.append((start + (count - 1) * step if count else 0, count, -step))
                key.append(slice(None, None, -1))
            read.append(n if whole else count)
        else:
            i = item.__index__()
            if not -n <= i < n:
                return None
            if packed_bits and axis == len(shape):
                dims.append((0, n, 1))
                read.append(n)
                key.append(i)
            else:
                dims.append((i % n, 1, 1))
                read.append(1)
                key.append(0)
    return dims, tuple(read), tuple(key)
