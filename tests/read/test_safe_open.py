"""safe_open's API as the reference package has it, plus slices with
numpy's basic indexing semantics."""

from __future__ import annotations

import pathlib

import fastst
import fastst.numpy
import numpy as np
import pytest
from helpers.raw_files import raw_file
from hypothesis import HealthCheck, given, settings
from hypothesis.extra import numpy as hnp
from safetensors import safe_open as ref_open

A = np.arange(6 * 5 * 4, dtype=np.float32).reshape(6, 5, 4)


@pytest.fixture
def sample(write):
    return write(
        raw_file(
            {"a": ("F32", A.shape, A.tobytes()), "b": ("I8", [2], b"\x01\xff")},
            {"format": "np", "x": "y"},
        )
    )


@pytest.mark.parametrize("framework", ["np", "numpy"])
def test_framework_names_and_pathlike(sample, framework) -> None:
    with fastst.safe_open(pathlib.Path(sample), framework) as f:
        assert f.keys() == ["a", "b"]
        assert f.offset_keys() == ["a", "b"]
        assert f.metadata() == {"format": "np", "x": "y"}
        assert len(f) == 2 and "a" in f and "zz" not in f
        got = f.get_tensors()
        assert list(got) == ["a", "b"]
        np.testing.assert_array_equal(got["a"], A)


def test_unknown_framework_and_backend(sample) -> None:
    with pytest.raises(fastst.SafetensorError, match="not supported"):
        fastst.safe_open(sample, "caffe")
    with pytest.raises(fastst.SafetensorError, match="backend") as caught:
        fastst.safe_open(sample, "np", backend="nfs")
    # The reference's class, not a ValueError as well, with the rule inside.
    assert type(caught.value) is fastst.SafetensorError
    assert caught.value.rule == "unknown-backend"
    with pytest.raises(fastst.SafetensorError) as caught:
        fastst.safe_open(sample, "caffe")
    assert type(caught.value) is fastst.SafetensorError
    assert caught.value.rule == "unknown-framework"


def test_usable_without_with_and_closed_errors(sample) -> None:
    f = fastst.safe_open(sample, "np")
    a = f.get_tensor("a")
    s = f.get_slice("a")
    f.close()
    for call in (f.keys, f.offset_keys, f.metadata, lambda: f.get_tensor("a"), lambda: s[0]):
        with pytest.raises(fastst.ClosedFileError, match="closed"):
            call()
    np.testing.assert_array_equal(a, A)


def test_missing_tensor_is_safetensor_and_key_error(sample) -> None:
    with fastst.safe_open(sample, "np") as f:
        with pytest.raises(fastst.TensorNotFoundError) as info:
            f.get_tensor("nope")
        assert isinstance(info.value, KeyError)
        assert isinstance(info.value, fastst.SafetensorError)
        assert str(info.value) == f'{sample}: the file does not contain a tensor named "nope"'
        with pytest.raises(fastst.TensorNotFoundError):
            f.get_slice("nope")


def test_missing_file_raises_file_not_found(tmp_path) -> None:
    with pytest.raises(FileNotFoundError):
        fastst.safe_open(tmp_path / "absent.safetensors", "np")
    with pytest.raises(IsADirectoryError):
        fastst.safe_open(tmp_path, "np")


def test_pread_backend_reads_the_same(sample) -> None:
    with fastst.safe_open(sample, "np", backend="pread") as f:
        np.testing.assert_array_equal(f.get_tensor("a"), A)
        assert f.get_tensor("a").flags.writeable


def test_slice_metadata(sample) -> None:
    with fastst.safe_open(sample, "np") as f:
        s = f.get_slice("a")
        assert s.get_shape() == [6, 5, 4]
        assert s.get_dtype() == "F32"
        assert len(s) == 6


SLICE_CASES = [
    np.s_[:],
    np.s_[1],
    np.s_[-1],
    np.s_[1:3],
    np.s_[:, :2],
    np.s_[::-1],
    np.s_[::2, 1::-1, -1],
    np.s_[..., 0],
    np.s_[None, 1:, ..., None],
    np.s_[2:100],
    np.s_[-100:2],
    np.s_[5:1],
    np.s_[1, 2, 3],
]


@pytest.mark.parametrize("index", SLICE_CASES, ids=[repr(i) for i in SLICE_CASES])
def test_slices_follow_numpy(sample, index) -> None:
    with fastst.safe_open(sample, "np") as f:
        got = f.get_slice("a")[index]
    expected = A[index]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("index", [np.s_[:, :2], np.s_[1:3], np.s_[2], np.s_[..., 1:3]])
