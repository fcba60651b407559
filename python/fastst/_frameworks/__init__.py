"""Framework names as ``safe_open`` accepts them, and the backends behind them.

Framework names as ``safe_open`` accepts them, and the backends that turn a
tensor's zero-copy buffer into each framework's tensor type.

A backend is looked up by canonical name; the ones for optional frameworks
live in ``fastst._frameworks.<name>`` modules imported on first use, so importing
fastst never imports a framework.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .._dtypes import to_numpy
from .._errors import rule_error

#: Accepted spellings -> canonical framework name (as the reference accepts).
ALIASES: Dict[str, str] = {
    "np": "numpy",
    "numpy": "numpy",
    "pt": "torch",
    "torch": "torch",
    "pytorch": "torch",
    "tf": "tensorflow",
    "tensorflow": "tensorflow",
    "flax": "flax",
    "jax": "flax",
    "mlx": "mlx",
    "paddle": "paddle",
}

#: Canonical name -> (module to import, pip extra that installs it).
REQUIREMENTS: Dict[str, Tuple[str, str]] = {
    "torch": ("torch", "torch"),
    "flax": ("jax", "jax"),
    "tensorflow": ("tensorflow", "tensorflow"),
    "paddle": ("paddle", "paddle"),
    "mlx": ("mlx.core", "mlx"),
}


def resolve(framework: object) -> str:
    """Canonical name of a framework, or SafetensorError for an unknown one."""
    if not isinstance(framework, str):
        raise TypeError(f"framework must be a str, got {type(framework).__name__}")
    canonical = ALIASES.get(framework)
    if canonical is None:
        known = ", ".join(sorted(ALIASES))
        raise rule_error(
            "unknown-framework", "", f"framework {framework!r} is not supported (known: {known})"
        )
    return canonical


def missing(framework: str, cause: BaseException) -> ImportError:
    """The ImportError for a framework that cannot be imported, naming the
    pip extra that installs it."""
    module, extra = REQUIREMENTS[framework]
    return ImportError(
        f"fastst's {framework} support needs the {module.split('.')[0]!r} package, "
        f"which could not be imported ({cause}); install it with: "
        f"pip install fastst[{extra}]"
    )


def require(framework: str) -> ModuleType:
    """Imports the module a framework needs, or raises :func:`missing`'s error."""
    try:
        return importlib.import_module(REQUIREMENTS[framework][0])
    except ImportError as exc:
        raise missing(framework, exc) from exc


Buffer = Any
Shape = Sequence[int]


class Where(NamedTuple):
    """The file (``""`` for bytes in memory) and the tensor a backend call
    is about. Its text (``file: tensor 'name'``) starts error messages;
    :meth:`error` makes the error of a rule broken by that tensor."""

    filename: str
    tensor: str

    def __str__(self) -> str:
        name = f"tensor {self.tensor!r}"
        return f"{self.filename}: {name}" if self.filename else name

    def error(self, rule: str, message: str) -> BaseException:
        return rule_error(rule, self.filename, f"tensor {self.tensor!r}: {message}", self.tensor)


#: Owned memory starts at a multiple of this many bytes (as torch's
#: allocator gives; numpy's gives 16)...
OWNED_ALIGN = 64
#: ... except owned copies of at least ``PLACED`` bytes, which sit at their
#: file offset modulo ``PAGE`` (where the reference's views sit, modulo 64):
#: a cold load's direct reads, whole disk blocks, then land in place.
PLACED = 1 << 20
PAGE = 4096

#: Where owned memory starts: ``(alignment, offset modulo it)``.
Placement = Tuple[int, int]


def placement(nbytes: int, copy: bool, offset: int = 0, itemsize: int = 1) -> Placement:
    """Where the owned destination of ``nbytes`` bytes of a tensor at file
    offset ``offset`` starts: a large copy (``copy`` False: a conversion)
    at ``offset`` modulo :data:`PAGE`, when that keeps its elements of
    ``itemsize`` bytes aligned; anything else at a multiple of
    :data:`OWNED_ALIGN`."""
    if copy and nbytes >= PLACED and offset % itemsize == 0:
        return PAGE, offset % PAGE
    return OWNED_ALIGN, 0


