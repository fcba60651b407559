"""The streaming writer: a file written tensor by tensor from its layout, saved whole or not at all.

:func:`open_writer` takes the layout first (each tensor's name, dtype and
shape) and the metadata, so the header and every tensor's place in the file
are known before any data: the header is planned exactly as ``save_file``
plans it (the same bytes for the same tensors). Tensors then arrive in any
order, from any thread, through :meth:`TensorWriter.write`; each is
converted by the input path every save uses (:func:`fastst._write.tensors.prepare`:
any layout, byte order, ``TensorSpec``, a torch tensor through the torch
conversion) and written at its final offset with the GIL released, a few
megabytes at a time for inputs that need converting, so memory stays
bounded by the tensors in hand, never the checkpoint.

The file is written unnamed beside its target (a short-named temporary
where the system has no unnamed files) and replaces the target only when
the ``with`` block ends cleanly with every tensor written completely
(:meth:`TensorWriter.close`). An exception in the block, a tensor missing,
or :meth:`TensorWriter.abort` leave the target as it was and no temporary
file behind. A URL of object storage is written the same way with a
multipart upload (:func:`fastst._write.remote.layout_writer`), each part
sent as soon as every byte of it was written and the upload completed by
:meth:`TensorWriter.close`, or aborted.

:func:`upload_layout` writes a file of a layout to a URL of object storage
in the file's order instead: each tensor is asked for when the multipart
upload reaches it, so memory holds the tensor in hand and the parts in
flight, never the file.
"""

from __future__ import annotations

import os
from collections import abc
from types import TracebackType
from typing import (
    Any,
    Callable,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
)

from .._dtypes import FACTS, NUMPY_DTYPES, target_dtype
from .._errors import SafetensorError, rule_error, save_errors
from .._fastst.read import DEFAULT_HEADER_CAP
from .._fastst.write import LayoutWriter, WritePlan
from .._frameworks import writable
from .._paths import os_path, readable
from .._sources.ranges import TensorRange
from .._sources.remote import refuse_local_options
from . import remote as _remote
from .shared_folder import drop_sharded_layout
from .tensors import SPEC_DTYPES, byte_view, check_align, check_metadata, prepare

__all__ = ["open_writer", "TensorWriter", "upload_layout"]

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

#: ``name -> (dtype, shape)``: the dtype as a header name (``"BF16"``), a
#: numpy dtype, a torch dtype or an ml_dtypes name; the shape a sequence of
#: ints.
Layout = Mapping[str, Tuple[Any, Sequence[int]]]

#: The packed FP4 spelling whose last dimension counts bytes (two values
#: each), as torch's ``float4_e2m1fn_x2`` and the reference's TensorSpec do.
_FP4_X2 = "float4_e2m1fn_x2"


def _layout_dtype(where: str, name: str, dtype: Any) -> Tuple[str, bool]:
    """``(header name, whether the last dimension counts pairs of FP4
    values)`` of a layout's dtype; rule ``unsupported-dtype`` otherwise."""
    if isinstance(dtype, str) and dtype in NUMPY_DTYPES:
        return dtype, False
    spelled = dtype if isinstance(dtype, str) else str(dtype).rsplit(".", 1)[-1]
    if spelled == _FP4_X2:
        return "F4", True
    if isinstance(dtype, str) and dtype in SPEC_DTYPES:
        return SPEC_DTYPES[dtype], False
    try:
        return target_dtype(dtype), False
    except (SafetensorError, TypeError, ValueError):
        raise rule_error(
            "unsupported-dtype",
            where,
            f"tensor {name!r}: dtype {dtype!r} has no safetensors equivalent",
            name,
        ) from None


#: Dimensions of a shape are below this (what the format's readers take).
_DIM_LIMIT = 1 << 63


def _layout_shape(where: str, name: str, shape: Any) -> List[int]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, abc.Iterable):
        raise rule_error(
            "bad-shape", where, f"tensor {name!r}: shape {shape!r} is not a sequence of ints", name
        )
    dims: List[int] = []
    for d in shape:
        if isinstance(d, bool) or not hasattr(d, "__index__"):
            raise rule_error(
                "bad-shape",
                where,
                f"tensor {name!r}: shape {shape!r} is not a sequence of ints",
                name,
            )
        dims.append(d.__index__())
    if any(d < 0 for d in dims):
        raise rule_error(
            "bad-shape", where, f"tensor {name!r}: shape {dims} has a negative dimension", name
        )
    if any(d >= _DIM_LIMIT for d in dims):
        raise rule_error(
            "bad-shape",
            where,
            f"tensor {name!r}: shape {dims} has a dimension of 2^63 or more (the format's limit)",
            name,
        )
    return dims


