"""The fastst exception tree, and the one way Python code raises a rule's error.

:class:`SafetensorError` is the root; :func:`rule_error` is that one way;
:class:`Where` and :data:`BYTES_NAME` are how an error names a tensor and a
file held in memory.

Every error raised for a bad file names the file, the tensor (where there is
one) and the rule that failed, and carries them as attributes. Each rule id
belongs to one family (an exception class here, or a builtin such as
ValueError), as the rule catalogue of the compiled core says.
"""

from __future__ import annotations

import contextlib
from typing import Dict, Iterator, List, NamedTuple, Optional, Type

from ._fastst import catalogue as _catalogue

#: How an error names a file held in memory as bytes (``serialize``, ``load``).
BYTES_NAME = "<bytes>"


class SafetensorError(Exception):
    """Root of every error fastst raises about a file's contents or use.

    Attributes ``filename``, ``tensor`` and ``rule`` say which file, which
    tensor (or ``None``) and which rule failed (a stable identifier such as
    ``"header-too-large"``).
    """

    filename: Optional[str] = None
    tensor: Optional[str] = None
    rule: Optional[str] = None


class HeaderFramingError(SafetensorError):
    """The 8-byte length prefix or the header's framing is wrong."""


class HeaderJsonError(SafetensorError):
    """The header is not a strict JSON object, or repeats a tensor name."""


class MetadataError(SafetensorError):
    """``__metadata__`` is not a string-to-string map."""


class TensorTableError(SafetensorError):
    """A tensor entry is malformed: fields, dtype, shape or size."""


class LayoutError(SafetensorError):
    """Data offsets do not tile the byte buffer exactly (holes, overlaps...)."""


class TensorNotFoundError(SafetensorError, KeyError):
    """A tensor asked for by name is not in the file (also a ``KeyError``)."""

    def __str__(self) -> str:
        return Exception.__str__(self)


class ClosedFileError(SafetensorError):
    """The file was used after it was closed."""


class SerializeError(SafetensorError, ValueError):
    """Tensors or metadata given to a writer cannot be written."""


class UnsupportedDtypeError(SafetensorError, TypeError):
    """A dtype has no equivalent in the requested framework."""


class ShardIndexError(SafetensorError):
    """A sharded checkpoint's index is malformed or disagrees with its shards."""


class DistributedLoadError(SafetensorError):
    """Loading one checkpoint across the ranks of a ``torch.distributed``
    group failed; every rank of the group raises it. ``causes`` maps each
    rank that failed to its error's message (empty for mismatches)."""

    causes: Dict[int, str] = {}


class FileAccessError(SafetensorError, OSError):
    """The file cannot be read safely: the path names a FIFO, socket or
    device rather than a regular file (rule ``not-regular-file``, refused at
    once, without blocking), or another program changed the file after it
    was opened (rule ``file-changed``). Also an ``OSError``."""

    def __str__(self) -> str:
        return Exception.__str__(self)


class ProvenanceError(SafetensorError, ValueError):
    """Signing, verifying or describing a model could not be done at all
    (unreadable key, model path that is not a file or a folder, symbolic
    link met while signing...). ``rule`` names the rule when one applies."""

    def __init__(
        self, message: str, *, rule: Optional[str] = None, filename: Optional[str] = None
    ) -> None:
        super().__init__(message)
        self.rule = rule
        self.filename = filename


class MissingExtraError(ProvenanceError, ImportError):
    """A package of the ``fastst[signing]`` extra is not installed."""


def rule_error(
    rule: str, filename: str, message: str, tensor: Optional[str] = None
) -> BaseException:
    """The exception for breaking ``rule``, an id of the core's rule
    catalogue (``_fastst.catalogue.rule_catalogue()``): an instance of the class of the
    rule's family, with text ``"<filename>: <message>"`` (just ``message``
    when ``filename`` is empty; the message names the tensor, if any, as the
    core's messages do) and attributes ``filename``, ``tensor`` and
    ``rule``. Returned, not raised. An id that is not in the catalogue
    raises ValueError at once.

    This is the glue's own exception maker, the one every error of the
    core goes through, so an error raised from Python and one raised by
    the core for the same rule cannot differ in class or attributes."""
    return _catalogue.rule_error(rule, filename, message, tensor)


