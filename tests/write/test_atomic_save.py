"""Atomic replacement: the target is the old file or the complete new one,
never a partial one; failures leave no temporary file; open readers keep
their data; new files get the usual permissions."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import fastst
import fastst._write.tensors as w
import fastst.numpy as fnp
import numpy as np
import pytest

OLD = {"w": np.arange(1000, dtype=np.float32)}


def listing(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.safetensors"
    fnp.save_file(OLD, path)
    return path


def test_saving_over_an_open_mapped_file_keeps_the_old_data(old_file: Path) -> None:
    big_old = {"w": np.full(4 << 20, 1, dtype=np.float32)}  # mapped, not copied
    fnp.save_file(big_old, old_file)
    with fastst.safe_open(old_file, "np") as f:
        before = f.get_tensor("w")
        fnp.save_file({"w": np.full(4 << 20, 2, dtype=np.float32)}, old_file)
        after = f.get_tensor("w")  # read through the old handle after the save
        assert (before == 1).all() and (after == 1).all()
    assert (fnp.load_file(old_file)["w"] == 2).all()
    assert listing(old_file.parent) == ["model.safetensors"]


def failing_pieces(after: int, exc: BaseException):
    real = w._pieces

    def pieces(a: np.ndarray) -> Iterator[np.ndarray]:
        for i, piece in enumerate(real(a)):
            if i == after:
                raise exc
            yield piece

    return pieces


@pytest.mark.parametrize(
    "exc",
    [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt(), ValueError("late")],
    ids=["enospc", "interrupt", "value-error"],
)
def test_failure_mid_write_leaves_the_original(old_file: Path, monkeypatch, exc) -> None:
    monkeypatch.setattr(w, "CHUNK_BYTES", 1 << 16)
    seen = []
    real = failing_pieces(3, exc)

    def spy(a: np.ndarray) -> Iterator[np.ndarray]:
        for piece in real(a):
            # Mid-write: the target is still the old file, the new one is a
            # temporary file beside it.
            seen.append(listing(old_file.parent))
            yield piece

    monkeypatch.setattr(w, "_pieces", spy)
    original = old_file.read_bytes()
    big = np.arange(1 << 20, dtype=">f4")  # big-endian: goes through _pieces
    with pytest.raises(type(exc)):
        fnp.save_file({"a": np.zeros(3), "big": big}, old_file)
    assert old_file.read_bytes() == original
    assert listing(old_file.parent) == ["model.safetensors"]
    # Mid-write the new file has no name yet (O_TMPFILE): the folder holds
    # only the old file, so a killed process leaves nothing behind.
    assert seen[0] == ["model.safetensors"]


def test_failed_write_syscall_leaves_the_original(old_file: Path) -> None:
    # A file size limit makes write(2) fail with EFBIG part-way through, as a
    # full disk would with ENOSPC.
    script = textwrap.dedent(
        f"""
        import errno, resource, signal
        import numpy as np
        import fastst.numpy as fnp
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        try:
            fnp.save_file({{"x": np.ones(4 << 20, dtype=np.uint8)}}, {str(old_file)!r})
        except OSError as exc:
            assert exc.errno == errno.EFBIG, exc
            assert {str(old_file)!r} in str(exc), exc
            print("failed as expected")
        """
    )
    original = old_file.read_bytes()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "failed as expected" in out.stdout
    assert old_file.read_bytes() == original
    assert listing(old_file.parent) == ["model.safetensors"]


def test_invalid_input_found_before_anything_is_written(old_file: Path) -> None:
    original = old_file.read_bytes()
    with pytest.raises(fastst.SerializeError):
        fnp.save_file({"a": np.zeros(2), "b": np.array([object()])}, old_file)
    with pytest.raises(fastst.SerializeError):
        fastst.serialize_file(
            {"x": {"dtype": "F32", "shape": [4], "data": b"short"}}, old_file, durable=False
        )
    assert old_file.read_bytes() == original
    assert listing(old_file.parent) == ["model.safetensors"]


def test_new_files_get_umask_permissions(tmp_path: Path) -> None:
    old_mask = os.umask(0o027)
    try:
        fnp.save_file(OLD, tmp_path / "a.safetensors")
    finally:
        os.umask(old_mask)
    assert (tmp_path / "a.safetensors").stat().st_mode & 0o777 == 0o640
    old_mask = os.umask(0o022)
    try:
        fnp.save_file(OLD, tmp_path / "b.safetensors")
    finally:
        os.umask(old_mask)
    assert (tmp_path / "b.safetensors").stat().st_mode & 0o777 == 0o644


def test_replacing_keeps_the_old_file_permissions(old_file: Path) -> None:
    old_file.chmod(0o604)
    fnp.save_file({"x": np.zeros(2)}, old_file)
    assert old_file.stat().st_mode & 0o777 == 0o604


def test_symlink_target_is_replaced_not_followed(tmp_path: Path) -> None:
    real = tmp_path / "real.safetensors"
    fnp.save_file(OLD, real)
    link = tmp_path / "link.safetensors"
    link.symlink_to(real)
    fnp.save_file({"y": np.ones(2)}, link)
    # The link itself became the new file; the file it pointed to is intact.
    assert not link.is_symlink()
    assert list(fnp.load_file(link)) == ["y"]
    assert list(fnp.load_file(real)) == list(OLD)


def test_os_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such.safetensors"
    with pytest.raises(FileNotFoundError, match="such.safetensors"):
        fnp.save_file(OLD, missing)
    folder = tmp_path / "dir.safetensors"
    folder.mkdir()
    with pytest.raises(IsADirectoryError):
        fnp.save_file(OLD, folder)
    assert listing(tmp_path) == ["dir.safetensors"]
