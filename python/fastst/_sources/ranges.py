"""``TensorRange``: bytes of a tensor of an open file, a part the streaming writer reads in place.

:meth:`fastst.safe_open.tensor_bytes` makes one; :meth:`fastst.TensorWriter.write_parts`
takes it beside buffers and, for a local file (or an open file object), reads its bytes
straight into the place they go (each byte copied once, by the read; no buffer in Python).
A range of an object of a store is read through a buffer of at most :data:`REMOTE_BLOCK`
bytes instead, with the store's ranged reads (which hear Ctrl-C), as reading it does.
The range is checked against its file when written (:meth:`TensorRange.checked`): the file
open, the tensor in it, the range within the tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional, Tuple

import numpy as np

from .._errors import rule_error
from .._fastst.read import RawFile
from .raw import RawSource
from .sharded import ShardedFile

__all__ = ["TensorRange", "REMOTE_BLOCK"]

#: Bytes of a range of an object of a store read at a time into the buffer a range of it
#: goes through.
REMOTE_BLOCK = 8 << 20


@dataclass(frozen=True, repr=False)
class TensorRange:
    """``length`` bytes of tensor ``tensor`` of the open file ``file``, from ``offset``
    bytes into the tensor's data: a part of :meth:`fastst.TensorWriter.write_parts`,
    read by the writer from the file in place. Made by
    :meth:`fastst.safe_open.tensor_bytes` (which checks it at once); the file must still
    be open when the range is written."""

    file: RawFile
    tensor: str
    offset: int
    length: int

    @classmethod
    def of(
        cls,
        source: RawSource,
        tensor: str,
        offset: int = 0,
        length: Optional[int] = None,
    ) -> TensorRange:
        """The range of ``tensor`` of ``source`` (an open file, or the shards of a
        checkpoint opened as one: the range is then of the shard holding ``tensor``)
        from ``offset``, ``length`` bytes long (None: to the tensor's end), checked
        (:meth:`checked`)."""
        if not isinstance(tensor, str):
            raise TypeError(f"a tensor name must be str, got {type(tensor).__name__}")
        raw = source.file_of(tensor) if isinstance(source, ShardedFile) else source
        if not isinstance(raw, RawFile):
            raise TypeError(f"a range is of an open file, not of a {type(source).__name__}")
        if length is None:
            _dtype, _shape, begin, end = raw.info(tensor)
            length = max(0, end - begin - _count(raw, tensor, "offset", offset))
        made = cls(raw, tensor, offset, length)
        made.checked()
        return made

    def __repr__(self) -> str:
        end = self.offset + self.length if isinstance(self.offset, int) else "?"
        return (
            f"<fastst.TensorRange {self.tensor!r} bytes [{self.offset}, {end}) "
            f"of {getattr(self.file, 'name', self.file)!r}>"
        )

    def checked(self) -> Tuple[RawFile, str, int, int]:
        """``(file, tensor, offset, length)``, once the file is open (rule
        ``closed-file``), holds the tensor (``tensor-not-found``) and the range lies
        within the tensor's bytes (``range-outside-tensor``, a
        :class:`fastst.SerializeError`)."""
        if not isinstance(self.file, RawFile):
            raise TypeError(f"a range is of an open file, not of a {type(self.file).__name__}")
        _dtype, _shape, begin, end = self.file.info(self.tensor)
        offset = _count(self.file, self.tensor, "offset", self.offset)
        length = _count(self.file, self.tensor, "length", self.length)
        if offset + length > end - begin:
            raise rule_error(
                "range-outside-tensor",
                self.file.name,
                f"tensor {self.tensor!r}: the range of {length} bytes at offset {offset} "
                f"runs past the tensor's end ({end - begin} bytes)",
                self.tensor,
            )
        return self.file, self.tensor, offset, length

    def parts(self) -> Iterator[Any]:
        """What the native writer takes for this range: the range itself, as
        ``(file, tensor, offset, length)``, which it reads in place; for an object of a
        store, its bytes read :data:`REMOTE_BLOCK` at a time into one buffer, reused
        (the writer copies each before asking for the next)."""
        raw, tensor, offset, length = self.checked()
        if not raw.remote:
            yield (raw, tensor, offset, length)
            return
        buf = np.empty(min(length, REMOTE_BLOCK), dtype=np.uint8)
        done = 0
        while done < length:
            out = buf[: min(length - done, REMOTE_BLOCK)]
            raw.read_range_into(tensor, offset + done, out)
            yield out
            done += len(out)


def _count(raw: RawFile, tensor: str, what: str, value: Any) -> int:
    """``value``, a range's ``what``, as a byte count: an int (TypeError otherwise), not
    negative (rule ``range-outside-tensor``)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(
            f"{raw.name}: tensor {tensor!r}: a range's {what} must be an int, "
            f"got {type(value).__name__}"
        )
    count = int(value.__index__())
    if count < 0:
        raise rule_error(
            "range-outside-tensor",
            raw.name,
            f"tensor {tensor!r}: a range's {what} must not be negative, got {count}",
            tensor,
        )
    return count
