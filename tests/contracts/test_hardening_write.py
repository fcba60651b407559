"""Saving safely in hostile folders: a symbolic link at the target is
replaced, never followed; a replaced file's owner, group and permission
bits are kept; temporary files are exclusive, short-named and
unnamed while written (a killed process leaves nothing); every name the
filesystem accepts can be saved; a SIGINT during a save leaves the old file
or the complete new one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fastst
import fastst.numpy as fnp
import numpy as np
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX semantics"),
]

T = {"w": np.arange(16, dtype=np.float32)}


def listing(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir())


def test_a_planted_symlink_is_replaced_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    link = tmp_path / "model.safetensors"
    link.symlink_to(victim)
    fnp.save_file(T, link)
    assert victim.read_bytes() == b"precious"
    assert not link.is_symlink() and link.is_file()
    assert (fnp.load_file(link)["w"] == T["w"]).all()
    # A link to a folder elsewhere, or dangling: the same.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dangling = tmp_path / "d.safetensors"
    dangling.symlink_to(elsewhere / "new.safetensors")
    fnp.save_file(T, dangling)
    assert listing(elsewhere) == []
    assert not dangling.is_symlink()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files away needs root")
def test_saving_over_a_file_keeps_its_owner_group_and_permission_bits(tmp_path: Path) -> None:
    # Replacing keeps who may read the file; setuid, setgid and sticky are
    # dropped, as the system drops them from a file that is written.
    path = tmp_path / "model.safetensors"
    fnp.save_file(T, path)
    os.chown(path, 1234, 1234)
    path.chmod(0o7640)
    fnp.save_file(T, path)
    info = path.stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o7777) == (1234, 1234, 0o640)


def test_the_sharded_index_is_written_without_following_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    out = tmp_path / "ckpt"
    out.mkdir()
    (out / "model.safetensors.index.json").symlink_to(victim)
    # A link planted where a predictable temporary name would be.
    (out / f"model.safetensors.index.json.{os.getpid()}.tmp").symlink_to(victim)
    fnp.save_sharded(T, out)
    assert victim.read_bytes() == b"precious"
    assert not (out / "model.safetensors.index.json").is_symlink()
    assert [n for n in listing(out) if n.endswith(".fastst-tmp")] == []
    assert fastst.safe_open(out, "numpy").keys() == ["w"]


@pytest.mark.parametrize("length", [200, 240, 255])
def test_names_up_to_the_filesystem_limit_can_be_saved(tmp_path: Path, length: int) -> None:
    name = "m" * (length - len(".safetensors")) + ".safetensors"
    assert len(name.encode()) == length
    fnp.save_file(T, tmp_path / name)
    fnp.save_file(T, tmp_path / name)  # replacing too
    assert listing(tmp_path) == [name]
    assert (fnp.load_file(tmp_path / name)["w"] == T["w"]).all()


SAVER = """
import sys, numpy as np, fastst.numpy as fnp
big = np.arange(16 << 20, dtype=">f4")  # big-endian: converted in chunks, slowly
print("ready", flush=True)
while True:
    fnp.save_file({"big": big}, sys.argv[1])
"""


def start_saver(target: Path) -> subprocess.Popen:
    # A test run started in the background (no job control) inherits SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler: give
    # the saver SIGINT's default disposition, as in a terminal.
    proc = subprocess.Popen(
        [sys.executable, "-c", SAVER, str(target)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="O_TMPFILE is Linux's")
def test_a_killed_save_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "model.safetensors"
    for delay in (0.3, 0.9):
        proc = start_saver(target)
        time.sleep(delay)
        proc.kill()
        proc.wait()
        assert [n for n in listing(tmp_path) if n != "model.safetensors"] == []
        if target.exists():
            assert fnp.load_file(target)["big"].shape == (16 << 20,)


def test_sigint_during_a_save_keeps_the_old_file_or_commits(tmp_path: Path) -> None:
    target = tmp_path / "model.safetensors"
    for delay in (0.2, 0.5, 0.8):
        proc = start_saver(target)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, _ = proc.communicate(timeout=60)
        # KeyboardInterrupt: raised from inside save_file (the old file is
        # kept), or just after a save that had reached its commit (the new
        # file is complete); never a partial file or a stray temporary one.
        assert proc.returncode != 0
        assert listing(tmp_path) in ([], ["model.safetensors"])
        if target.exists():
            assert fnp.load_file(target)["big"][-1] == (16 << 20) - 1


def test_planted_temporary_names_are_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    for i in range(16):
        (tmp_path / f".{i:016x}.fastst-tmp").symlink_to(victim)
    fnp.save_file(T, tmp_path / "m.safetensors")
    assert victim.read_bytes() == b"precious"


def test_the_docs_state_the_write_guarantees() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "io.md").read_text()
    for phrase in ("O_TMPFILE", "symbolic link", "SIGINT", "file-changed", "not-regular-file"):
        assert phrase in page, phrase


def test_write_parts_takes_any_buffer_and_names_what_is_not_one(tmp_path: Path) -> None:
    layout = {"a": ("F32", [4]), "b": ("F32", [2])}
    with fastst.open_writer(tmp_path / "m.safetensors", layout) as w:
        w.write_parts("a", [np.arange(2, dtype=np.float32), memoryview(np.ones(2, np.float32))])
        with pytest.raises(TypeError, match=r"m\.safetensors: tensor 'b': part 1 .* not a buffer"):
            w.write_parts("b", [b"", 3])
        w.write_parts("b", [memoryview(np.arange(4, dtype=np.float32))[::2]])
    loaded = fastst.numpy.load_file(tmp_path / "m.safetensors")
    assert loaded["a"].tolist() == [0.0, 1.0, 1.0, 1.0] and loaded["b"].tolist() == [0.0, 2.0]


def test_a_shape_past_the_format_names_the_tensor_and_the_rule(tmp_path: Path) -> None:
    for opener in (fastst.open_writer, fastst.open_sharded_writer):
        with pytest.raises(fastst.SerializeError) as caught:
            opener(tmp_path / "x.safetensors", {"big": ("F32", [2**64])})
        assert caught.value.rule == "bad-shape" and caught.value.tensor == "big"
        assert "x.safetensors" in str(caught.value) and "'big'" in str(caught.value)


@pytest.mark.parametrize("builtin", [FileNotFoundError, IsADirectoryError])
def test_os_errors_of_saves_are_safetensor_errors_too(tmp_path: Path, builtin: type) -> None:
    (tmp_path / "dir.safetensors").mkdir()
    (tmp_path / "afile").write_bytes(b"")
    if builtin is FileNotFoundError:
        target = tmp_path / "missing" / "m.safetensors"
        sharded_into = tmp_path / "afile" / "ckpt"
    else:
        target = tmp_path / "dir.safetensors"
        sharded_into = tmp_path / "afile"

    def streamed() -> None:
        with fastst.open_writer(target, {"a": ("F32", [2])}) as w:
            w.write("a", np.ones(2, np.float32))

    saves = [lambda: fastst.numpy.save_file({"a": np.ones(2)}, target), streamed]
    for save in saves:
        with pytest.raises(fastst.SafetensorError) as caught:
            save()
        assert isinstance(caught.value, builtin), type(caught.value).__mro__
        assert caught.value.rule == "io" and str(target) in str(caught.value)
    with pytest.raises(fastst.SafetensorError) as caught:
        fastst.numpy.save_sharded({"a": np.ones(2)}, sharded_into)
    assert isinstance(caught.value, OSError) and caught.value.rule == "io"
