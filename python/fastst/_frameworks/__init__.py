"""Framework names as ``safe_open`` accepts them, and the backends behind them.

A backend turns a tensor's zero-copy buffer into its framework's tensor type;
a :class:`Writable` turns a framework's tensors into what the writer takes.
Both are looked up by canonical name; the ones for optional frameworks live
in ``fastst._frameworks.<name>`` modules imported on first use, so importing
fastst never imports a framework. This room is a leaf: it imports neither
reading (``_read``) nor writing (``_write``), which both use it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .._dtypes import to_numpy
from .._errors import Where, rule_error

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


#: Where owned memory starts: ``(alignment, offset modulo it)``, as
#: :func:`fastst._read.placement.placement` chooses it.
Placement = Tuple[int, int]

#: ``to_arrays(tensors, keep_alive)``: a framework's tensors -> what the
#: writer takes (numpy arrays, ``TensorSpec``, dict inputs), appending to
#: ``keep_alive`` any object whose memory they point into.
ToArrays = Callable[[Any, List[Any]], Mapping[str, Any]]


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
    ``place[1]`` modulo ``place[0]`` (:data:`Placement`), where a framework
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


@dataclass(frozen=True)
class Writable:
    """How the writer takes one framework's tensors: ``is_tensor(value)``
    says whether ``value`` is one of them, ``to_arrays`` turns a dict of
    them into what the writer takes (checked as the framework's
    ``save_file`` checks them)."""

    framework: str
    is_tensor: Callable[[Any], bool]
    to_arrays: ToArrays


#: canonical name -> :class:`Writable`; registered by the modules of
#: :data:`WRITABLE_MODULES` on import.
WRITABLES: Dict[str, Writable] = {}

#: canonical name -> the module of this package that registers its
#: :class:`Writable` (frameworks without one are given to the writer as
#: arrays: numpy's, or anything numpy reads).
WRITABLE_MODULES: Dict[str, str] = {"torch": "torch_storage"}


def register_writable(writable: Writable) -> None:
    """Makes ``writable`` the one used for its framework's tensors."""
    WRITABLES[writable.framework] = writable


def writable(value: Any) -> Optional[Writable]:
    """The :class:`Writable` of the framework whose tensor ``value`` is, or
    None. A framework is only looked at when a class of ``value``'s type
    comes from its package, so no framework is imported here."""
    packages = {cls.__module__.partition(".")[0] for cls in type(value).__mro__}
    for framework, module in WRITABLE_MODULES.items():
        if REQUIREMENTS[framework][0].partition(".")[0] not in packages:
            continue
        found = WRITABLES.get(framework)
        if found is None:
            importlib.import_module(f"fastst._frameworks.{module}")
            found = WRITABLES[framework]
        if found.is_tensor(value):
            return found
    return None
