"""``fastst.open_writer``: a layout first, then tensors in any order and from any thread, each
written at its offset; the file byte-identical to ``save_file``'s, saved only when the block
ends cleanly with every tensor written (else nothing at the target and no temporary file);
errors naming the file, the tensor and the rule; the GIL released; memory bounded by the
tensors in hand, not the checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterator

import fastst
import fastst.numpy as fnp
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
from fastst import ClosedFileError, SerializeError


def layout_of(tensors: Dict[str, Any]) -> Dict[str, Any]:
    return {name: (t.dtype, tuple(t.shape)) for name, t in tensors.items()}


def inputs() -> Dict[str, np.ndarray]:
    """Arrays of many dtypes and every memory layout save_file accepts."""
    rng = np.random.default_rng(7)
    return {
        "f32": rng.standard_normal((5, 7)).astype(np.float32),
        "bf16": rng.standard_normal((4, 3)).astype(ml_dtypes.bfloat16),
        "f8": rng.standard_normal(16).astype(ml_dtypes.float8_e4m3fn),
        "f4": rng.standard_normal(8).astype(ml_dtypes.float4_e2m1fn),
        "f6": rng.standard_normal(12).astype(ml_dtypes.float6_e2m3fn),
        "i64": np.arange(9, dtype=np.int64),
        "u8": np.arange(250, dtype=np.uint8),
        "bool": np.array([[True, False], [False, True]]),
        "c64": (rng.standard_normal(3) + 1j).astype(np.complex64),
        "scalar": np.array(2.5, dtype=np.float64),
        "empty": np.zeros((0, 4), dtype=np.float16),
        "big_endian": np.arange(10, dtype=">i4"),
        "fortran": np.asfortranarray(rng.standard_normal((6, 4)).astype(np.float32)),
        "strided": rng.standard_normal((8, 10))[::2, ::-3],
    }


def only_the_target(folder: Path, name: str = "m.safetensors") -> bool:
    return sorted(os.listdir(folder)) == ([name] if (folder / name).exists() else [])


# ----------------------------------------------------------- byte-identical


@pytest.mark.parametrize("align", [None, 64, 4096])
def test_any_order_gives_the_bytes_save_file_writes(tmp_path: Path, align: Any) -> None:
    tensors = inputs()
    meta = {"format": "np", "step": "12"}
    expected = tmp_path / "expected.safetensors"
    fnp.save_file(tensors, expected, metadata=meta, align=align)
    path = tmp_path / "m.safetensors"
    order = list(reversed(tensors))
    with fastst.open_writer(path, layout_of(tensors), metadata=meta, align=align) as w:
        assert w.missing() == list(tensors)
        for name in order:
            assert not path.exists()
            w.write(name, tensors[name])
        assert w.missing() == []
    assert w.closed
    assert path.read_bytes() == expected.read_bytes()
    assert path.read_bytes() == fastst.serialize(tensors, meta, align=align)
    assert sorted(os.listdir(tmp_path)) == ["expected.safetensors", "m.safetensors"]
    loaded = fnp.load_file(path)
    for name, value in tensors.items():
        little = value.dtype.newbyteorder("<")
        assert loaded[name].tobytes() == np.ascontiguousarray(value, dtype=little).tobytes(), name


def test_layout_dtypes_in_every_spelling(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones(4, dtype=ml_dtypes.bfloat16)
    c = np.zeros(2, dtype=ml_dtypes.float8_e5m2)
    spellings = [
        {"a": ("F32", [2, 3]), "b": ("BF16", [4]), "c": ("F8_E5M2", [2])},
        {"a": (np.float32, (2, 3)), "b": (ml_dtypes.bfloat16, (4,)), "c": (c.dtype, (2,))},
        {"a": ("float32", (2, 3)), "b": ("bfloat16", (4,)), "c": ("float8_e5m2", (2,))},
        {
            "a": (torch.float32, torch.Size([2, 3])),
            "b": (torch.bfloat16, [4]),
            "c": (torch.float8_e5m2, [2]),
        },
        {
            "a": (np.dtype("<f4"), np.array([2, 3])),
            "b": (b.dtype, [np.int64(4)]),
            "c": ("F8_E5M2", [2]),
        },
    ]
    expected = fastst.serialize({"a": a, "b": b, "c": c})
    for i, layout in enumerate(spellings):
        path = tmp_path / f"s{i}.safetensors"
        with fastst.open_writer(path, layout) as w:
            w.write("c", c)
            w.write("a", a)
            w.write("b", b)
        assert path.read_bytes() == expected, layout


def test_torch_tensors_are_written_as_torch_save_file_writes_them(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import fastst.torch as ftorch

    state = {
        "w": torch.randn(4, 6, dtype=torch.bfloat16),
        "b": torch.arange(5, dtype=torch.int32),
        "f8": torch.randn(8).to(torch.float8_e4m3fn),
        "h": torch.randn(3, 3, dtype=torch.float16).t().contiguous(),
        "flag": torch.tensor([True, False]),
        "grad": torch.randn(3, requires_grad=True),
    }
    if hasattr(torch, "float4_e2m1fn_x2"):
        state["fp4"] = torch.arange(6, dtype=torch.uint8).view(torch.float4_e2m1fn_x2).reshape(2, 3)
    meta = {"format": "pt"}
    expected = tmp_path / "expected.safetensors"
    ftorch.save_file(state, expected, metadata=meta)
    path = tmp_path / "m.safetensors"
    layout = {k: (v.dtype, v.shape) for k, v in state.items()}
    with fastst.open_writer(path, layout, metadata=meta) as w:
        for name in sorted(state, reverse=True):
            w.write(name, state[name])
    assert path.read_bytes() == expected.read_bytes()
    # A non-contiguous tensor is refused as torch's save_file refuses it.
    with pytest.raises(ValueError, match="non contiguous"):
        with fastst.open_writer(tmp_path / "t.safetensors", {"t": (torch.float32, [3, 2])}) as w:
            w.write("t", torch.randn(2, 3).t())
    assert not (tmp_path / "t.safetensors").exists()


def test_raw_inputs_tensorspec_bytes_and_dicts(tmp_path: Path) -> None:
    raw = np.arange(8, dtype=np.float32)
    spec = fastst.TensorSpec(
        dtype="float32", shape=[8], data_ptr=raw.ctypes.data, data_len=raw.nbytes
    )
    tensors = {
        "spec": spec,
        "bytes": b"abcdef",
        "dict": {"dtype": "I16", "shape": [2], "data": b"\x01\x00\x02\x00"},
    }
    layout = {"spec": ("F32", [8]), "bytes": ("U8", [6]), "dict": ("I16", [2])}
    path = tmp_path / "m.safetensors"
    with fastst.open_writer(path, layout) as w:
        for name, value in tensors.items():
            w.write(name, value)
    assert path.read_bytes() == fastst.serialize(tensors)
    # Raw bytes of the wrong length: rule data-length, the tensor pending again.
    with fastst.open_writer(tmp_path / "n.safetensors", {"d": ("I16", [2])}) as w:
        with pytest.raises(SerializeError) as info:
            w.write("d", {"dtype": "I16", "shape": [2], "data": b"\x01\x00\x02"})
        assert (info.value.rule, info.value.tensor) == ("data-length", "d")
        assert w.missing() == ["d"]
        w.write("d", {"dtype": "I16", "shape": [2], "data": b"\x01\x00\x02\x00"})
    assert safetensors.numpy.load_file(str(tmp_path / "n.safetensors"))["d"].tolist() == [1, 2]


# -------------------------------------------------------------- whole or nothing


def test_an_exception_in_the_block_saves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"old contents")
    tensors = inputs()
    with pytest.raises(RuntimeError, match="training crashed"):
        with fastst.open_writer(path, layout_of(tensors)) as w:
            for name, value in tensors.items():
                w.write(name, value)
            raise RuntimeError("training crashed")
    assert path.read_bytes() == b"old contents"
    assert only_the_target(tmp_path)
    assert w.closed
    with pytest.raises(ClosedFileError) as info:
        w.write("f32", tensors["f32"])
    assert (info.value.rule, info.value.filename) == ("closed-file", str(path))


def test_tensors_missing_save_nothing_and_say_which(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"old contents")
    tensors = inputs()
    with pytest.raises(SerializeError) as info:
        with fastst.open_writer(path, layout_of(tensors)) as w:
            w.write("f32", tensors["f32"])
            w.write("u8", tensors["u8"])
    err = info.value
    assert (err.rule, err.filename, err.tensor) == ("tensors-missing", str(path), "bf16")
    assert str(err).startswith(f"{path}: {len(tensors) - 2} of {len(tensors)} tensors")
    assert "nothing was saved" in str(err)
    assert path.read_bytes() == b"old contents"
    assert only_the_target(tmp_path)
    # New file: nothing appears at all.
    fresh = tmp_path / "fresh.safetensors"
    w = fastst.open_writer(fresh, {"a": ("F32", [2])})
    with pytest.raises(SerializeError, match="tensors-missing|were not written"):
        w.close()
    assert not fresh.exists()
    with pytest.raises(ClosedFileError):
        w.close()
    assert only_the_target(tmp_path)


def test_abort_and_garbage_collection_leave_nothing(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    w = fastst.open_writer(path, {"a": ("F32", [2])})
    w.write("a", np.ones(2, np.float32))
    w.abort()
    w.abort()
    assert w.closed and not path.exists()
    w = fastst.open_writer(path, {"a": ("F32", [2])})
    w.write("a", np.ones(2, np.float32))
    del w
    assert not path.exists()
    assert os.listdir(tmp_path) == []


def test_the_file_is_unnamed_while_written(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    with fastst.open_writer(path, {"a": ("U8", [3]), "b": ("U8", [2])}) as w:
        w.write("a", b"abc")
        if sys.platform == "linux":
            assert os.listdir(tmp_path) == []
        w.write("b", b"de")
    assert os.listdir(tmp_path) == ["m.safetensors"]


def test_a_symbolic_link_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    link = tmp_path / "m.safetensors"
    link.symlink_to(victim)
    with fastst.open_writer(link, {"a": ("U8", [1])}) as w:
        w.write("a", b"x")
    assert not link.is_symlink()
    assert victim.read_bytes() == b"precious"


# --------------------------------------------------------------------- errors


def test_errors_name_the_file_the_tensor_and_the_rule(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    layout = {"a": ("F32", [2, 3]), "b": ("I8", [4])}
    with fastst.open_writer(path, layout) as w:
        cases = [
            ("zz", np.zeros(1, np.float32), "tensor-not-in-layout", "zz"),
            ("a", np.zeros((2, 3), np.float64), "layout-mismatch", "a"),
            ("a", np.zeros((3, 2), np.float32), "layout-mismatch", "a"),
            ("b", np.zeros(4, np.uint8), "layout-mismatch", "b"),
        ]
        for name, value, rule, tensor in cases:
            with pytest.raises(SerializeError) as info:
                w.write(name, value)
            assert (info.value.rule, info.value.tensor, info.value.filename) == (
                rule,
                tensor,
                str(path),
            ), name
            assert str(info.value).startswith(f"{path}: "), str(info.value)
            assert repr(tensor)[1:-1] in str(info.value)
        with pytest.raises(SerializeError) as info:
            w.write("a", np.zeros((2, 3), np.float64))
        assert "F32 [2, 3]" in str(info.value) and "F64 [2, 3]" in str(info.value)
        w.write("a", np.zeros((2, 3), np.float32))
        with pytest.raises(SerializeError) as info:
            w.write("a", np.zeros((2, 3), np.float32))
        assert (info.value.rule, info.value.tensor) == ("tensor-written-twice", "a")
        with pytest.raises(TypeError):
            w.write(3, np.zeros(4, np.int8))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="expected an array"):
            w.write("b", object())
        w.write("b", np.zeros(4, np.int8))
    assert safetensors.numpy.load_file(str(path))["b"].tolist() == [0, 0, 0, 0]


def test_bad_layouts_are_refused_before_anything_is_created(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    bad = [
        ({"a": ("F33", [2])}, SerializeError, "unsupported-dtype"),
        ({"a": (object(), [2])}, SerializeError, "unsupported-dtype"),
        ({"a": ("F32", [-1])}, SerializeError, "bad-shape"),
        ({"a": ("F32", "2")}, SerializeError, "bad-shape"),
        ({"a": ("F32", [2.5])}, SerializeError, "bad-shape"),
        ({"__metadata__": ("F32", [2])}, SerializeError, "reserved-name"),
        ({"a": ("F4", [3])}, SerializeError, "bad-tensor-size"),
        ({"a": "F32"}, TypeError, None),
        ({"a": ("F32",)}, TypeError, None),
        ({1: ("F32", [2])}, TypeError, None),
        ([("a", "F32", [2])], TypeError, None),
    ]
    for layout, cls, rule in bad:
        with pytest.raises(cls) as info:
            fastst.open_writer(path, layout)  # type: ignore[arg-type]
        if rule is not None:
            assert info.value.rule == rule, layout  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="metadata"):
        fastst.open_writer(path, {"a": ("F32", [2])}, metadata={"k": 1})  # type: ignore[dict-item]
    with pytest.raises(SerializeError) as info:
        fastst.open_writer(path, {"a": ("F32", [2])}, header_cap=10)
    assert info.value.rule == "header-over-cap"
    with pytest.raises(FileNotFoundError):
        fastst.open_writer(tmp_path / "no" / "m.safetensors", {"a": ("F32", [2])})
    assert os.listdir(tmp_path) == []


def test_a_failed_write_can_be_done_again(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    data = np.arange(1 << 20, dtype=np.uint8)

    def failing() -> Iterator[np.ndarray]:
        yield data[:1000]
        raise KeyboardInterrupt("stopped while producing")

    with fastst.open_writer(path, {"a": ("U8", [data.size])}) as w:
        with pytest.raises(KeyboardInterrupt):
            w._native.write("a", "U8", [data.size], failing())
        assert w.missing() == ["a"]
        w.write("a", data)
    assert path.read_bytes() == fastst.serialize({"a": data})


# -------------------------------------------------------------------- threads


def test_threads_write_different_tensors_at_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    tensors = {
        f"layer.{i}.w": rng.standard_normal((64 + i, 257)).astype(
            [np.float32, ml_dtypes.bfloat16, np.float16, np.int64][i % 4]
        )
        for i in range(48)
    }
    # Some need converting, chunk by chunk, on their thread.
    for i in range(0, 48, 5):
        name = f"layer.{i}.w"
        tensors[name] = np.asfortranarray(tensors[name])
    path = tmp_path / "m.safetensors"
    names = list(tensors)
    rng.shuffle(names)
    with fastst.open_writer(path, layout_of(tensors), metadata={"format": "np"}) as w:
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda n: w.write(n, tensors[n]), names))
    assert path.read_bytes() == fastst.serialize(tensors, {"format": "np"})


def test_the_same_tensor_from_two_threads_is_written_once(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    big = np.ones(32 << 20, np.uint8)
    outcomes = []
    barrier = threading.Barrier(4)

    def write() -> None:
        barrier.wait()
        try:
            w.write("a", big)
            outcomes.append("ok")
        except SerializeError as exc:
            outcomes.append(exc.rule)

    with fastst.open_writer(path, {"a": ("U8", [big.size])}, durable=False) as w:
        threads = [threading.Thread(target=write) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(outcomes) == ["ok"] + ["tensor-written-twice"] * 3
    assert path.read_bytes() == fastst.serialize({"a": big})


def test_gil_is_released_while_bytes_move(tmp_path: Path) -> None:
    big = np.ones(256 << 20, dtype=np.uint8)
    done = threading.Event()
    timing = {}

    def save() -> None:
        start = time.perf_counter()
        with fastst.open_writer(
            tmp_path / "big.safetensors", {"big": ("U8", [big.size])}, durable=False
        ) as w:
            w.write("big", big)
        timing["write"] = time.perf_counter() - start
        done.set()

    thread = threading.Thread(target=save)
    last = time.perf_counter()
    worst = 0.0
    thread.start()
    while not done.is_set():
        now = time.perf_counter()
        worst = max(worst, now - last)
        last = now
        time.sleep(0.001)
    thread.join()
    assert worst < 0.8 * timing["write"], (worst, timing)


# --------------------------------------------------------------------- memory

MEMORY_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    import fastst

    path, count, each = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def peak() -> int:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    n = each // 4
    layout = {f"t{i:02d}": ("F32", [n // 1024, 1024]) for i in range(count)}

    def produce():
        # One tensor in memory at a time; every third is reversed and big-endian
        # (converted chunk by chunk), the others contiguous.
        for i in reversed(range(count)):
            a = np.empty((n // 1024, 1024), dtype=np.float32)
            a.fill(i)
            if i % 3 == 0:
                a = a.astype(">f4")[::-1]
            yield f"t{i:02d}", a
            del a

    # Warm up the paths once (imports, first allocations) before measuring.
    with fastst.open_writer(path + ".warm", {"w": ("F32", [4])}) as w:
        w.write("w", np.zeros(4, np.float32).astype(">f4")[::-1])
    base = peak()
    with fastst.open_writer(path, layout, durable=False) as w:
        for name, tensor in produce():
            w.write(name, tensor)
            del tensor
    print(peak() - base)
    """
)


