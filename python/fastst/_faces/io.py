"""``FrameworkIO``: the save and load functions of a framework module, made from one function.

The one function is a :data:`fastst._frameworks.ToArrays`, turning the
framework's tensors into arrays; ``save``, ``save_file``, ``load`` and
``load_file`` are made from it."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from .._frameworks import ToArrays
from .._paths import os_path, readable
from .._read.load import load_bytes
from .._read.safe_open import load_path
from .._write.tensors import check_align, serialize, serialize_file

PathLike = Union[str, "os.PathLike[str]"]


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

    def save(
        self, tensors: Any, metadata: Optional[Mapping[str, str]], align: Optional[int] = None
    ) -> bytes:
        keep_alive: List[Any] = []
        data = serialize(self._to_arrays(tensors, keep_alive), metadata=metadata, align=align)
        del keep_alive
        return bytes(data)

    def save_file(
        self,
        tensors: Any,
        filename: PathLike,
        metadata: Optional[Mapping[str, str]],
        durable: Optional[bool] = None,
        align: Optional[int] = None,
        storage_options: Optional[Mapping[str, Any]] = None,
    ) -> None:
        keep_alive: List[Any] = []
        arrays = self._to_arrays(tensors, keep_alive)
        serialize_file(
            arrays,
            filename,
            metadata,
            durable=durable,
            align=align,
            storage_options=storage_options,
        )
        del keep_alive

    def shard_saver(
        self,
        folder: Any,
        align: Optional[int],
        storage_options: Optional[Mapping[str, Any]] = None,
    ) -> Callable[..., None]:
        """What a sharded save into ``folder`` writes each shard with:
        :meth:`save_file` with ``align`` and ``storage_options`` (a URL's)
        (``save_one(subset, path, metadata, durable)``), ``align`` checked at
        once (before any shard)."""
        check_align(readable(os_path(folder)), align)

        def save_one(
            tensors: Any,
            filename: PathLike,
            metadata: Optional[Mapping[str, str]],
            durable: Optional[bool] = None,
        ) -> None:
            self.save_file(tensors, filename, metadata, durable, align, storage_options)

        return save_one

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
