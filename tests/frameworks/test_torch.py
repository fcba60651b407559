"""fastst.torch and safe_open(framework="pt") against the reference package:
same tensors (values, dtypes, shapes) from the same files, byte-identical
saves, the same shared-tensor rules and errors; plus zero-copy, writability
and independence of what fastst hands out."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Tuple

import fastst
import fastst.torch as ft
import numpy as np
import pytest
import safetensors
import safetensors.torch as ref
import torch
from helpers.raw_files import raw_file
from helpers.st_compare import same_file_bytes
from helpers.torch_kinds import TORCH_KINDS  # noqa: E402
from hypothesis import given, settings
from hypothesis import strategies as st

SIZES = {name: torch.empty((), dtype=dt).element_size() for name, dt in TORCH_KINDS.items()}
SHAPES: List[Tuple[int, ...]] = [(2, 3), (), (0, 4), (7,)]


def payload(dtype: str, count: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    if dtype == "BOOL":
        return rng.integers(0, 2, count, dtype=np.uint8).tobytes()
    return rng.integers(0, 256, count * SIZES[dtype], dtype=np.uint8).tobytes()


def as_bytes(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def same_tensor(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert isinstance(ours, torch.Tensor)
    assert ours.dtype == theirs.dtype
    assert ours.shape == theirs.shape
    assert ours.device == theirs.device
    assert as_bytes(ours) == as_bytes(theirs)


@pytest.fixture(scope="module")
def every_dtype(tmp_path_factory) -> Path:
    """One file holding every torch kind in several shapes, plus F4."""
    tensors: Dict[str, Any] = {}
    for i, dtype in enumerate(TORCH_KINDS):
        for j, shape in enumerate(SHAPES):
            count = int(np.prod(shape, dtype=np.int64))
            tensors[f"{dtype}.{j}"] = (dtype, shape, payload(dtype, count, seed=i * 10 + j))
    tensors["F4.0"] = ("F4", (2, 4), bytes([0x12, 0x34, 0x56, 0x78]))
    tensors["F4.1"] = ("F4", (3, 0), b"")
    path = tmp_path_factory.mktemp("torch") / "every.safetensors"
    path.write_bytes(raw_file(tensors, {"format": "pt"}))
    return path


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> Path:
    """Tensors large enough (>= 64 KiB) to be served from the file mapping."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((256, 512), dtype=np.float32)
    b = rng.integers(0, 2**16, (512, 512), dtype=np.uint16)
    path = tmp_path_factory.mktemp("torchbig") / "big.safetensors"
    path.write_bytes(
        raw_file({"a": ("F32", a.shape, a.tobytes()), "b": ("BF16", b.shape, b.tobytes())})
    )
    return path


# ---------------------------------------------------------------- loading


def test_get_tensor_matches_reference_for_every_dtype(every_dtype: Path) -> None:
    with fastst.safe_open(every_dtype, "pt") as f, safetensors.safe_open(every_dtype, "pt") as r:
        assert f.keys() == sorted(r.keys())
        assert f.metadata() == r.metadata()
        for name in r.keys():
            same_tensor(f.get_tensor(name), r.get_tensor(name))


def test_framework_spellings(every_dtype: Path) -> None:
    for spelling in ("pt", "torch", "pytorch"):
        with fastst.safe_open(every_dtype, spelling) as f:
            assert f.get_tensor("BF16.0").dtype == torch.bfloat16


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_load_file_matches_reference(every_dtype: Path, backend: str) -> None:
    ours = ft.load_file(every_dtype, backend=backend)
    # (The reference's pread back end fails on F4: its mmap one is the oracle.)
    theirs = ref.load_file(every_dtype)
    assert list(ours) == list(theirs)
    for name in theirs:
        same_tensor(ours[name], theirs[name])


def test_load_bytes_matches_reference_and_does_not_alias(every_dtype: Path) -> None:
    data = every_dtype.read_bytes()
    ours = ft.load(data)
    # (The reference's load() has no F4 support; its load_file() has.)
    theirs = ref.load_file(every_dtype)
    assert list(ours) == list(theirs)
    for name in theirs:
        same_tensor(ours[name], theirs[name])
    ours["F32.0"].fill_(3.0)
    ours["F32.3"].fill_(3.0)
    assert data == every_dtype.read_bytes()
    assert as_bytes(ft.load(data)["F32.0"]) == as_bytes(theirs["F32.0"])
    assert as_bytes(ours["F32.3"]) != as_bytes(theirs["F32.3"])


