"""Where tensors sit in memory, modulo 64 bytes (CPU kernels take different
paths by alignment, so this decides the last bits of a model's outputs).

The reference hands out torch tensors as views of its mapping of the file:
``data_ptr() % 64 == (8 + header length + begin) % 64``; its numpy arrays
and its pread back end are copies wherever the allocator puts them. fastst
hands out every tensor at its file offset's alignment (views, and the small
tensors and pread tensors it copies alike), directly and through the
drop-in switch. Memory of its own (``copy=True``, ``dtype=``) starts at a
multiple of 64 bytes, like torch's allocator, except copies of 1 MiB or
more, which sit at their file offset modulo 4096 (so that a cold load's
direct reads, whole disk blocks, land in place; modulo 64 that is where the
reference's views sit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import fastst
import fastst.numpy
import fastst.torch
import numpy as np
import pytest

torch = pytest.importorskip("torch")

# Odd sizes: every offset lands somewhere else modulo 64; small (copied)
# and large (mapped) tensors both.
SIZES = [3, 5, 100, 1000, 70_000, 7, 200_000, 13, 65_535, 1]


@pytest.fixture(scope="module")
def odd(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("align") / "odd.safetensors"
    tensors = {f"t{i:02d}": np.arange(n, dtype=np.uint8) for i, n in enumerate(SIZES)}
    tensors["f"] = np.arange(9, dtype=np.float32)
    fastst.numpy.save_file(tensors, path)
    return path


def file_alignment(path: Path) -> Dict[str, int]:
    with fastst.safe_open(path, "np") as f:
        start = f._raw.data_start
        return {k: (start + f._raw.info(k)[2]) % 64 for k in f.keys()}


def pointer(t) -> int:  # type: ignore[no-untyped-def]
    return t.data_ptr() if isinstance(t, torch.Tensor) else t.ctypes.data


@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize("framework", ["pt", "np"])
def test_handouts_sit_at_their_file_offset_modulo_64(odd, framework, backend) -> None:
    want = file_alignment(odd)
    assert len(set(want.values())) > 5, "the file's offsets are spread"
    with fastst.safe_open(odd, framework, backend=backend) as f:
        got = {k: pointer(f.get_tensor(k)) % 64 for k in f.keys()}
    assert got == want
    load = fastst.torch.load_file if framework == "pt" else fastst.numpy.load_file
    assert {k: pointer(t) % 64 for k, t in load(odd, backend=backend).items()} == want


def test_torch_tensors_sit_where_the_reference_puts_them(odd) -> None:
    pytest.importorskip("safetensors")
    import safetensors.torch

    with safetensors.safe_open(odd, "pt") as f:
        reference = {k: f.get_tensor(k).data_ptr() % 64 for k in f.keys()}
    loaded = safetensors.torch.load_file(odd)
    assert {k: t.data_ptr() % 64 for k, t in loaded.items()} == reference
    assert reference == file_alignment(odd)
    with fastst.safe_open(odd, "pt") as f:
        assert {k: f.get_tensor(k).data_ptr() % 64 for k in f.keys()} == reference


@pytest.mark.parametrize("framework", ["pt", "np"])
@pytest.mark.parametrize("options", [{"copy": True}, {"dtype": "F64"}])
def test_memory_of_its_own_is_64_byte_aligned(odd, framework, options) -> None:
    with fastst.safe_open(odd, framework) as f:
        names = ["f"] if "dtype" in options else f.keys()
        one = {k: pointer(f.get_tensor(k, **options)) % 64 for k in names}
        every = f.get_tensors(copy=True) if "copy" in options else {}
    assert set(one.values()) == {0}
    assert {pointer(t) % 64 for t in every.values()} <= {0}


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("align") / "large.safetensors"
    tensors = {
        "a": np.arange(5, dtype=np.uint8),
        "h": np.ones(600_003, dtype=np.float16),
        "w": np.ones(300_001, dtype=np.float32),
        "z": np.ones(1 << 20, dtype=np.uint8),
    }
    fastst.numpy.save_file(tensors, path, metadata={"pad": "x" * 13})
    return path


def file_offsets(path: Path) -> Dict[str, int]:
    with fastst.safe_open(path, "np") as f:
        return {k: f._raw.data_start + f._raw.info(k)[2] for k in f.keys()}


@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize("framework", ["pt", "np"])
def test_large_copies_sit_at_their_file_offset_modulo_4096(large, framework, backend) -> None:
    offsets = file_offsets(large)
    big = {"h", "w", "z"}
    assert len({offsets[k] % 4096 for k in big}) == 3, "the offsets are spread"
    assert all(offsets[k] % 4096 for k in big), "none sits on a page boundary in the file"
    load = fastst.torch.load_file if framework == "pt" else fastst.numpy.load_file
    loaded = load(large, copy=True, backend=backend)
    want = {k: offsets[k] % 4096 for k in big}
    assert {k: pointer(loaded[k]) % 4096 for k in big} == want
    assert pointer(loaded["a"]) % 64 == 0
    with fastst.safe_open(large, framework, backend=backend) as f:
        assert pointer(f.get_tensor("w", copy=True)) % 4096 == offsets["w"] % 4096
        streamed = {k: pointer(t) for k, t in f.iter_tensors()}
        assert {k: streamed[k] % 4096 for k in big} == want
        assert streamed["a"] % 64 == 0
        # Conversions stay 64-byte aligned.
        assert pointer(f.get_tensor("w", dtype="F64")) % 64 == 0
    assert all(
        np.all(np.asarray(t) == (np.arange(5) if k == "a" else 1)) for k, t in loaded.items()
    )


def test_copies_whose_offset_splits_an_element_stay_64_byte_aligned(tmp_path) -> None:
    path = tmp_path / "split.safetensors"
    body = np.ones(300_000, dtype=np.float32).tobytes()
    table = {
        "w": {"dtype": "F32", "shape": [300_000], "data_offsets": [2, 2 + len(body)]},
        "b": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
    }
    header = json.dumps(table).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0\0" + body)
    for load in (fastst.numpy.load_file, fastst.torch.load_file):
        w = load(path, copy=True)["w"]
        assert pointer(w) % 64 == 0
        assert np.all(np.asarray(w) == 1)


DROP_IN = r"""
import json, sys
if sys.argv[2] == "fastst":
    import fastst
    fastst.install()