@pytest.mark.slow
def test_peak_memory_is_bounded_by_buffers_not_the_checkpoint(tmp_path: Path) -> None:
    count, each = 48, 64 << 20  # 3 GiB of tensors, made one at a time
    path = tmp_path / "big.safetensors"
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(path), str(count), str(each)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    growth = int(result.stdout.split()[-1])
    try:
        assert path.stat().st_size > count * each
        with fastst.safe_open(path, "np") as f:
            assert len(f.keys()) == count
            for i in (0, 1, count - 1):
                row = f.get_slice(f"t{i:02d}")[-1:, :4]
                assert row.tolist() == [[float(i)] * 4]
    finally:
        path.unlink(missing_ok=True)
    # One tensor (64 MiB) and its conversion's copy plus chunk buffers: far
    # below the 3 GiB a writer holding the file would need.
    assert growth < 300 << 20, f"peak RSS grew by {growth >> 20} MiB"


def test_write_parts_streams_a_tensor_from_pieces(tmp_path: Path) -> None:
    """A tensor given as its bytes in pieces is the tensor written whole; pieces that do not
    add up to it, or that fail, leave it unwritten, to be written again."""
    w_data = np.arange(24, dtype=np.float32).reshape(4, 6)
    b_data = np.ones(3, dtype=np.float16)
    path = tmp_path / "parts.safetensors"
    with fastst.open_writer(path, {"w": ("F32", (4, 6)), "b": (np.float16, (3,))}) as w:
        flat = w_data.reshape(-1).view(np.uint8)
        with pytest.raises(SerializeError) as info:
            w.write_parts("w", [flat[:40], flat[40:]] + [flat[:8]])  # 8 bytes too many
        assert info.value.rule == "data-length"

        def failing() -> Iterator[Any]:
            yield flat[:16]
            raise RuntimeError("source went away")

        with pytest.raises(RuntimeError, match="went away"):
            w.write_parts("w", failing())
        assert w.missing() == ["w", "b"]
        w.write_parts("w", (flat[i : i + 10] for i in range(0, flat.nbytes, 10)))
        w.write_parts("b", [b_data.tobytes()])
        with pytest.raises(SerializeError) as info:
            w.write_parts("zz", [])
        assert info.value.rule == "tensor-not-in-layout"
    fnp.save_file({"w": w_data, "b": b_data}, tmp_path / "whole.safetensors")
    assert path.read_bytes() == (tmp_path / "whole.safetensors").read_bytes()