def layout_entries(where: str, layout: Any) -> List[Tuple[str, str, List[int]]]:
    """``(name, header dtype, header shape)`` of each entry of ``layout``."""
    if not isinstance(layout, abc.Mapping):
        raise TypeError(
            f"{where}: the layout must be a dict of tensor name -> (dtype, shape), "
            f"got {type(layout).__name__}"
        )
    entries = []
    for name, entry in layout.items():
        if not isinstance(name, str):
            raise TypeError(
                f"{where}: tensor names must be str, got {type(name).__name__} {name!r}"
            )
        if (
            isinstance(entry, (str, bytes))
            or not isinstance(entry, abc.Sequence)
            or len(entry) != 2
        ):
            raise TypeError(
                f"{where}: tensor {name!r}: a layout entry is a (dtype, shape) pair, got {entry!r}"
            )
        dtype, pairs = _layout_dtype(where, name, entry[0])
        shape = _layout_shape(where, name, entry[1])
        if pairs and shape:
            shape[-1] *= 2
        entries.append((name, dtype, shape))
    return entries


def element_count(shape: Sequence[int]) -> int:
    """Elements of a tensor of ``shape`` (1 for a scalar)."""
    count = 1
    for d in shape:
        count *= d
    return count


def tensor_bytes(dtype: str, shape: Sequence[int]) -> int:
    """Bytes of a tensor of header ``dtype`` and header ``shape`` (packed
    dtypes rounded up to whole bytes)."""
    return -(-element_count(shape) * FACTS[dtype]["bits"] // 8)


def _framework_input(name: str, value: Any, keep_alive: List[Any]) -> Any:
    """``value`` as the writer's input path takes it: a framework's tensor
    (torch's) through the conversion its ``save_file`` uses (the framework
    registry's :func:`fastst._frameworks.writable`), anything else as it is."""
    found = writable(value)
    if found is not None:
        return found.to_arrays({name: value}, keep_alive)[name]
    return value


_W = TypeVar("_W", bound="WholeOrNothing")


class WholeOrNothing:
    """The ``with`` protocol of fastst's writers: a block that ends cleanly
    saves (``close()``), one that raises discards (``abort()``)."""

    def close(self) -> Any:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def __enter__(self: _W) -> _W:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class TensorWriter(WholeOrNothing):
    """A ``.safetensors`` file being written from its layout; made by
    :func:`open_writer` (see there). Use it as a context manager, or call
    :meth:`close` (or :meth:`abort`) yourself. Safe to share between
    threads."""

    def __init__(
        self,
        path: PathLike,
        layout: Layout,
        *,
        metadata: Optional[Mapping[str, str]] = None,
        align: Optional[int] = None,
        durable: Optional[bool] = True,
        header_cap: int = DEFAULT_HEADER_CAP,
        storage_options: Optional[Mapping[str, Any]] = None,
    ) -> None:
        url = _remote.is_url(path)
        if not url:
            refuse_local_options(storage_options, path)
        target = str(path) if url else os_path(path)
        where = readable(str(path)) if url else readable(target)
        entries = layout_entries(where, layout)
        meta = check_metadata(where, metadata)
        unit = check_align(where, align)
        if durable is not None and not isinstance(durable, bool):
            raise TypeError(f"durable must be a bool or None, got {type(durable).__name__}")
        self._where = where
        self._names = frozenset(e[0] for e in entries)
        self._entries = {e[0]: (e[1], e[2]) for e in entries}
        self._local: Optional[Any] = None if url else target
        if url:
            self._native = _remote.layout_writer(
                str(path), entries, meta, header_cap, unit, storage_options
            )
        else:
            with save_errors(where):
                self._native = LayoutWriter(target, where, entries, meta, header_cap, unit, durable)

    @property
    def name(self) -> str:
        """The target file, as messages show it."""
        return self._where

    @property
    def closed(self) -> bool:
        """True once the file was saved (:meth:`close`) or discarded."""
        return self._native.closed

    @property
    def data_start(self) -> int:
        """Offset of the data section in the file (the header's length)."""
        return self._native.data_start

    def missing(self) -> List[str]:
        """Names of the tensors of the layout not written completely yet, in
        the layout's order."""
        return self._native.missing()

    def write(self, name: str, data: Any) -> None:
        """Writes tensor ``name`` of the layout from ``data``: a numpy array
        (of any layout or byte order), a torch tensor (as
        ``fastst.torch.save_file`` takes it), a ``TensorSpec``, or anything
        numpy reads, of exactly the layout's dtype and shape. Any order, any
        thread; each tensor once. On an error the tensor is left unwritten
        (it may be written again, in full) and the rest stands.

        Raises :class:`fastst.SerializeError` with rule
        ``tensor-not-in-layout``, ``layout-mismatch`` (another dtype or
        shape), ``tensor-written-twice`` or ``data-length`` (raw bytes of
        the wrong size), and :class:`fastst.ClosedFileError` once the
        writer is closed."""
        if not isinstance(name, str):
            raise TypeError(f"{self._where}: tensor names must be str, got {type(name).__name__}")
        if name not in self._names:
            raise rule_error(
                "tensor-not-in-layout",
                self._where,
                f"tensor {name!r} is not in the writer's layout",
                name,
            )
        keep_alive: List[Any] = []
        tensor = prepare(self._where, name, _framework_input(name, data, keep_alive))
        self._native.write(name, tensor.dtype, list(tensor.shape), tensor.data)
        del keep_alive

    def write_parts(self, name: str, parts: Iterable[Any]) -> None:
        """Writes tensor ``name`` of the layout from its bytes as the file
        holds them, given in order by ``parts``: C-contiguous buffers (numpy
        arrays, memoryviews, ``bytes``...) and ranges of tensors of open
        files (:class:`fastst.TensorRange`, made by
        :meth:`fastst.safe_open.tensor_bytes`), in any mix, whose lengths
        add up to the tensor's size, so that a tensor gathered from pieces
        is written without being assembled in memory. A range of a local
        file is read by the writer straight into the place its bytes go
        (no buffer in Python; each byte copied once); one of an object of a
        store through a buffer of a few megabytes. The rules and errors are
        those of :meth:`write` (an exception from ``parts`` leaves the
        tensor unwritten); a range is checked when its turn comes: its
        file closed raises :class:`fastst.ClosedFileError` (rule
        ``closed-file``), a tensor the file lacks
        :class:`fastst.TensorNotFoundError`, a range not within its tensor
        :class:`fastst.SerializeError` (rule ``range-outside-tensor``),
        each naming that file and tensor."""
        if not isinstance(name, str):
            raise TypeError(f"{self._where}: tensor names must be str, got {type(name).__name__}")
        if name not in self._names:
            raise rule_error(
                "tensor-not-in-layout",
                self._where,
                f"tensor {name!r} is not in the writer's layout",
                name,
            )
        dtype, shape = self._entries[name]
        where = self._where

        def as_bytes(items: Iterable[Any]) -> Iterator[Any]:
            for at, part in enumerate(items):
                if isinstance(part, TensorRange):
                    yield from part.parts()
                    continue
                try:
                    yield byte_view(part)
                except TypeError:
                    raise TypeError(
                        f"{where}: tensor {name!r}: part {at} given to write_parts is a "
                        f"{type(part).__name__}, not a buffer (bytes, memoryview, array) "
                        "or a TensorRange"
                    ) from None

        self._native.write(name, dtype, list(shape), as_bytes(parts))

    def close(self) -> None:
        """Saves the file: when every tensor of the layout was written, it
        replaces the target at once (flushed to disk first when durable; for
        a URL, the upload's last parts are waited for and the upload
        completed); otherwise nothing is saved, the target is left as it
        was, and
        :class:`fastst.SerializeError` (rule ``tensors-missing``) names what
        is missing. The writer is closed afterwards either way; closing it
        again raises :class:`fastst.ClosedFileError`. A file ``{prefix}.safetensors``
        replaces the sharded checkpoint of the same prefix beside it (see
        ``docs/io.md``)."""
        if self._local is None:
            self._native.commit()
            return
        with save_errors(self._where):
            self._native.commit()
        drop_sharded_layout(self._local)

    def abort(self) -> None:
        """Discards the file (for a URL, aborts the upload): nothing is
        saved and the target is left as it was. Does nothing once closed."""
        self._native.abort()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.missing())} tensors to write"
        return f"<fastst.TensorWriter {self._where!r}: {state}>"


