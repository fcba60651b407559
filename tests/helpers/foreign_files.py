"""Files that are not safetensors, one of each kind the recogniser knows, with the kind it
must give and the words its message must hold (the ``foreign`` fixture of conftest.py)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Callable, Dict, Tuple

import numpy as np
import pytest


def _torch_zip(p: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.zeros(3)}, p)


def _torch_legacy(p: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.zeros(3)}, p, _use_new_zipfile_serialization=False)


def _hdf5(p: Path) -> None:
    h5py = pytest.importorskip("h5py")
    with h5py.File(p, "w") as f:
        f["w"] = np.zeros(3)


def _npz(p: Path) -> None:
    with open(p, "wb") as fh:
        np.savez(fh, w=np.zeros(3))


def _npy(p: Path) -> None:
    with open(p, "wb") as fh:
        np.save(fh, np.zeros(3))


#: name -> (maker, kind identify gives, words the message holds)
FOREIGN: Dict[str, Tuple[Callable[[Path], None], str, str]] = {
    "torch-zip": (_torch_zip, "pytorch-zip", "PyTorch checkpoint (zip with pickles)"),
    "torch-legacy": (_torch_legacy, "pickle", "pickle stream (protocol 2)"),
    "pickle": (
        lambda p: p.write_bytes(pickle.dumps({"w": [1, 2]}, protocol=4)),
        "pickle",
        "pickle stream (protocol 4)",
    ),
    "gguf": (lambda p: p.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\0" * 64), "gguf", "GGUF"),
    "npy": (_npy, "npy", "NumPy .npy"),
    "npz": (_npz, "npz", "NumPy .npz"),
    "hdf5": (_hdf5, "hdf5", "HDF5"),
    "onnx": (
        lambda p: p.write_bytes(b"\x08\x08\x12\x07pytorch\x1a\x052.1.0" + b"\0" * 40),
        "onnx",
        "ONNX",
    ),
    "html": (
        lambda p: p.write_text("<!DOCTYPE html>\n<html><body>Access denied</body></html>\n"),
        "html",
        "HTML page",
    ),
    "text": (lambda p: p.write_text("Not Found\n"), "text", "text file"),
    "lfs": (
        lambda p: p.write_text(
            "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 9\n"
        ),
        "git-lfs-pointer",
        "Git LFS pointer",
    ),
    "empty": (lambda p: p.write_bytes(b""), "empty", "empty file"),
}
