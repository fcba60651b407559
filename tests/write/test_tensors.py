"""The writer's API: inputs it accepts, errors it raises (with the file,
tensor and rule named), deserialize/load semantics, GIL release."""

from __future__ import annotations

import array
import json
import struct
import threading
import time
from pathlib import Path

import fastst
import fastst.numpy
import fastst.numpy as fnp
import ml_dtypes
import numpy as np
import pytest
import torch
from fastst import SafetensorError, SerializeError


def header_of(data: bytes) -> dict:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n])


# ------------------------------------------------------------------ inputs


def test_accepts_scalars_buffers_and_array_likes() -> None:
    class ArrayLike:
        def __array__(self, dtype=None, copy=None):
            return np.arange(3, dtype=np.int32)

    data = fastst.serialize(
        {
            "scalar": np.float32(1.5),
            "buffer": memoryview(array.array("f", [1.0, 2.0])),
            "view": memoryview(b"abc"),
            "bytes": b"de",
            "bytearray": bytearray(b"f"),
            "like": ArrayLike(),
            "torch": torch.arange(4, dtype=torch.float64),
        }
    )
    out = fnp.load(data)
    assert out["scalar"].shape == () and out["scalar"] == np.float32(1.5)
    assert out["buffer"].dtype == np.float32 and list(out["buffer"]) == [1.0, 2.0]
    assert out["view"].dtype == np.uint8 and bytes(out["view"]) == b"abc"
    assert bytes(out["bytes"]) == b"de" and bytes(out["bytearray"]) == b"f"
    assert list(out["like"]) == [0, 1, 2]
    assert list(out["torch"]) == [0.0, 1.0, 2.0, 3.0]


def test_every_ml_dtype_round_trips() -> None:
    kinds = {
        "bf16": ml_dtypes.bfloat16,
        "e4m3": ml_dtypes.float8_e4m3fn,
        "e5m2": ml_dtypes.float8_e5m2,
        "e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
        "e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
        "e8m0": ml_dtypes.float8_e8m0fnu,
        "f4": ml_dtypes.float4_e2m1fn,
        "f6a": ml_dtypes.float6_e2m3fn,
        "f6b": ml_dtypes.float6_e3m2fn,
    }
    tensors = {k: np.array([1.0, 2.0, 0.5, 4.0] * 2, dtype=v) for k, v in kinds.items()}
    out = fnp.load(fnp.save(tensors))
    for k, v in tensors.items():
        assert out[k].dtype == v.dtype
        np.testing.assert_array_equal(out[k].astype(np.float32), v.astype(np.float32))
    # Packed kinds take less room: F4 two per byte, F6 four per three bytes.
    header = header_of(fnp.save(tensors))
    assert header["f4"]["data_offsets"][1] - header["f4"]["data_offsets"][0] == 4
    assert header["f6a"]["data_offsets"][1] - header["f6a"]["data_offsets"][0] == 6


def test_shared_memory_is_written_twice() -> None:
    a = np.arange(4, dtype=np.float32)
    out = fnp.load(fnp.save({"x": a, "y": a, "z": a[::2]}))
    np.testing.assert_array_equal(out["x"], a)
    np.testing.assert_array_equal(out["y"], a)
    np.testing.assert_array_equal(out["z"], a[::2])


def test_large_non_contiguous_array_is_written_in_chunks(monkeypatch) -> None:
    import fastst._write.tensors as w

    monkeypatch.setattr(w, "CHUNK_BYTES", 4096)
    base = np.arange(64 * 50 * 8, dtype=">i8").reshape(64, 50, 8)
    f4 = (np.arange(64 * 50 * 8) % 16).astype(np.uint8).view(ml_dtypes.float4_e2m1fn)
    f6 = (np.arange(64 * 50 * 8) % 64).astype(np.uint8).view(ml_dtypes.float6_e3m2fn)
    cases = [
        base[:, ::-1, ::2],
        np.asfortranarray(base),
        base[::3, 1:, 3],
        f4.reshape(64, 50, 8)[:, ::-1, ::2],
        f6.reshape(64, 400).T,
        f4,
    ]
    out = fnp.load(fnp.save({str(i): c for i, c in enumerate(cases)}))
    for i, c in enumerate(cases):
        assert out[str(i)].dtype == c.dtype.newbyteorder("=")
        little = c.dtype.newbyteorder("<")
        expected = np.ascontiguousarray(c, dtype=little).tobytes()
        assert out[str(i)].shape == c.shape
        assert np.ascontiguousarray(out[str(i)], dtype=little).tobytes() == expected


