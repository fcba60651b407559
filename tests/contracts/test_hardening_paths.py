"""Paths that are not UTF-8: POSIX names are bytes, and Python hands them
over as surrogate-escaped ``str``. ``str``, ``bytes`` and ``os.PathLike``
work in ``safe_open``, ``load_file``, ``save_file``, the inspection
functions and the command, and messages show the odd bytes as ``\\xNN``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import fastst
import fastst.numpy as fnp
import fastst.tools.inspect as fi
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="byte file names")

T = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
RAW_NAME = b"mod\xffel\xe9.safetensors"


@pytest.fixture
def odd(tmp_path: Path) -> bytes:
    return os.fsencode(tmp_path) + b"/" + RAW_NAME


@pytest.mark.parametrize("kind", ["str", "bytes", "pathlike"])
def test_round_trip_through_a_non_utf8_name(odd: bytes, kind: str) -> None:
    path = {"str": os.fsdecode(odd), "bytes": odd, "pathlike": Path(os.fsdecode(odd))}[kind]
    fnp.save_file(T, path)
    assert os.path.exists(odd)
    assert (fnp.load_file(path)["w"] == T["w"]).all()
    with fastst.safe_open(path, "numpy") as f:
        assert f.keys() == ["w"]
        assert (f.get_slice("w")[1] == T["w"][1]).all()
    assert fi.hash_file(path)["sha256"]
    assert fi.verify_file(path)["accepted"]
    assert fi.inspect_file(path)["tensors"] == 1
    fnp.save_file(T, path)  # replacing it


def test_messages_show_odd_bytes_readably(odd: bytes) -> None:
    with open(odd, "wb") as fh:
        fh.write(b"\x03\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(fastst.SafetensorError) as info:
        fastst.safe_open(odd, "numpy")
    message = str(info.value)
    assert "mod\\xffel\\xe9.safetensors" in message, message
    message.encode("utf-8")  # printable: no surrogates
    with pytest.raises(FileNotFoundError):
        fastst.safe_open(odd + b".missing", "numpy")
    # Result dicts keep the exact name (it round-trips through --json, whose
    # escaping keeps lone surrogates); only messages show it readably.
    report = fi.verify_file(odd)
    assert report["path"] == os.fsdecode(odd)


def test_the_command_gets_the_file_argument_intact(odd: bytes) -> None:
    fnp.save_file(T, odd)
    for command in (["hash"], ["inspect"], ["verify"], ["meta"]):
        out = subprocess.run(
            [os.fsencode(sys.executable), b"-m", b"fastst", *map(str.encode, command), odd],
            capture_output=True,
            timeout=60,
        )
        assert out.returncode == 0, (command, out.stdout, out.stderr)