def test_f4_packs_two_values_per_element(every_dtype: Path) -> None:
    with fastst.safe_open(every_dtype, "pt") as f:
        t = f.get_tensor("F4.0")
        assert t.dtype == torch.float4_e2m1fn_x2 and t.shape == (2, 2)
        assert as_bytes(t) == bytes([0x12, 0x34, 0x56, 0x78])
        assert f.get_tensor("F4.1").shape == (3, 0)


def test_f4_with_odd_last_dimension_is_refused(write) -> None:
    path = write(raw_file({"x": ("F4", (2, 3), b"\x00\x11\x22")}))
    with fastst.safe_open(path, "pt") as f:
        with pytest.raises(fastst.UnsupportedDtypeError, match="even last dimension"):
            f.get_tensor("x")


@pytest.mark.parametrize("dtype", ["F6_E2M3", "F6_E3M2"])
def test_f6_has_no_torch_type(write, dtype: str) -> None:
    path = write(raw_file({"x": (dtype, (4,), b"\x00\x11\x22")}))
    with fastst.safe_open(path, "pt") as f:
        with pytest.raises(fastst.UnsupportedDtypeError, match=f"x.*{dtype}"):
            f.get_tensor("x")
    with safetensors.safe_open(path, "pt") as r:
        with pytest.raises(Exception, match="Dtype not understood"):
            r.get_tensor("x")


def _mapping_of(address: int) -> str:
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        start, stop = (int(x, 16) for x in fields[0].split("-"))
        if start <= address < stop:
            return fields[5] if len(fields) > 5 else ""
    raise AssertionError(f"address {address:#x} is not mapped")


def test_large_tensors_are_zero_copy_views_of_the_file(big_file: Path) -> None:
    with fastst.safe_open(big_file, "pt") as f:
        a = f.get_tensor("a")
        b = f.get_tensor("b")
        assert _mapping_of(a.data_ptr()) == str(big_file)
        assert _mapping_of(b.data_ptr()) == str(big_file)
        sliced = f.get_slice("b")[10:20]
        assert _mapping_of(sliced.data_ptr()) == str(big_file)
    ref_a = ref.load_file(big_file)["a"]
    same_tensor(a, ref_a)


