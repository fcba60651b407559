"""A path or URL is shown the same way in every message, whether the core
names it or Python does (one rule, the core's): hostile names included."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any, Callable, List

import fastst
import fastst.numpy as fastst_numpy
import numpy as np
import pytest
from fastst import SafetensorError, _fastst
from fastst._paths import readable
from fastst._sources import folders as _folders
from fastst._sources import remote as _remote
from fastst.tools import inspect, stats
from helpers.cli_files import run

#: An object URL with a user, a presigned query, a fragment, a space and
#: characters that act on a terminal; the path cannot name an object, so
#: opening it fails before any request.
URL = "s3://user:secret@bucket/a b\x1b[31m\u202e.safetensors?X-Amz-Signature=SIGNED#frag"


def _local_names(tmp_path: Path) -> List[str]:
    hostile = tmp_path / os.fsdecode(b"ctl\x1b]0;x\x07\xe2\x80\xae\xff\xfe.index.json")
    deep = tmp_path.joinpath(*["d" * 200] * 8)
    deep.mkdir(parents=True)
    names = [str(hostile), str(deep / "long.index.json")]
    for name in names:
        Path(name).write_bytes(b"{not json")
    return names


def _message(call: Callable[..., Any], *args: Any, **options: Any) -> str:
    with pytest.raises((SafetensorError, OSError, ValueError)) as caught:
        call(*args, **options)
    return str(caught.value)


def test_the_core_and_python_name_a_hostile_file_alike(tmp_path: Path) -> None:
    for name in _local_names(tmp_path):
        shown = readable(name)
        assert "\\xff\\xfe" in shown or len(shown) > 1600
        by_python = _message(_folders.read_index, name)
        by_core = _message(_fastst.inspect.inspect_file, name, table=False)
        assert by_python.startswith(f"{shown}: ") and by_core.startswith(f"{shown}: ")


def test_the_core_and_python_name_a_hostile_url_alike() -> None:
    shown = readable(URL)
    by_python = _message(_remote.read_index, URL, [])  # named by Python
    by_core = _message(_fastst.inspect.inspect_file, URL, table=False)  # named by the core
    assert by_python.startswith(f"{shown}: ") and by_core.startswith(f"{shown}: ")
    for message in (shown, by_python, by_core):
        assert "secret" not in message and "SIGNED" not in message and "frag" not in message


@pytest.mark.slow  # the command in fresh interpreters
def test_a_password_in_a_url_never_reaches_a_message() -> None:
    # Nothing listens on port 9: the store's answer quotes the URL it asked.
    url = "http://user:s3cret@127.0.0.1:9/x.safetensors"
    for call in (partial(fastst.safe_open, framework="numpy"), inspect.inspect_file):
        message = _message(call, url)
        assert message.startswith("http://127.0.0.1:9/x.safetensors: ")
        assert "s3cret" not in message and "user" not in message, message


def test_the_command_names_a_hostile_url_once(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run(["inspect", URL], capsys)
    assert code == 2 and err.count("s3://") == 1 and "SIGNED" not in err


@pytest.mark.parametrize(
    "call",
    [
        partial(fastst.safe_open, framework="numpy"),
        inspect.verify_file,
        inspect.hash_file,
        inspect.inspect_file,
        inspect.read_metadata,
        stats.stats_file,
        stats.tensor_stats,
    ],
)
def test_a_name_no_file_can_have_is_python_s_error_not_a_crash(call: Callable[..., Any]) -> None:
    # A lone surrogate cannot be encoded as a file name: the error Python's
    # own file functions raise, never a panic of the compiled part.
    with pytest.raises(UnicodeEncodeError):
        call("model\ud800.safetensors")


@pytest.mark.parametrize(
    "call",
    [
        partial(_fastst.read.RawFile, display_name="n"),
        _fastst.inspect.verify_file,
        _fastst.inspect.hash_file,
        _fastst.inspect.inspect_file,
        _fastst.inspect.read_metadata,
        _fastst.inspect.stats_file,
    ],
)
def test_the_compiled_part_takes_any_path_and_refuses_a_lone_surrogate(
    call: Callable[..., Any], tmp_path: Path
) -> None:
    # Called straight, past the public entry points' own checks.
    with pytest.raises(UnicodeEncodeError):
        call("model\ud800.safetensors")
    path = tmp_path / "m\udcff.safetensors"  # an undecodable byte, surrogate-escaped
    fastst_numpy.save_file({"t": np.ones(3, np.float32)}, str(path), metadata={"k": "v"})
    for form in (str(path), os.fsencode(path), path):
        assert call(form) is not None
