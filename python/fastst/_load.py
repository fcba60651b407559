"""Tensors <-> ``.safetensors`` bytes and files, for every framework module.

``serialize``, ``serialize_file`` and ``deserialize`` (the reference
package's functions), loading bytes or a file as a framework's tensors
(:func:`load_bytes`, :func:`load_path`), and :class:`FrameworkIO`, which
makes the ``save``/``save_file``/``load``/``load_file`` functions of a
framework module from one function turning its tensors into arrays.

The framework modules (``fastst.numpy``, ``fastst.torch``...) import this
module; it imports nothing above it (not the package root).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from . import _prefetch
from ._fastst import DEFAULT_HEADER_CAP, parse_bytes
from ._frameworks import Where
from ._frameworks import backend as framework_backend
from ._hook import read_backend
from ._open import safe_open
from ._paths import os_path, readable
from ._write import BYTES_NAME, plan

PathLike = Union[str, "os.PathLike[str]"]

__all__ = [
    "serialize",
    "serialize_file",
    "deserialize",
    "load_bytes",
    "load_path",
    "FrameworkIO",
]


def serialize(
    tensor_dict: Mapping[str, Any],
    metadata: Optional[Mapping[str, str]] = None,
    *,
    header_cap: int = DEFAULT_HEADER_CAP,
) -> bytes:
    """The ``.safetensors`` bytes of ``tensor_dict`` (name -> array, or
    ``TensorSpec``, or ``{"dtype", "shape", "data"}`` dict) with optional
    str -> str ``metadata``. Tensors are laid out as the reference writer
    lays them out; metadata keys are written sorted."""
    layout, sources = plan(BYTES_NAME, tensor_dict, metadata, header_cap)
    return layout.to_bytes(BYTES_NAME, sources)


def serialize_file(
    tensor_dict: Mapping[str, Any],
    filename: PathLike,
    metadata: Optional[Mapping[str, str]] = None,
    *,
    durable: Optional[bool] = None,
    header_cap: int = DEFAULT_HEADER_CAP,
) -> None:
    """Writes ``tensor_dict`` to ``filename`` (see :func:`serialize`).

    The file is written to a temporary file in the same folder and renamed
    over ``filename`` once complete: readers never see a partial file, a
    file open with ``safe_open`` keeps its old contents, and on any error the
    old file is left untouched and the temporary file removed.

    ``durable`` says whether the data is flushed to disk before the rename,
    so that a system crash cannot leave a truncated file in its place. The
    default (``None``) flushes when an existing file is replaced, which is
    when a crash could cost good data, and skips the flush for a new file
    (as fast as a plain write); ``True`` always flushes, ``False`` never.
    """
    path = os_path(filename)
    name = readable(path)
    layout, sources = plan(name, tensor_dict, metadata, header_cap)
    layout.write_file(path, name, sources, durable)


def _entries(data: Any, caller: str) -> Iterator[Tuple[str, str, Tuple[int, ...], bytearray]]:
    """``(name, dtype, shape, bytes)`` of each tensor of a whole file held in
    memory, in file order; each ``bytes`` is a copy of its own. The header
    is parsed and validated before the first tensor is produced."""
    try:
        view = memoryview(data)
    except TypeError:
        got = type(data).__name__
        raise TypeError(f"{caller} expects a bytes-like object, got {got}") from None
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    start, entries, _metadata = parse_bytes(view, BYTES_NAME)
    return (
        (name, dtype, shape, bytearray(view[start + begin : start + end]))
        for name, dtype, shape, begin, end in entries
    )


def deserialize(data: Any) -> List[Tuple[str, Dict[str, Any]]]:
    """Parses the bytes of a whole file: ``[(name, {"dtype": "F32",
    "shape": [2, 3], "data": bytearray}), ...]`` in file order, each
    ``data`` an independent copy."""
    return [
        (name, {"dtype": dtype, "shape": list(shape), "data": data})
        for name, dtype, shape, data in _entries(data, "deserialize")
    ]


def load_bytes(data: Any, framework: str, device: Any = "cpu") -> Dict[str, Any]:
    """Every tensor of a ``.safetensors`` file given as bytes, as tensors of
    ``framework`` (a canonical name), in file order. Each tensor gets its own
    writable copy of its bytes, so none aliases ``data`` or another tensor."""
    found = framework_backend(framework)
    target = found.device(device)
    return {
        name: found.tensor(buffer, dtype, shape, target, Where("", name))
        for name, dtype, shape, buffer in _entries(data, "load")
    }


def load_path(
    filename: Any,
    framework: str,
    *,
    device: Any = "cpu",
    backend: str = "mmap",
    copy: bool = False,
    dtype: Any = None,
    progress: Any = None,
    storage_options: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """Every tensor of ``filename`` as tensors of ``framework``, in file
    order, on ``device``; ``backend`` is safe_open's, ``copy`` and ``dtype``
    are :meth:`fastst.safe_open.get_tensor`'s, ``progress`` is
    :meth:`fastst.safe_open.get_tensors`', ``storage_options`` safe_open's.
    Returns once every tensor has landed on its device. While the drop-in
    hook is on, ``FASTST_READ`` may turn ``backend="mmap"`` into ``"pread"``
    (:func:`fastst._hook.read_backend`)."""
    backend = read_backend(backend)
    # Views are touched after this returns: read the file ahead of that.
    views = not copy and dtype is None and backend == "mmap"
    with safe_open(
        filename,
        framework,
        device=device,
        backend=backend,
        prefetch=None,
        storage_options=storage_options,
    ) as f:
        if views and f._prefetch is not None and _prefetch.enabled():
            f._prefetch.declare("all")
        tensors = f.get_tensors(copy=copy, dtype=dtype, progress=progress)
        f._settle()
        if f._prefetch is not None:
            f._prefetch.detach()
    return tensors


#: ``to_arrays(tensors, keep_alive)``: a framework's tensors -> what the
#: writer takes (numpy arrays, ``TensorSpec``), appending to ``keep_alive``
#: any object whose memory they point into.
ToArrays = Callable[[Any, List[Any]], Mapping[str, Any]]


class FrameworkIO:
    """The save and load functions of one framework module.

    ``framework`` is the canonical name its tensors are loaded as;
    ``to_arrays`` checks and turns the tensors given to a save function into
    what the writer takes. Objects it puts in ``keep_alive`` (tensors whose
    memory the arrays point into) are kept until the bytes are written.
    """

    def __init__(self, framework: str, to_arrays: ToArrays) -> None:
        self.framework = framework
        self._to_arrays = to_arrays

    def save(self, tensors: Any, metadata: Optional[Mapping[str, str]]) -> bytes:
        keep_alive: List[Any] = []
        data = serialize(self._to_arrays(tensors, keep_alive), metadata=metadata)
        del keep_alive
        return bytes(data)

    def save_file(
        self,
        tensors: Any,
        filename: PathLike,
        metadata: Optional[Mapping[str, str]],
        durable: Optional[bool] = None,
    ) -> None:
        keep_alive: List[Any] = []
        serialize_file(self._to_arrays(tensors, keep_alive), filename, metadata, durable=durable)
        del keep_alive

    def load(self, data: Any, device: Any = "cpu") -> Dict[str, Any]:
        return load_bytes(data, self.framework, device)

    def load_file(
        self,
        filename: PathLike,
        device: Any = "cpu",
        *,
        backend: str = "mmap",
        copy: bool = False,
        dtype: Any = None,
        progress: Any = None,
        storage_options: Optional[Mapping[str, str]] = None,
    ) -> Dict[str, Any]:
        return load_path(
            filename,
            self.framework,
            device=device,
            backend=backend,
            copy=copy,
            dtype=dtype,
            progress=progress,
            storage_options=storage_options,
        )