import safetensors, safetensors.torch, safetensors.numpy
path = sys.argv[1]
out = {"served": hasattr(safetensors, "__fastst_version__")}
with safetensors.safe_open(path, "pt") as f:
    out["safe_open"] = {k: f.get_tensor(k).data_ptr() % 64 for k in f.keys()}
out["load_file"] = {k: t.data_ptr() % 64 for k, t in safetensors.torch.load_file(path).items()}
with open(path, "rb") as fh:
    out["load"] = {k: t.data_ptr() % 64 for k, t in safetensors.torch.load(fh.read()).items()}
print(json.dumps(out))
"""


@pytest.mark.slow  # two fresh interpreters with torch
@pytest.mark.parametrize("which", ["odd", "large"])
def test_through_the_drop_in_switch_torch_tensors_sit_where_the_reference_puts_them(
    which, request
) -> None:
    pytest.importorskip("safetensors")
    path = request.getfixturevalue(which)

    def run(who: str) -> dict:
        env = dict(os.environ)
        env.pop("FASTST_AS_SAFETENSORS", None)
        if who == "reference":
            env.pop("PYTHONPATH", None)
        done = subprocess.run(
            [sys.executable, "-c", DROP_IN, str(path), who],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    reference, ours = run("reference"), run("fastst")
    assert ours.pop("served") and not reference.pop("served")
    assert ours["safe_open"] == reference["safe_open"] == file_alignment(path)
    assert ours["load_file"] == reference["load_file"]
    # ``load(bytes)``: the reference's tensors are copies of its own; only
    # the set of names is compared.
    assert ours["load"].keys() == reference["load"].keys()