def test_tensors_are_writable_independent_and_outlive_the_file(
    big_file: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy.safetensors"
    copy.write_bytes(big_file.read_bytes())
    digest = hashlib.sha256(copy.read_bytes()).hexdigest()
    f = fastst.safe_open(copy, "pt")
    first = f.get_tensor("a")
    second = f.get_tensor("a")
    small = f.get_slice("a")[0, :4]
    first.add_(1.0)
    small.zero_()
    assert torch.equal(second, ref.load_file(big_file)["a"])
    assert torch.equal(first, second + 1.0)
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == digest
    f.close()
    os.unlink(copy)
    assert torch.allclose(first - 1.0, second, atol=1e-6)
    loaded = ft.load_file(big_file)
    loaded["b"].zero_()
    assert hashlib.sha256(big_file.read_bytes()).hexdigest() == digest
    assert not torch.equal(ft.load_file(big_file)["b"], loaded["b"])


INDICES = [
    (slice(None),),
    0,
    -1,
    (slice(None, None, 2),),
    (Ellipsis, 1),
    (None,),
    (slice(0, 10),),
    (slice(None), -1),
    (),
    slice(1, 0),
    (0, 0),
    Ellipsis,
    (slice(-10, 10), slice(1, 3)),
    (None, 1, None, slice(1, None, 2)),
]


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_slices_match_reference(big_file: Path, index: Any) -> None:
    with fastst.safe_open(big_file, "pt") as f, safetensors.safe_open(big_file, "pt") as r:
        for name in ("a", "b"):
            ours = f.get_slice(name)[index]
            theirs = r.get_slice(name)[index]
            same_tensor(ours, theirs)


def test_slices_follow_torch_rules(big_file: Path) -> None:
    with fastst.safe_open(big_file, "pt") as f, safetensors.safe_open(big_file, "pt") as r:
        with pytest.raises(ValueError, match="step must be greater than zero"):
            f.get_slice("a")[::-1]
        with pytest.raises(ValueError, match="step must be greater than zero"):
            r.get_slice("a")[::-1]
        with pytest.raises(IndexError, match="tensor 'a'.*out of bounds"):
            f.get_slice("a")[300]
        with pytest.raises(IndexError):
            r.get_slice("a")[300]
        with pytest.raises(TypeError, match="basic indexing"):
            f.get_slice("a")[[0, 1]]
        assert f.get_slice("a").get_shape() == r.get_slice("a").get_shape()
        assert f.get_slice("b").get_dtype() == r.get_slice("b").get_dtype()


def _outcome(call) -> Tuple[str, str]:
    try:
        t = call()
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return "ok", str(t.device)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", 0])
def test_cuda_device_like_reference(big_file: Path, device: Any) -> None:
    def ours() -> torch.Tensor:
        with fastst.safe_open(big_file, "pt", device=device) as f:
            return f.get_tensor("a")

    def theirs() -> torch.Tensor:
        with safetensors.safe_open(big_file, "pt", device=device) as r:
            return r.get_tensor("a")

    if torch.cuda.is_available():
        got = ours()
        assert got.device.type == "cuda"
        same_tensor(got, theirs())
        loaded = ft.load_file(big_file, device=device)
        same_tensor(loaded["b"], ref.load_file(big_file, device=device)["b"])
    else:
        # torch's own error (RuntimeError "Found no NVIDIA driver..." on a CUDA
        # build, AssertionError on a CPU-only one), exactly as the reference.
        kind, message = _outcome(ours)
        assert kind != "ok"
        assert (kind, message) == _outcome(theirs)
        assert (kind, message) == _outcome(lambda: ft.load_file(big_file, device=device))


@pytest.mark.parametrize("device", ["bogus", "meta", -1, True, 1.5])
def test_invalid_devices_raise(big_file: Path, device: Any) -> None:
    with pytest.raises(fastst.SafetensorError, match="device"):
        fastst.safe_open(big_file, "pt", device=device)


def test_cpu_device_spellings(big_file: Path) -> None:
    for device in ("cpu", torch.device("cpu")):
        with fastst.safe_open(big_file, "pt", device=device) as f:
            assert f.get_tensor("a").device.type == "cpu"


# ---------------------------------------------------------------- saving


def _state(seed: int = 0) -> Dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out: Dict[str, torch.Tensor] = {
        "f32": torch.randn(3, 5, generator=g),
        "bf16": torch.randn(4, 4, generator=g).to(torch.bfloat16),
        "f16": torch.randn(8, generator=g).to(torch.float16),
        "f64": torch.randn(2, 2, generator=g, dtype=torch.float64),
        "i64": torch.randint(-(2**40), 2**40, (3,), generator=g),
        "i32": torch.randint(-100, 100, (2, 2), generator=g, dtype=torch.int32),
        "i16": torch.randint(-100, 100, (5,), generator=g, dtype=torch.int16),
        "i8": torch.randint(-100, 100, (5,), generator=g, dtype=torch.int8),
        "u8": torch.randint(0, 255, (1, 2, 3), generator=g, dtype=torch.uint8),
        "u16": torch.randint(0, 2**16, (4,), generator=g).to(torch.uint16),
        "u32": torch.randint(0, 2**31, (4,), generator=g).to(torch.uint32),
        "u64": torch.randint(0, 2**62, (4,), generator=g).to(torch.uint64),
        "bool": torch.randint(0, 2, (3, 3), generator=g).to(torch.bool),
        "c64": torch.randn(3, generator=g, dtype=torch.complex64),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "f8e4m3": torch.randn(6, generator=g).to(torch.float8_e4m3fn),
        "f8e5m2": torch.randn(6, generator=g).to(torch.float8_e5m2),
        "f8e4m3fnuz": torch.randn(6, generator=g).to(torch.float8_e4m3fnuz),
        "f8e5m2fnuz": torch.randn(6, generator=g).to(torch.float8_e5m2fnuz),
        "f8e8m0": torch.rand(6, generator=g).to(torch.float8_e8m0fnu),
        "f4": torch.randint(0, 255, (2, 3), generator=g, dtype=torch.uint8).view(
            torch.float4_e2m1fn_x2
        ),
    }
    return out


def test_save_file_is_byte_identical_to_reference(tmp_path: Path) -> None:
    state = _state()
    metadata = {"format": "pt", "b": "2", "a": "1"}
    ft.save_file(state, tmp_path / "ours.safetensors", metadata=metadata)
    ref.save_file(state, tmp_path / "theirs.safetensors", metadata=metadata)
    same_file_bytes(
        (tmp_path / "ours.safetensors").read_bytes(),
        (tmp_path / "theirs.safetensors").read_bytes(),
    )
    same_file_bytes(ft.save(state, metadata=metadata), ref.save(state, metadata=metadata))
    assert ft.save(state, metadata={"format": "pt"}) == ref.save(state, metadata={"format": "pt"})
    assert ft.save(state) == ref.save(state)


def test_save_round_trips_every_dtype(tmp_path: Path) -> None:
    state = _state(3)
    ft.save_file(state, tmp_path / "x.safetensors")
    back = ft.load_file(tmp_path / "x.safetensors")
    theirs = ref.load_file(tmp_path / "x.safetensors")
    assert set(back) == set(state)
    for name, tensor in state.items():
        same_tensor(back[name], tensor)
        same_tensor(theirs[name], tensor)
    loaded = ft.load(ft.save(state))
    for name, tensor in state.items():
        same_tensor(loaded[name], tensor)


def test_save_writes_from_the_tensors_own_memory() -> None:
    state = _state()
    state["big"] = torch.randn(1024, 1024)
    keep: List[Any] = []
    arrays = ft._to_arrays(state, keep)
    for name, tensor in state.items():
        if tensor.numel() == 0:
            continue
        if name == "f4":
            # The writer's dict input over the packed bytes (no copy).
            assert arrays[name]["dtype"] == "float4_e2m1fn_x2"
            assert arrays[name]["data"].ctypes.data == tensor.data_ptr()
            assert arrays[name]["data"].nbytes == tensor.numel()
            continue
        assert arrays[name].ctypes.data == tensor.data_ptr(), name
        assert arrays[name].nbytes == tensor.numel() * tensor.element_size(), name


def test_save_accepts_views_and_grad_tensors(tmp_path: Path) -> None:
    base = torch.arange(40, dtype=torch.float32).reshape(4, 10)
    state = {
        "row": base[2].clone(),
        "offset": torch.arange(20.0)[5:15],  # contiguous, non-zero storage offset
        "grad": torch.ones(3, requires_grad=True),
    }
    assert ft.save(state) == ref.save(state)


def test_save_resolves_lazy_conjugation() -> None:
    # The reference writes the unconjugated memory of a lazily conjugated
    # tensor; fastst writes the tensor's values.
    value = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    back = ft.load(ft.save({"c": value.conj(), "n": torch.ones(2)._neg_view()}))
    assert back["c"].tolist() == [1 - 2j, 3 + 1j]
    assert back["n"].tolist() == [-1.0, -1.0]


def test_save_errors_match_reference() -> None:
    base = torch.zeros(4, 4)
    cases: List[Any] = [
        ["not", "a", "dict"],
        {"a": np.zeros(3)},
        {"t": base.t()},
        {"a": base, "b": base[1]},
        {"s": torch.zeros(3, 3).to_sparse()},
    ]
    for case in cases:
        with pytest.raises(Exception) as theirs:
            ref.save(case)
        with pytest.raises(type(theirs.value)) as ours:
            ft.save(case)
        assert str(ours.value).split() == str(theirs.value).split()


def test_shared_tensor_error(tmp_path: Path) -> None:
    a = torch.zeros(6)
    target = tmp_path / "never-written.safetensors"
    with pytest.raises(RuntimeError, match="Some tensors share memory") as exc:
        ft.save_file({"a": a, "b": a}, target)
    assert "save_model" in str(exc.value)
    assert not target.exists()
    # Overlap is judged on the bytes each tensor spans, strided views included
    # (where the reference fails inside torch.view instead).
    other = torch.zeros(3, 4)
    assert ft._find_shared_tensors({"t": other.t(), "u": other}) == [{"t", "u"}]
    with pytest.raises(RuntimeError, match="Some tensors share memory"):
        ft.save({"t": other.t(), "u": other})


def test_save_moves_and_names(tmp_path: Path) -> None:
    path = tmp_path / "p.safetensors"
    ft.save_file({"x": torch.ones(2)}, str(path))
    ft.save_file({"x": torch.ones(2)}, path)
    assert ref.load_file(path)["x"].tolist() == [1.0, 1.0]


# ------------------------------------------------------- shared storage rules


def _shared_cases() -> List[Dict[str, torch.Tensor]]:
    base = torch.arange(24.0)
    other = torch.zeros(3, 4)
    return [
        {"a": base, "b": base},
        {"a": base[:12], "b": base[12:]},
        {"a": base, "b": base[3:9], "c": other, "d": other.view(12)},
        {"z": base[:8], "y": base[4:16], "x": base[20:]},
        {"m": torch.empty(0), "n": torch.empty(0)},
        {"meta": torch.empty(3, device="meta"), "cpu": torch.ones(2)},
    ]


def test_storage_helpers_match_reference() -> None:
    for case in _shared_cases():
        for tensor in case.values():
            assert ft.storage_ptr(tensor) == ref.storage_ptr(tensor)
            assert ft.storage_size(tensor) == ref.storage_size(tensor)
        assert ft._find_shared_tensors(case) == ref._find_shared_tensors(case)
        try:
            theirs = ref._remove_duplicate_names(case)
        except RuntimeError as exc:
            with pytest.raises(RuntimeError) as ours:
                ft._remove_duplicate_names(case)
            assert str(ours.value) == str(exc)
            continue
        assert ft._remove_duplicate_names(case) == theirs
        for preferred in (["b"], ["d", "b"], []):
            for discard in (["a"], ["c"], None):
                assert ft._remove_duplicate_names(
                    case, preferred_names=preferred, discard_names=discard
                ) == ref._remove_duplicate_names(
                    case, preferred_names=preferred, discard_names=discard
                )


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.body = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.tensor(0.5))


