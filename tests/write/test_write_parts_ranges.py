"""``TensorWriter.write_parts`` takes ranges of tensors of open files (``fastst.TensorRange``,
made by ``safe_open.tensor_bytes``) beside buffers: a local file's range is read by the writer
in place (no buffer in Python: the peak memory of a 64 MiB range stays near the writer's own
buffer), one of an object of a store through a bounded buffer; a range outside its tensor, of a
closed file or of a tensor the file lacks, and ranges that do not add up to the tensor, are
errors of the SafetensorError tree naming the file, the tensor and the rule."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Tuple

import fastst
import fastst.numpy as fnp
import numpy as np
import pytest
from fastst import ClosedFileError, SerializeError, TensorNotFoundError, TensorRange
from helpers.remote_servers import RangeHTTPServer


def _source(tmp_path: Path) -> Tuple[Path, np.ndarray, np.ndarray]:
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    b = np.arange(100, 112, dtype=np.float32)
    path = tmp_path / "src.safetensors"
    fnp.save_file({"a": a, "b": b}, path)
    return path, a, b


def test_ranges_and_buffers_mixed_make_the_tensor(tmp_path: Path) -> None:
    """Ranges of two tensors of one file, a buffer between them, and a range of a shard of a
    checkpoint opened through its index: the file written is the one save_file writes."""
    path, a, b = _source(tmp_path)
    want = np.concatenate([a.reshape(-1)[:10], np.float32([-1, -2]), b[4:], a.reshape(-1)[10:]])
    index = fnp.save_sharded({"c": a, "d": b}, tmp_path / "ck", max_shard_size=100)
    out = tmp_path / "out.safetensors"
    with fastst.safe_open(str(path), "np") as f, fastst.safe_open(index, "np") as ck:
        whole = f.tensor_bytes("b")
        assert isinstance(whole, TensorRange)
        assert (whole.tensor, whole.offset, whole.length) == ("b", 0, b.nbytes)
        with fastst.open_writer(out, {"w": ("F32", [want.size]), "d": ("F32", [12])}) as w:
            w.write_parts(
                "w",
                [
                    f.tensor_bytes("a", 0, 40),
                    np.float32([-1, -2]),
                    f.tensor_bytes("b", 16),
                    f.tensor_bytes("a", 40, a.nbytes - 40),
                ],
            )
            w.write_parts("d", [ck.tensor_bytes("d", 0, 8), ck.tensor_bytes("d", 8)])
    fnp.save_file({"w": want, "d": b}, tmp_path / "want.safetensors")
    assert out.read_bytes() == (tmp_path / "want.safetensors").read_bytes()


def test_range_errors_name_file_tensor_and_rule(tmp_path: Path) -> None:
    path, a, _b = _source(tmp_path)
    out = tmp_path / "out.safetensors"
    with fastst.safe_open(str(path), "np") as f:
        for offset, length in ((90, 8), (0, a.nbytes + 1), (a.nbytes + 4, None), (-4, 8), (0, -1)):
            with pytest.raises(SerializeError) as info:
                f.tensor_bytes("a", offset, length)
            assert (info.value.rule, info.value.filename, info.value.tensor) == (
                "range-outside-tensor",
                str(path),
                "a",
            )
            assert str(path) in str(info.value) and "'a'" in str(info.value)
        with pytest.raises(TensorNotFoundError) as missing:
            f.tensor_bytes("zz")
        assert (missing.value.rule, missing.value.tensor) == ("tensor-not-found", "zz")
        with pytest.raises(TypeError):
            f.tensor_bytes("a", 1.5)  # type: ignore[arg-type]
        raw = f.tensor_bytes("a").file
        kept = f.tensor_bytes("a")
        with fastst.open_writer(out, {"w": ("F32", [4, 6])}) as w:
            # Made by hand past the tensor's end: refused when written, nothing written.
            with pytest.raises(SerializeError) as info:
                w.write_parts("w", [TensorRange(raw, "a", 8, a.nbytes)])
            assert (info.value.rule, info.value.tensor) == ("range-outside-tensor", "a")
            # Ranges that do not add up to the tensor: the writer's own rule.
            with pytest.raises(SerializeError) as info:
                w.write_parts("w", [f.tensor_bytes("a", 0, 8)])
            assert (info.value.rule, info.value.tensor) == ("data-length", "w")
            # The native face's tuples are no part of the public one.
            with pytest.raises(TypeError, match="TensorRange"):
                w.write_parts("w", [(raw, "a", 0, a.nbytes)])
            assert w.missing() == ["w"]
            w.write_parts("w", [kept])
    assert np.array_equal(fnp.load_file(out)["w"], a)
    # A range of a file closed since: the one closed-file error, the tensor left unwritten.
    with fastst.open_writer(out, {"w": ("F32", [4, 6])}) as w:
        with pytest.raises(ClosedFileError) as closed:
            w.write_parts("w", [kept])
        assert (closed.value.rule, closed.value.filename) == ("closed-file", str(path))
        assert w.missing() == ["w"]
        w.write_parts("w", [a])
    with pytest.raises(ClosedFileError):
        f.tensor_bytes("a")


def test_a_range_of_an_object_of_a_store_goes_through_a_bounded_buffer(
    http_dir: Tuple[Path, RangeHTTPServer],
) -> None:
    """An object read over HTTP has no local file to read in place: its range is read with
    ranged reads into a buffer of at most 8 MiB, and the tensor comes out whole."""
    root, server = http_dir
    x = np.arange(5 << 20, dtype=np.float32)  # 20 MiB: three reads
    fnp.save_file({"x": x}, root / "a.safetensors")
    out = root / "out.safetensors"
    with fastst.safe_open(f"{server.url}/a.safetensors", "np") as f:
        r = f.tensor_bytes("x", 4)
        assert r.file.remote
        with fastst.open_writer(out, {"y": ("F32", [x.size])}) as w:
            w.write_parts("y", [x[:1], r])
        with pytest.raises(SerializeError) as info:
            f.tensor_bytes("x", x.nbytes, 1)
        assert (info.value.rule, info.value.filename) == (
            "range-outside-tensor",
            f"{server.url}/a.safetensors",
        )
    assert np.array_equal(fnp.load_file(out)["y"], x)


RANGE_PEAK = """
import sys
import fastst

