"""Durable saves: the data is written to the device behind the writer
(``sync_file_range``, a window at a time) and flushed before the rename.
The bytes are the same whatever the size around the window, the fallback
(tmpfs, where there is nothing to write back) works, a write error part-way
leaves the old file and no temporary file, and a killed durable replace
leaves the old file or the new one."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Iterator

import fastst
import fastst.numpy as fnp
import numpy as np
import pytest
from fastst._fastst.write import WritePlan

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX semantics"),
]

WINDOW = WritePlan.WRITEBACK_WINDOW


def listing(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir())


def one_tensor_of_total(total: int) -> dict:
    """A single U8 tensor whose file is exactly ``total`` bytes long (or the
    empty file's header alone when ``total`` is smaller)."""
    n = max(0, total - 8)
    for _ in range(8):
        plan = WritePlan([("x", "U8", [n])], None, "x")
        if plan.total_len == total or n == 0:
            break
        n = max(0, n + total - plan.total_len)
    rng = np.random.default_rng(total)
    return {"x": rng.integers(0, 256, n, dtype=np.uint8)}


def test_the_window_is_whole_pages() -> None:
    assert WINDOW > 0 and WINDOW % 4096 == 0


@pytest.mark.parametrize(
    "total",
    [0, 1, WINDOW - 1, WINDOW, WINDOW + 1, 2 * WINDOW, 3 * WINDOW + 4097, 7 * WINDOW + 1],
    ids=["0", "1", "w-1", "w", "w+1", "2w", "3w+4097", "7w+1"],
)
def test_durable_bytes_are_identical_around_the_window(tmp_path: Path, total: int) -> None:
    tensors = one_tensor_of_total(total)
    expected = fastst.serialize(tensors)
    if total >= 16:
        assert len(expected) == total
    fresh, replaced = tmp_path / "fresh.safetensors", tmp_path / "old.safetensors"
    replaced.write_bytes(b"old contents")
    fastst.serialize_file(tensors, fresh, durable=True)  # durable, new file
    fnp.save_file(tensors, replaced)  # durable by default: it replaces a file
    assert fresh.read_bytes() == expected
    assert replaced.read_bytes() == expected
    assert listing(tmp_path) == ["fresh.safetensors", "old.safetensors"]


def test_many_tensors_across_windows_round_trip(tmp_path: Path) -> None:
    # Tensors of odd sizes straddle window boundaries; small ones go
    # through the write buffer, large ones straight from their memory.
    rng = np.random.default_rng(3)
    tensors = {
        f"t{i}": rng.standard_normal(int(n)).astype(np.float32)
        for i, n in enumerate(rng.integers(1, 3 * WINDOW // 4, 24))
    }
    tensors["strided"] = rng.standard_normal((2048, 1024))[:, ::2]
    tensors["big_endian"] = np.arange(WINDOW, dtype=">i4")
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"x")
    fnp.save_file(tensors, path)
    assert path.read_bytes() == fastst.serialize(tensors)
    back = fnp.load_file(path)
    for k, v in tensors.items():
        assert np.array_equal(back[k], v), k


def test_fallback_on_tmpfs(tmp_path: Path) -> None:
    # tmpfs has nothing to write back: the durable save works the same.
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        pytest.skip("no writable /dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="fastst-durable-", dir=shm))
    try:
        tensors = one_tensor_of_total(2 * WINDOW + 123)
        target = folder / "m.safetensors"
        target.write_bytes(b"old")
        fnp.save_file(tensors, target)
        fastst.serialize_file(tensors, folder / "n.safetensors", durable=True)
        expected = fastst.serialize(tensors)
        assert target.read_bytes() == expected
        assert (folder / "n.safetensors").read_bytes() == expected
        assert listing(folder) == ["m.safetensors", "n.safetensors"]
    finally:
        shutil.rmtree(folder)


def test_write_error_during_overlap_keeps_the_old_file(tmp_path: Path) -> None:
    # A file size limit makes write(2) fail with EFBIG after several windows
    # were handed to the device: the save fails with the usual OSError naming
    # the file, the old target is intact and no temporary file is left.
    old = tmp_path / "model.safetensors"
    fnp.save_file({"w": np.arange(1000, dtype=np.float32)}, old)
    original = old.read_bytes()
    limit = 3 * WINDOW + 12345
    script = textwrap.dedent(
        f"""
        import errno, resource, signal
        import numpy as np
        import fastst.numpy as fnp
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        try:
            fnp.save_file({{"x": np.ones({6 * WINDOW}, dtype=np.uint8)}}, {str(old)!r})
        except OSError as exc:
            assert exc.errno == errno.EFBIG, exc
            assert {str(old)!r} in str(exc), exc
            assert getattr(exc, "rule", "io") == "io", exc
            print("failed as expected")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "failed as expected" in out.stdout
    assert old.read_bytes() == original
    assert listing(tmp_path) == ["model.safetensors"]


def small_filesystem(kind: str, where: Path, size_mb: int) -> Iterator[Path]:
    """Mounts a small filesystem of ``kind`` (``tmpfs`` or ``ext4`` on a
    loop device) at ``where``; needs root."""
    where.mkdir()
    image = where.with_suffix(".img")
    if kind == "tmpfs":
        cmd = ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)]
    else:
        with open(image, "wb") as f:
            f.truncate(size_mb << 20)
        made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True)
        if made.returncode != 0:
            pytest.skip(f"mkfs.ext4 failed: {made.stderr.decode(errors='replace')}")
        cmd = ["mount", "-o", "loop", str(image), str(where)]
    mounted = subprocess.run(cmd, capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a {kind}: {mounted.stderr.decode(errors='replace')}")
    try:
        yield where
    finally:
        # A busy machine may still hold the new mount for a moment (device
        # probes of the loop device): retry, then detach it lazily.
        for _ in range(50):
            if subprocess.run(["umount", str(where)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", str(where)], check=True)
        image.unlink(missing_ok=True)


@pytest.fixture(params=["tmpfs", "ext4"])
def full_fs(request, tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small filesystem needs root")
    if request.param == "ext4" and shutil.which("mkfs.ext4") is None:
        pytest.skip("no mkfs.ext4")
    yield from small_filesystem(request.param, tmp_path / "small", 48)


def test_full_filesystem_during_a_durable_replace(full_fs: Path) -> None:
    # A filesystem of 48 MB holding a 16 MB file: the durable replace by a
    # 40 MB file runs out of space part-way (after several windows were
    # handed to the device on ext4), fails with ENOSPC naming the file, and
    # leaves the old file whole and no temporary file.
    old = full_fs / "model.safetensors"
    first = {"w": np.full(16 << 20, 7, dtype=np.uint8)}
    fnp.save_file(first, old)
    original = old.read_bytes()
    before = listing(full_fs)
    with pytest.raises(OSError) as info:
        fnp.save_file({"w": np.ones(40 << 20, dtype=np.uint8)}, old)
    assert info.value.errno in (errno.ENOSPC, errno.EDQUOT), info.value
    assert str(old) in str(info.value) or old.name in str(info.value)
    assert old.read_bytes() == original
    assert listing(full_fs) == before
    # The space comes back: a save that fits still works.
    fnp.save_file({"w": np.ones(8 << 20, dtype=np.uint8)}, old)
    assert (fnp.load_file(old)["w"] == 1).all()


def test_full_filesystem_under_the_streaming_writers(full_fs: Path) -> None:
    # open_writer and the sharded writer (durable, tensors written at their offsets, whole
    # blocks directly) run out of space part-way: the write raises ENOSPC naming the file, and
    # the folder keeps its old checkpoint and nothing else.
    folder = full_fs / "ckpt"
    old = {f"t{i}": np.full(4 << 20, i, dtype=np.uint8) for i in range(4)}  # 16 MiB
    fnp.save_sharded(old, folder, max_shard_size="9MB")
    before = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    layout = {f"t{i}": ("U8", [10 << 20]) for i in range(4)}  # 40 MiB
    with pytest.raises(OSError) as info:
        with fastst.open_sharded_writer(folder, layout, max_shard_size="11MB") as w:
            for i in range(4):
                w.write(f"t{i}", np.ones(10 << 20, dtype=np.uint8))
    assert info.value.errno in (errno.ENOSPC, errno.EDQUOT), info.value
    assert "t" in str(info.value)
    assert {p.name: p.read_bytes() for p in sorted(folder.iterdir())} == before
    single = full_fs / "one.safetensors"
    with pytest.raises(OSError) as info:
        with fastst.open_writer(single, {"w": ("U8", [40 << 20])}) as w1:
            w1.write("w", np.ones(40 << 20, dtype=np.uint8))
    assert info.value.errno in (errno.ENOSPC, errno.EDQUOT), info.value
    assert not single.exists()
    assert sorted(p.name for p in full_fs.iterdir() if p.name != "lost+found") == ["ckpt"]


SAVER = """
import sys, numpy as np, fastst.numpy as fnp
value = int(sys.argv[2])
data = {"big": np.full(24 << 20, value, dtype=np.uint32)}  # 96 MiB, native
print("ready", flush=True)
fnp.save_file(data, sys.argv[1])  # replaces the file: durable by default
print("saved", flush=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="O_TMPFILE is Linux's")
def test_a_killed_durable_replace_leaves_old_or_new(tmp_path: Path) -> None:
    target = tmp_path / "model.safetensors"
    for round_, delay in enumerate((0.0, 0.05, 0.15, 0.3, 0.6)):
        old_value, new_value = 2 * round_ + 1, 2 * round_ + 2
        fnp.save_file({"big": np.full(24 << 20, old_value, dtype=np.uint32)}, target)
        proc = subprocess.Popen(
            [sys.executable, "-c", SAVER, str(target), str(new_value)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert listing(tmp_path) == ["model.safetensors"]
        big = fnp.load_file(target)["big"]
        assert big.shape == (24 << 20,)
        # Entirely the old file or entirely the new one.
        assert big[0] in (old_value, new_value)
        assert (big == big[0]).all()


def open_handles_to(path: Path) -> list:
    """This process's descriptors that point at ``path`` or at a deleted
    file once known by that name."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link in (str(path), f"{path} (deleted)"):
            found.append(link)
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_large_replaced_file_is_let_go_of(tmp_path: Path) -> None:
    # Replacing a file of 64 MiB or more hands the old file to a background
    # thread, which closes it: no handle on the old file stays open, and a
    # reader that had it open keeps reading the old data.
    target = tmp_path / "model.safetensors"
    fnp.save_file({"w": np.full(20 << 20, 1, dtype=np.float32)}, target)  # 80 MiB
    with fastst.safe_open(target, "np") as reader:
        fnp.save_file({"w": np.full(20 << 20, 2, dtype=np.float32)}, target)
        assert (reader.get_tensor("w")[-4:] == 1).all()
    assert (fnp.load_file(target)["w"][-4:] == 2).all()
    deadline = time.monotonic() + 10
    while open_handles_to(target) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert open_handles_to(target) == []
    assert listing(tmp_path) == ["model.safetensors"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_a_sharded_save_holds_the_replaced_shards_until_its_last_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Freeing a replaced shard joins the filesystem's running journal
    # transaction, which the commit's next flush would then wait for (on ext4
    # mounted with discard, the old blocks' trim: a third of a second per
    # gigabyte): the old shards are let go of only once the index naming the
    # new ones is flushed, then no handle on them stays.
    from fastst._write import sharded

    folder = tmp_path / "ckpt"
    tensors = {f"t{i}": np.full(1 << 20, i, dtype=np.float32) for i in range(2)}
    fnp.save_sharded(tensors, folder, max_shard_size="4MiB")
    old = sorted(p for p in folder.iterdir() if p.name.endswith(".safetensors"))
    assert len(old) == 2
    for shard in old:  # large enough to be held (64 MiB), sparse
        os.truncate(shard, 64 << 20)
    held_at_flush = []
    replace = sharded.replace_bytes

    def spied(path: str, data: bytes) -> None:
        held_at_flush.append([bool(open_handles_to(p)) for p in old])
        replace(path, data)

    monkeypatch.setattr(sharded, "replace_bytes", spied)
    fnp.save_sharded({k: v + 1 for k, v in tensors.items()}, folder, max_shard_size="4MiB")
    # The index written twice: naming the staged shards, then the final names.
    assert held_at_flush == [[False, False], [True, True]]
    deadline = time.monotonic() + 10
    while any(open_handles_to(p) for p in old) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [open_handles_to(p) for p in old] == [[], []]
    assert (fnp.load_file(folder)["t1"] == 2).all()


@pytest.fixture
def roomy_ext4(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None or shutil.which("mkfs.ext4") is None:
        pytest.skip("mounting a loop ext4 needs root and mkfs.ext4")
    yield from small_filesystem("ext4", tmp_path / "roomy", 256)


def test_the_replaced_file_space_comes_back(roomy_ext4: Path) -> None:
    # Five durable replaces of an 80 MiB file on a 256 MB filesystem: each
    # needs the space of the old and the new file at once, which is only
    # there if every replaced file is freed (no handle kept).
    target = roomy_ext4 / "model.safetensors"
    for value in range(5):
        fnp.save_file({"w": np.full(20 << 20, value, dtype=np.float32)}, target)
        assert (fnp.load_file(target)["w"][-4:] == value).all()
        stats = os.statvfs(roomy_ext4)
        deadline = time.monotonic() + 10
        while stats.f_bavail * stats.f_frsize < (100 << 20) and time.monotonic() < deadline:
            time.sleep(0.02)
            stats = os.statvfs(roomy_ext4)
        assert stats.f_bavail * stats.f_frsize >= 100 << 20
    assert listing(roomy_ext4) == ["lost+found", "model.safetensors"]
