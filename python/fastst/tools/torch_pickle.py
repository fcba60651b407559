"""What a PyTorch checkpoint may hold, checked as data before torch reads it.

A zip must hold exactly the members ``torch.save`` writes (a TorchScript
archive, which holds code, is refused); every pickle is followed opcode by
opcode (:mod:`pickletools`), never run, and may use only the opcodes and
globals a state dict needs; the storages it declares must match the bytes
the file holds for them; the pickle is read within a cap, and a compressed
one is refused before inflating when it would expand too far. torch older
than 2.6 is refused (it hands TorchScript archives to the TorchScript
loader, which runs their code). Used by :mod:`fastst.tools.convert`.
"""

from __future__ import annotations

import io
import pickletools
import re
import struct
import zipfile
import zlib
from typing import IO, Any, Dict, List, Optional, Tuple, cast

from .._errors import rule_error

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
                name = ".".join(str(arg).split(" ", 1))
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
                memo[cast(int, arg)] = stack[-1]  # an int for these opcodes
            elif code in ("BINGET", "LONG_BINGET"):
                stack.append(memo[cast(int, arg)])
            elif code not in ("PROTO", "STOP"):
                empty = {"EMPTY_DICT": _OBJECT, "EMPTY_LIST": [], "EMPTY_TUPLE": ()}
                stack.append({"NEWTRUE": True, "NEWFALSE": False, **empty}.get(code, arg))
        (value,) = stack
    except (ValueError, LookupError, AttributeError) as exc:
        if getattr(exc, "rule", None) is not None:
            raise
        raise refuse(f"malformed pickle ({exc!r})") from None
    return value, storages


def scan_zip(fh: IO[bytes], size: int, where: str, cap: int) -> None:
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
        for info, (head, slash, rest) in zip(infos, parts, strict=True):
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
        stored = data.pop(key) if key in data else None
        held = "no member" if stored is None else f"{stored.file_size:,} bytes"
        if stored is None or stored.file_size != numel * itemsize:
            raise _refuse(
                "convert-storage-size",
                where,
                f"storage {key!r} is declared as {numel:,} elements of {itemsize} bytes, but the "
                f"file holds {held} for it",
            )
    if data:
        raise layout(f"member data/{min(data)} belongs to no storage")


def scan_legacy(fh: IO[bytes], size: int, where: str, cap: int) -> None:
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


def check_torch(version: str, where: str) -> None:
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
