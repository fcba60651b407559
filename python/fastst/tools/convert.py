"""Leaving pickle: PyTorch checkpoints (``.bin``, ``.pt``, ``.pth``,
``.ckpt``) converted to safetensors without running code from them.

Before torch sees the checkpoint, it is read here as data, never run: a
zip must hold exactly the members ``torch.save`` writes (a TorchScript
archive, which holds code, is refused), every pickle is followed opcode by
opcode (:mod:`pickletools`) and may use only the opcodes and globals a state
dict needs, and the storages it declares must match the bytes the file holds
for them; the pickle is read within ``max_pickle_bytes``. Only then is it
loaded with torch's restricted unpickler (``torch.load(weights_only=True)``,
torch 2.6 or newer: older ones hand TorchScript archives to the TorchScript
loader, which runs their code), through the file opened and checked here.

Shared tensors are stored once, as the Hugging Face hub's converter does:
one name per group of tensors covering the same storage is kept and each
dropped name is recorded in the metadata as ``dropped -> kept``. After
writing, the file is read back and every tensor compared with what was
meant to be written.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import re
import stat
import struct
import zipfile
import zlib
from typing import IO, Any, Callable, Dict, List, Optional, Tuple, Union

from .. import _fastst
from .._errors import rule_error
from .._fastst import DEFAULT_HEADER_CAP
from .._folders import read_index
from .._identify import NOT_FILES, identify, not_safetensors_message
from .._paths import readable
from .._sharded import open_raw
from . import results

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


#: Default of ``max_pickle_bytes``: the most of a checkpoint's pickle read.
#: A state dict's pickle takes a few hundred bytes per tensor (the tensor
#: data lies outside it), so this is far above any real one, while keeping
#: what unpickling holds in memory (here and in torch) bounded.
MAX_PICKLE_BYTES = 256 << 20

#: The most a compressed ``data.pkl`` may expand (a state dict's pickle
#: deflates to about a quarter; zip bombs expand a thousandfold).
MAX_RATIO = 100

#: Members of a ``torch.save`` zip besides ``data.pkl`` and the storages
#: ``data/<key>``, each a few bytes (``.data/version`` is where torch's
#: reader looks for the version first).
_RECORDS = frozenset(
    {
        "version",
        ".data/version",
        "byteorder",
        ".format_version",
        ".storage_alignment",
        ".data/serialization_id",
    }
)
_SMALL = 1024
_STORAGE_MEMBER = re.compile(r"data/[0-9]+")
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001

#: The opcodes a ``torch.save`` state dict uses (protocol 2), a subset of
#: those torch's restricted unpickler reads.
_OPCODES = frozenset(
    "PROTO STOP GLOBAL REDUCE BUILD MARK TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_TUPLE EMPTY_LIST "
    "EMPTY_DICT APPEND APPENDS SETITEM SETITEMS NONE NEWTRUE NEWFALSE BININT BININT1 BININT2 "
    "LONG1 BINFLOAT BINUNICODE SHORT_BINSTRING BINPERSID BINGET LONG_BINGET BINPUT "
    "LONG_BINPUT".split()
)
#: Storage classes a persistent id may name -> the size of their elements.
_STORAGES = {
    f"torch.{kind}Storage": int(size)
    for kind, size in (
        pair.split(":")
        for pair in (
            "Double:8 Float:4 Half:2 BFloat16:2 Long:8 Int:4 Short:2 Char:1 Byte:1 Bool:1 "
            "ComplexDouble:16 ComplexFloat:8"
        ).split()
    )
}
_STORAGES["torch.storage.UntypedStorage"] = 1
#: Globals a pickle may call (REDUCE): the tensor and parameter builders and
#: the state dict's own class.
_CALLS = frozenset(
    {
        "collections.OrderedDict",
        "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_tensor_v3",
        "torch._utils._rebuild_parameter",
    }
)
#: Every global a pickle may name: those, the storage classes and the dtypes.
_GLOBALS = (
    _CALLS
    | set(_STORAGES)
    | {
        f"torch.{dtype}"
        for dtype in (
            "float64 float32 float16 bfloat16 int64 int32 int16 int8 uint64 uint32 uint16 uint8 "
            "bool complex64 complex128 float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz "
            "float8_e8m0fnu float4_e2m1fn_x2"
        ).split()
    }
)


class _Global:
    """A global a pickle names (``module.name``), as a value of the scan."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


