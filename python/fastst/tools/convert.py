"""Leaving pickle: PyTorch checkpoints converted to safetensors without running code from them.

Takes ``.bin``, ``.pt``, ``.pth`` and ``.ckpt`` files.

Before torch sees the checkpoint, it is read as data, never run
(:mod:`fastst.tools.torch_pickle`: the zip's members, every pickle opcode by
opcode, the storages against the bytes that hold them, within
``max_pickle_bytes``). Only then is it loaded with torch's restricted
unpickler (``torch.load(weights_only=True)``, torch 2.6 or newer), through
the file opened and checked here.

Shared tensors are stored once, as the Hugging Face hub's converter does:
one name per group of tensors covering the same storage is kept and each
dropped name is recorded in the metadata as ``dropped -> kept``. After
writing, the file is read back and every tensor compared with what was
meant to be written.
"""

from __future__ import annotations

import os
import pickle
import stat
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from .. import _fastst
from .._errors import rule_error
from .._fastst.read import DEFAULT_HEADER_CAP
from .._paths import readable
from .._sources.folders import read_index
from .._sources.identify import NOT_FILES, identify, not_safetensors_message
from .._sources.opener import open_source
from . import results
from .torch_pickle import MAX_PICKLE_BYTES, check_torch, scan_legacy, scan_zip

__all__ = ["convert_pickle", "STATE_DICT_KEYS", "DTYPES", "MAX_PICKLE_BYTES"]

PathLike = Union[str, "os.PathLike[str]"]

#: Keys under which checkpoints nest their state dict, tried in this order.
STATE_DICT_KEYS = ("state_dict", "model_state_dict", "model", "module", "net", "params")

#: ``--dtype`` names -> torch dtype attribute names.
DTYPES = {
    "bf16": "bfloat16",
    "f16": "float16",
    "fp16": "float16",
    "f32": "float32",
    "fp32": "float32",
    "f64": "float64",
}


def _reason(exc: BaseException) -> str:
    """The sentences of torch's refusal that say what was refused."""
    text = " ".join(str(exc).split())
    sentences = [s.strip() for s in text.split(". ") if s.strip()]
    telling = [s for s in sentences if "GLOBAL" in s or "nsupported" in s or "not allowed" in s]
    return ". ".join(telling or sentences).rstrip(".") + "."


def _check_written(path: str, tensors: Dict[str, Any], torch: Any) -> None:
    """Reads ``path`` back and compares every tensor with what was meant to
    be written: the same names, dtypes and shapes, and the same bytes (NaN
    payloads and signed zeros included), compared by the core on several
    threads without the GIL."""
    from .._frameworks.torch import HEADER_NAMES

    raw = open_source(path, "mmap", DEFAULT_HEADER_CAP)
    try:
        if set(raw.keys()) != set(tensors):
            raise ValueError("the written file holds other tensor names than meant")
        for name, tensor in tensors.items():
            dtype, shape, _, _ = raw.info(name)
            meant = tensor.reshape(-1).view(torch.uint8).numpy()
            buffer = raw.tensor(name)[0]
            same = (
                dtype == HEADER_NAMES.get(tensor.dtype)
                and tuple(shape) == tuple(tensor.shape)
                and len(memoryview(buffer)) == meant.nbytes
                and _fastst.inspect.diff_buffers(buffer, meant, "U8")["identical"]
            )
            if not same:
                raise ValueError(f"tensor {name!r} differs after writing")
    finally:
        raw.close()


def _pick(obj: Any, key: Optional[str], torch: Any) -> Tuple[Dict[str, Any], Optional[str]]:
    """The flat state dict in ``obj`` and the key path it was found under."""

    def is_state_dict(value: Any) -> bool:
        return (
            isinstance(value, dict)
            and bool(value)
            and any(isinstance(v, torch.Tensor) for v in value.values())
        )

    if key is not None:
        value = obj
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                raise ValueError(f"no entry {key!r} in the checkpoint")
            value = value[part]
        if not is_state_dict(value):
            raise ValueError(f"entry {key!r} holds no tensors")
        return value, key
    if is_state_dict(obj) and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return obj, None
    if isinstance(obj, dict):
        for candidate in STATE_DICT_KEYS:
            if is_state_dict(obj.get(candidate)):
                return obj[candidate], candidate
        nested = [k for k, v in obj.items() if is_state_dict(v)]
        if len(nested) == 1:
            return obj[nested[0]], str(nested[0])
        if len(nested) > 1:
            raise ValueError(
                f"several entries hold tensors ({', '.join(map(repr, nested))}); pick one "
                "with --key"
            )
        if is_state_dict(obj):
            return obj, None
    raise ValueError(f"no state dict (a dict of tensors) in the checkpoint ({type(obj).__name__})")


