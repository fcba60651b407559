"""fastst.flax / tensorflow / paddle / mlx and safe_open with those frameworks,
against the reference package on the same files: same values, dtypes and
shapes where the reference can load a dtype, the framework's own type where
only fastst can, byte-identical saves, and the caller's dict left alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

# paddle must be imported before tensorflow: importing it after tensorflow
# crashes the interpreter (paddlepaddle 3.3 / tensorflow-cpu 2.21).
import paddle  # isort: skip  # noqa: I001

import fastst
import fastst.flax
import fastst.mlx
import fastst.paddle
import fastst.tensorflow
import jax
import jax.numpy as jnp
import ml_dtypes
import mlx.core as mx
import numpy as np
import pytest
import safetensors
import safetensors.flax as ref_flax
import safetensors.mlx as ref_mlx
import safetensors.paddle as ref_paddle
import safetensors.tensorflow as ref_tf
import tensorflow as tf
from helpers.raw_files import raw_file
from helpers.st_compare import same_file_bytes

ALL_DTYPES = [
    "BOOL", "U8", "I8", "U16", "I16", "F16", "BF16", "U32", "I32", "F32", "C64", "U64", "I64",
    "F64", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0", "F4", "F6_E2M3",
    "F6_E3M2",
]  # fmt: skip
BITS = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2, "U32": 4, "I32": 4}
BYTES.update({"F32": 4, "C64": 8, "U64": 8, "I64": 8, "F64": 8})

#: Header dtypes each framework has no type for (fastst raises
#: UnsupportedDtypeError for them; every other dtype loads).
UNSUPPORTED: Dict[str, set] = {
    "flax": {"F6_E2M3", "F6_E3M2"},
    "tensorflow": {"F8_E8M0", "F6_E2M3", "F6_E3M2"},
    "paddle": {"U16", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2"},
    "mlx": {d for d in ALL_DTYPES if d.startswith(("F8_", "F6_")) or d == "F4"},
}


def _paddle_bytes(t: Any) -> bytes:
    return t.numpy().tobytes()


def _mlx_bytes(t: Any) -> bytes:
    if t.dtype == mx.bfloat16:
        t = t.view(mx.uint16)
    return np.asarray(t).tobytes()


#: framework -> (tensor type, bytes of a tensor, dtype name of a tensor)
KINDS: Dict[str, Tuple[type, Callable[[Any], bytes], Callable[[Any], str]]] = {
    "flax": (jax.Array, lambda t: np.asarray(t).tobytes(), lambda t: str(t.dtype)),
    "tensorflow": (tf.Tensor, lambda t: t.numpy().tobytes(), lambda t: t.dtype.name),
    "paddle": (paddle.Tensor, _paddle_bytes, lambda t: str(t.dtype)),
    "mlx": (mx.array, _mlx_bytes, lambda t: str(t.dtype)),
}
REFERENCE = {"flax": ref_flax, "tensorflow": ref_tf, "paddle": ref_paddle, "mlx": ref_mlx}
OURS = {
    "flax": fastst.flax,
    "tensorflow": fastst.tensorflow,
    "paddle": fastst.paddle,
    "mlx": fastst.mlx,
}
SHAPES = [(2, 4), (), (0, 2)]


def _payload(dtype: str, shape: Tuple[int, ...], seed: int) -> bytes:
    count = int(np.prod(shape, dtype=np.int64))
    rng = np.random.default_rng(seed)
    if dtype in BITS:
        return rng.integers(0, 256, count * BITS[dtype] // 8, dtype=np.uint8).tobytes()
    if dtype == "BOOL":
        return rng.integers(0, 2, count, dtype=np.uint8).tobytes()
    if dtype in ("F16", "BF16", "F32", "F64", "C64"):
        # Finite values: the frameworks may canonicalise NaN payloads.
        kind = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "C64": np.complex64}
        values = rng.standard_normal(count).astype(np.float32)
        if dtype == "BF16":
            return values.astype(ml_dtypes.bfloat16).tobytes()
        return values.astype(kind[dtype]).tobytes()
    size = BYTES.get(dtype, 1)
    return rng.integers(0, 256, count * size, dtype=np.uint8).tobytes()


@pytest.fixture(scope="module")
def every_dtype(tmp_path_factory) -> Path:
    tensors: Dict[str, Any] = {}
    for i, dtype in enumerate(ALL_DTYPES):
        for j, shape in enumerate(SHAPES):
            if dtype in BITS and not shape:
                continue  # a lone sub-byte value does not fill a byte
            tensors[f"{dtype}.{j}"] = (dtype, shape, _payload(dtype, shape, i * 7 + j))
    path = tmp_path_factory.mktemp("fw") / "every.safetensors"
    path.write_bytes(raw_file(tensors, {"format": "mixed"}))
    return path


def _reference_tensor(path: Path, framework: str, name: str) -> Any:
    try:
        with safetensors.safe_open(path, framework) as r:
            return r.get_tensor(name)
    except Exception:  # the reference cannot load this dtype here
        return None


def _numpy_oracle(path: Path, name: str) -> np.ndarray:
    with fastst.safe_open(path, "np") as f:
        return f.get_tensor(name)


@pytest.mark.parametrize("framework", list(KINDS))
def test_every_dtype_against_reference(every_dtype: Path, framework: str) -> None:
    kind, to_bytes, dtype_of = KINDS[framework]
    compared = 0
    with fastst.safe_open(every_dtype, framework) as f:
        for name in f.keys():
            dtype = name.split(".")[0]
            if dtype in UNSUPPORTED[framework]:
                with pytest.raises(fastst.UnsupportedDtypeError, match=f"'{name}'.*{dtype}"):
                    f.get_tensor(name)
                continue
            ours = f.get_tensor(name)
            assert isinstance(ours, kind)
            theirs = _reference_tensor(every_dtype, framework, name)
            if theirs is not None:
                compared += 1
                assert dtype_of(ours) == dtype_of(theirs), name
                assert tuple(ours.shape) == tuple(theirs.shape), name
                assert to_bytes(ours) == to_bytes(theirs), name
            else:
                # Only fastst loads this dtype: check against the raw bytes
                # (through fastst's numpy view, itself tested on the reference).
                expected = _numpy_oracle(every_dtype, name)
                assert tuple(ours.shape) == expected.shape, name
                assert to_bytes(ours) == expected.tobytes(), name
                assert dtype_of(ours).split(".")[-1] == expected.dtype.name, name
    assert compared >= 30


@pytest.mark.parametrize("framework", list(KINDS))
def test_load_file_and_load_match_reference(tmp_path: Path, framework: str) -> None:
    rng = np.random.default_rng(5)
    tensors = {
        "z": ("F32", (3, 4), rng.standard_normal(12).astype(np.float32).tobytes()),
        "a": ("BF16", (5,), rng.standard_normal(5).astype(ml_dtypes.bfloat16).tobytes()),
        "m": ("I32", (), np.int32(-7).tobytes()),
    }
    path = tmp_path / "x.safetensors"
    path.write_bytes(raw_file(tensors))
    _kind, to_bytes, dtype_of = KINDS[framework]
    theirs = REFERENCE[framework].load_file(path)
    # (The reference's load(bytes) goes through numpy and fails on BF16, so
    # fastst's load(bytes) is compared with the reference's load_file.)
    for ours in (OURS[framework].load_file(path), OURS[framework].load(path.read_bytes())):
        assert list(ours) == list(theirs)
        for name in theirs:
            assert dtype_of(ours[name]) == dtype_of(theirs[name])
            assert tuple(ours[name].shape) == tuple(theirs[name].shape)
            assert to_bytes(ours[name]) == to_bytes(theirs[name])


def _inputs(framework: str) -> Dict[str, Any]:
    rng = np.random.default_rng(9)
    f32 = rng.standard_normal((3, 4)).astype(np.float32)
    i64 = rng.integers(-100, 100, (5,)).astype(np.int64)
    u8 = rng.integers(0, 255, (2, 2, 2)).astype(np.uint8)
    b = np.array([True, False, True])
    bf16 = rng.standard_normal(6).astype(ml_dtypes.bfloat16)
    if framework == "flax":
        return {
            "f32": jnp.asarray(f32),
            "i32": jnp.asarray(i64.astype(np.int32)),
            "u8": jnp.asarray(u8),
            "bool": jnp.asarray(b),
            "bf16": jnp.asarray(bf16),
            "f8": jnp.asarray(f32.reshape(-1).astype(ml_dtypes.float8_e4m3fn)),
            "scalar": jnp.asarray(np.float32(1.5)),
            "empty": jnp.zeros((0, 2)),
        }
    if framework == "tensorflow":
        return {
            "f32": tf.constant(f32),
            "i64": tf.constant(i64),
            "u8": tf.constant(u8),
            "bool": tf.constant(b),
            "bf16": tf.constant(f32[0], dtype=tf.bfloat16),
            "empty": tf.zeros((0, 2)),  # (no 0-d tensor: the reference's TF save fails on them)
        }
    if framework == "paddle":
        return {
            "f32": paddle.to_tensor(f32),
            "i64": paddle.to_tensor(i64),
            "u8": paddle.to_tensor(u8),
            "bool": paddle.to_tensor(b),
            "bf16": paddle.to_tensor(f32).astype("bfloat16"),
            "f8": paddle.to_tensor(f32).astype(paddle.float8_e4m3fn),
            "scalar": paddle.to_tensor(1.5),
            "empty": paddle.zeros([0, 2]),
        }
    # (No 0-d array: the reference's MLX save fails on them.)
    return {
        "f32": mx.array(f32),
        "i64": mx.array(i64),
        "u8": mx.array(u8),
        "bool": mx.array(b),
        "empty": mx.zeros((0, 2)),
    }


@pytest.mark.parametrize("framework", list(KINDS))
def test_save_is_byte_identical_and_leaves_the_dict_alone(tmp_path: Path, framework: str) -> None:
    tensors = _inputs(framework)
    before = dict(tensors)
    metadata = {"k": "v", "format": framework}
    ours = OURS[framework].save(tensors, metadata=metadata)
    assert all(tensors[k] is before[k] for k in before)
    same_file_bytes(ours, REFERENCE[framework].save(dict(tensors), metadata=metadata))
    assert OURS[framework].save(tensors) == REFERENCE[framework].save(dict(tensors))
    OURS[framework].save_file(tensors, tmp_path / "ours.safetensors", metadata=metadata)
    assert all(tensors[k] is before[k] for k in before)
    REFERENCE[framework].save_file(dict(tensors), tmp_path / "theirs.safetensors", metadata)
    same_file_bytes(
        (tmp_path / "ours.safetensors").read_bytes(),
        (tmp_path / "theirs.safetensors").read_bytes(),
    )
    back = OURS[framework].load_file(tmp_path / "ours.safetensors")
    _kind, to_bytes, dtype_of = KINDS[framework]
    for name, value in tensors.items():
        assert dtype_of(back[name]) == dtype_of(value)
        assert to_bytes(back[name]) == to_bytes(value)


def test_tensorflow_scalar_round_trip() -> None:
    # The reference's TF save fails on 0-d tensors (numpy scalars).
    data = fastst.tensorflow.save({"s": tf.constant(1.5), "b": tf.constant(2, dtype=tf.bfloat16)})
    back = fastst.tensorflow.load(data)
    assert back["s"].shape == () and float(back["s"]) == 1.5
    assert back["b"].dtype == tf.bfloat16 and float(back["b"]) == 2.0


def test_mlx_bfloat16_round_trip(tmp_path: Path) -> None:
    # The reference cannot save MLX bfloat16 (numpy has no buffer format for it).
    value = mx.array([1.0, -2.5, 3.25]).astype(mx.bfloat16)
    data = fastst.mlx.save({"w": value, "s": mx.array(1.5)})
    back = fastst.mlx.load(data)
    assert back["w"].dtype == mx.bfloat16
    assert _mlx_bytes(back["w"]) == _mlx_bytes(value)
    assert back["s"].shape == () and back["s"].item() == 1.5
    with fastst.safe_open(_write(tmp_path, data), "np") as f:
        assert f.get_tensor("w").dtype == np.dtype(ml_dtypes.bfloat16)


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "data.safetensors"
    path.write_bytes(data)
    return path


def test_paddle_zero_copy_and_independent(tmp_path: Path) -> None:
    values = np.arange(64 * 1024, dtype=np.float32)
    path = tmp_path / "p.safetensors"
    path.write_bytes(raw_file({"x": ("F32", values.shape, values.tobytes())}))
    with fastst.safe_open(path, "paddle") as f:
        first = f.get_tensor("x")
        second = f.get_tensor("x")
    first.add_(paddle.to_tensor(1.0))
    assert np.array_equal(second.numpy(), values)
    assert np.array_equal(first.numpy(), values + 1)
    assert path.read_bytes()[-4:] == values[-1:].tobytes()
    maps = Path("/proc/self/maps").read_text().splitlines()
    ptr = first.data_ptr()
    owners = [
        line.split(maxsplit=5)[-1]
        for line in maps
        if int(line.split("-")[0], 16) <= ptr < int(line.split()[0].split("-")[1], 16)
    ]
    assert owners == [str(path)]


def test_paddle_saves_from_tensor_memory() -> None:
    tensor = paddle.to_tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    keep: List[Any] = []
    array = fastst.paddle._as_numpy("t", tensor, keep)
    assert array.ctypes.data == tensor.data_ptr()
    assert array.shape == (3, 4)


def test_paddle_save_errors_match_reference() -> None:
    for case in (["x"], {"a": np.zeros(2)}, {"t": paddle.zeros([3, 4]).transpose([1, 0])}):
        try:
            ref_paddle.save(case)  # type: ignore[arg-type]
        except Exception as exc:
            with pytest.raises(type(exc)) as ours:
                fastst.paddle.save(case)  # type: ignore[arg-type]
            assert str(ours.value) == str(exc)
        else:
            # paddle's transpose may already give a contiguous tensor.
            assert fastst.paddle.save(case) == ref_paddle.save(case)  # type: ignore[arg-type]


@pytest.mark.parametrize("device", ["gpu", "gpu:0", "cuda", 0])
def test_paddle_devices(tmp_path: Path, device: Any) -> None:
    path = _write(tmp_path, raw_file({"x": ("F32", (2,), np.ones(2, np.float32).tobytes())}))
    if paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        got = fastst.paddle.load_file(path, device=device)["x"]
        assert "gpu" in str(got.place).lower()
    else:
        with pytest.raises(ValueError, match="not compiled with CUDA"):
            fastst.paddle.load_file(path, device=device)
    for bad in ("bogus", "cpu:0", -1):
        with pytest.raises(fastst.SafetensorError, match="device"):
            fastst.paddle.load_file(path, device=bad)


@pytest.mark.parametrize("framework", ["flax", "tensorflow", "mlx"])
def test_cpu_only_frameworks_refuse_devices(tmp_path: Path, framework: str) -> None:
    path = _write(tmp_path, raw_file({"x": ("F32", (2,), np.ones(2, np.float32).tobytes())}))
    with pytest.raises(fastst.SafetensorError, match="device 'cuda'"):
        fastst.safe_open(path, framework, device="cuda")


INDICES = [(slice(None),), 1, -1, (slice(0, 1), slice(1, 3)), (Ellipsis, 2), (None, 0)]


@pytest.mark.parametrize("framework", list(KINDS))
def test_slices_match_reference(tmp_path: Path, framework: str) -> None:
    values = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    path = _write(tmp_path, raw_file({"x": ("F32", values.shape, values.tobytes())}))
    _kind, to_bytes, dtype_of = KINDS[framework]

    def summary(t: Any) -> Tuple[Tuple[int, ...], str, bytes]:
        return tuple(t.shape), dtype_of(t), to_bytes(t)

    with fastst.safe_open(path, framework) as f, safetensors.safe_open(path, framework) as r:
        for index in INDICES:
            ours = summary(f.get_slice("x")[index])
            try:
                # (Summarised at once: paddle aborts when several of the
                # reference's slices are alive together.)
                theirs = summary(r.get_slice("x")[index])
            except Exception:  # the reference lacks this index form (flax: None)
                expected = np.ascontiguousarray(values[index])
                assert ours[0] == expected.shape and ours[2] == expected.tobytes(), index
                continue
            assert ours == theirs, index
        # numpy's rules: negative steps are allowed outside torch.
        reversed_part = f.get_slice("x")[::-1, :, ::2]
        assert to_bytes(reversed_part) == np.ascontiguousarray(values[::-1, :, ::2]).tobytes()


def _tf_make() -> Dict[str, Any]:
    return {"w": tf.reshape(tf.range(6, dtype=tf.bfloat16), (2, 3))}


def _paddle_make() -> Dict[str, Any]:
    return {"w": paddle.arange(6, dtype="float32").astype("bfloat16").reshape([2, 3])}


FRAMEWORK_MODULES = {
    "flax": (fastst.flax, lambda: {"w": jnp.arange(6, dtype=jnp.bfloat16).reshape(2, 3)},
             lambda t: np.asarray(t.astype(jnp.float32))),
    "tensorflow": (fastst.tensorflow, _tf_make, lambda t: tf.cast(t, tf.float32).numpy()),
    "paddle": (fastst.paddle, _paddle_make, lambda t: t.astype("float32").numpy()),
    "mlx": (fastst.mlx, lambda: {"w": mx.arange(6, dtype=mx.bfloat16).reshape(2, 3)},
            lambda t: np.array(t.astype(mx.float32))),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FRAMEWORK_MODULES))
def test_every_framework_module_takes_the_uniform_options(name: str, tmp_path: Path) -> None:
    module, make, as_f32 = FRAMEWORK_MODULES[name]
    path = tmp_path / "m.safetensors"
    module.save_file(make(), path, durable=True)
    expected = np.arange(6, dtype=np.float32).reshape(2, 3)
    seen: List[Tuple[int, int]] = []
    for options in (
        {"copy": True},
        {"backend": "pread"},
        {"dtype": np.float32},
        {"dtype": "F32", "copy": True, "progress": lambda done, total: seen.append((done, total))},
    ):
        got = module.load_file(path, **options)["w"]
        assert np.array_equal(as_f32(got), expected), options
        assert ("float32" in str(got.dtype)) == ("dtype" in options), options
    assert seen and seen[-1][0] == seen[-1][1] == 12
