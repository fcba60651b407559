"""The one atomic replacement of small files (``fastst._write.atomic.replace_bytes``): indexes,
signatures, SBOMs and HTML reports are committed exactly as tensor files are.

Each guarantee is tested on the helper and on the writers that use it: the old contents survive a
failed write, a symbolic link is replaced rather than written through, new files get the umask's
permissions, the file and its folder are flushed to disk, and nothing else in the package replaces
files by itself.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import fastst
import fastst.numpy as fnp
import numpy as np
import pytest
from fastst._write.atomic import replace_bytes

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX semantics")

PACKAGE = Path(fastst.__file__).resolve().parent


def listing(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir())


def test_replaces_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "index.json"
    replace_bytes(target, b"first")
    assert target.read_bytes() == b"first"
    replace_bytes(str(target), b"second, longer")
    assert target.read_bytes() == b"second, longer"
    replace_bytes(os.fsencode(target), b"")
    assert target.read_bytes() == b""
    assert listing(tmp_path) == ["index.json"]


def test_new_files_get_umask_permissions_and_replaced_ones_keep_theirs(tmp_path: Path) -> None:
    old_mask = os.umask(0o027)
    try:
        replace_bytes(tmp_path / "a.json", b"{}")
    finally:
        os.umask(old_mask)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o640
    (tmp_path / "a.json").chmod(0o600)
    replace_bytes(tmp_path / "a.json", b"[]")
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o600


def test_a_link_is_replaced_not_written_through(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_bytes(b"keep me")
    link = tmp_path / "report.html"
    link.symlink_to(elsewhere)
    replace_bytes(link, b"<html></html>")
    assert not link.is_symlink()
    assert link.read_bytes() == b"<html></html>"
    assert elsewhere.read_bytes() == b"keep me"


def test_a_failed_write_keeps_the_old_file_and_names_it(tmp_path: Path) -> None:
    # A file size limit makes write(2) fail part-way (EFBIG), as a full disk would.
    target = tmp_path / "model.safetensors.index.json"
    target.write_bytes(b'{"old": true}')
    script = textwrap.dedent(
        f"""
        import errno, resource, signal
        from fastst._write.atomic import replace_bytes
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
        try:
            replace_bytes({str(target)!r}, b"x" * (1 << 20))
        except OSError as exc:
            assert exc.errno == errno.EFBIG, exc
            assert {target.name!r} in str(exc), exc
            print("failed as expected")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "failed as expected" in out.stdout
    assert target.read_bytes() == b'{"old": true}'
    assert listing(tmp_path) == [target.name]


def test_a_missing_folder_is_an_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="absent"):
        replace_bytes(tmp_path / "absent" / "x.json", b"x")
    assert listing(tmp_path) == []


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_the_index_of_a_sharded_save_is_flushed_with_its_folder(tmp_path: Path) -> None:
    # strace shows an fsync of the index file before its rename, and one of
    # the folder after it: a power cut cannot leave an empty index.
    script = textwrap.dedent(
        f"""
        import numpy as np, fastst.numpy as fnp
        tensors = {{f"t{{i}}": np.full(1000, i, dtype=np.float32) for i in range(4)}}
        fnp.save_sharded(tensors, {str(tmp_path)!r}, max_shard_size="5KB")
        """
    )
    log = tmp_path.parent / "strace.log"
    subprocess.run(
        [
            "strace",
            "-f",
            "-o",
            str(log),
            "-e",
            "trace=fsync,fdatasync,rename,renameat,renameat2",
            sys.executable,
            "-c",
            script,
        ],
        check=True,
    )
    lines = [line for line in log.read_text().splitlines() if "resumed" not in line]
    index = next(i for i, line in enumerate(lines) if "rename" in line and "index.json" in line)
    before, after = lines[:index], lines[index + 1 :]
    assert any("fsync" in line or "fdatasync" in line for line in before[-3:]), lines
    assert any("fsync" in line for line in after), lines


def test_the_index_replaces_a_link_instead_of_writing_through_it(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "model.safetensors.index.json").symlink_to(elsewhere)
    fnp.save_sharded({"a": np.zeros(4, dtype=np.float32)}, folder)
    assert not (folder / "model.safetensors.index.json").is_symlink()
    assert elsewhere.read_text() == "{}"
    assert fnp.load_file(folder)["a"].shape == (4,)


def test_html_reports_and_sboms_go_through_the_helper(tmp_path: Path) -> None:
    # A link at the report's path is replaced, not written through.
    model = tmp_path / "m.safetensors"
    fnp.save_file({"w": np.ones((2, 2), dtype=np.float32)}, model)
    elsewhere = tmp_path / "elsewhere.html"
    elsewhere.write_text("keep")
    report = tmp_path / "report.html"
    report.symlink_to(elsewhere)
    out = subprocess.run(
        [sys.executable, "-m", "fastst", "inspect", str(model), "--html", str(report)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert not report.is_symlink() and "<html" in report.read_text().lower()
    assert elsewhere.read_text() == "keep"
    assert listing(tmp_path) == ["elsewhere.html", "m.safetensors", "report.html"]


def _calls(path: Path) -> set:
    """Dotted names of the calls in ``path`` (``os.replace``, ``shutil.move``...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if isinstance(node.func.value, ast.Name):
                found.add(f"{node.func.value.id}.{node.func.attr}")
    return found


def test_nothing_else_in_the_package_replaces_files_by_itself() -> None:
    # One commit sequence: the core's, reached through replace_bytes or the
    # tensor writers; no module renames temporaries of its own.
    own = {"os.replace", "os.rename", "shutil.move"}
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(_calls(path) & own)
        for path in PACKAGE.rglob("*.py")
        if _calls(path) & own
    }
    assert offenders == {}
