"""Hostile files: FIFOs, sockets and devices are refused at once (rule
``not-regular-file``) by the API and every subcommand; files changed by
another program give an error (rule ``file-changed``), never SIGBUS; the
guarantees of zero-copy views that docs/io.md states."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import fastst
import fastst.numpy as fnp
import fastst.tools.inspect
import numpy as np
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX file types"),
]

CLI = [sys.executable, "-m", "fastst"]


def run_py(script: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.safetensors"
    os.mkfifo(path)
    return path


def test_safe_open_refuses_a_fifo_at_once(fifo: Path) -> None:
    # In a subprocess: before the fix, opening a FIFO blocked forever.
    out = run_py(
        f"""
        import fastst
        try:
            fastst.safe_open({str(fifo)!r}, "numpy")
        except fastst.FileAccessError as e:
            assert isinstance(e, OSError) and isinstance(e, fastst.SafetensorError)
            print(e.rule, "|", e)
        """,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    rule, message = out.stdout.strip().split(" | ")
    assert rule == "not-regular-file"
    assert "pipe.safetensors" in message and "FIFO" in message


@pytest.mark.parametrize("kind", ["socket", "device"])
def test_sockets_and_devices_are_refused(tmp_path: Path, kind: str) -> None:
    if kind == "socket":
        path = tmp_path / "sock.safetensors"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
    else:
        path = Path("/dev/null")
    try:
        with pytest.raises(fastst.FileAccessError) as info:
            fastst.safe_open(path, "numpy")
        assert info.value.rule == "not-regular-file"
        with pytest.raises(fastst.FileAccessError):
            fnp.load_file(path)
        with pytest.raises(fastst.FileAccessError):
            fastst.tools.inspect.hash_file(path)
    finally:
        if kind == "socket":
            server.close()


@pytest.mark.parametrize("command", ["inspect", "verify", "hash", "meta"])
def test_every_subcommand_refuses_a_fifo(fifo: Path, command: str) -> None:
    out = subprocess.run([*CLI, command, str(fifo)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "not a regular file" in out.stderr


@pytest.mark.parametrize("command", ["verify", "hash", "inspect"])
def test_a_folder_scan_meeting_a_fifo_does_not_hang(tmp_path: Path, command: str) -> None:
    fnp.save_file({"a": np.zeros(2, dtype=np.float32)}, tmp_path / "good.safetensors")
    os.mkfifo(tmp_path / "trap.safetensors")
    out = subprocess.run([*CLI, command, str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "trap.safetensors" in out.stderr and "not a regular file" in out.stderr


# --- files changed by another program --------------------------------------

BIG = 1 << 20  # float32 elements: 4 MiB, a private mapping of its own


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.safetensors"
    fnp.save_file(
        {"w": np.full(BIG, 1, dtype=np.float32), "s": np.arange(4, dtype=np.float32)}, path
    )
    return path


def rewrite_in_place(path: Path, value: int) -> None:
    """Overwrites the tensor bytes in place (same length), as a program
    writing into the file would; the modification time is moved on so the
    change is visible whatever the clock's granularity."""
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    with open(path, "r+b") as fh:
        fh.seek(8 + n)
        fh.write(np.full((len(data) - 8 - n) // 4, value, dtype=np.float32).tobytes())
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_a_handle_refuses_new_views_after_an_in_place_change(model: Path) -> None:
    with fastst.safe_open(model, "numpy") as f:
        before = f.get_tensor("w")
        rewrite_in_place(model, 7)
        for call in (
            lambda: f.get_tensor("w"),
            lambda: f.get_tensor("s"),
            lambda: f.get_tensor("w", copy=True),
            lambda: f.get_tensor("w", dtype=np.float16),
            lambda: f.get_slice("w")[0:3],
        ):
            with pytest.raises(fastst.FileAccessError) as info:
                call()
            assert info.value.rule == "file-changed"
            assert isinstance(info.value, fastst.SafetensorError)
            assert "model.safetensors" in str(info.value)
        del before


@pytest.mark.parametrize("how", ["copy", "pread", "convert", "get_tensor"])
def test_a_truncated_file_gives_an_error_not_sigbus(model: Path, how: str) -> None:
    # In a subprocess: before the fix the process died from SIGBUS.
    call = {
        "copy": 'fastst.safe_open(p, "numpy").get_tensor("w", copy=True)',
        "pread": 'fastst.safe_open(p, "numpy", backend="pread").get_tensor("w")',
        "convert": 'fastst.safe_open(p, "numpy").get_tensor("w", dtype="float16")',
        "get_tensor": 'fastst.safe_open(p, "numpy").get_tensor("w")',
    }[how]
    out = run_py(
        f"""
        import os, fastst
        p = {str(model)!r}
        f = eval({call.split(".get_tensor")[0]!r})
        os.truncate(p, 100)
        try:
            f.get_tensor("w", **{_kwargs(how)!r})
        except fastst.FileAccessError as e:
            print(e.rule)
        """
    )
    assert out.returncode == 0, (out.returncode, out.stderr)
    assert out.stdout.strip() == "file-changed"


def _kwargs(how: str) -> dict:
    return {"copy": {"copy": True}, "convert": {"dtype": "float16"}}.get(how, {})


# --- what zero-copy views guarantee (docs/io.md, "Files changed underneath") -


def test_writes_to_arrays_never_reach_the_file(model: Path) -> None:
    original = model.read_bytes()
    with fastst.safe_open(model, "numpy") as f:
        a = f.get_tensor("w")
        a[:] = 5
        b = f.get_tensor("w")
        assert (b == 1).all()
    assert model.read_bytes() == original


def test_replacing_the_file_never_affects_views_or_the_handle(model: Path) -> None:
    with fastst.safe_open(model, "numpy") as f:
        a = f.get_tensor("w")
        fnp.save_file({"w": np.zeros(3, dtype=np.float32)}, model)  # rename over it
        os.replace(model, model.with_suffix(".moved"))
        assert (a == 1).all()
        assert (f.get_tensor("w") == 1).all()


def test_elements_the_program_wrote_keep_its_values(model: Path) -> None:
    with fastst.safe_open(model, "numpy") as f:
        a = f.get_tensor("w")
        a[0] = 42
        rewrite_in_place(model, 9)
        assert a[0] == 42


@pytest.mark.parametrize("options", [{"copy": True}, {"backend": "pread"}])
def test_copies_and_pread_arrays_are_fully_independent(model: Path, options: dict) -> None:
    backend = options.get("backend", "mmap")
    with fastst.safe_open(model, "numpy", backend=backend) as f:
        a = f.get_tensor("w", copy=options.get("copy", False))
    rewrite_in_place(model, 3)
    assert (a == 1).all()
    os.truncate(model, 100)
    assert (a == 1).all() and a.sum() == BIG


def test_a_zero_copy_view_may_show_an_in_place_rewrite(model: Path) -> None:
    # Documented, not prevented: untouched pages of a private mapping are
    # the file's pages until first written.
    with fastst.safe_open(model, "numpy") as f:
        a = f.get_tensor("w")
        rewrite_in_place(model, 8)
        assert a[-1] == 8


def test_touching_a_view_of_a_truncated_file_is_sigbus(model: Path) -> None:
    # Documented, not preventable for zero-copy views (copy=True or
    # backend="pread" avoid it): the process gets SIGBUS.
    out = run_py(
        f"""
        import os, fastst
        p = {str(model)!r}
        a = fastst.safe_open(p, "numpy").get_tensor("w")
        os.truncate(p, 100)
        print(a[-1])
        """
    )
    assert out.returncode == -signal.SIGBUS