def peak() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no VmHWM")

src, out = sys.argv[1], sys.argv[2]
with fastst.safe_open(src + "-warm", "np", backend="pread") as f:  # imports, first buffers
    with fastst.open_writer(out + "-warm", {"w": ("U8", [4096])}) as w:
        w.write_parts("w", [f.tensor_bytes("w")])
base = peak()
with fastst.safe_open(src, "np", backend="pread") as f:
    with fastst.open_writer(out, {"w": ("U8", [64 << 20])}) as w:
        w.write_parts("w", [f.tensor_bytes("w", 0, 1 << 20), f.tensor_bytes("w", 1 << 20)])
print(peak() - base)
"""


def test_a_local_range_is_read_in_place(tmp_path: Path) -> None:
    """The writer reads a local file's range straight into the aligned buffer of its direct
    writes (4 MiB): writing a 64 MiB tensor from ranges of a file (read with pread, so no
    mapping counts) grows the peak memory by about that buffer, not by a buffer of Python's
    on top of it (an 8 MiB one, as a range of an object of a store takes, makes about 12)."""
    data = np.random.default_rng(0).integers(0, 255, 64 << 20, dtype=np.uint8)
    src = tmp_path / "src.safetensors"
    fnp.save_file({"w": data}, src)
    fnp.save_file({"w": data[:4096]}, str(src) + "-warm")
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RANGE_PEAK), str(src), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    growth = int(result.stdout.split()[-1])
    assert growth < 8 << 20, growth
    assert np.array_equal(fnp.load_file(tmp_path / "out")["w"], data)