#: Dicts and what calls return, as values of the scan: their contents do not matter.
_OBJECT = object()


def _refuse(rule: str, where: str, message: str) -> BaseException:
    return rule_error(rule, where, f"{message} [{rule}]")


def _storage(pid: Any) -> Optional[Tuple[str, int, int]]:
    """(key, elements, element size) of a storage's persistent id: ``("storage",
    class, key, location, elements)``, plus ``None`` (no view) in the legacy
    format. None for anything else."""
    if not (
        type(pid) is tuple
        and len(pid) in (5, 6)
        and pid[0] == "storage"
        and pid[5:] in ((), (None,))
    ):
        return None
    _, kind, key, location, numel = pid[:5]
    size = _STORAGES.get(kind.name) if isinstance(kind, _Global) else None
    if size is None or type(key) is not str or type(location) is not str:
        return None
    return (key, numel, size) if type(numel) is int and numel >= 0 else None


def _scan_pickle(stream: IO[bytes], where: str) -> Tuple[Any, Dict[str, Tuple[int, int]]]:
    """Follows one pickle opcode by opcode, running nothing: the value it
    leaves (lists, tuples, strings and numbers as such, other objects as
    placeholders) and the storages its persistent ids declare, key ->
    (elements, element size). Refuses (rule ``convert-pickle-refused``) an
    opcode or global a state dict does not need, and a malformed pickle."""
    stack: List[Any] = []
    marks: List[List[Any]] = []
    memo: Dict[int, Any] = {}
    storages: Dict[str, Tuple[int, int]] = {}

    def refuse(message: str) -> BaseException:
        return _refuse("convert-pickle-refused", where, message)

    try:
        for op, arg, pos in pickletools.genops(stream):
            code = op.name
            if code not in _OPCODES:
                raise refuse(f"opcode {code} at byte {pos} of the pickle: a state dict needs none")
            if code == "GLOBAL":
                name = ".".join(arg.split(" ", 1))
                if name not in _GLOBALS:
                    raise refuse(
                        f"GLOBAL {name} at byte {pos} of the pickle: a state dict needs none "
                        "(it could run code)"
                    )
                stack.append(_Global(name))
            elif code == "MARK":
                marks.append(stack)
                stack = []
            elif code in ("TUPLE", "APPENDS", "SETITEMS"):
                items, stack = stack, marks.pop()
                if code == "TUPLE":
                    stack.append(tuple(items))
                elif code == "APPENDS":
                    stack[-1].extend(items)
                elif stack[-1] is not _OBJECT:
                    raise IndexError
            elif code in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(code[-1])
                if len(stack) < n:
                    raise IndexError
                stack[-n:] = [tuple(stack[-n:])]
            elif code == "APPEND":
                item = stack.pop()
                stack[-1].append(item)
            elif code in ("SETITEM", "BUILD", "REDUCE"):
                del stack[-(2 if code == "SETITEM" else 1) :]
                call = stack[-1]
                if code == "REDUCE":
                    if not (isinstance(call, _Global) and call.name in _CALLS):
                        raise refuse(f"REDUCE at byte {pos} of the pickle calls what is no builder")
                    stack[-1] = _OBJECT
            elif code == "BINPERSID":
                found = _storage(stack.pop())
                if found is None:
                    raise refuse(f"persistent id at byte {pos} of the pickle names no storage")
                key, numel, size = found
                if storages.setdefault(key, (numel, size)) != (numel, size):
                    raise refuse(f"storage {key!r} is declared twice with different sizes")
                stack.append(_OBJECT)
            elif code in ("BINPUT", "LONG_BINPUT"):
                memo[arg] = stack[-1]
            elif code in ("BINGET", "LONG_BINGET"):
                stack.append(memo[arg])
            elif code not in ("PROTO", "STOP"):
                empty = {"EMPTY_DICT": _OBJECT, "EMPTY_LIST": [], "EMPTY_TUPLE": ()}
                stack.append({"NEWTRUE": True, "NEWFALSE": False, **empty}.get(code, arg))
        (value,) = stack
    except (ValueError, LookupError, AttributeError) as exc:
        if getattr(exc, "rule", None) is not None:
            raise
        raise refuse(f"malformed pickle ({exc!r})") from None
    return value, storages


