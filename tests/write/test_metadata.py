"""Editing metadata with ``fastst.update_metadata``: tensors byte-identical, the header
deterministic, the atomic writer, errors; edited in place, the file keeps who may read it (owner,
group, permissions, a symbolic link's target) or is refused. (The command's ``fastst meta
--set/--unset``: tests/cli/test_meta_edit.py.)"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import fastst
import fastst.numpy
import numpy as np
import pytest
import safetensors
import safetensors.numpy
from helpers.cli_files import run
from helpers.raw_files import data_of as _data
from helpers.raw_files import header_of as _header
from helpers.raw_files import save_with_metadata as _save


def test_update_metadata_api(tmp_path: Path) -> None:
    src = _save(tmp_path / "m.safetensors", {"format": "np", "old": "1", "keep": "k"})
    before = src.read_bytes()
    out = tmp_path / "out.safetensors"
    result = fastst.update_metadata(src, {"old": "2", "new": "n"}, remove=["keep"], output=out)
    assert src.read_bytes() == before  # the source is left alone
    assert result["metadata"] == {"format": "np", "old": "2", "new": "n"}
    assert result["set"] == ["old", "new"] and result["removed"] == ["keep"]
    assert result["tensors"] == 3 and result["data_unchanged"] is True
    assert _header(out)["__metadata__"] == {"format": "np", "old": "2", "new": "n"}
    # The writer lays the header out as for any file it writes (keys sorted).
    assert list(_header(out)["__metadata__"]) == ["format", "new", "old"]
    assert _data(out) == _data(src)
    with safetensors.safe_open(str(out), "numpy") as f:
        assert f.metadata() == result["metadata"]
        reference = safetensors.numpy.load_file(str(src))
        for name in f.keys():
            assert np.array_equal(f.get_tensor(name), reference[name])
    # Deterministic: the same edit gives the same bytes.
    again = tmp_path / "again.safetensors"
    fastst.update_metadata(src, {"old": "2", "new": "n"}, remove=["keep"], output=again)
    assert again.read_bytes() == out.read_bytes()
    # Removing every key drops __metadata__.
    fastst.update_metadata(out, remove=["format", "old", "new", "absent"])
    assert "__metadata__" not in _header(out)


def test_update_metadata_errors(tmp_path: Path) -> None:
    src = _save(tmp_path / "m.safetensors", {"a": "1"})
    with pytest.raises(ValueError):
        fastst.update_metadata(src, {"a": "2"}, remove=["a"])
    with pytest.raises(TypeError):
        fastst.update_metadata(src, {"a": 2})  # type: ignore[dict-item]
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(src.read_bytes() + b"junk")
    with pytest.raises(fastst.SafetensorError):
        fastst.update_metadata(broken, {"a": "2"})
    assert broken.read_bytes() == src.read_bytes() + b"junk"


# --- in place: who may read the file does not change ------------------------------------------

as_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving files away needs root"
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_in_place_through_a_symlink_edits_the_file_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshot"
    blobs.mkdir()
    snapshot.mkdir()
    private = _save(blobs / "private.safetensors", {"a": "1"})
    private.chmod(0o600)
    link = snapshot / "model.safetensors"
    link.symlink_to(Path("..") / "blobs" / "private.safetensors")
    result = fastst.update_metadata(link, {"k": "v"})
    assert link.is_symlink() and os.readlink(link) == os.path.join("..", "blobs", private.name)
    assert result["path"] == str(private)
    assert _header(private)["__metadata__"] == {"a": "1", "k": "v"}
    assert _mode(private) == 0o600
    assert sorted(os.listdir(blobs)) == [private.name] and os.listdir(snapshot) == [link.name]
    code, out, _ = run(["meta", "--set", "k=w", "--in-place", str(link)], capsys)
    assert code == 0 and f"wrote {private}" in out
    assert link.is_symlink() and _header(link)["__metadata__"]["k"] == "w"
    assert _mode(private) == 0o600


@as_root
def test_in_place_keeps_owner_group_and_permissions(tmp_path: Path) -> None:
    path = _save(tmp_path / "m.safetensors", {"a": "1"})
    os.chown(path, 1234, 1234)
    for mode, kept in ((0o640, 0o640), (0o444, 0o444), (0o6750, 0o750)):
        path.chmod(mode)
        fastst.update_metadata(path, {"mode": oct(mode)})
        info = path.stat()
        # setuid and setgid are dropped, as the system drops them from a
        # written file; a read-only file stays read-only (root may write it).
        assert (info.st_uid, info.st_gid, _mode(path)) == (1234, 1234, kept)
        assert _header(path)["__metadata__"]["mode"] == oct(mode)


EDIT = """
import sys, fastst
try:
    fastst.update_metadata(sys.argv[-1], {"k": "v"})
    print("edited")