class Other(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(4, 4)
        self.extra = torch.nn.Linear(2, 2)


def test_save_model_matches_reference_and_keeps_callers_metadata(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Tied()
    metadata = {"format": "pt"}
    ft.save_model(model, str(tmp_path / "ours.safetensors"), metadata=metadata)
    assert metadata == {"format": "pt"}
    ref.save_model(model, str(tmp_path / "theirs.safetensors"), metadata=dict(metadata))
    same_file_bytes(
        (tmp_path / "ours.safetensors").read_bytes(),
        (tmp_path / "theirs.safetensors").read_bytes(),
    )
    with fastst.safe_open(tmp_path / "ours.safetensors", "pt") as f:
        assert f.metadata() == {"format": "pt", "head.weight": "embed.weight"}
        assert "head.weight" not in f.keys()
    ft.save_model(model, str(tmp_path / "plain.safetensors"))
    ref.save_model(model, str(tmp_path / "plain-ref.safetensors"))
    assert (tmp_path / "plain.safetensors").read_bytes() == (
        tmp_path / "plain-ref.safetensors"
    ).read_bytes()


def test_load_model_restores_tied_weights(tmp_path: Path) -> None:
    torch.manual_seed(1)
    source = Tied()
    path = str(tmp_path / "m.safetensors")
    ft.save_model(source, path)
    target = Tied()
    missing, unexpected = ft.load_model(target, path)
    assert (missing, unexpected) == (set(), [])
    assert target.head.weight is target.embed.weight
    for name, tensor in source.state_dict().items():
        assert torch.equal(target.state_dict()[name], tensor), name
    # Files written by either library load in the other.
    other = Tied()
    assert ref.load_model(other, path) == (set(), [])
    ref.save_model(source, str(tmp_path / "r.safetensors"))
    assert ft.load_model(Tied(), str(tmp_path / "r.safetensors")) == (set(), [])


def test_load_model_missing_and_unexpected_keys_like_reference(tmp_path: Path) -> None:
    path = str(tmp_path / "m.safetensors")
    ft.save_model(Tied(), path)
    with pytest.raises(RuntimeError) as theirs:
        ref.load_model(Other(), path)
    with pytest.raises(RuntimeError) as ours:
        ft.load_model(Other(), path)
    assert str(ours.value) == str(theirs.value)
    assert "Missing key(s)" in str(ours.value) and "Unexpected key(s)" in str(ours.value)
    ours_lax = ft.load_model(Other(), path, strict=False)
    theirs_lax = ref.load_model(Other(), path, strict=False)
    assert (ours_lax[0], sorted(ours_lax[1])) == (theirs_lax[0], sorted(theirs_lax[1]))


def test_save_model_force_contiguous(tmp_path: Path) -> None:
    class Transposed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3, 5).t())

    model = Transposed()
    ft.save_model(model, str(tmp_path / "a.safetensors"))
    assert torch.equal(ft.load_file(tmp_path / "a.safetensors")["w"], model.w.detach())
    with pytest.raises(ValueError) as ours:
        ft.save_model(model, str(tmp_path / "b.safetensors"), force_contiguous=False)
    with pytest.raises(ValueError) as theirs:
        ref.save_model(model, str(tmp_path / "c.safetensors"), force_contiguous=False)
    assert "non contiguous tensor: `w`" in str(ours.value)
    assert "force_contiguous=True" in str(ours.value)
    assert str(ours.value) == str(theirs.value)