def _scan_zip(fh: IO[bytes], size: int, where: str, cap: int) -> None:
    """Refuses a zip that is not exactly what ``torch.save`` writes (or whose
    pickle is refused), before torch reads it."""

    def layout(message: str) -> BaseException:
        return _refuse("convert-zip-layout", where, message)

    try:
        archive = zipfile.ZipFile(fh)
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise layout(f"not a zip archive torch can read ({exc})") from None
    with archive:
        infos = archive.infolist()
        parts = [info.filename.partition("/") for info in infos]
        if any(rest == "constants.pkl" or rest.startswith("code/") for _, _, rest in parts):
            raise _refuse(
                "convert-torchscript",
                where,
                "this is a TorchScript archive (code/, constants.pkl): it holds code, and "
                "convert reads only what torch.save writes",
            )
        root = parts[0][0] if parts else ""
        members: Dict[str, zipfile.ZipInfo] = {}
        for info, (head, slash, rest) in zip(infos, parts):
            problem = None
            if head != root or not slash or head in ("", ".", "..") or "\\" in info.filename:
                problem = "lies outside the archive's one folder"
            elif (
                rest not in _RECORDS and rest != "data.pkl" and not _STORAGE_MEMBER.fullmatch(rest)
            ):
                problem = "is not one torch.save writes"
            elif rest in members:
                problem = "appears twice"
            elif info.flag_bits & 1:
                problem = "is encrypted"
            elif info.compress_type != zipfile.ZIP_STORED and (
                rest.startswith("data/") or info.compress_type != zipfile.ZIP_DEFLATED
            ):
                problem = (
                    "is compressed (torch.save stores it; torch would map the compressed bytes)"
                )
            elif rest in _RECORDS and info.file_size > _SMALL:
                problem = f"holds {info.file_size:,} bytes (torch.save writes a few)"
            else:
                fh.seek(info.header_offset)
                local = fh.read(30)
                if len(local) < 30 or local[:4] != b"PK\x03\x04":
                    problem = "has no local header where the directory says"
                elif (
                    info.header_offset
                    + 30
                    + sum(struct.unpack("<HH", local[26:]))
                    + info.compress_size
                    > size
                ):
                    problem = "runs past the end of the file"
            if problem is not None:
                raise layout(f"member {info.filename!r} {problem}")
            members[rest] = info
        pkl = members.get("data.pkl")
        if pkl is None:
            raise layout("no data.pkl: not a checkpoint torch.save wrote")
        if pkl.file_size > cap:
            raise _refuse(
                "convert-pickle-size",
                where,
                f"data.pkl holds {pkl.file_size:,} bytes, above the limit of {cap:,} bytes "
                "(raise it with --max-pickle-size or max_pickle_bytes=)",
            )
        if (
            pkl.compress_type != zipfile.ZIP_STORED
            and pkl.file_size > MAX_RATIO * pkl.compress_size
        ):
            raise _refuse(
                "convert-pickle-size",
                where,
                f"data.pkl expands {pkl.file_size:,} bytes from {pkl.compress_size:,}, more than "
                f"the limit of {MAX_RATIO}:1 (a zip bomb? torch.save stores it uncompressed)",
            )
        try:
            pickled = archive.read(pkl)
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise layout(f"data.pkl cannot be read ({exc})") from None
        _, storages = _scan_pickle(io.BytesIO(pickled), where)
    data = {rest[5:]: info for rest, info in members.items() if rest.startswith("data/")}
    for key, (numel, itemsize) in storages.items():
        info = data.pop(key, None)
        held = "no member" if info is None else f"{info.file_size:,} bytes"
        if info is None or info.file_size != numel * itemsize:
            raise _refuse(
                "convert-storage-size",
                where,
                f"storage {key!r} is declared as {numel:,} elements of {itemsize} bytes, but the "
                f"file holds {held} for it",
            )
    if data:
        raise layout(f"member data/{min(data)} belongs to no storage")


