"""Behaviour no other test pinned down, found by the Python mutation pass
(scripts/pymutants.py; the mutant each test kills is named in its docstring,
see docs/python-mutants.md)."""

from __future__ import annotations

import fastst
import fastst.numpy
import numpy as np
import pytest


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


def test_get_tensors_converts_without_copy(tmp_path):
    """``get_tensors(dtype=...)`` without ``copy=True`` still converts every
    tensor (mutant: the no-copy shortcut taken whenever dtype is given)."""
    path = tmp_path / "m.safetensors"
    halves = {
        "a": np.array([[0.5, -1.0], [2.0, 65504.0]], dtype=np.float16),
        "b": np.array([1.0, -2.5, 3.25], dtype=np.float16),
    }
    fastst.numpy.save_file(halves, path)
    with fastst.safe_open(path, "np") as f:
        got = f.get_tensors(dtype=np.float32)
        views = f.get_tensors()
    _same(got, {k: v.astype(np.float32) for k, v in halves.items()})
    _same(views, halves)


def test_slice_shape_and_dtype_properties(tmp_path):
    """``SafeSlice.shape`` / ``.dtype`` (properties) agree with
    ``get_shape()`` / ``get_dtype()`` (mutant: ``shape`` returning None)."""
    path = tmp_path / "m.safetensors"
    fastst.numpy.save_file(_sample(), path)
    with fastst.safe_open(path, "np") as f:
        a, b = f.get_slice("a"), f.get_slice("b")
        assert a.shape == (2, 3) and isinstance(a.shape, tuple)
        assert a.get_shape() == [2, 3]
        assert (a.dtype, a.get_dtype()) == ("F32", "F32")
        assert b.shape == (4,) and b.dtype == "I16"
        assert len(a) == 2


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