def open_writer(
    path: PathLike,
    layout: Layout,
    *,
    metadata: Optional[Mapping[str, str]] = None,
    align: Optional[int] = None,
    durable: Optional[bool] = True,
    header_cap: int = DEFAULT_HEADER_CAP,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> TensorWriter:
    """A writer of the ``.safetensors`` file ``path`` holding the tensors of
    ``layout`` (``name -> (dtype, shape)``; the dtype as a header name such
    as ``"BF16"``, a numpy, torch or ml_dtypes dtype or its name; for
    torch's ``float4_e2m1fn_x2`` the shape is torch's, as for a
    ``TensorSpec``) and str -> str ``metadata``::

        with fastst.open_writer("model.safetensors", layout) as w:
            for name, tensor in produce():   # any order, any thread
                w.write(name, tensor)

    The file is byte-identical to what ``save_file`` writes for the same
    tensors and metadata (``align`` as for :func:`fastst.serialize`). It
    appears at ``path`` only when the block ends without an exception and
    every tensor was written completely; otherwise ``path`` keeps what it
    held and nothing is left behind. ``durable`` (default True) flushes the
    data to disk before the file replaces ``path``, so that a crash of the
    system cannot leave a truncated file there; False skips the flush,
    None flushes only when a file is replaced (``save_file``'s default).

    A URL of object storage (``s3://``, ``gs://``, ``az://``), configured
    by ``storage_options`` as reading is (else by the environment), is
    written with a multipart upload whose parts are planned from the
    layout: each part goes up, under its own number, as soon as every byte
    of it was written, whatever the order of the tensors, and the object
    appears only when the block ends cleanly with every tensor written (an
    exception, a missing tensor, a part the store keeps refusing or Ctrl-C
    abort the upload; an old object under the key stays as it was).
    Tensors written in the layout's order hold about one part being filled
    plus the parts in flight in memory; out of order, every part started
    and not complete is held too (see ``docs/remote.md``). ``durable`` does
    not apply to URLs.

    The layout is checked at once (rule ``unsupported-dtype``,
    ``bad-shape``, ``duplicate-name``, ``reserved-name``,
    ``bad-alignment``...), and the temporary file is created beside
    ``path`` (``OSError`` when the folder cannot hold it), or the upload
    started."""
    return TensorWriter(
        path,
        layout,
        metadata=metadata,
        align=align,
        durable=durable,
        header_cap=header_cap,
        storage_options=storage_options,
    )


def upload_layout(
    url: str,
    layout: Layout,
    fetch: Callable[[str], Any],
    *,
    metadata: Optional[Mapping[str, str]] = None,
    align: Optional[int] = None,
    header_cap: int = DEFAULT_HEADER_CAP,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> None:
    """Writes the file of ``layout`` (as for :func:`open_writer`) and ``metadata`` to the
    object ``url`` with a multipart upload (:func:`fastst._write.remote.upload`, whole or
    not at all), the bytes the same as ``open_writer``'s. Each tensor's data is
    ``fetch(name)`` (what :meth:`TensorWriter.write` takes), called when the upload
    reaches the tensor, in the file's order; its dtype and shape must be the layout's
    (rule ``layout-mismatch``). An error, from ``fetch`` too, aborts the upload."""
    where = readable(url)
    entries = layout_entries(where, layout)
    meta = check_metadata(where, metadata)
    unit = check_align(where, align)
    plan = WritePlan(entries, meta, where, header_cap, unit)

    def data(name: str, dtype: str, shape: List[int]) -> Iterator[Any]:
        keep_alive: List[Any] = []
        tensor = prepare(where, name, _framework_input(name, fetch(name), keep_alive))
        if tensor.dtype != dtype or list(tensor.shape) != shape:
            raise rule_error(
                "layout-mismatch",
                where,
                f"tensor {name!r} is {tensor.dtype} {list(tensor.shape)}, the layout says "
                f"{dtype} {shape}",
                name,
            )
        if isinstance(tensor.data, abc.Iterator):
            yield from tensor.data
        else:
            yield tensor.data
        del keep_alive

    _remote.upload(plan, url, [data(*entry) for entry in entries], storage_options)
