"""Owned (materialized) loads, conversion on load, the pread back end and
huge headers: fastst vs the reference package on the same files, same run.

Run: `python -m pytest benches/test_bench_owned.py --benchmark-json=owned.json`
then `python benches/ratios.py owned.json`."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading

import fastst
import numpy as np
import pytest
import torch
from fastst.numpy import load_file
from layouts import BENCH_DIR
from safetensors import safe_open as ref_open
from safetensors.numpy import load_file as ref_load_file


def fastst_owned(path, **kw):
    with fastst.safe_open(path, "np", **kw) as f:
        return f.get_tensors(copy=True)


@pytest.mark.benchmark(group="owned-load")
def test_owned_fastst(benchmark, llama_bf16):
    out = benchmark.pedantic(
        load_file, args=(llama_bf16,), kwargs={"copy": True}, rounds=5, warmup_rounds=1
    )
    assert all(a.flags.owndata or a.base is not None for a in out.values())


@pytest.mark.benchmark(group="owned-load")
def test_owned_reference(benchmark, llama_f16):
    # numpy path of the reference (it cannot read BF16: F16 twin, same bytes)
    benchmark.pedantic(ref_load_file, args=(llama_f16,), rounds=5, warmup_rounds=1)


def preadv_two_threads(path, buf):
    """The raw limit: two threads preadv-ing the data into a pre-touched buffer."""
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
    start = 8 + n
    size = len(buf)
    fd = os.open(path, os.O_RDONLY)
    try:
        half = size // 2
        view = memoryview(buf)

        def part(lo, hi):
            off = lo
            while off < hi:
                chunk = view[off : min(hi, off + (64 << 20))]
                off += os.preadv(fd, [chunk], start + off)

        threads = [
            threading.Thread(target=part, args=(0, half)),
            threading.Thread(target=part, args=(half, size)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.close(fd)


@pytest.mark.benchmark(group="owned-load")
def test_owned_preadv_limit(benchmark, llama_bf16):
    with open(llama_bf16, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
    buf = np.ones(os.path.getsize(llama_bf16) - 8 - n, dtype=np.uint8)  # pre-touched
    benchmark.pedantic(preadv_two_threads, args=(llama_bf16, buf), rounds=5, warmup_rounds=1)


@pytest.mark.benchmark(group="bf16-to-f32")
def test_convert_fastst(benchmark, llama_bf16):
    benchmark.pedantic(
        load_file, args=(llama_bf16,), kwargs={"dtype": np.float32}, rounds=5, warmup_rounds=1
    )


@pytest.mark.benchmark(group="bf16-to-f32")
def test_convert_reference_torch(benchmark, llama_bf16):
    def run():
        with ref_open(llama_bf16, "pt") as f:
            return {k: f.get_tensor(k).to(torch.float32) for k in f.keys()}

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)


@pytest.mark.benchmark(group="bf16-to-f32")
def test_convert_reference_numpy_f16(benchmark, llama_f16):
    def run():
        with ref_open(llama_f16, "np") as f:
            return {k: f.get_tensor(k).astype(np.float32) for k in f.keys()}

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)


@pytest.mark.benchmark(group="pread-owned")
def test_pread_fastst(benchmark, llama_bf16):
    benchmark.pedantic(
        fastst_owned, args=(llama_bf16,), kwargs={"backend": "pread"}, rounds=5, warmup_rounds=1
    )


@pytest.mark.benchmark(group="pread-owned")
def test_pread_reference(benchmark, llama_bf16):
    def run():
        with ref_open(llama_bf16, "pt", backend="pread") as f:
            return {k: f.get_tensor(k) for k in f.keys()}

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)


@pytest.fixture(scope="session")
def huge_header():
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    path = BENCH_DIR / "1500000-empty.safetensors"
    if not path.exists():
        parts = [
            f'"t.{i}":{{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}' for i in range(1_500_000)
        ]
        hb = ("{" + ",".join(parts) + "}").encode()
        hb += b" " * (-len(hb) % 8)
        path.write_bytes(struct.pack("<Q", len(hb)) + hb)
    return path


def keys_of(opener, path):
    with opener(path, "np") as f:
        return f.keys()


@pytest.mark.benchmark(group="keys-1.5M")
def test_huge_keys_fastst(benchmark, huge_header):
    assert (
        len(
            benchmark.pedantic(
                keys_of, args=(fastst.safe_open, huge_header), rounds=5, warmup_rounds=1
            )
        )
        == 1_500_000
    )


@pytest.mark.benchmark(group="keys-1.5M")
def test_huge_keys_reference(benchmark, huge_header):
    benchmark.pedantic(keys_of, args=(ref_open, huge_header), rounds=2)


PEAK = """
import sys
which, path, do_open = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if which == "fastst":
    from fastst import safe_open
else:
    from safetensors import safe_open
if do_open:
    with safe_open(path, "np") as f:
        keys = f.keys()
# VmHWM is this process's own high-water mark (getrusage would include the
# parent's memory, inherited across fork and exec).
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        print(int(line.split()[1]))
"""


def child_peak_kib(*args: str) -> int:
    """Peak RSS (KiB) of a child process, from the kernel's accounting at exit."""
    out = subprocess.run(
        [sys.executable, "-c", PEAK, *args], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


def test_huge_keys_peak_rss(huge_header, capsys):
    peaks = {}
    for which in ("fastst", "reference"):
        # growth over the same interpreter that only imports the package
        opened = child_peak_kib(which, str(huge_header), "1")
        imported = child_peak_kib(which, str(huge_header), "0")
        peaks[which] = opened - imported
    with capsys.disabled():
        ratio = peaks["fastst"] / peaks["reference"]
        print(f"\npeak RSS growth (KiB): {json.dumps(peaks)}; ratio {ratio:.2f}")
    assert peaks["fastst"] < peaks["reference"]