# ---------------------------------------------------------------- imports


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_importing_fastst_imports_no_framework() -> None:
    done = _python(
        "import sys, fastst\n"
        "f = fastst.safe_open\n"
        "bad = [m for m in ('torch','jax','tensorflow','paddle','mlx') if m in sys.modules]\n"
        "print(bad)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_missing_torch_names_the_extra(every_dtype: Path) -> None:
    done = _python(
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "import fastst\n"
        "try:\n"
        "    import fastst.torch\n"
        "except ImportError as e:\n"
        "    print('module:', e)\n"
        f"try:\n    fastst.safe_open({str(every_dtype)!r}, 'pt')\n"
        "except ImportError as e:\n"
        "    print('open:', e)\n"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert "pip install fastst[torch]" in line


# ------------------------------------------------------------ properties

_HYP_DTYPES = [
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.float8_e4m3fn,
    torch.uint32,
    torch.complex64,
]


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.tuples(
            st.sampled_from(_HYP_DTYPES),
            st.lists(st.integers(0, 4), max_size=3),
            st.integers(0, 2**32 - 1),
        ),
        max_size=6,
    )
)
def test_save_and_load_agree_with_reference(spec) -> None:
    state: Dict[str, torch.Tensor] = {}
    for name, (dtype, shape, seed) in spec.items():
        count = int(np.prod(shape, dtype=np.int64))
        size = torch.empty((), dtype=dtype).element_size()
        raw = np.random.default_rng(seed).integers(0, 256, count * size, dtype=np.uint8)
        if dtype == torch.bool:
            raw &= 1
        if count == 0:
            state[name] = torch.empty(shape, dtype=dtype)
        else:
            state[name] = torch.from_numpy(raw).view(dtype).reshape(shape)
    ours = ft.save(state)
    assert ours == ref.save(state)
    back = ft.load(ours)
    assert set(back) == set(ref.load(ours))  # (the reference's order is a hash map's)
    for name, tensor in state.items():
        same_tensor(back[name], tensor)


