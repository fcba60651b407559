"""The rules a sharded checkpoint's index and its shards agree on, checked by one walk.

One walk (:func:`check_shards`) over an index's ``weight_map`` and the
tensor tables of the shards it names reports each broken rule, in order, as
a :class:`ShardProblem` to a sink, as the core's ``validate/`` does for one
file: the reader (:class:`fastst._sources.sharded.ShardedFile`) raises the
first (:meth:`ShardProblem.error`, a ``ShardIndexError``); ``fastst verify``
(``fastst.tools.checkpoint_verify``) collects them all as findings. The
rules, in the order they are reported:

1. every entry names a file inside the checkpoint, in the index's order
   (``index-shape``, ``shard-path``: :func:`fastst._sources.folders.placements`
   walks the entries through :func:`~fastst._sources.folders.shard_problem`,
   or :func:`~fastst._sources.folders.object_problem` for a remote index);
2. every shard named, in the order the index first names it, is there
   (``shard-missing``) and holds every tensor the index places in it
   (``shard-lacks-tensor``); a shard whose table cannot be read is skipped
   (its own errors say why);
3. every shard read holds only tensors the index places in it: the others
   are ``shard-extra-tensor`` (no other shard holds them) or, one problem
   each, ``shard-duplicate-tensor`` (another shard holds it too).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Collection, Dict, List, Optional, Tuple, Union

from .._errors import rule_error
from .folders import placements

#: Rules about what a shard's file holds: the reader's error names the shard.
_IN_SHARD = ("shard-lacks-tensor", "shard-extra-tensor", "shard-duplicate-tensor")


@dataclass(frozen=True)
class ShardProblem:
    """One broken rule of an index against its shards.

    ``rule``: its id; ``message``: the reader's text (after the file's
    name); ``shard``: the index's name of the shard it is about (None: an
    entry of the index that names no usable shard); ``tensors``: the
    tensors it is about (sorted; one for an entry and for a duplicate);
    ``tensor``: the one tensor the reader's error carries (an entry's, a
    duplicate's), else None; ``why``: why an entry is refused; ``others``:
    the other shards holding a duplicate; ``placed``: where the index
    places a duplicate (the ``weight_map`` value, any JSON)."""

    rule: str
    message: str
    shard: Optional[str] = None
    tensors: Tuple[str, ...] = ()
    tensor: Optional[str] = None
    why: str = ""
    others: Tuple[str, ...] = ()
    placed: Any = None

    def error(self, index: str, shard_file: Callable[[str], str]) -> BaseException:
        """The reader's exception for this problem of the index named
        ``index``: the ``ShardIndexError`` of the rule,
        naming the shard's file (``shard_file(shard)``) when the problem is
        what the shard holds, else the index."""
        rule = self.rule
        in_shard = self.shard is not None and self.rule in _IN_SHARD
        filename = shard_file(self.shard) if in_shard and self.shard is not None else index
        return rule_error(rule, filename, self.message, self.tensor)


#: Where each problem goes: the reader's raises, verify's collects.
Sink = Callable[[ShardProblem], None]


class Table(enum.Enum):
    """What a shard's ``table`` (:func:`check_shards`) is when there is no
    list of tensors to check."""

    MISSING = "missing"  # no such file or object: shard-missing
    UNREAD = "unread"  # there, but its table cannot be read: its own errors say why


#: ``table(shard, placed)``: the names of the tensors the shard ``shard``
#: holds (``placed``: those the index places in it), or a :class:`Table`.
Tables = Callable[[str, List[str]], Union[Collection[str], Table]]


def check_shards(
    folder: Optional[str], weight_map: Dict[Any, Any], table: Tables, sink: Sink
) -> Dict[str, List[str]]:
    """Reports to ``sink`` every problem of the index in ``folder`` (None:
    a remote index) whose ``weight_map`` is given against the shards it
    names, whose tables ``table`` gives (called once per shard, in order;
    an exception it raises ends the walk), in the order of the module's
    rules; returns :func:`fastst._sources.folders.placements`."""

    def refused(rule: str, message: str, tensor: str, why: str) -> None:
        sink(ShardProblem(rule, message, tensors=(tensor,), tensor=tensor, why=why))

    placed = placements(folder, weight_map, refused)
    held: Dict[str, List[str]] = {}  # the tensors of each shard read
    holders: Dict[str, List[str]] = {}  # the shards holding each tensor
    for shard, listed in placed.items():
        present = table(shard, listed)
        if isinstance(present, Table):
            if present is Table.MISSING:
                sink(
                    ShardProblem(
                        "shard-missing",
                        f"shard {shard!r} listed in the index is missing",
                        shard=shard,
                        tensors=tuple(listed),
                    )
                )
            continue
        held[shard] = list(present)
        for name in held[shard]:
            holders.setdefault(name, []).append(shard)
        lacking = sorted(set(listed) - set(held[shard]))
        if lacking:
            sink(
                ShardProblem(
                    "shard-lacks-tensor",
                    f"tensors the index places in this shard are not in it: {lacking[:5]}",
                    shard=shard,
                    tensors=tuple(lacking),
                )
            )
    for shard, names in held.items():
        stray = sorted(n for n in names if weight_map.get(n) != shard)
        only_here = [n for n in stray if len(holders[n]) == 1]
        if only_here:
            sink(
                ShardProblem(
                    "shard-extra-tensor",
                    f"shard holds tensors the index does not place in it: {only_here[:5]}",
                    shard=shard,
                    tensors=tuple(only_here),
                )
            )
        for name in (n for n in stray if len(holders[n]) > 1):
            others = tuple(s for s in holders[name] if s != shard)
            where = weight_map.get(name)
            sink(
                ShardProblem(
                    "shard-duplicate-tensor",
                    f"shard holds tensors the index does not place in it: {[name]} (also "
                    f"stored in {', '.join(repr(o) for o in others)}; the index places it "
                    f"in {where!r})",
                    shard=shard,
                    tensors=(name,),
                    tensor=name,
                    others=others,
                    placed=where,
                )
            )
    return placed
