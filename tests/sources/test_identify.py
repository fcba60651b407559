"""The one recogniser of files that are not safetensors (PyTorch zip and legacy checkpoints,
pickles, GGUF, NumPy, HDF5, ONNX, HTML, text, Git LFS pointers, empty files: the ``foreign``
fixture), and the reader's errors saying what such a file is. (Through every subcommand:
tests/cli/test_inputs.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Tuple

import fastst
import fastst.numpy
import fastst.tools.inspect as fi
import numpy as np
import pytest

pytestmark = pytest.mark.slow


def test_identify(foreign: Tuple[Path, str, str]) -> None:
    path, kind, words = foreign
    found = fi.identify(path)
    assert found is not None and found["kind"] == kind and words in found["description"]


def test_identify_leaves_safetensors_alone(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    fastst.numpy.save_file({"w": np.zeros(3, np.float32)}, path)
    assert fi.identify(path) is None
    # Broken, but still safetensors framing: the reader says what is wrong.
    raw = path.read_bytes()
    (path.parent / "cut.safetensors").write_bytes(raw[:-4])
    assert fi.identify(path.parent / "cut.safetensors") is None


def test_reader_errors_say_what_the_file_is(foreign: Tuple[Path, str, str]) -> None:
    path, kind, words = foreign
    with pytest.raises(fastst.SafetensorError) as info:
        fastst.safe_open(path, "numpy")
    assert words in str(info.value) and "not a safetensors file" in str(info.value)
    assert info.value.rule and info.value.filename == str(path)
    with pytest.raises(type(info.value)):
        fastst.numpy.load_file(path)