class Where(NamedTuple):
    """The file (``""`` for bytes in memory) and the tensor an error is
    about. Its text (``file: tensor 'name'``) starts error messages;
    :meth:`error` makes the error of a rule broken by that tensor."""

    filename: str
    tensor: str

    def __str__(self) -> str:
        name = f"tensor {self.tensor!r}"
        return f"{self.filename}: {name}" if self.filename else name

    def error(self, rule: str, message: str) -> BaseException:
        return rule_error(rule, self.filename, f"tensor {self.tensor!r}: {message}", self.tensor)


def closed_file_error(filename: str) -> BaseException:
    """The :class:`ClosedFileError` for any use of ``filename`` after it was
    closed (rule ``closed-file``)."""
    return _catalogue.closed_file_error(filename)


_SAVE_OS_ERRORS: Dict[Type[OSError], Type[OSError]] = {}


def _save_class(builtin: Type[OSError]) -> Type[OSError]:
    """The class of an OS error of a save: a :class:`SafetensorError` and ``builtin`` (the
    ``OSError`` subclass the error's errno maps to), made once per builtin."""
    made = _SAVE_OS_ERRORS.get(builtin)
    if made is None:
        doc = f"An OS error of a save: a SafetensorError and a {builtin.__name__} (rule ``io``)."
        made = type(builtin.__name__, (SafetensorError, builtin), {"__doc__": doc})
        made.__module__ = "fastst"
        made.__str__ = OSError.__str__  # type: ignore[method-assign]
        _SAVE_OS_ERRORS[builtin] = made
    return made


@contextlib.contextmanager
def save_errors(filename: str) -> Iterator[None]:
    """Raises an OS error of a save to ``filename`` (a missing folder, a folder at the
    path, a full disk) as a :class:`SafetensorError` that is also the builtin ``OSError``
    subclass it was (``FileNotFoundError``...), with rule ``io``: ``except
    SafetensorError`` around a save catches it, as it does the reference's, and so does
    ``except FileNotFoundError``. Errors that are SafetensorErrors already pass as they
    are."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, SafetensorError) or type(exc) in _SAVE_OS_ERRORS.values():
            raise
        args = exc.args
        if exc.errno is not None and exc.strerror is not None:
            args = (exc.errno, exc.strerror, exc.filename, None, exc.filename2)
            args = args[:3] if exc.filename2 is None else args
            args = args[:2] if exc.filename is None else args
        error = _save_class(type(exc))(*args)
        error.filename = exc.filename if exc.filename is not None else filename
        error.rule = "io"  # type: ignore[attr-defined]
        error.tensor = None  # type: ignore[attr-defined]
        raise error.with_traceback(exc.__traceback__) from exc.__cause__


class LoadStopped(Exception):
    """Raised inside a background load (``iter_tensors``) to end it: its
    iterator was left, its file closed, or the interpreter is exiting."""


class FolderError(SafetensorError, ValueError):
    """A model folder given as a file holds several checkpoints (listed in
    the message and in ``candidates``): open one of them by its path."""

    candidates: List[str] = []


class HookError(SafetensorError, RuntimeError):
    """The drop-in hook (``fastst.install()``) cannot serve ``safetensors``:
    the reference package is already imported."""


class StorageOptionsError(SafetensorError, ValueError):
    """``storage_options`` were given for a local path: they configure the
    store of a URL only (rule ``storage-options-local``). Also a
    ``ValueError``."""


class DropinWarning(UserWarning):
    """``import safetensors`` was served by fastst because the
    ``FASTST_AS_SAFETENSORS`` environment variable is set."""


class InsecureTransportWarning(UserWarning):
    """A store was configured to skip the checks that keep its traffic
    private and authentic: TLS certificates are not checked
    (``allow_invalid_certificates`` in ``storage_options``, or
    ``AWS_ALLOW_INVALID_CERTIFICATES`` and the like in the environment).
    Given once per process; filter it like any warning, e.g.
    ``warnings.simplefilter("error", fastst.InsecureTransportWarning)`` to
    refuse such stores. See docs/remote.md, "Settings that weaken
    security"."""


__all__ = [
    "SafetensorError",
    "HeaderFramingError",
    "HeaderJsonError",
    "MetadataError",
    "TensorTableError",
    "LayoutError",
    "TensorNotFoundError",
    "ClosedFileError",
    "SerializeError",
    "UnsupportedDtypeError",
    "ShardIndexError",
    "DistributedLoadError",
    "FileAccessError",
    "ProvenanceError",
    "MissingExtraError",
    "rule_error",
    "closed_file_error",
    "FolderError",
    "HookError",
    "StorageOptionsError",
    "DropinWarning",
    "InsecureTransportWarning",
]
