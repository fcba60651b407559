"""Charts in text: sparklines and horizontal bars, in Unicode block characters or ASCII.

Unicode uses the block characters ``▁▂▃▄▅▆▇█``; ASCII is used when the
output cannot show them (``--ascii``, or an output encoding other than
UTF-8). Every chart is sized to the columns it is given."""

from __future__ import annotations

import codecs
import math
from typing import Any, List, Optional, Sequence

__all__ = ["unicode_ok", "resample", "sparkline", "bar"]

_LEVELS = "▁▂▃▄▅▆▇█"
_ASCII_LEVELS = "_.-:=+*#"
_EIGHTHS = " ▏▎▍▌▋▊▉"


def unicode_ok(stream: Any) -> bool:
    """Whether ``stream`` writes UTF-8 (else charts use ASCII)."""
    encoding = getattr(stream, "encoding", None)
    if not encoding:
        return False
    try:
        return codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        return False


def resample(values: Sequence[float], columns: int, merge: str = "sum") -> List[float]:
    """``values`` in at most ``columns`` columns: neighbours merged (their
    ``sum`` for counts, their ``max`` for a profile) when there are more."""
    n = len(values)
    if n <= columns or columns <= 0:
        return list(values)
    out = []
    for i in range(columns):
        group = values[i * n // columns : (i + 1) * n // columns]
        out.append(sum(group) if merge == "sum" else max(group))
    return out


def sparkline(
    values: Sequence[Optional[float]],
    columns: Optional[int] = None,
    *,
    ascii: bool = False,
    merge: str = "sum",
    relative: bool = False,
) -> str:
    """One character per value (merged down to ``columns``), its height in
    proportion to the largest; zero (and None, NaN) is a blank, any other
    value at least the lowest level. ``relative``: heights from the smallest
    value (the lowest level) to the largest (a profile), blanks only for
    missing values."""
    levels = _ASCII_LEVELS if ascii else _LEVELS
    top: Optional[float] = None
    if relative:
        known = [v is not None and math.isfinite(v) for v in values]
        clean = [
            float(v) if k and v is not None else 0.0 for v, k in zip(values, known, strict=True)
        ]
        low = min((v for v, k in zip(clean, known, strict=True) if k), default=0.0)
        step = (max(clean, default=0.0) - low) / (len(levels) - 1)
        if step <= 0:  # flat: every known value at the lowest level
            step, top = 1.0, float(len(levels))
        clean = [v - low + step if k else 0.0 for v, k in zip(clean, known, strict=True)]
    else:
        clean = [float(v) if v is not None and v > 0 and math.isfinite(v) else 0.0 for v in values]
    if columns is not None:
        clean = resample(clean, columns, merge)
    top = max(clean, default=0.0) if top is None else top
    out = []
    for v in clean:
        if v <= 0 or top <= 0:
            out.append(" ")
        else:
            out.append(levels[max(0, math.ceil(v / top * len(levels)) - 1)])
    return "".join(out)


def bar(value: float, top: float, columns: int, *, ascii: bool = False) -> str:
    """A horizontal bar ``value / top`` of ``columns`` long, to an eighth of
    a column in Unicode (any non-zero value shows at least a sliver)."""
    if top <= 0 or value <= 0 or columns <= 0:
        return ""
    if ascii:
        return "#" * max(1, round(value / top * columns))
    eighths = max(1, round(value / top * columns * 8))
    return "█" * (eighths // 8) + _EIGHTHS[eighths % 8].strip()