def convert_pickle(
    source: PathLike,
    output: PathLike,
    *,
    key: Optional[str] = None,
    dtype: Optional[str] = None,
    max_shard_size: Optional[Union[int, str]] = None,
    max_pickle_bytes: int = MAX_PICKLE_BYTES,
    progress: Optional[Callable[[str], None]] = None,
) -> results.ConvertReport:
    """Converts the PyTorch checkpoint ``source`` to ``output``.

    ``key``: the entry (dotted for nested dicts) holding the state dict;
    by default the checkpoint itself when it is one, else the first of
    :data:`STATE_DICT_KEYS` present, else the only entry holding tensors.
    Entries of the state dict that are not tensors are left out (listed in
    ``skipped``). ``dtype`` (``bf16``, ``f16``, ``f32``, ``f64``) converts
    the floating-point tensors. ``max_shard_size`` writes a sharded
    checkpoint into the folder ``output`` instead of one file.
    ``max_pickle_bytes`` bounds the checkpoint's pickle (see
    :data:`MAX_PICKLE_BYTES`). ``progress(message)`` hears each phase.

    Returns ``{"source", "output", "format", "picked", "tensors",
    "parameters", "bytes", "removed_shared", "skipped", "dtype", "files",
    "verified"}`` (``files``: every file written; ``verified``: every tensor
    read back equal). Raises ValueError when the checkpoint cannot be
    converted (with a ``rule`` attribute, one of the ``convert-*`` rules,
    when it is refused before torch reads it, or when torch is older than
    2.6), OSError when it cannot be read.
    """
    import torch

    import fastst.torch as ft

    from .._frameworks.torch_storage import remove_duplicate_names

    src = os.fsdecode(os.fspath(source))
    dst = os.fsdecode(os.fspath(output))
    where = readable(src)
    tell = progress or (lambda message: None)
    check_torch(torch.__version__, where)
    found = identify(src)
    if found is None:
        raise ValueError("this is already a safetensors file")
    if found["kind"] not in ("pytorch-zip", "pickle", "zip"):
        message = not_safetensors_message(found)
        if found["kind"] not in NOT_FILES:
            message = message.replace(", not a safetensors file", ", not a PyTorch checkpoint")
        raise ValueError(message)
    target = None
    if dtype is not None:
        if dtype.lower() not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
        target = getattr(torch, DTYPES[dtype.lower()])
    with open(
        src, "rb", opener=lambda path, flags: os.open(path, flags | getattr(os, "O_NONBLOCK", 0))
    ) as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise rule_error("not-regular-file", where, "not a regular file")
        tell("checking the checkpoint's layout and pickle")
        scan = scan_zip if fh.read(4) == b"PK\x03\x04" else scan_legacy  # as torch.load tells
        fh.seek(0)
        scan(fh, st.st_size, where, max_pickle_bytes)
        # torch reads the file checked here, even if the path changed since.
        proc = f"/proc/self/fd/{fh.fileno()}"
        loaded = proc if os.path.exists(proc) else src
        tell("loading with torch.load(weights_only=True)")
        try:
            try:
                obj = torch.load(loaded, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc):
                    raise
                obj = torch.load(loaded, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            raise ValueError(f"refused by torch's restricted unpickler: {_reason(exc)}") from None
        except (RuntimeError, EOFError, ValueError) as exc:
            raise ValueError(f"torch cannot load it: {' '.join(str(exc).split())}") from None
    state, picked = _pick(obj, key, torch)
    tensors: Dict[str, Any] = {}
    skipped: List[str] = []
    for name, value in state.items():
        if isinstance(value, torch.Tensor) and isinstance(name, str):
            tensors[name] = value
        else:
            skipped.append(str(name))
    metadata: Dict[str, str] = {"format": "pt"}
    removed: Dict[str, str] = {}
    try:
        groups = remove_duplicate_names(tensors)
    except RuntimeError as exc:
        raise ValueError(str(exc)) from None
    for kept, dropped_names in groups.items():
        for dropped in dropped_names:
            metadata.setdefault(dropped, kept)
            removed[dropped] = kept
            del tensors[dropped]
    converted = 0
    for name, tensor in tensors.items():
        if target is not None and tensor.is_floating_point() and tensor.dtype != target:
            tensor = tensor.to(target)
            converted += 1
        tensors[name] = tensor.contiguous()
    tell(f"writing {len(tensors):,} tensors")
    if max_shard_size is not None:
        written = ft.save_sharded(tensors, dst, max_shard_size=max_shard_size, metadata=metadata)
        folder = os.path.dirname(written)
        shards = sorted(set(read_index(written)[1]["weight_map"].values()))
        files = [written] + [os.path.join(folder, s) for s in shards]
        check_path = written
    else:
        ft.save_file(tensors, dst, metadata=metadata)
        files = [dst]
        check_path = dst
    tell("reading back and comparing every tensor")
    _check_written(check_path, tensors, torch)
    return {
        "source": src,
        "output": check_path,
        "format": found["kind"],
        "picked": picked,
        "tensors": len(tensors),
        "parameters": sum(int(t.numel()) for t in tensors.values()),
        "bytes": sum(int(t.numel()) * t.element_size() for t in tensors.values()),
        "removed_shared": removed,
        "skipped": skipped,
        "dtype": DTYPES[dtype.lower()] if dtype is not None else None,
        "converted": converted,
        "files": files,
        "verified": True,
    }
