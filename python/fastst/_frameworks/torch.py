"""torch backend: zero-copy CPU tensors over a file's pages, and CUDA loads.

Slices follow torch's own indexing rules; CUDA loads go through pinned
staging memory."""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as _np

from .. import _frameworks
from .._errors import Where, rule_error

torch = _frameworks.require("torch")


def _dtype(name: str) -> Any:
    return getattr(torch, name, None)


#: Header dtype name -> torch dtype (None where this torch lacks it).
TORCH_DTYPES: Dict[str, Any] = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "U16": _dtype("uint16"),
    "I16": torch.int16,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "U32": _dtype("uint32"),
    "I32": torch.int32,
    "F32": torch.float32,
    "C64": torch.complex64,
    "U64": _dtype("uint64"),
    "I64": torch.int64,
    "F64": torch.float64,
    "F8_E4M3": _dtype("float8_e4m3fn"),
    "F8_E5M2": _dtype("float8_e5m2"),
    "F8_E4M3FNUZ": _dtype("float8_e4m3fnuz"),
    "F8_E5M2FNUZ": _dtype("float8_e5m2fnuz"),
    "F8_E8M0": _dtype("float8_e8m0fnu"),
    # Two FP4 values per byte: the last dimension counts bytes, not values.
    "F4": _dtype("float4_e2m1fn_x2"),
}

#: torch dtype -> header dtype name.
HEADER_NAMES: Dict[Any, str] = {dt: name for name, dt in TORCH_DTYPES.items() if dt is not None}

#: Bytes per element, as torch stores them.
ITEM_SIZES: Dict[Any, int] = {dt: torch.empty((), dtype=dt).element_size() for dt in HEADER_NAMES}


#: torch's CPU allocator starts every tensor's memory at a multiple of this
#: many bytes: an owned load placed no more strictly takes torch's own memory.
ALLOC_ALIGN = 64


def torch_dtype(dtype: str, where: Where) -> Any:
    found = TORCH_DTYPES.get(dtype)
    if found is None:
        raise where.error(
            "framework-dtype",
            f"dtype {dtype} has no torch equivalent in torch {torch.__version__}",
        )
    return found