def test_threads_share_one_open_file(big_file: Path) -> None:
    expected = ref.load_file(big_file)
    errors: List[BaseException] = []

    def work(f: Any, seed: int) -> None:
        try:
            for i in range(20):
                name = "ab"[(seed + i) % 2]
                t = f.get_tensor(name)
                same_tensor(t, expected[name])
                t.zero_()
                part = f.get_slice(name)[i : i + 3]
                same_tensor(part, expected[name][i : i + 3])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    with fastst.safe_open(big_file, "pt") as f:
        threads = [threading.Thread(target=work, args=(f, s)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]


@pytest.mark.slow
def test_load_file_barely_grows_anonymous_memory(tmp_path: Path) -> None:
    # In a fresh interpreter, so that other tests' allocations do not count:
    # load_file of a 128 MiB file, then a read of every page of every tensor.
    per = 8 << 20
    layout = {f"layer.{i}.weight": ("BF16", (per // 2,), bytes([i]) * per) for i in range(16)}
    path = tmp_path / "m.safetensors"
    path.write_bytes(raw_file(layout))
    script = (
        "import sys, torch, fastst.torch as ft\n"
        "def rss_anon():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('RssAnon:'):\n"
        "            return int(line.split()[1]) * 1024\n"
        "base = rss_anon()\n"
        "tensors = ft.load_file(sys.argv[1])\n"
        "total = sum(int(t.view(torch.uint8)[::4096].sum()) for t in tensors.values())\n"
        "print(rss_anon() - base, total)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    grown, total = (int(x) for x in done.stdout.split())
    assert total == sum(i * (per // 4096) for i in range(16))
    assert grown < 0.05 * 16 * per