except PermissionError as exc:
    print("refused", exc.errno, exc)
"""


def _as(uid: int, code: str, *args: str) -> subprocess.CompletedProcess:
    """Runs ``code`` as user and group ``uid`` (no other groups), switched to
    after importing fastst: the interpreter lives in a folder only root
    may enter here."""
    imports = "import locale, os, fastst, fastst.cli\n"
    drop = imports + "os.setgroups([]); os.setgid({0}); os.setuid({0})\n"
    return subprocess.run(
        [sys.executable, "-c", drop.format(uid) + code, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


CLI = "import sys, fastst.cli\nsys.exit(fastst.cli.main(sys.argv[1:]))"


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder every user may write in (outside pytest's private tmp)."""
    base = Path(tempfile.mkdtemp())
    base.chmod(0o755)
    folder = base / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(base)


@as_root
@pytest.mark.slow  # fresh interpreters as other users
def test_in_place_refuses_what_the_user_may_not_write_or_give_away(
    shared_folder: Path,
) -> None:
    # Another user's file, writable by this one, in a folder both may write
    # in: the new file could not keep its owner, so nothing is written.
    theirs = _save(shared_folder / "theirs.safetensors", {"a": "1"})
    os.chown(theirs, 1234, 1234)
    theirs.chmod(0o666)
    before = theirs.read_bytes()
    result = _as(1235, EDIT, str(theirs))
    assert result.stdout.startswith(f"refused {errno.EPERM} "), result.stdout + result.stderr
    assert "owner and group 1234:1234" in result.stdout
    assert theirs.read_bytes() == before and theirs.stat().st_uid == 1234
    cli = _as(1235, CLI, "meta", "--set", "k=v", "--in-place", str(theirs))
    assert cli.returncode == 2 and "owner and group" in cli.stderr
    # The user's own read-only file: refused too (a file the user may write
    # and keep is edited).
    mine = _save(shared_folder / "mine.safetensors", {"a": "1"})
    os.chown(mine, 1235, 1235)
    mine.chmod(0o444)
    result = _as(1235, EDIT, str(mine))
    assert result.stdout.startswith(f"refused {errno.EACCES} "), result.stdout + result.stderr
    assert _header(mine)["__metadata__"] == {"a": "1"}
    mine.chmod(0o640)
    assert _as(1235, EDIT, str(mine)).stdout == "edited\n"
    assert (mine.stat().st_uid, _mode(mine)) == (1235, 0o640)
    assert sorted(p.name for p in shared_folder.iterdir()) == [mine.name, theirs.name]


def _user_namespaces() -> bool:
    try:
        return subprocess.run(["unshare", "-r", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


@as_root
@pytest.mark.skipif(not _user_namespaces(), reason="needs unshare(1) and user namespaces")
def test_in_place_refuses_an_owner_root_cannot_give(tmp_path: Path) -> None:
    # Root of a user namespace where uid 1234 is not mapped cannot give a
    # file to it: found by trying on a scratch file, before writing.
    path = _save(tmp_path / "m.safetensors", {"a": "1"})
    os.chown(path, 1234, 1234)
    path.chmod(0o666)  # writable by the namespace's root
    before = path.read_bytes()
    result = subprocess.run(
        ["unshare", "-r", sys.executable, "-c", EDIT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.startswith(f"refused {errno.EPERM} "), result.stdout + result.stderr
    assert path.read_bytes() == before and path.stat().st_uid == 1234
    assert os.listdir(tmp_path) == [path.name]


def _file(path):
    fastst.numpy.save_file({"w": np.arange(4, dtype=np.float32)}, path)
    return path


@pytest.mark.parametrize("updates", [[("a", "b")], "a=b", 3])
def test_update_metadata_needs_a_mapping(tmp_path, updates):
    """``updates`` that is not a mapping is a TypeError saying so, and the
    file is left alone (mutant: the check dropped, failing later with an
    AttributeError)."""
    src = _file(tmp_path / "m.safetensors")
    before = src.read_bytes()
    with pytest.raises(TypeError, match="updates must be a dict of str to str"):
        fastst.update_metadata(src, updates)
    assert src.read_bytes() == before
