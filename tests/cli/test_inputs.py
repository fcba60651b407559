"""Inputs that are not safetensors files, through every subcommand: each is recognised
(PyTorch zip and legacy checkpoints, pickles, GGUF, NumPy, HDF5, ONNX, HTML, text, Git LFS
pointers, empty files: the ``foreign`` fixture) or refused at once (FIFOs, symlink loops), one
line per problem, the documented exit code, no traceback, no hang. (The recogniser and the
reader's errors: tests/sources/test_identify.py.)"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Tuple

import fastst
import fastst.numpy
import fastst.tools.inspect as fi
import numpy as np
import pytest
from helpers.cli_files import run, run_envelope

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("command", ["inspect", "hash", "meta"])
def test_subcommands_refuse_foreign_files(
    foreign: Tuple[Path, str, str], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, kind, words = foreign
    code, out, err = run([command, str(path)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and words in err and "not a safetensors file" in err
    code, doc, _ = run_envelope([command, "--json", str(path)], capsys)
    assert code == 2 and doc["results"] == []
    (error,) = doc["errors"]
    assert error["format"] == kind and words in error["message"]


def test_verify_reports_foreign_files(
    foreign: Tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, kind, words = foreign
    code, doc, _ = run_envelope(["verify", "--json", str(path)], capsys)
    (report,) = doc["results"]
    rules = [f["rule"] for f in report["findings"]]
    assert "foreign-content" in rules or kind == "empty"
    assert code == 1 and not report["accepted"]


def test_missing_symlink_loop_and_folder_without_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loop_a, loop_b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    os.symlink(loop_b, loop_a)
    os.symlink(loop_a, loop_b)
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in ("inspect", "verify", "hash", "meta"):
        code, out, err = run([command, str(loop_a), str(tmp_path / "none"), str(empty)], capsys)
        lines = err.splitlines()
        summary = (
            "0 inputs verified: 0 with red flags at or above low, 0 malformed (inconclusive), "
            "3 unreadable\n"
        )
        assert code == 2 and out == ("" if command != "verify" else summary), out
        assert len(lines) == 3, (command, err)
        assert "symbolic links" in lines[0] and "No such file" in lines[1]
        assert "no .safetensors file" in lines[2]


def test_fifo_never_hangs(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    good = tmp_path / "good.safetensors"
    fastst.numpy.save_file({"w": np.zeros(2, np.float32)}, good)
    for command in ("inspect", "verify", "hash", "meta"):
        for target in (fifo, tmp_path):  # also met in a folder scan
            result = subprocess.run(
                [sys.executable, "-m", "fastst", command, str(target)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 2, (command, result.stderr)
            assert "FIFO" in result.stderr and result.stderr.count("\n") == 1
            assert "Traceback" not in result.stderr


def test_folder_of_many_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(3000):
        (tmp_path / f"note{i}.txt").write_bytes(b"")
    fastst.numpy.save_file({"w": np.zeros(2, np.float32)}, tmp_path / "m.safetensors")
    code, doc, _ = run_envelope(["inspect", "--json", str(tmp_path)], capsys)
    assert code == 0 and len(doc["results"]) == 1


def test_truncated_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cut.safetensors"
    fastst.numpy.save_file({"w": np.zeros(64, np.float32)}, path)
    path.write_bytes(path.read_bytes()[:-10])
    for command in ("inspect", "meta", "hash"):
        code, out, err = run([command, str(path)], capsys)
        assert err.count("\n") <= 1 and "Traceback" not in err
    assert run(["inspect", str(path)], capsys)[0] == 2
    assert run(["verify", str(path)], capsys)[0] == 2  # malformed: inconclusive
    # A length prefix past the end of the file.
    path.write_bytes(struct.pack("<Q", 1000) + b'{"w":')
    code, _, err = run(["inspect", str(path)], capsys)
    assert code == 2 and "header" in err


# Folders nested deeper than a scan enters -----------------------------------

LEVELS = 1200  # past Python's recursion limit; 2 characters a level, far from PATH_MAX


@pytest.fixture
def deep_tree(tmp_path: Path) -> Iterator[Tuple[Path, Path]]:
    """``tmp_path/tree`` holding ``top.safetensors`` and, 1,200 folders down,
    ``deep.safetensors`` and a stale temporary file; removed level by level
    (a recursive removal would fail as the walks did)."""
    root = tmp_path / "tree"
    root.mkdir()
    deepest = root.joinpath(*["d"] * LEVELS)
    # Level by level, each folder made and removed relative to its parent's descriptor
    # (os.makedirs recurses too; whole paths would cost the kernel 1,200 lookups each).
    fd = os.open(root, os.O_RDONLY)
    for _ in range(LEVELS):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    for folder in (root, deepest):
        name = "top" if folder == root else "deep"
        fastst.numpy.save_file({"w": np.zeros(2, np.float32)}, folder / f"{name}.safetensors")
    (deepest / ".0123456789abcdef.fastst-tmp").write_bytes(b"")
    yield root, deepest
    for path in deepest.iterdir():
        path.unlink()
    fd = os.open(deepest, os.O_RDONLY)
    for _ in range(LEVELS):
        parent = os.open("..", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        os.rmdir("d", dir_fd=parent)
        fd = parent
    os.close(fd)


def test_deep_folders_are_one_error_line(
    deep_tree: Tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = deep_tree
    too_deep = str(root.joinpath(*["d"] * 257))
    for command in ("inspect", "hash", "meta"):
        code, doc, err = run_envelope([command, "--json", str(root)], capsys)
        assert code == 2 and [r["path"] for r in doc["results"]] == [str(root / "top.safetensors")]
        (error,) = doc["errors"]
        assert error["rule"] == "folder-too-deep" and error["path"] == too_deep
        assert err.count("\n") == 1 and "more than 256 levels deep" in err
    assert list(fi.iter_inputs([root]))[-1] == ("too-deep", too_deep)
    found = []
    with pytest.raises(fastst.FolderError) as info:
        found.extend(fi.iter_safetensors([root]))
    assert found == [str(root / "top.safetensors")] and info.value.rule == "folder-too-deep"


def test_deep_folders_are_a_verify_finding(
    deep_tree: Tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = deep_tree
    code, doc, _ = run_envelope(["verify", "--json", str(root)], capsys)
    top, folder = doc["results"]
    assert top["path"] == str(root / "top.safetensors") and top["findings"] == []
    assert folder["kind"] == "folder" and folder["path"] == str(root.joinpath(*["d"] * 257))
    assert [(f["rule"], f["severity"]) for f in folder["findings"]] == [
        ("folder-too-deep", "medium")
    ]
    assert code == 1 and folder["fails"] and doc["errors"] == [] and doc["stale_temp_files"] == []
    code, _, _ = run_envelope(["verify", "--json", "--fail-on", "high", str(root)], capsys)
    assert code == 2  # not failing, but inconclusive
    code, out, err = run(["verify", str(root)], capsys)
    assert code == 1 and "folder-too-deep" in out and "not scanned" in out and err == ""
    code, out, _ = run(["verify", "--format", "sarif", str(root)], capsys)
    assert [r["ruleId"] for r in json.loads(out)["runs"][0]["results"]] == ["folder-too-deep"]


def test_paths_past_path_max_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 17 folders of 250 characters: fewer levels than the limit, but a path
    # longer than the system takes; created relative to each parent.
    fastst.numpy.save_file({"w": np.zeros(2, np.float32)}, tmp_path / "top.safetensors")
    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(17):
        os.mkdir("x" * 250, dir_fd=fd)
        inner = os.open("x" * 250, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    code, doc, _ = run_envelope(["verify", "--json", str(tmp_path)], capsys)
    assert [r["kind"] for r in doc["results"]] == ["file", "folder"] and code == 1
    assert doc["results"][1]["findings"][0]["rule"] == "folder-too-deep"