def test_tensor_spec_api() -> None:
    a = np.arange(6, dtype=np.uint8)
    spec = fastst.TensorSpec(
        dtype="float4_e2m1fn_x2", shape=[2, 3], data_ptr=a.ctypes.data, data_len=6
    )
    assert spec.dtype == "F4" and spec.shape == [2, 6] and spec.data_len == 6
    assert "F4" in repr(spec)
    header = header_of(fastst.serialize({"q": spec}))
    assert header["q"] == {"dtype": "F4", "shape": [2, 6], "data_offsets": [0, 6]}
    assert fastst.TensorSpec(dtype="BF16", shape=[3], data_ptr=0, data_len=6).dtype == "BF16"
    with pytest.raises(fastst.SafetensorError, match="Unknown dtype") as caught:
        fastst.TensorSpec(dtype="float128", shape=[1], data_ptr=0, data_len=16)
    # The reference raises its root class here, not a ValueError.
    assert type(caught.value) is fastst.SafetensorError
    assert caught.value.rule == "unknown-spec-dtype"
    with pytest.raises(ValueError):
        fastst.TensorSpec(dtype="float32", shape=[-1], data_ptr=0, data_len=0)


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "metadata, match",
    [
        ([("k", "v")], "metadata must be a dict"),
        ({1: "v"}, "metadata key 1"),
        ({"k": 1}, "metadata value for key 'k'"),
        ({"k": None}, "metadata value for key 'k'"),
    ],
)
def test_metadata_must_map_str_to_str(metadata, match, tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    with pytest.raises(TypeError, match=match) as info:
        fnp.save_file({"x": np.zeros(1)}, path, metadata=metadata)
    assert str(path) in str(info.value)
    assert not path.exists()
    with pytest.raises(TypeError, match=match):
        fnp.save({"x": np.zeros(1)}, metadata=metadata)


def test_names_must_be_str_and_not_reserved(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="tensor names must be str"):
        fnp.save({1: np.zeros(1)})
    # Not encodable as UTF-8: the same error as the reference's.
    with pytest.raises(UnicodeEncodeError):
        fnp.save({"a\ud800": np.zeros(1)})
    with pytest.raises(UnicodeEncodeError):
        fnp.save({"a": np.zeros(1)}, metadata={"k": "\udc80"})
    path = tmp_path / "r.safetensors"
    with pytest.raises(SerializeError, match="reserved") as info:
        fnp.save_file({"__metadata__": np.zeros(1)}, path)
    assert info.value.rule == "reserved-name"
    assert info.value.tensor == "__metadata__"
    assert info.value.filename == str(path)
    assert isinstance(info.value, ValueError) and isinstance(info.value, SafetensorError)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "value",
    [
        np.array([1, "a"], dtype=object),
        np.array(["ab", "c"]),
        np.array([b"ab"]),
        np.array(["2020-01-01"], dtype="datetime64[D]"),
        np.array([1], dtype="timedelta64[s]"),
        np.zeros(2, dtype=np.longdouble),
        np.zeros(2, dtype=np.complex128),
        np.zeros(2, dtype="V4"),
        np.zeros(2, dtype=[("a", "<i4")]),
    ],
    ids=lambda v: str(v.dtype),
)
def test_unsupported_dtypes_are_rejected(value: np.ndarray) -> None:
    with pytest.raises(SerializeError, match=r"tensor 'bad'.*no safetensors equivalent") as info:
        fnp.save({"ok": np.zeros(1), "bad": value})
    assert info.value.rule == "unsupported-dtype"
    assert info.value.tensor == "bad"


def test_not_a_tensor_or_not_a_dict() -> None:
    with pytest.raises(TypeError, match="tensor 'x'.*got list"):
        fnp.save({"x": [1, 2]})
    with pytest.raises(TypeError, match="expected a dict"):
        fnp.save([("x", np.zeros(1))])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs the keys"):
        fastst.serialize({"x": {"dtype": "F32"}})


def test_packed_kinds_must_fill_whole_bytes() -> None:
    with pytest.raises(SerializeError, match="do not fill whole bytes") as info:
        fnp.save({"q": np.zeros(3, dtype=ml_dtypes.float4_e2m1fn)})
    assert info.value.rule == "bad-tensor-size"
    with pytest.raises(SerializeError, match="do not fill whole bytes"):
        fnp.save({"q": np.zeros(6, dtype=ml_dtypes.float6_e2m3fn)})