def test_slices_match_reference(sample, index) -> None:
    with fastst.safe_open(sample, "np") as f, ref_open(sample, "np") as r:
        np.testing.assert_array_equal(f.get_slice("a")[index], r.get_slice("a")[index])


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_bad_slices(sample, backend) -> None:
    with fastst.safe_open(sample, "np", backend=backend) as f:
        s = f.get_slice("a")
        # Out-of-range ints, on the first axis (which pread reads row by row)
        # and on the others: IndexError naming the tensor and its full shape.
        for index in (6, -7, 100, np.int64(6), (0, 5), (1, 0, 4), (-1, -6), np.s_[1:3, 5]):
            with pytest.raises(IndexError, match=r"tensor 'a' of shape \[6, 5, 4\]: index"):
                s[index]
        with pytest.raises(IndexError):
            s[0, 0, 0, 0]
        with pytest.raises(TypeError, match="basic indexing"):
            s[[0, 1]]
        with pytest.raises(TypeError, match="basic indexing"):
            s["x"]
        # A bool is not an int index (numpy would read it as a mask).
        for index in (True, False, np.True_, (0, True), (slice(None), False)):
            with pytest.raises(TypeError, match="basic indexing.*got bool"):
                s[index]
        # In-range ints still work on both back ends.
        np.testing.assert_array_equal(s[-6], A[-6])
        np.testing.assert_array_equal(s[5, 4, 3], A[5, 4, 3])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(index=hnp.basic_indices(shape=A.shape, allow_newaxis=True, allow_ellipsis=True))
def test_any_basic_index_matches_numpy(sample, index) -> None:
    with fastst.safe_open(sample, "np") as f:
        got = f.get_slice("a")[index]
    expected = A[index]
    assert got.shape == np.shape(expected)
    np.testing.assert_array_equal(got, expected)


def test_framework_names_match_the_reference(sample) -> None:
    from fastst._frameworks import ALIASES
    from safetensors import SafetensorError as RefError

    # The names the reference accepts (opening with them imports the
    # frameworks, which must not share a process in some orders: the set is
    # written out, and only numpy and refused names are opened here).
    assert set(ALIASES) == {
        "np",
        "numpy",
        "pt",
        "torch",
        "pytorch",
        "tf",
        "tensorflow",
        "flax",
        "jax",
        "mlx",
        "paddle",
    }
    for name in ["np", "numpy", "pp", "PT", "Numpy", "caffe", ""]:
        try:
            ref_open(sample, name)
            ref_ok = True
        except RefError:
            ref_ok = False
        try:
            fastst.safe_open(sample, name).close()
            ours_ok = True
        except fastst.SafetensorError:
            ours_ok = False
        assert ours_ok == ref_ok, name


@pytest.mark.parametrize("index", SLICE_CASES + [np.s_[3:1], np.s_[-2:, 1], np.s_[0:6:4]], ids=repr)
def test_pread_slices_read_only_their_rows_and_match_numpy(sample, index) -> None:
    with fastst.safe_open(sample, "np", backend="pread") as f:
        got = f.get_slice("a")[index]
    expected = A[index]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_pread_slice_reads_a_part(sample, monkeypatch) -> None:
    from fastst._fastst.read import RawFile

    calls = []
    with fastst.safe_open(sample, "np", backend="pread") as f:
        real = f._raw

        class Spy:
            def __getattr__(self, name):
                return getattr(real, name)

            def read_slice_into(self, name, dims, out):
                calls.append((dims, len(out)))
                real.read_slice_into(name, dims, out)

            def tensor(self, name):  # the whole-tensor path must not be taken
                raise AssertionError("whole tensor read")

        f._raw = Spy()
        part = f.get_slice("a")[2:4, ::2]
        f._raw = real
    np.testing.assert_array_equal(part, A[2:4, ::2])
    # Rows 2 and 3, every other index of the next dimension, all of the last.
    assert calls == [([(2, 2, 1), (0, 3, 2), (0, 4, 1)], 2 * 3 * 4 * 4)]
    assert isinstance(real, RawFile)


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


def _sample() -> dict:
    # 24 + 8 data bytes and a header padded to 8: the file's length is a
    # multiple of 8, so it can be viewed as 2-, 4- or 8-byte items.
    return {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.array([1, -2, 3, -4], dtype=np.int16),
    }


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
