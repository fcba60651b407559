"""What a load's ``progress=`` shows, decided here for every load.

``None``/``False``: nothing. A callable: called as ``(bytes_done,
bytes_total)``. ``True``: where stderr is a terminal, the core's line (a bar,
rate and ETA, drawn without the GIL); elsewhere (a Jupyter notebook, a log
file) a ``tqdm`` bar in bytes when tqdm is installed (``tqdm.auto``: the
notebook widget in Jupyter), else plain lines on stderr, one every
:data:`EVERY` seconds and one at the end, since the caller asked for
progress explicitly.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, Tuple, Union

from .._paths import progress_label

#: ``progress=`` of a load: None/False (off), True (shown, see above) or a
#: callable taking ``(bytes_done, bytes_total)``.
Progress = Union[None, bool, Callable[[int, int], Any]]

Report = Callable[[int, int], Any]

#: Seconds between two plain lines (no terminal, no tqdm).
EVERY = 5.0


def _terminal() -> bool:
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def resolve(progress: Progress, name: str) -> Tuple[Optional[Report], bool]:
    """``(callback or None, whether the core draws its terminal line)`` for a
    load of the file ``name`` given ``progress``; lines and bars name it by
    :func:`fastst._paths.progress_label` (a URL without its user part,
    query or fragment, escaped for the terminal)."""
    if progress is None or progress is False:
        return None, False
    if progress is True:
        if _terminal():
            return None, True
        try:
            from tqdm.auto import tqdm  # type: ignore[import-untyped,unused-ignore]
        except ImportError:
            return _Lines(_label(name)), False
        return _Bar(_label(name), tqdm), False
    if callable(progress):
        return progress, False
    raise TypeError(f"progress must be None, a bool or a callable, got {type(progress).__name__}")


def _label(name: str) -> str:
    return progress_label(name, True) or ""


class _Bar:
    """A tqdm bar in bytes, made at the first report, closed at the last."""

    def __init__(self, label: str, tqdm: Any) -> None:
        self.label, self.tqdm = label, tqdm
        self.bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = self.tqdm(
                total=total, desc=self.label, unit="B", unit_scale=True, unit_divisor=1024
            )
        self.bar.update(done - self.bar.n)
        if done >= total:
            self.bar.close()


def _size(n: int) -> str:
    value, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"


class _Lines:
    """Plain lines on stderr: one every :data:`EVERY` seconds, one at the end."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = self.last = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        end = done >= total
        if not end and now - self.last < EVERY:
            return
        self.last = now
        share = min(100 * done // total, 100) if total else 100
        text = f"{self.label}: {share}% of {_size(total)}"
        if end:
            text += f" in {now - self.started:.1f} s"
        try:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except (AttributeError, ValueError, OSError):
            pass  # progress is best effort
