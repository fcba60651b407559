"""API parity with the reference package (safetensors 0.8.0): safe_open on
file objects, the reference's private torch helpers, the empty-list slice,
FileNotFoundError's message, and the reference's slicing errors under the
``safetensors`` name. (Model folders: tests/sources/test_folders.py.)"""

from __future__ import annotations

import io
import os

import fastst
import fastst.numpy
import fastst.torch
import numpy as np
import pytest
import safetensors as reference
import safetensors.torch as reference_torch
import torch
from fastst._dropin.facade import safe_open as dropin_safe_open

A = np.arange(50, dtype=np.float32).reshape(10, 5)
B = np.arange(6, dtype=np.uint8)


@pytest.fixture
def sample(tmp_path):
    path = tmp_path / "model.safetensors"
    fastst.numpy.save_file({"a": A, "b": B}, path, metadata={"k": "v"})
    return path


# file objects ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["rb", "r"])
@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_safe_open_on_a_file_object_with_fileno(sample, mode, backend) -> None:
    with open(sample, mode) as fh:
        if mode == "rb":
            fh.read(3)  # the object's position does not matter
        with fastst.safe_open(fh, "np", backend=backend) as f:
            assert f.keys() == ["a", "b"]
            assert f.metadata() == {"k": "v"}
            np.testing.assert_array_equal(f.get_tensor("a"), A)
            np.testing.assert_array_equal(f.get_slice("a")[2:4], A[2:4])
        assert not fh.closed


def test_safe_open_handle_reference_name(sample) -> None:
    with open(sample, "rb") as fh, fastst._safe_open_handle(fh, framework="pt") as f:
        assert torch.equal(f.get_tensor("a"), torch.from_numpy(A))


def test_file_object_after_the_file_is_deleted(sample) -> None:
    with open(sample, "rb") as fh:
        os.remove(sample)
        with fastst.safe_open(fh, "np") as f:
            np.testing.assert_array_equal(f.get_tensor("b"), B)


def test_pipe_file_objects_are_refused_without_blocking() -> None:
    read_end, write_end = os.pipe()
    try:
        with os.fdopen(read_end, "rb", closefd=False) as fh:
            with pytest.raises(OSError, match="not a regular file"):
                fastst.safe_open(fh, "np")
    finally:
        os.close(read_end)
        os.close(write_end)


def test_bytesio_is_read_with_positioned_reads(sample) -> None:
    stream = io.BytesIO(sample.read_bytes())
    with fastst.safe_open(stream, "np") as f:
        assert f.offset_keys() == ["a", "b"]
        np.testing.assert_array_equal(f.get_tensor("a"), A)
        np.testing.assert_array_equal(f.get_slice("a")[3], A[3])
        np.testing.assert_array_equal(f.get_tensor("a", copy=True), A)
        bf16 = f.get_tensor("a", dtype="bfloat16")
        assert str(bf16.dtype) == "bfloat16"
        with pytest.raises(ValueError, match="no conversion from U8 to F32"):
            f.get_tensor("b", dtype="float32")
        with pytest.raises(fastst.TensorNotFoundError):
            f.get_tensor("nope")
    with pytest.raises(fastst.ClosedFileError):
        f.keys()


def test_bytesio_with_a_bad_header_is_refused_like_a_file(tmp_path) -> None:
    bad = (8).to_bytes(8, "little") + b'{"a": 1}'
    path = tmp_path / "bad.safetensors"
    path.write_bytes(bad)
    with pytest.raises(fastst.SafetensorError) as from_path:
        fastst.safe_open(path, "np")
    with pytest.raises(fastst.SafetensorError) as from_stream:
        fastst.safe_open(io.BytesIO(bad), "np")
    assert type(from_stream.value) is type(from_path.value)
    assert from_stream.value.rule == from_path.value.rule
    with pytest.raises(fastst.HeaderFramingError):
        fastst.safe_open(io.BytesIO(b"\x01"), "np")
    huge = (1 << 40).to_bytes(8, "little") + b"{}"
    with pytest.raises(fastst.HeaderFramingError):
        fastst.safe_open(io.BytesIO(huge), "np")


