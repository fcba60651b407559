"""Saves sharing a folder: the folder's commit lock, and the mark that says a save is alive.

Two saves may write into one folder at once (two jobs, or every rank calling save): each
writes its new files under names of its own (a token per save), and the steps that change
what the folder's checkpoint is (an index replaced, shards linked in, files of earlier saves
removed) run under :func:`locked`, an advisory lock (``flock``) on the folder itself, so
that the commits of two saves come one after the other: the last one to commit wins, whole.
The lock is the kernel's: it dies with the process, so a save killed mid-commit never
blocks the next one, and it leaves no file behind.

A save that is writing holds its :class:`SaveMark`: the file ``.<token>.fastst-tmp``
(the name of a temporary, so leftovers are recognisable and reported by the stale-temp
rule), holding the save's prefix and locked while the save lives. Another save's clean-up
removes the staged files of a token only when that token's mark is unlocked (its save
was killed), never those of a save in progress; :func:`dead_mark` says so.

Where the file system has no ``flock`` (some network file systems), nothing is locked:
commits are not kept apart, and every mark counts as alive (nothing of another save is
removed).
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import Dict, Iterator, Optional, Set, Union

from .._errors import save_errors
from .._layout import UNFINISHED, WEIGHTS_SUFFIX, index_name, shard_pattern
from .._paths import readable

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = ["locked", "SaveMark", "dead_mark", "remove_earlier", "drop_sharded_layout"]

#: What follows a save's token in the name of its mark.
MARK_SUFFIX = ".fastst-tmp"

#: What a mark holds before the prefix of its save.
_MAGIC = b"fastst save of the prefix:\n"

#: Errors of ``flock`` that mean the file system has none.
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.EBADF, errno.EINVAL, errno.ENOSYS}

_MARK_CAP = len(_MAGIC) + 4096


def _flock(fd: int, exclusive_now: bool) -> Optional[bool]:
    """Locks ``fd`` exclusively: waiting (``exclusive_now`` False) or not. True: locked;
    False: another holds it; None: the file system has no locks."""
    if fcntl is None:
        return None
    how = fcntl.LOCK_EX | (fcntl.LOCK_NB if exclusive_now else 0)
    try:
        fcntl.flock(fd, how)
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in _NO_LOCKS:
            return None
        raise
    return True


@contextlib.contextmanager
def locked(folder: str) -> Iterator[None]:
    """Holds the commit lock of ``folder`` (waiting for another save's commit to end)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(folder, flags)
    try:
        _flock(fd, False)
        yield
    finally:
        os.close(fd)


class SaveMark:
    """The mark of one save into ``folder`` of the checkpoint ``prefix``: a new token (16 hex
    digits), and ``.<token>.fastst-tmp`` created exclusively and locked until
    :meth:`release` (which removes it; call it once the save's own files are gone or
    committed). One descriptor."""

    def __init__(self, folder: str, prefix: str) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        for _ in range(64):
            token = os.urandom(8).hex()
            path = os.path.join(folder, f".{token}{MARK_SUFFIX}")
            try:
                fd = os.open(path, flags, 0o666)
            except FileExistsError:
                continue
            break
        else:
            raise FileExistsError(errno.EEXIST, "no free name for a save's mark", folder)
        try:
            _flock(fd, True)
            os.write(fd, _MAGIC + os.fsencode(prefix))
        except BaseException:
            os.close(fd)
            remove_if_present(path)
            raise
        self.token = token
        self.path: Optional[str] = path
        self._fd: Optional[int] = fd

    def release(self) -> None:
        """Removes the mark and lets go of its lock (again: nothing)."""
        if self.path is not None:
            remove_if_present(self.path)
            self.path = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def dead_mark(folder: str, token: str, prefix: str) -> Optional[bool]:
    """Whether the save of ``token`` is gone: True when its mark is there, unlocked, and
    names ``prefix``; False when its save is alive (or
    the lock cannot be tested) or the mark names another prefix; None when there is no
    mark (a save that keeps none: its staged files go by their names alone)."""
    path = os.path.join(folder, f".{token}{MARK_SUFFIX}")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError:
        return False
    try:
        if _flock(fd, True) is not True:
            return False
        held = os.read(fd, _MARK_CAP + 1)
    except OSError:  # not a file of ours (a folder...): left alone
        return False
    finally:
        os.close(fd)
    return held == _MAGIC + os.fsencode(prefix)


def drop_sharded_layout(path: Union[str, bytes]) -> None:
    """After the single file ``path`` (``{prefix}.safetensors``) was saved: removes the
    sharded checkpoint of the same prefix beside it, the other layout (its index, then
    the shards and staged files saves of that prefix made, never those of a save still
    alive), under the folder's commit lock, while ``path`` is still there (a sharded save
    that committed meanwhile removed it, and won)."""
    folder, name = os.path.split(os.fsdecode(path))
    if not name.endswith(WEIGHTS_SUFFIX):
        return
    prefix = name[: -len(WEIGHTS_SUFFIX)]
    index_path = os.path.join(folder, index_name(prefix))
    if not prefix or not os.path.lexists(index_path):
        return
    with save_errors(readable(os.fsdecode(path))), locked(folder or "."):
        if not os.path.lexists(os.path.join(folder, name)):
            return
        remove_if_present(index_path)
        remove_earlier(folder or ".", prefix, set())


def remove_earlier(folder: str, prefix: str, keep: Set[str]) -> None:
    """Removes from ``folder`` what saves of ``prefix`` made that ``keep`` does not hold:
    shards by their names, the staged files and marks of saves that were killed (and
    staged files no mark claims, by their final names). Run under the commit lock."""
    ours = shard_pattern(prefix)
    entries = os.listdir(folder)
    dead: Dict[str, Optional[bool]] = {}

    def gone(token: str) -> Optional[bool]:
        if token not in dead:
            dead[token] = dead_mark(folder, token, prefix)
        return dead[token]

    for entry in entries:
        if ours.fullmatch(entry) is not None and entry not in keep:
            remove_if_present(os.path.join(folder, entry))
            continue
        match = UNFINISHED.fullmatch(entry)
        if match is None or match.group(1) is None:
            continue
        verdict = gone(entry[1:17])
        if verdict or (verdict is None and ours.fullmatch(match.group(1)) is not None):
            remove_if_present(os.path.join(folder, entry))
    for entry in entries:
        match = UNFINISHED.fullmatch(entry)
        if match is not None and match.group(1) is None and gone(entry[1:17]):
            remove_if_present(os.path.join(folder, entry))


def remove_if_present(path: str) -> None:
    """Removes the file ``path``; one already gone is not an error (a clean-up's step)."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
