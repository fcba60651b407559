"""Every ``FASTST_*`` environment variable the Python package reads, and the one size grammar.

Sizes (``max_shard_size=``, ``fastst convert --max-shard-size``,
``FASTST_INDEX_CAP``, ``FASTST_PREFETCH_BUDGET``, ``FASTST_READ_AHEAD_BUDGET``,
``FASTST_REMOTE_PART_SIZE``) are read by one grammar, the core's (``parse_size`` in
``rust/fastst-core/src/size.rs``, reached through :func:`parse_size`), so one
string means the same number of bytes everywhere: a plain number is bytes;
``KB``/``MB``/``GB``/``TB`` are powers of 1000 (as Hugging Face's
``max_shard_size`` reads them: ``"5GB"`` is 5,000,000,000 bytes);
``KiB``/``MiB``/``GiB``/``TiB`` and the bare letters ``K``/``M``/``G``/``T``
are powers of 1024 (as ``dd`` and the kernel read ``"512M"``). Units are read
without regard to case; a fraction is allowed (``"1.5GiB"``, rounded down);
blanks around the number and the unit are ignored.

The variables:

- ``FASTST_AS_SAFETENSORS``: serve ``import safetensors`` with fastst from
  start-up (read by the ``.pth`` file, :mod:`_fastst_switch`).
- ``FASTST_READ``: ``mmap`` (default) or ``pread``, how loads through the
  drop-in switch read files (:func:`read_backend`).
- ``FASTST_READ_AHEAD``: ``0``/``off``/``false``/``no`` turns the automatic
  read-ahead of loads off (:func:`read_ahead_enabled`).
- ``FASTST_READ_AHEAD_BUDGET``: a size, the most the read-ahead runs ahead
  of its consumer (:func:`read_ahead_budget`; half the memory available
  when unset).
- ``FASTST_PREFETCH_BUDGET``: a size, the bytes all prefetch loaders of the
  process together hold landed and not yet taken (:func:`prefetch_budget`;
  1 GiB when unset).
- ``FASTST_PREFETCH_THREADS``: the most reader threads all prefetch loaders
  of the process run at once (:func:`prefetch_threads`; 8 when unset).
- ``FASTST_INDEX_CAP``: a size, the most bytes an index file may hold
  (:func:`index_cap`).
- ``FASTST_DROPIN_URLS``: ``1``/``true``/``yes``/``on`` lets names holding
  URLs be read as URLs while the drop-in switch is on; without it they are
  paths there, as for the reference package (:func:`reads_urls`).

- ``FASTST_REMOTE_CONCURRENCY``: requests in flight per object of a store.
- ``FASTST_REMOTE_PART_SIZE``: a size, the bytes of one ranged request.
- ``FASTST_REMOTE_DEADLINE``: how long a read of a store may take (seconds,
  or a duration such as ``90s`` or ``5m``; 120 s by default) for every
  ``FASTST_REMOTE_CONCURRENCY`` requests it needs; an open or a listing
  once; an upload for every ``FASTST_REMOTE_CONCURRENCY`` parts, its waits
  on the store together. Past it the read or the upload fails with
  ``TimeoutError`` (rule ``remote-deadline``).

The three ``FASTST_REMOTE_*`` variables are read by the compiled
object-store client (``rust/fastst-remote/src/options.rs``), each also as
the lower-case ``storage_options`` key of its name, which wins; sizes
through the same grammar.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

import _fastst_switch as _switch

from ._fastst import text as _fastst_text

AS_SAFETENSORS_ENV = "FASTST_AS_SAFETENSORS"
READ_ENV = "FASTST_READ"
READ_AHEAD_ENV = "FASTST_READ_AHEAD"
READ_AHEAD_BUDGET_ENV = "FASTST_READ_AHEAD_BUDGET"
PREFETCH_BUDGET_ENV = "FASTST_PREFETCH_BUDGET"
PREFETCH_THREADS_ENV = "FASTST_PREFETCH_THREADS"
INDEX_CAP_ENV = "FASTST_INDEX_CAP"
REMOTE_CONCURRENCY_ENV = "FASTST_REMOTE_CONCURRENCY"
REMOTE_PART_SIZE_ENV = "FASTST_REMOTE_PART_SIZE"
REMOTE_DEADLINE_ENV = "FASTST_REMOTE_DEADLINE"
DROPIN_URLS_ENV = "FASTST_DROPIN_URLS"

#: The read modes ``FASTST_READ`` takes (``safe_open``'s back ends).
READ_MODES = ("mmap", "pread")

#: The most bytes an index file may hold when ``FASTST_INDEX_CAP`` is unset.
DEFAULT_INDEX_CAP = 64 << 20


def parse_size(size: object, what: str = "size") -> int:
    """Bytes from an ``int`` or a size string (the grammar above), for the
    setting named ``what``; ``0`` is a size. A negative int, an unknown unit
    or text that is not a number is a ValueError naming ``what``; any type
    other than ``int`` or ``str`` (``bool`` included) a TypeError."""
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise TypeError(
            f"{what} must be an int or a size string such as '5GB' or '512MiB', "
            f"got {type(size).__name__}"
        )
    if isinstance(size, int):
        value = size
    else:
        try:
            value = _fastst_text.parse_size(size)
        except ValueError as exc:
            raise ValueError(f"{what}: cannot read {size!r} as a size: {exc}") from None
    if value < 0:
        raise ValueError(f"{what} must not be negative, got {size!r}")
    return value


def _env_size(name: str) -> Optional[int]:
    """The size in environment variable ``name``; None when unset or empty."""
    text = os.environ.get(name, "").strip()
    return parse_size(text, name) if text else None


def index_cap() -> int:
    """The most bytes an index file may hold: ``FASTST_INDEX_CAP`` when
    set, else 64 MiB."""
    cap = _env_size(INDEX_CAP_ENV)
    return DEFAULT_INDEX_CAP if cap is None else cap


def read_ahead_enabled() -> bool:
    """False when ``FASTST_READ_AHEAD`` turns the automatic read-ahead off."""
    value = os.environ.get(READ_AHEAD_ENV, "1").strip().lower()
    return value not in ("0", "off", "false", "no")


def read_ahead_budget() -> Optional[int]:
    """``FASTST_READ_AHEAD_BUDGET`` in bytes; None when unset."""
    return _env_size(READ_AHEAD_BUDGET_ENV)


def prefetch_budget() -> Optional[int]:
    """``FASTST_PREFETCH_BUDGET`` in bytes; None when unset."""
    return _env_size(PREFETCH_BUDGET_ENV)


#: Reader threads of every prefetch loader of the process together, when
#: ``FASTST_PREFETCH_THREADS`` is unset.
DEFAULT_PREFETCH_THREADS = 8


def prefetch_threads() -> int:
    """The most reader threads all prefetch loaders of the process run at
    once: ``FASTST_PREFETCH_THREADS`` (a positive integer) when set, else 8."""
    text = os.environ.get(PREFETCH_THREADS_ENV, "").strip()
    if not text:
        return DEFAULT_PREFETCH_THREADS
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{PREFETCH_THREADS_ENV} must be a positive integer, got {text!r}")
    return int(text)


#: True while the drop-in hook serves ``safetensors`` (set by
#: :mod:`fastst._dropin.hook`, so loads need not import the hook to ask).
dropin_active = False


def set_dropin_active(active: bool) -> None:
    """Records whether the drop-in hook serves ``safetensors`` (called by
    :mod:`fastst._dropin.hook` as it installs and removes itself)."""
    global dropin_active
    dropin_active = active


def dropin_on() -> bool:
    """True while ``import safetensors`` gives fastst: the hook is installed,
    or the start-up half of ``FASTST_AS_SAFETENSORS`` is waiting for the
    first ``import safetensors``."""
    if dropin_active:
        return True
    boot = sys.modules.get("_fastst_boot")
    return boot is not None and bool(boot.pending())


#: True while the ``fastst`` command runs (set by :func:`fastst.cli.main`):
#: the URLs on its command line are its user's own, read as URLs even
#: while the drop-in switch is on.
command_running = False


def reads_urls() -> bool:
    """Whether a name holding a URL (``s3://``, ``https://``...) is read as
    one. Always, except while the drop-in switch is on (:func:`dropin_on`):
    then every name given to fastst's reading and writing functions is a
    path, as the reference package takes it, so that a program passing a
    name its own user chose to ``safetensors`` makes no request to any
    host. ``FASTST_DROPIN_URLS`` holding a true value (``1``, ``true``,
    ``yes``, ``on``; any case) opts in to URLs there; the ``fastst``
    command reads the URLs it is given."""
    if command_running or not dropin_on():
        return True
    value = os.environ.get(DROPIN_URLS_ENV)
    return value is not None and value.strip().lower() in _switch.TRUE_VALUES


def read_backend(backend: str) -> str:
    """The back end of a load that asks for ``backend``.

    While the drop-in switch is on, ``FASTST_READ=pread`` turns the memory
    map (the reference's default, which loaders such as transformers also
    pass explicitly) into positioned reads; ``mmap``, empty or unset keep it
    (values compared without case and surrounding blanks). Any other value
    raises ValueError naming the variable and its values, at the first load
    that reads it. With the switch off, or ``backend="pread"``, the caller's
    choice stands."""
    if not dropin_on():
        return backend
    value = os.environ.get(READ_ENV, "").strip().lower()
    if value not in ("", *READ_MODES):
        raise ValueError(
            f"{READ_ENV}={os.environ[READ_ENV]!r} is not a read mode: "
            f"use {' or '.join(READ_MODES)} (default mmap)"
        )
    return value if value and backend == "mmap" else backend