def test_stream_that_shrinks_raises(sample) -> None:
    data = sample.read_bytes()

    class Shrinking(io.BytesIO):
        def readinto(self, buffer):  # type: ignore[override]
            if self.tell() > 100:
                return 0
            return super().readinto(buffer)

    with fastst.safe_open(Shrinking(data), "np") as f, pytest.raises(OSError, match="shrank"):
        f.get_tensor("b")


# errors and slices -----------------------------------------------------------


def test_file_not_found_message_matches_the_reference(tmp_path) -> None:
    missing = str(tmp_path / "notafile")
    with pytest.raises(FileNotFoundError) as ours:
        fastst.safe_open(missing, "np")
    with pytest.raises(FileNotFoundError) as theirs:
        reference.safe_open(missing, "np")
    assert str(ours.value) == str(theirs.value)
    assert ours.value.errno == 2


def test_empty_list_index(sample) -> None:
    with fastst.safe_open(sample, "np") as f:
        assert f.get_slice("a")[[]].shape == (0, 5)
    with fastst.safe_open(sample, "pt") as f:
        assert f.get_slice("a")[[]].shape == (0, 5)


@pytest.mark.parametrize(
    "index",
    [
        [],
        [0, 1],
        (slice(2, None), -6),
        (slice(2, None), 20),
        slice(None, 20),
        (slice(None), slice(None, 20)),
        (0, 0, 0),
        (Ellipsis, Ellipsis),
        slice(None, None, 0),
        (slice(1, 3), -1),
        (Ellipsis, 2),
        slice(10, 10),
    ],
)
def test_dropin_slices_raise_what_the_reference_raises(sample, index) -> None:
    with reference.safe_open(str(sample), "np") as f:
        try:
            expected = f.get_slice("a")[index]
            failure = None
        except Exception as exc:  # noqa: BLE001 - compared below
            failure = exc
    with dropin_safe_open(sample, "np") as g:
        if failure is None:
            np.testing.assert_array_equal(g.get_slice("a")[index], expected)
        else:
            expected_type = (
                fastst.SafetensorError
                if isinstance(failure, reference.SafetensorError)
                else type(failure)
            )
            with pytest.raises(expected_type) as ours:
                g.get_slice("a")[index]
            assert str(ours.value) == str(failure)


def test_fastst_slices_keep_numpy_rules(sample) -> None:
    with fastst.safe_open(sample, "np") as f:
        np.testing.assert_array_equal(f.get_slice("a")[:20], A[:20])


# the reference's private torch helpers ---------------------------------------


def _cases():
    base = torch.zeros(16)
    grid = torch.zeros(4, 6)
    return [
        torch.zeros(4),
        base[::4],
        torch.zeros(4, dtype=torch.float16),
        grid.t(),
        grid[1:, 2:],
        torch.zeros(0),
        torch.tensor(3.0),
    ]


def test_end_ptr_matches_the_reference() -> None:
    for tensor in _cases():
        if tensor.is_contiguous() or tensor.dim() <= 1:
            assert fastst.torch._end_ptr(tensor) == reference_torch._end_ptr(tensor)


def test_find_shared_and_remove_duplicates_match_the_reference() -> None:
    a = torch.zeros(4)
    dicts = [
        {"A": a, "B": a[:2]},
        {"B": a[:2], "C": a[2:]},
        {"B": a[:2], "C": a[2:], "D": a[:1]},
        {"x": torch.zeros(3), "y": torch.zeros(3)},
    ]
    for state in dicts:
        assert fastst.torch._find_shared_tensors(state) == reference_torch._find_shared_tensors(
            state
        )
        groups = [set(g) for g in reference_torch._find_shared_tensors(state)]
        assert fastst.torch._filter_shared_not_shared(
            groups, state
        ) == reference_torch._filter_shared_not_shared(groups, state)
    full = {"A": a, "B": a[:2], "C": a}
    assert fastst.torch._remove_duplicate_names(full) == reference_torch._remove_duplicate_names(
        full
    )