def test_declared_sizes_must_match_data() -> None:
    a = np.arange(4, dtype=np.float32)
    with pytest.raises(SerializeError, match="expected 16 bytes of data, got 12") as info:
        fastst.serialize({"x": {"dtype": "F32", "shape": [4], "data": a.tobytes()[:12]}})
    assert info.value.rule == "data-length"
    spec = fastst.TensorSpec(dtype="float32", shape=[5], data_ptr=a.ctypes.data, data_len=16)
    with pytest.raises(SerializeError, match="expected 20 bytes"):
        fastst.serialize({"x": spec})


def test_header_over_cap_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(SerializeError, match="header size cap") as info:
        fnp.save({"x": np.zeros(1)}, metadata={"k": "v" * 100_000_000})
    assert info.value.rule == "header-over-cap"
    tensors = {f"t{i}": np.zeros(1, np.int8) for i in range(50)}
    with pytest.raises(SerializeError, match="above the 1000-byte"):
        fastst.serialize_file(tensors, tmp_path / "c.safetensors", header_cap=1000)
    assert list(tmp_path.iterdir()) == []
    fastst.serialize_file(tensors, tmp_path / "c.safetensors", header_cap=4000)


# ------------------------------------------------------- deserialize / load


def test_deserialize_shape_and_errors() -> None:
    data = fnp.save({"b": np.arange(3, dtype=np.float32), "a": np.arange(2)}, {"k": "v"})
    out = fastst.deserialize(data)
    assert [name for name, _ in out] == ["a", "b"]  # file order
    name, entry = out[0]
    assert entry == {"dtype": "I64", "shape": [2], "data": bytearray(np.arange(2).tobytes())}
    assert isinstance(entry["data"], bytearray)
    assert fastst.deserialize(bytearray(data)) == out
    assert fastst.deserialize(memoryview(data)) == out
    assert fastst.deserialize(np.frombuffer(data, np.uint8)) == out
    with pytest.raises(TypeError):
        fastst.deserialize("not bytes")
    with pytest.raises(SafetensorError, match="shorter than the 8-byte"):
        fastst.deserialize(b"abc")
    with pytest.raises(SafetensorError, match="trailing"):
        fastst.deserialize(data + b"x")
    with pytest.raises(SafetensorError):
        fnp.load(data[:-1])


def test_load_gives_writable_independent_arrays() -> None:
    data = fnp.save({"a": np.zeros(4, np.float32), "b": np.zeros(4, np.float32)})
    out = fnp.load(data)
    out["a"][0] = 7
    assert out["b"][0] == 0
    assert fnp.load(data)["a"][0] == 0


def test_paths_and_return_values(tmp_path: Path) -> None:
    t = {"x": np.arange(3, dtype=np.int16)}
    assert fnp.save_file(t, tmp_path / "p.safetensors") is None
    assert fnp.save_file(t, str(tmp_path / "s.safetensors")) is None
    fastst.serialize_file(t, bytes(tmp_path / "b.safetensors"), durable=False)
    fnp.save_file(t, tmp_path / "d.safetensors", durable=True)
    fnp.save_file(t, tmp_path / "d.safetensors")  # replaces: flushed by default
    for name in ("p", "s", "b", "d"):
        np.testing.assert_array_equal(fnp.load_file(tmp_path / f"{name}.safetensors")["x"], t["x"])
    assert fnp.load_file(tmp_path / "p.safetensors", backend="pread")["x"].tolist() == [0, 1, 2]


# ---------------------------------------------------------------- threads


def test_gil_is_released_while_bytes_move(tmp_path: Path) -> None:
    big = np.ones(256 << 20, dtype=np.uint8)
    done = threading.Event()
    timing = {}

    def save() -> None:
        start = time.perf_counter()
        fastst.serialize_file({"big": big}, tmp_path / "big.safetensors", durable=False)
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
    # Were the GIL held during the single 256 MB write, this loop would stall
    # for about the whole write.
    assert worst < 0.8 * timing["write"], (worst, timing)