def torch_shape(dtype: str, shape: Sequence[int], where: Where) -> Tuple[int, ...]:
    """The shape torch sees: F4 packs two values per byte along the last axis."""
    dims = tuple(int(d) for d in shape)
    if dtype != "F4":
        return dims
    if not dims or dims[-1] % 2:
        raise where.error(
            "framework-dtype",
            f"F4 tensor of shape {list(dims)} cannot be held by "
            "torch.float4_e2m1fn_x2, which needs an even last dimension",
        )
    return dims[:-1] + (dims[-1] // 2,)


def cpu_tensor(buffer: Any, dtype: str, shape: Sequence[int], where: Where) -> Any:
    """A CPU tensor sharing the buffer's memory (writable; no copy)."""
    tdtype = torch_dtype(dtype, where)
    dims = torch_shape(dtype, shape, where)
    if len(buffer) == 0:
        # torch.frombuffer refuses empty buffers.
        return torch.empty(dims, dtype=tdtype)
    return torch.frombuffer(buffer, dtype=tdtype).view(dims)


# devices ----------------------------------------------------------------


class Target:
    """Where tensors of one open file go: a torch device, and for CUDA the
    pinned staging buffers reused across that file's tensors."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.is_cpu = device.type == "cpu"
        self._stager: Optional[PinnedStager] = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Target({self.device})"

    def place(self, tensor: Any) -> Any:
        if self.is_cpu:
            return tensor
        if self.device.type != "cuda":
            return tensor.to(self.device)
        # Allocating on the device first raises torch's own error (RuntimeError)
        # on a machine without CUDA, before any staging memory is pinned.
        out = torch.empty(tensor.shape, dtype=tensor.dtype, device=self.device)
        if tensor.numel() == 0:
            return out
        with self._lock:
            if self._stager is None:
                self._stager = PinnedStager(self.device)
            self._stager.copy(tensor, out)
        return out

    def synchronize(self) -> None:
        """Waits until every copy issued for this file has landed."""
        with self._lock:
            if self._stager is not None:
                self._stager.synchronize()


def stand_in(shape: Sequence[int]) -> Any:
    """A uint8 tensor of ``shape`` whose elements all share one byte: an index
    applied to it raises what torch raises for the whole tensor."""
    return torch.zeros((), dtype=torch.uint8).expand(tuple(shape))


def check_device(device: Any) -> Target:
    """Normalises ``device`` ("cpu", "cuda", "cuda:N", an int N >= 0 meaning
    "cuda:N", a torch.device, or another torch device name)."""
    if isinstance(device, Target):
        return device
    if isinstance(device, bool):
        raise rule_error("bad-device", "", f"device {device!r} is invalid")
    if isinstance(device, int):
        if device < 0:
            raise rule_error("bad-device", "", f"device {device} is invalid")
        return Target(torch.device("cuda", device))
    if isinstance(device, torch.device):
        parsed = device
    elif isinstance(device, str):
        try:
            parsed = torch.device(device)
        except RuntimeError:
            raise rule_error("bad-device", "", f"device {device} is invalid") from None
    else:
        raise rule_error("bad-device", "", f"device {device!r} is invalid")
    if parsed.type == "meta":
        raise rule_error("bad-device", "", f"device {device} is invalid: meta tensors hold no data")
    return Target(parsed)


class PinnedStager:
    """Double-buffered pinned host memory for host-to-device copies.

    Bytes are copied from the (pageable, memory-mapped) tensor into one half
    while the other half's asynchronous copy to the device may still run; an
    event per half says when it may be overwritten. Small tensors share a
    half, large ones go through in chunks.
    """

    CHUNK = 32 << 20

    def __init__(self, device: Any) -> None:
        self.device = device
        self.halves = [
            torch.empty(self.CHUNK, dtype=torch.uint8, pin_memory=True) for _ in range(2)
        ]
        self.events = [torch.cuda.Event() for _ in range(2)]
        self.pending = [False, False]
        self.current = 0
        self.used = 0

    def _next_half(self) -> None:
        self.current ^= 1
        self.used = 0
        if self.pending[self.current]:
            self.events[self.current].synchronize()
            self.pending[self.current] = False

    def copy(self, src: Any, dst: Any) -> None:
        src_bytes = src.contiguous().reshape(-1).view(torch.uint8)
        dst_bytes = dst.reshape(-1).view(torch.uint8)
        total = src_bytes.numel()
        stream = torch.cuda.current_stream(self.device)
        done = 0
        while done < total:
            if self.used == self.CHUNK:
                self._next_half()
            take = min(total - done, self.CHUNK - self.used)
            half = self.current
            staging = self.halves[half][self.used : self.used + take]
            staging.copy_(src_bytes[done : done + take])
            dst_bytes[done : done + take].copy_(staging, non_blocking=True)
            self.events[half].record(stream)
            self.pending[half] = True
            self.used += take
            done += take

    def synchronize(self) -> None:
        for half in (0, 1):
            if self.pending[half]:
                self.events[half].synchronize()
                self.pending[half] = False


# backend ----------------------------------------------------------------


def tensor(buffer: Any, dtype: str, shape: Sequence[int], device: Target, where: Where) -> Any:
    return device.place(cpu_tensor(buffer, dtype, shape, where))


def index(
    buffer: Any,
    dtype: str,
    shape: Sequence[int],
    key: Any,
    device: Target,
    where: Where,
) -> Any:
    part = _frameworks.apply_index(cpu_tensor(buffer, dtype, shape, where), key, where)
    return device.place(part)


def settle(device: Target) -> None:
    device.synchronize()


def empty(
    dtype: str, shape: Sequence[int], where: Where, place: _frameworks.Placement
) -> Tuple[Any, Any]:
    """An uninitialised CPU tensor for tensor ``where`` of header dtype
    ``dtype`` and ``shape`` (filled by an owned load): torch's own memory,
    or where ``place`` asks for more than torch's alignment (and the
    element size allows) memory from numpy's allocator placed there; and
    its bytes as a writable uint8 numpy array (no copy)."""
    dims, tdtype = torch_shape(dtype, shape, where), torch_dtype(dtype, where)
    align, phase = place
    try:
        if (align <= ALLOC_ALIGN and phase % align == 0) or phase % tdtype.itemsize:
            made = torch.empty(dims, dtype=tdtype)
        else:
            # Placed as asked: exactly its bytes, inside a block from numpy's
            # allocator that the tensor's storage holds.
            nbytes = tdtype.itemsize
            for d in dims:
                nbytes *= d
            block = _np.empty(nbytes + align, dtype=_np.uint8)
            skip = (phase - block.ctypes.data) % align
            made = torch.from_numpy(block[skip : skip + nbytes]).view(tdtype).view(dims)
    except RuntimeError as exc:
        # torch's CPU allocator reports a failed allocation as RuntimeError.
        if "allocate" not in str(exc):
            raise
        raise MemoryError(str(exc)) from None
    if made.numel() == 0:
        return made, _np.empty(0, dtype=_np.uint8)
    return made, made.reshape(-1).view(torch.uint8).numpy()


def place(made: Any, device: Target) -> Any:
    """A tensor filled by an owned load, on its device."""
    return device.place(made)


_frameworks.register(
    _frameworks.Backend(
        "torch",
        check_device,
        tensor,
        index,
        settle,
        empty=empty,
        place=place,
        stand_in=stand_in,
        check_dtype=torch_dtype,
    )
)

__all__: List[str] = ["TORCH_DTYPES", "HEADER_NAMES", "ITEM_SIZES", "check_device", "Target"]
