"""What ``progress=True`` shows (fastst._read.progress): a tqdm bar in bytes off a
terminal (a notebook) when tqdm is installed, else plain lines on stderr, the
core's line on a terminal; and the command's bar with rate and ETA on a
terminal, nothing on a pipe."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Dict, List

import fastst.numpy
import numpy as np
import pytest
from fastst._read import progress as _progress


class FakeTqdm:
    """Records what a tqdm bar is made with and how far it is driven."""

    made: List[FakeTqdm] = []

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs: Dict[str, Any] = kwargs
        self.n = 0
        self.closed = False
        FakeTqdm.made.append(self)

    def update(self, n: int) -> None:
        assert not self.closed
        self.n += n

    def close(self) -> None:
        self.closed = True


class Stderr:
    """What was written to ``sys.stderr`` (captured: not a terminal)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def getvalue(self) -> str:
        assert not sys.stderr.isatty()
        return self.capsys.readouterr().err


@pytest.fixture
def notebook(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Stderr:
    """A Jupyter-like process: ipykernel imported, stderr not a terminal."""
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    return Stderr(capsys)


@pytest.fixture
def fake_tqdm(monkeypatch: pytest.MonkeyPatch) -> List[FakeTqdm]:
    package, auto = types.ModuleType("tqdm"), types.ModuleType("tqdm.auto")
    auto.tqdm = FakeTqdm  # type: ignore[attr-defined]
    package.auto = auto  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tqdm", package)
    monkeypatch.setitem(sys.modules, "tqdm.auto", auto)
    monkeypatch.setattr(FakeTqdm, "made", [])
    return FakeTqdm.made


@pytest.fixture
def no_tqdm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)


def _model(path: Path, mib: int = 1) -> int:
    fastst.numpy.save_file(
        {"a": np.ones((mib << 18,), np.float32), "b": np.arange(10, dtype=np.int64)}, path
    )
    return (mib << 20) + 80


@pytest.mark.parametrize("copy", [False, True])
def test_a_notebook_gets_a_tqdm_bar_in_bytes_driven_to_the_total(
    tmp_path: Path, notebook: Stderr, fake_tqdm: List[FakeTqdm], copy: bool
) -> None:
    path = tmp_path / "m\x1b[2J.safetensors"
    total = _model(path)
    out = fastst.numpy.load_file(path, copy=copy, progress=True)
    assert sorted(out) == ["a", "b"]
    (bar,) = fake_tqdm
    assert bar.kwargs["total"] == total and bar.n == total and bar.closed
    assert bar.kwargs["unit"] == "B" and bar.kwargs["unit_scale"] is True
    # The file's name is escaped like every label.
    assert bar.kwargs["desc"] == str(path).replace("\x1b", "\\u{1b}")
    assert notebook.getvalue() == ""  # tqdm draws, nothing else


def test_a_callable_or_off_makes_no_bar(
    tmp_path: Path, notebook: Stderr, fake_tqdm: List[FakeTqdm]
) -> None:
    path = tmp_path / "m.safetensors"
    total = _model(path)
    seen: List[Any] = []
    fastst.numpy.load_file(path, copy=True, progress=lambda d, t: seen.append((d, t)))
    fastst.numpy.load_file(path, copy=True, progress=False)
    fastst.numpy.load_file(path, copy=True)
    assert seen == [(total, total)] and fake_tqdm == [] and notebook.getvalue() == ""


def test_without_tqdm_plain_lines_on_stderr(
    tmp_path: Path, notebook: Stderr, no_tqdm: None
) -> None:
    path = tmp_path / "m\u202e.safetensors"
    _model(path, mib=3)
    fastst.numpy.load_file(path, copy=True, progress=True)
    # A quick load: one line, at the end.
    err = notebook.getvalue()
    (line,) = err.splitlines()
    assert err.endswith("\n") and line.startswith(str(tmp_path))
    assert re.search(r"/m\\u\{202e\}\.safetensors: 100% of 3\.0 MiB in \d+\.\d s$", line)


def test_plain_lines_come_every_few_seconds_and_at_the_end(
    notebook: Stderr, no_tqdm: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, draw = _progress.resolve(True, "f")
    assert report is not None and not draw
    report(1 << 30, 4 << 30)  # within EVERY seconds of the start: nothing
    assert notebook.getvalue() == ""
    monkeypatch.setattr(_progress, "EVERY", 0.0)
    report(1 << 30, 4 << 30)
    report(4 << 30, 4 << 30)
    first, last = notebook.getvalue().splitlines()
    assert first == "f: 25% of 4.0 GiB"
    assert re.fullmatch(r"f: 100% of 4\.0 GiB in \d+\.\d s", last)


def test_on_a_terminal_the_core_draws_its_line_not_tqdm(
    monkeypatch: pytest.MonkeyPatch, fake_tqdm: List[FakeTqdm]
) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", Tty())
    assert _progress.resolve(True, "f") == (None, True)
    assert _progress.resolve(None, "f") == (None, False)
    assert fake_tqdm == []
    with pytest.raises(TypeError, match="progress must be"):
        _progress.resolve("yes", "f")  # type: ignore[arg-type]


def _hash(path: Path, stderr: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "fastst", "hash", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
        timeout=120,
    )


def test_the_command_draws_a_bar_with_rate_and_eta_on_a_terminal(tmp_path: Path) -> None:
    path = tmp_path / "big.safetensors"
    _model(path, mib=24)  # hashed in several blocks: reports before the end
    leader, follower = pty.openpty()
    try:
        result = _hash(path, follower)
        os.close(follower)
        err = b""
        while True:
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # the other end is closed
                break
            if not chunk:
                break
            err += chunk
    finally:
        os.close(leader)
    assert result.returncode == 0 and b"sha256" in result.stdout
    text = err.decode()
    bar = r"\[[#.]{20}\] +\d+\.\d% \d+/24 MiB, \d+ MiB/s, "
    assert re.search(rf"{bar}ETA \d+:\d\d(?!\d)", text), text
    assert re.search(r"\[#{20}\] 100\.0% 24/24 MiB, \d+ MiB/s, took \d+:\d\d\r?\n$", text), text


def test_the_command_prints_no_progress_on_a_pipe(tmp_path: Path) -> None:
    path = tmp_path / "big.safetensors"
    _model(path, mib=24)
    result = _hash(path, subprocess.PIPE)
    assert result.returncode == 0 and b"sha256" in result.stdout
    assert result.stderr == b""
