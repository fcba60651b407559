"""Listing and hashing a model's files in parallel, and the signing format's path rules.

The path rules (:func:`ignore_parts`, :func:`resource_key`) live here once
and follow ``model_signing`` exactly.

The OpenSSF model signing format (``files`` serialization) records the
digest of every whole file, so one file is one sequential stream; fastst
hashes the files of a model concurrently (``hashlib`` releases the GIL while
it hashes), largest first, reading each with ``readinto`` into a reused
1 MiB buffer (no per-chunk allocation). The ``shards`` serialization splits files
into fixed-size pieces, so a single large file is hashed in parallel too.

Files are opened without following a final symbolic link (unless asked to),
without blocking (FIFOs, devices and sockets are refused), and a file that
shrinks while it is read ends in an error, never a crash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import stat
from typing import (
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Protocol,
    Sequence,
    Tuple,
)

from ..._read.pool import run_all
from .findings import Finding, ProvenanceError, finding

#: Paths model_signing leaves out by default (``--ignore-git-paths``).
GIT_PATHS: Tuple[str, ...] = (".git", ".gitattributes", ".github", ".gitignore")

#: Bytes read per call (small enough to stay in L2 cache between the copy
#: and the hash).
_CHUNK = 1 << 20


class Hasher(Protocol):
    """What the hashing code needs of a hash object (hashlib's and
    ``blake3.blake3`` objects all qualify)."""

    def update(self, data: memoryview, /) -> object: ...

    def hexdigest(self) -> str: ...


#: Hash names as the format writes them -> constructor.
_ALGORITHMS: Dict[str, Callable[[], Hasher]] = {
    "sha256": hashlib.sha256,
    "blake2b": hashlib.blake2b,
}


def hash_constructor(name: str) -> Optional[Callable[[], Hasher]]:
    """The constructor for a hash the format names, or None if unsupported
    (``blake3`` works when the ``blake3`` package is installed)."""
    if name in _ALGORITHMS:
        return _ALGORITHMS[name]
    if name == "blake3":
        try:
            import blake3  # type: ignore[import-not-found]
        except ImportError:
            return None
        return blake3.blake3
    return None


@dataclasses.dataclass(frozen=True)
class ModelFile:
    """A regular file of a model: its name in the manifest (POSIX, relative
    to the model; ``.`` when the model is a single file) and its path."""

    name: str
    path: str
    size: int


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

#: Deepest folder listed below a model's root; a deeper one is a problem of
#: the listing (a finding), never a crash.
MAX_DEPTH = 256


def ignore_parts(root: str, entry: str) -> Optional[Tuple[str, ...]]:
    """The path components, relative to the model ``root``, that the ignore
    path ``entry`` leaves out, read as ``model_signing`` reads ignore paths
    (signed ones and given ones alike): ``entry`` is joined to ``root`` as a
    pure POSIX path (``./``, repeated and trailing slashes dropped; ``..``,
    case and backslashes kept as they are) and counts only if the result is
    still under ``root``; so an absolute entry counts only when it names a
    path under an absolute ``root``, and an entry with a ``..`` component
    never matches a file. ``()`` leaves out the whole model; None: nothing."""
    base = pathlib.PurePosixPath(root)
    try:
        return (base / entry).relative_to(base).parts
    except ValueError:
        return None


def resource_key(name: str, shards: bool = False) -> str:
    """A resource name of a signed statement as ``model_signing`` reads it:
    the path as a pure POSIX path (as :func:`ignore_parts`; ``""`` is
    ``.``), and for the ``shards`` serialization ``path:start:end`` split at
    every ``:`` into exactly three parts with integer offsets. Raises
    ValueError for a shard name that is not."""
    if not shards:
        return str(pathlib.PurePosixPath(name))
    parts = name.split(":")
    if len(parts) != 3:
        raise ValueError(f"shard name {name!r} is not PATH:START:END")
    return f"{pathlib.PurePosixPath(parts[0])}:{int(parts[1])}:{int(parts[2])}"


def _under(parts: Tuple[str, ...], ignored: Iterable[Tuple[str, ...]]) -> bool:
    return any(parts[: len(p)] == p for p in ignored)


def list_model(
    root: str,
    *,
    ignore: Sequence[str] = (),
    allow_symlinks: bool = False,
    max_depth: int = MAX_DEPTH,
) -> Tuple[List[ModelFile], List[Finding]]:
    """The regular files of the model at ``root`` (a file or a folder) and
    the problems met: ``signature-symlink`` for a symbolic link (unless
    ``allow_symlinks``: then a link to a file is read as that file, and a
    link to a folder is left out, as ``model_signing`` does),
    ``signature-special-file`` for anything else that is not a file or a
    folder, cannot be read, or lies in a folder more than ``max_depth``
    levels below ``root``. ``ignore`` holds ignore paths read by
    :func:`ignore_parts`; a folder ignores everything under it. Folders are
    walked without recursion.
    """
    ignored = [p for p in (ignore_parts(root, e) for e in ignore) if p is not None]
    problems: List[Finding] = []
    try:
        st = os.lstat(root)
    except OSError as exc:
        raise ProvenanceError(
            f"{root}: cannot read the model: {exc.strerror or exc}", filename=root
        ) from None
    if stat.S_ISLNK(st.st_mode):
        if not allow_symlinks:
            raise ProvenanceError(
                f"{root}: the model path is a symbolic link; give the real path "
                "(or allow symbolic links)",
                rule="signature-symlink",
                filename=root,
            )
        st = os.stat(root)
    if stat.S_ISREG(st.st_mode):
        return ([] if _under((), ignored) else [ModelFile(".", root, st.st_size)]), problems
    if not stat.S_ISDIR(st.st_mode):
        raise ProvenanceError(
            f"{root}: the model is neither a regular file nor a folder",
            rule="signature-special-file",
            filename=root,
        )
    files: List[ModelFile] = []
    # One open folder per level: its descriptor (what the next level is
    # opened and examined through, so a level costs the same at any depth),
    # its path, its name in the manifest and its sorted entries not yet seen.
    stack: List[Tuple[int, str, str, Iterator[os.DirEntry]]] = []

    def enter(name: str, dir_fd: Optional[int], path: str, prefix: str) -> None:
        fd = -1
        try:
            fd = os.open(name, _DIR_FLAGS | (_NOFOLLOW if dir_fd is not None else 0), dir_fd=dir_fd)
            with os.scandir(fd) as it:
                listing = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            if fd >= 0:
                os.close(fd)
            problems.append(
                finding(
                    "signature-special-file",
                    f"{prefix or '.'}: folder cannot be listed: {exc.strerror or exc}",
                    prefix or ".",
                )
            )
            return
        stack.append((fd, path, prefix, iter(listing)))

    try:
        enter(root, None, root, "")
        while stack:
            fd, folder, prefix, it = stack[-1]
            entry = next(it, None)
            if entry is None:
                os.close(stack.pop()[0])
                continue
            name = f"{prefix}{entry.name}"
            if _under(tuple(name.split("/")), ignored):
                continue
            path = os.path.join(folder, entry.name)
            try:
                est = entry.stat(follow_symlinks=False)
                link = stat.S_ISLNK(est.st_mode)
                if link and not allow_symlinks:
                    target = os.readlink(entry.name, dir_fd=fd)
                    problems.append(
                        finding(
                            "signature-symlink",
                            f"{name} is a symbolic link (to {target!r}); the model signing "
                            "format refuses links unless signed with symbolic links allowed",
                            name,
                        )
                    )
                    continue
                if link:
                    est = os.stat(entry.name, dir_fd=fd)
            except OSError as exc:
                problems.append(
                    finding(
                        "signature-special-file",
                        f"{name}: cannot be examined: {exc.strerror or exc}",
                        name,
                    )
                )
                continue
            if stat.S_ISDIR(est.st_mode):
                if link:  # model_signing does not descend into linked folders
                    continue
                if len(stack) > max_depth:
                    problems.append(
                        finding(
                            "signature-special-file",
                            f"{name}: folder nested more than {max_depth} levels deep; "
                            "not examined",
                            name,
                        )
                    )
                    continue
                enter(entry.name, fd, path, name + "/")
            elif stat.S_ISREG(est.st_mode):
                files.append(ModelFile(name, path, est.st_size))
            else:
                problems.append(
                    finding(
                        "signature-special-file",
                        f"{name} is not a regular file (FIFO, socket or device)",
                        name,
                    )
                )
    finally:
        for fd, *_ in stack:
            os.close(fd)
    return files, problems


def _open_regular(path: str, follow: bool) -> int:
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str, limit: int, *, follow: bool = True) -> bytes:
    """Up to ``limit + 1`` bytes of the regular file ``path`` (so that the
    caller can tell a file over the limit), opened without blocking: a FIFO,
    device or socket raises OSError at once instead of hanging."""
    fd = _open_regular(path, follow)
    with os.fdopen(fd, "rb") as f:
        return f.read(limit + 1)


def hash_range(
    path: str,
    algorithm: str = "sha256",
    start: int = 0,
    end: Optional[int] = None,
    *,
    follow: bool = False,
) -> str:
    """Hex digest of bytes ``[start, end)`` of ``path`` (to the end of the
    file when ``end`` is None). Raises OSError when the file cannot be read
    or is shorter than ``end``."""
    make = hash_constructor(algorithm)
    if make is None:
        raise ValueError(f"unsupported hash algorithm {algorithm!r}")
    h = make()
    fd = _open_regular(path, follow)
    try:
        with os.fdopen(fd, "rb", buffering=0, closefd=False) as f:
            if start:
                f.seek(start)
            remaining = None if end is None else end - start
            buf = bytearray(_CHUNK if remaining is None else max(1, min(_CHUNK, remaining)))
            view = memoryview(buf)
            while remaining is None or remaining > 0:
                want = len(buf) if remaining is None else min(len(buf), remaining)
                n = f.readinto(view[:want])
                if not n:
                    if remaining is not None:
                        raise OSError(f"{path}: file ended {remaining} bytes early (truncated?)")
                    break
                h.update(view[:n])
                if remaining is not None:
                    remaining -= n
    finally:
        os.close(fd)
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class Piece:
    """A unit of hashing: a whole file, or a shard ``[start, end)`` of it."""

    name: str
    path: str
    start: int
    end: Optional[int]


def shards_of(files: Sequence[ModelFile], shard_size: int) -> List[Piece]:
    """The pieces of the ``shards`` serialization: each non-empty file cut
    every ``shard_size`` bytes (empty files have none)."""
    pieces = []
    for f in files:
        start = 0
        while start < f.size:
            end = min(start + shard_size, f.size)
            pieces.append(Piece(f"{f.name}:{start}:{end}", f.path, start, end))
            start = end
    return pieces


def hash_pieces(
    pieces: Sequence[Piece],
    algorithm: str = "sha256",
    *,
    threads: int = 0,
    follow: bool = False,
    sizes: Optional[Dict[str, int]] = None,
) -> Tuple[Dict[str, str], Dict[str, str]]:
    """Hashes ``pieces`` concurrently (``threads`` workers, 0: one per core),
    largest first. Returns ``(digests, errors)``: name -> hex digest, and
    name -> message for pieces that could not be read."""
    workers = threads or os.cpu_count() or 1

    def size(p: Piece) -> int:
        if p.end is not None:
            return p.end - p.start
        return (sizes or {}).get(p.name, 0)

    order = sorted(pieces, key=size, reverse=True)
    digests: Dict[str, str] = {}
    errors: Dict[str, str] = {}

    def one(p: Piece) -> Tuple[str, Optional[str], Optional[str]]:
        try:
            return p.name, hash_range(p.path, algorithm, p.start, p.end, follow=follow), None
        except OSError as exc:
            return p.name, None, exc.strerror or str(exc)

    results = run_all(one, order, workers, "fastst-hash")
    for name, digest, error in results:
        if digest is not None:
            digests[name] = digest
        else:
            errors[name] = error or "unreadable"
    return digests, errors


def sort_key(name: str, shards: bool = False) -> Tuple:
    """The manifest order of a resource name: by path components (as
    model_signing's ``PurePosixPath`` ordering), then, for shards
    (``path:start:end``), by offsets."""
    if shards:
        path, start, end = (name.rsplit(":", 2) + ["0", "0"])[:3]
        try:
            return (tuple(path.split("/")), int(start), int(end))
        except ValueError:
            return (tuple(name.split("/")), 0, 0)
    return (tuple(name.split("/")), 0, 0)