def _scan_legacy(fh: IO[bytes], size: int, where: str, cap: int) -> None:
    """Refuses a legacy checkpoint (pickles, then each storage's element
    count and bytes) that is not exactly what ``torch.save`` writes, before
    torch reads it."""
    stream = io.BytesIO(fh.read(min(size, cap)))
    try:
        magic, protocol = (_scan_pickle(stream, where)[0] for _ in range(2))
        if magic != _LEGACY_MAGIC or protocol != _LEGACY_PROTOCOL:
            raise _refuse("convert-pickle-refused", where, "a pickle, but not a PyTorch checkpoint")
        _scan_pickle(stream, where)  # system information
        storages = _scan_pickle(stream, where)[1]
        keys = _scan_pickle(stream, where)[0]
    except ValueError:
        if stream.tell() < cap:
            raise
        raise _refuse(
            "convert-pickle-size",
            where,
            f"the pickles run past {cap:,} bytes, the limit (raise it with --max-pickle-size "
            "or max_pickle_bytes=)",
        ) from None
    if type(keys) is not list or any(type(k) is not str for k in keys):
        raise _refuse("convert-pickle-refused", where, "the list of storages is not one of names")
    if sorted(keys) != sorted(storages):
        raise _refuse(
            "convert-storage-size", where, "the list of stored storages differs from those declared"
        )
    pos = stream.tell()
    for key in keys:
        numel, itemsize = storages[key]
        fh.seek(pos)
        count = int.from_bytes(fh.read(8), "little")
        pos += 8 + numel * itemsize
        if count != numel or pos > size:
            raise _refuse(
                "convert-storage-size",
                where,
                f"storage {key!r} is declared as {numel:,} elements of {itemsize} bytes, but the "
                "file holds another count or fewer bytes",
            )
    if pos != size:
        raise _refuse(
            "convert-storage-size", where, f"{size - pos:,} bytes follow the last storage"
        )


def _check_torch(version: str, where: str) -> None:
    """Refuses torch older than 2.6, whose ``torch.load(weights_only=True)``
    hands TorchScript archives to the TorchScript loader (CVE-2025-32434)."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None or (int(found[1]), int(found[2])) < (2, 6):
        raise _refuse(
            "convert-torch-version",
            where,
            f"convert needs torch 2.6 or newer, not {version}: older torch.load(weights_only=True) "
            "runs the code of TorchScript archives (CVE-2025-32434); upgrade torch",
        )


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
    from .._fw_torch import HEADER_NAMES

    raw = open_raw(path, "mmap", DEFAULT_HEADER_CAP)
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
                and _fastst.diff_buffers(buffer, meant, "U8")["identical"]
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

    from ..torch import _remove_duplicate_names

    src = os.fsdecode(os.fspath(source))
    dst = os.fsdecode(os.fspath(output))
    where = readable(src)
    tell = progress or (lambda message: None)
    _check_torch(torch.__version__, where)
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
        scan = _scan_zip if fh.read(4) == b"PK\x03\x04" else _scan_legacy  # as torch.load tells
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
        groups = _remove_duplicate_names(tensors)
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