def test_to_ndarray_and_flatten_as_ptr() -> None:
    tensor = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    ours, kept = fastst.torch._to_ndarray(tensor)
    theirs, _ = reference_torch._to_ndarray(tensor)
    assert ours.tobytes() == theirs.tobytes()
    assert kept.data_ptr() == tensor.data_ptr()
    keep: list = []
    specs = fastst.torch._flatten_as_ptr({"t": tensor}, keep)
    assert specs["t"].dtype == "BF16" and specs["t"].shape == [2, 3]
    assert fastst.serialize(specs) == reference_torch.save({"t": tensor})
    with pytest.raises(ValueError, match="non contiguous"):
        fastst.torch._flatten_as_ptr({"t": tensor.t()}, keep)


def test_numpy_private_helpers_match_the_reference() -> None:
    import safetensors.numpy as reference_numpy

    arrays = {"a": A, "big": np.arange(4, dtype=">i4"), "h": np.ones(3, np.float16)}
    keep: list = []
    assert fastst.serialize(fastst.numpy._flatten(arrays, keep)) == reference_numpy.save(arrays)
    data = reference_numpy.save({"x": B})
    np.testing.assert_array_equal(fastst.numpy._view2np(fastst.deserialize(data))["x"], B)
    for name in ("F32", "BOOL", "C64", "U16"):
        assert np.dtype(fastst.numpy._getdtype(name)) == np.dtype(reference_numpy._getdtype(name))
    for array in arrays.values():
        assert fastst.numpy._is_little_endian(array) == reference_numpy._is_little_endian(array)


def test_view2torch_and_getdtype() -> None:
    data = reference_torch.save({"x": torch.arange(4, dtype=torch.int32)})
    views = fastst.deserialize(data)
    tensors = fastst.torch._view2torch(views)
    assert torch.equal(tensors["x"], torch.arange(4, dtype=torch.int32))
    assert fastst.torch._getdtype("BF16") is torch.bfloat16


def test_reference_top_level_names_are_all_served() -> None:
    import fastst._dropin.facade as facade

    names = {
        n
        for n in dir(reference)
        if not n.startswith("__") and not isinstance(getattr(reference, n), type(reference))
    }
    names |= {"__version__"}
    missing = {n for n in names if not hasattr(facade, n)}
    assert not missing
    # the release whose contract is served: 0.9.0rc1, a superset of the installed 0.8.0
    assert facade.__version__ == "0.9.0rc1" and reference.__version__ == "0.8.0"
    for module in ("torch", "numpy"):
        ref = __import__(f"safetensors.{module}", fromlist=["_"])
        ours = __import__(f"fastst.{module}", fromlist=["_"])
        public = {
            n
            for n in dir(ref)
            if not n.startswith("_")
            and callable(getattr(ref, n))
            and getattr(getattr(ref, n), "__module__", "") != "typing"
        }
        assert not {n for n in public if not hasattr(ours, n)}, module


# safetensors 0.9's prefetch ---------------------------------------------------


def test_dropin_prefetch_keeps_the_references_contract(sample) -> None:
    import fastst._dropin.facade as facade

    assert facade.PrefetchLoader is fastst.PrefetchLoader
    assert facade.TensorMeta is fastst.TensorMeta
    with dropin_safe_open(sample, "np") as f:
        with pytest.raises(fastst.SafetensorError, match='framework="pt"') as info:
            f.prefetch()
        assert info.value.rule == "bad-device"
    with dropin_safe_open(sample, "pt") as f:
        for call in (f.prefetch, lambda: f.prefetch(device="cpu")):
            with pytest.raises(fastst.SafetensorError, match="cuda devices, not cpu"):
                call()
    with dropin_safe_open(sample, "pt", device="cuda:0") as f:
        # plans are checked before any device work, with the reference's words
        with pytest.raises(fastst.SafetensorError, match="None or a slice"):
            f.prefetch({"a": (slice(0, 2),)})  # fastst's index form is not 0.9's
        with pytest.raises(fastst.TensorNotFoundError, match="does not contain"):
            f.prefetch({"nope": None})
    # fastst's own name loads to the CPU
    with fastst.safe_open(sample, "pt") as f, f.prefetch({"a": slice(2, 4)}) as loader:
        assert torch.equal(loader.take("a"), torch.from_numpy(A[2:4]))
