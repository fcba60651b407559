"""The fastst exception tree, rooted at :class:`SafetensorError`.

Every error raised for a bad file names the file, the tensor (where there is
one) and the rule that failed, and carries them as attributes.
"""

from __future__ import annotations

from typing import List, Optional


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


class FolderError(SafetensorError, ValueError):
    """A model folder given as a file holds several checkpoints (listed in
    the message and in ``candidates``): open one of them by its path."""

    candidates: List[str] = []


class HookError(SafetensorError, RuntimeError):
    """The drop-in hook (``fastst.install()``) cannot serve ``safetensors``:
    the reference package is already imported."""


class DropinWarning(UserWarning):
    """``import safetensors`` was served by fastst because the
    ``FASTST_AS_SAFETENSORS`` environment variable is set."""


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
    "FolderError",
    "HookError",
    "DropinWarning",
]