@dataclass(frozen=True)
class Backend:
    """How one framework receives tensors from a file.

    ``device(value)`` validates and normalises the ``device`` argument when
    the file is opened; ``tensor(buffer, dtype, shape, device, where)`` wraps
    a whole tensor; ``index(buffer, dtype, shape, key, device, where)``
    returns part of one with the framework's indexing rules. ``where`` names
    the file and tensor for error messages. ``settle(device)`` returns once
    every tensor handed out for that device has landed there (a no-op where
    tensors are complete when handed out). Owned loads allocate each
    destination with ``empty(dtype, shape, where, place)`` -> ``(tensor, its
    bytes as a writable uint8 numpy array)``, the bytes starting at
    ``place[1]`` modulo ``place[0]`` (:func:`placement`), where a framework
    has its own memory (None: numpy arrays, wrapped by ``tensor``), and hand
    the filled tensor out through ``place(tensor, device)``.
    ``stand_in(shape)`` is an array of ``shape`` holding no data, to which an
    index is applied to raise what the framework raises for it before
    anything is read (default: a numpy one, for the frameworks fed from
    numpy). ``check_dtype(dtype, where)`` raises rule ``framework-dtype`` when
    the framework cannot hold a header dtype, reading nothing (default: it
    can hold them all).
    """

    name: str
    device: Callable[[Any], Any]
    tensor: Callable[[Buffer, str, Shape, Any, Where], Any]
    index: Callable[[Buffer, str, Shape, Any, Any, Where], Any]
    settle: Callable[[Any], None] = lambda _device: None
    empty: Optional[Callable[[str, Shape, Where, Placement], Tuple[Any, np.ndarray]]] = None
    place: Optional[Callable[[Any, Any], Any]] = None
    stand_in: Callable[[Shape], Any] = lambda shape: numpy_stand_in(shape)
    check_dtype: Callable[[str, Where], None] = lambda _dtype, _where: None


def numpy_stand_in(shape: Shape) -> np.ndarray:
    """A read-only uint8 array of ``shape`` whose elements all share one byte."""
    return np.ndarray(tuple(shape), np.uint8, buffer=b"\0", strides=(0,) * len(shape))


def apply_index(array: Any, key: Any, where: object) -> Any:
    """``array[key]`` (a numpy array, a framework tensor, a :attr:`Backend.stand_in`),
    with the framework's rules; its IndexError worded as every backend words
    it: the tensor, its whole shape, the framework's reason."""
    try:
        return array[key]
    except IndexError as exc:
        raise IndexError(f"{where} of shape {list(array.shape)}: {exc}") from None


def numpy_index(buffer: Buffer, dtype: str, shape: Shape, key: Any, where: Where) -> np.ndarray:
    """``key`` applied with numpy's basic indexing to the zero-copy array."""
    part = apply_index(to_numpy(buffer, dtype, shape), key, where)
    if not isinstance(part, np.ndarray):
        part = np.asarray(part)
    return part


def cpu_only(framework: str) -> Callable[[Any], Any]:
    """A device check accepting only the CPU (``"cpu"`` or None)."""

    def check(device: Any) -> Any:
        if device is None or device == "cpu":
            return "cpu"
        raise rule_error(
            "bad-device",
            "",
            f"{framework} tensors are loaded on the CPU; device {device!r} is not supported",
        )

    return check


def from_numpy(
    framework: str,
    convert: Callable[[np.ndarray, str, Any, Where], Any],
    device: Callable[[Any], Any],
) -> Backend:
    """A backend for frameworks that take numpy arrays: ``convert(array,
    dtype, device, where)`` turns the zero-copy numpy array (whole or indexed with
    numpy's rules) into the framework's tensor."""

    def tensor(buffer: Buffer, dtype: str, shape: Shape, dev: Any, where: Where) -> Any:
        return convert(to_numpy(buffer, dtype, shape), dtype, dev, where)

    def index(buffer: Buffer, dtype: str, shape: Shape, key: Any, dev: Any, where: Where) -> Any:
        return convert(numpy_index(buffer, dtype, shape, key, where), dtype, dev, where)

    return Backend(framework, device, tensor, index)


NUMPY = from_numpy("numpy", lambda array, _dtype, _device, _where: array, cpu_only("numpy"))

#: canonical name -> backend; optional frameworks register on import.
BACKENDS: Dict[str, Backend] = {"numpy": NUMPY}


def register(backend: Backend) -> None:
    """Makes ``backend`` the one used for its framework."""
    BACKENDS[backend.name] = backend


def backend(framework: str) -> Backend:
    """The backend of a canonical framework name, importing it on first use."""
    found = BACKENDS.get(framework)
    if found is None:
        importlib.import_module(f"fastst._frameworks.{framework}")
        found = BACKENDS[framework]
    return found
