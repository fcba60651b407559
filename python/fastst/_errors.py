"""The fastst exception tree, rooted at :class:`SafetensorError`, and the one
way Python code raises a rule's error (:func:`rule_error`).

Every error raised for a bad file names the file, the tensor (where there is
one) and the rule that failed, and carries them as attributes. Each rule id
belongs to one family (an exception class here), as the rule catalogue of
the compiled core says.
"""

from __future__ import annotations

from typing import Dict, Optional


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


#: Exception class name -> class, for every family a rule can belong to.
FAMILIES: Dict[str, type] = {
    cls.__name__: cls
    for cls in (
        SafetensorError,
        HeaderFramingError,
        HeaderJsonError,
        MetadataError,
        TensorTableError,
        LayoutError,
        TensorNotFoundError,
        ClosedFileError,
        SerializeError,
        UnsupportedDtypeError,
        ShardIndexError,
    )
}

# The families of the rules Python raises itself (until the core's catalogue
# is exported to Python, which will replace this table).
_PYTHON_RULES: Dict[str, str] = {
    "bad-shape": "SerializeError",
    "unsupported-dtype": "SerializeError",
    "closed-file": "ClosedFileError",
    "tensor-not-found": "TensorNotFoundError",
    "index-json": "ShardIndexError",
    "index-shape": "ShardIndexError",
    "shard-path": "ShardIndexError",
    "shard-missing": "ShardIndexError",
    "shard-lacks-tensor": "ShardIndexError",
    "shard-extra-tensor": "ShardIndexError",
}


def family(rule: str) -> type:
    """The exception class of ``rule``'s family; KeyError for an unknown id."""
    return FAMILIES[_PYTHON_RULES[rule]]


def rule_error(
    rule: str, filename: Optional[str], message: str, tensor: Optional[str] = None
) -> SafetensorError:
    """The exception for a failure of ``rule`` (an id of the catalogue) about
    ``filename``: an instance of the rule's family whose text is
    ``"<filename>: <message>"`` (just ``message`` when there is no file; the
    message names the tensor, if any, as the core's messages do) and whose
    ``filename``, ``tensor`` and ``rule`` attributes are set. An unknown
    rule id raises KeyError at once."""
    cls = family(rule)
    err: SafetensorError = cls(f"{filename}: {message}" if filename else message)
    err.filename = filename
    err.tensor = tensor
    err.rule = rule
    return err


def closed_file_error(filename: str) -> SafetensorError:
    """The :class:`ClosedFileError` for any use of ``filename`` after it was
    closed (rule ``closed-file``)."""
    return rule_error(
        "closed-file",
        filename,
        "file is closed (the `with` block ended or close() was called); "
        "arrays obtained before stay valid",
    )


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
    "rule_error",
    "closed_file_error",
]