def test_two_threads_save_different_files(tmp_path: Path) -> None:
    arrays = [np.full(8 << 20, i, dtype=np.uint8) for i in range(2)]
    errors = []

    def save(i: int) -> None:
        try:
            fnp.save_file({"x": arrays[i]}, tmp_path / f"{i}.safetensors")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(2):
        assert (fnp.load_file(tmp_path / f"{i}.safetensors")["x"] == i).all()


def _sample() -> dict:
    # 24 + 8 data bytes and a header padded to 8: the file's length is a
    # multiple of 8, so it can be viewed as 2-, 4- or 8-byte items.
    return {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.array([1, -2, 3, -4], dtype=np.int16),
    }


def _same(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype
        assert got[name].shape == want[name].shape
        np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize(
    "view",
    [
        lambda raw: np.frombuffer(raw, np.uint32),  # 4-byte items, 1-D
        lambda raw: np.frombuffer(raw, np.uint8).reshape(-1, 8),  # bytes, 2-D
        lambda raw: memoryview(np.frombuffer(raw, np.int8)),  # signed bytes
        lambda raw: memoryview(raw).cast("B", (len(raw) // 2, 2)),  # 2-D memoryview
    ],
    ids=["u32", "u8-2d", "i8", "memoryview-2d"],
)
def test_load_reads_any_buffer_as_bytes(view):
    """``load``/``deserialize`` read any contiguous buffer as its raw bytes,
    whatever its item format and number of dimensions (mutants: the cast to
    flat bytes skipped for non-byte formats or for 2-D buffers)."""
    raw = fastst.numpy.save(_sample())
    assert len(raw) % 8 == 0
    buffer = view(raw)
    _same(fastst.numpy.load(buffer), _sample())
    entries = fastst.deserialize(buffer)
    assert [(n, e["dtype"], e["shape"], bytes(e["data"])) for n, e in entries] == [
        ("a", "F32", [2, 3], _sample()["a"].tobytes()),
        ("b", "I16", [4], _sample()["b"].tobytes()),
    ]


@pytest.mark.parametrize("layout", ["strided", "big-endian"])
def test_long_vectors_needing_conversion_are_written_whole(layout):
    """A 1-D array of more than one conversion chunk (8 MiB) that cannot be
    written from its memory as it is (strided, big-endian) is converted in
    pieces that together cover every element (mutant: the pieces' bounds
    ``a[i : i - step]``, which writes empty pieces)."""
    n = 2_500_001  # 10 MB of float32: two pieces and a tail
    values = np.arange(n, dtype=np.float32)
    if layout == "strided":
        array = np.arange(2 * n, dtype=np.float32)[::2]
        values = values * 2
    else:
        array = values.astype(">f4")
    assert array.nbytes > 8 << 20 and not (array.flags.c_contiguous and array.dtype == "<f4")
    out = fastst.numpy.load(fastst.numpy.save({"v": array}))["v"]
    assert out.dtype == np.float32 and out.shape == (n,)
    np.testing.assert_array_equal(out, values)


def test_dict_input_with_non_contiguous_data():
    """The dict form's ``data`` may be a non-contiguous buffer: its bytes are
    taken in C order (mutant: the contiguity test negated, so a strided
    buffer is refused as "not a bytes-like object")."""
    base = np.arange(16, dtype=np.uint8)
    strided = memoryview(base)[::2]
    assert not strided.c_contiguous
    raw = fastst.serialize({"x": {"dtype": "uint8", "shape": [2, 4], "data": strided}})
    got = fastst.numpy.load(raw)["x"]
    np.testing.assert_array_equal(got, base[::2].reshape(2, 4))
    # and a contiguous one of another item size is read as its raw bytes
    words = np.array([1, 2], dtype="<u4")
    raw = fastst.serialize({"w": {"dtype": "uint8", "shape": [8], "data": words}})
    assert fastst.numpy.load(raw)["w"].tobytes() == words.tobytes()


def test_dict_input_float4_shape_of_rank_two():
    """The dict form with torch's packed ``float4_e2m1fn_x2`` counts two F4
    values per byte along the last axis, whatever the rank (mutant: the
    leading axes dropped)."""
    packed = bytes(range(6))
    raw = fastst.serialize({"q": {"dtype": "float4_e2m1fn_x2", "shape": [2, 3], "data": packed}})
    header = dict(fastst.deserialize(raw))
    assert header["q"]["dtype"] == "F4" and header["q"]["shape"] == [2, 6]
    assert bytes(header["q"]["data"]) == packed
