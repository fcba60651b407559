"""Where the memory of an owned load starts, so that direct reads land in place.

An owned load (``copy=True``, a dtype conversion) gives each tensor memory of
its own; :func:`placement` says at which alignment, and at which offset
modulo it, that memory starts (a backend's ``empty`` honours it).
"""

from __future__ import annotations

from .._frameworks import Placement

#: Owned memory starts at a multiple of this many bytes (as torch's
#: allocator gives; numpy's gives 16)...
OWNED_ALIGN = 64
#: ... except owned copies of at least ``PLACED`` bytes, which sit at their
#: file offset modulo ``PAGE`` (where the reference's views sit, modulo 64):
#: a cold load's direct reads, whole disk blocks, then land in place.
PLACED = 1 << 20
PAGE = 4096


def placement(nbytes: int, copy: bool, offset: int = 0, itemsize: int = 1) -> Placement:
    """Where the owned destination of ``nbytes`` bytes of a tensor at file
    offset ``offset`` starts: a large copy (``copy`` False: a conversion)
    at ``offset`` modulo :data:`PAGE`, when that keeps its elements of
    ``itemsize`` bytes aligned; anything else at a multiple of
    :data:`OWNED_ALIGN`."""
    if copy and nbytes >= PLACED and offset % itemsize == 0:
        return PAGE, offset % PAGE
    return OWNED_ALIGN, 0
