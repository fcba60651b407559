"""The layer view of a checkpoint: tensors grouped by repeated structure.

A name such as ``model.layers.7.self_attn.q_proj.weight`` has a numeric
component of at most 18 digits (components are separated by ``.`` or ``_``, so kohya's
``lora_unet_down_blocks_0_...`` names work too); the names sharing what
comes before it (``model.layers.``) form instances (7), each with the set
of what comes after it (``.self_attn.q_proj.weight``...). Instances with
the same set are one block pattern, repeated as many times as there are
such instances: ``model.layers.{0-31}`` x 32. Nothing about any model
family is assumed: GPT-2's ``h.N.``, BERT's ``encoder.layer.N.`` and
diffusers' ``down_blocks.N.resnets.M.`` are found the same way. Names not
taken by the outermost number that repeats are tried at their next number
(``up_blocks.3.attentions.{0-2}``); what is left are the tensors that do
not repeat.
"""

from __future__ import annotations

import math
import re
from itertools import islice
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

from . import results

__all__ = ["layer_view", "span_text", "number_after", "DIGITS"]

#: (name, dtype, shape, bytes) of one tensor.
Row = Tuple[str, str, Sequence[int], int]


def _parameters(shape: Sequence[int]) -> int:
    return math.prod(shape)


def span_text(indices: Sequence[int]) -> str:
    """``0-31`` for a run, ``0,2,5`` otherwise, ``0-3,7`` mixed."""
    parts: List[str] = []
    start = prev = indices[0]
    for i in list(indices[1:]) + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(parts)


#: How many numbers of a name are tried, outermost first: real models nest
#: blocks a few deep; a hostile name holding thousands costs no more.
_DEPTH = 8
#: The most digits a block number has: a longer run of digits in a name is
#: text, not a number (names are data; Python refuses to turn more than
#: 4,300 digits into an int, and no model has 10**18 layers).
DIGITS = 18
#: A number component: digits (no leading zero, at most :data:`DIGITS`)
#: between separators.
_NUMBER = re.compile(rf"(?:(?<=[._])|^)(?:0|[1-9][0-9]{{0,{DIGITS - 1}}})(?=[._]|$)")


def number_after(name: str, prefix: str) -> Optional[int]:
    """The number ``name`` holds right after ``prefix`` (a block's), if any."""
    found = _NUMBER.match(name, len(prefix)) if name.startswith(prefix) else None
    return int(found.group()) if found else None


def layer_view(rows: Iterable[Row]) -> results.LayerView:
    """Groups ``rows`` (name, dtype, shape, bytes; in file order) into
    repeated blocks and the tensors that do not repeat (see the module's
    description); both in the order their first tensor comes."""
    table = {name: (dtype, list(shape), nbytes) for name, dtype, shape, nbytes in rows}
    place = {name: i for i, name in enumerate(table)}
    numbers = {name: [m.span() for m in islice(_NUMBER.finditer(name), _DEPTH)] for name in table}
    pending = dict.fromkeys(table, 0)  # name -> how many of its numbers were tried
    found: List[Tuple[int, results.LayerBlock]] = []
    in_blocks: Set[str] = set()
    while pending:
        # prefix -> instance number -> (name, what follows the number)
        groups: Dict[str, Dict[int, List[Tuple[str, str]]]] = {}
        for name, tried in list(pending.items()):
            spans = numbers[name]
            if tried >= len(spans):
                del pending[name]
                continue
            start, end = spans[tried]
            instances = groups.setdefault(name[:start], {})
            instances.setdefault(int(name[start:end]), []).append((name, name[end:]))
        for prefix, instances in groups.items():
            alike: Dict[FrozenSet[str], List[int]] = {}
            for index, members in instances.items():
                alike.setdefault(frozenset(s for _, s in members), []).append(index)
            for suffixes, indices in alike.items():
                names = [n for i in indices for n, _ in instances[i]]
                if len(indices) < 2:
                    for n in names:
                        pending[n] += 1
                    continue
                indices.sort()
                for n in names:
                    del pending[n]
                span = "{" + span_text(indices) + "}"
                block: results.LayerBlock = {
                    "pattern": prefix + span,
                    "prefix": prefix,
                    "indices": indices,
                    "repeats": len(indices),
                    "tensors": len(suffixes),
                    "parameters": sum(_parameters(table[n][1]) for n in names),
                    "bytes": sum(table[n][2] for n in names),
                    "dtypes": sorted({table[n][0] for n in names}),
                    "suffixes": sorted(suffixes),
                }
                in_blocks.update(names)
                found.append((min(place[n] for n in names), block))
    single: List[results.LayerTensor] = [
        {
            "name": name,
            "dtype": dtype,
            "shape": shape,
            "parameters": _parameters(shape),
            "bytes": nbytes,
        }
        for name, (dtype, shape, nbytes) in table.items()
        if name not in in_blocks
    ]
    found.sort(key=lambda pair: pair[0])
    return {"blocks": [b for _, b in found], "single": single}
