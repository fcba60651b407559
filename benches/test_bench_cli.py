"""Benchmarks of the ``fastst`` command against the baselines it must match,
on the same files in the same run:

- ``fastst hash`` (all hashes, one pass) on the shared Llama-like BF16
  checkpoint of ``layouts.py`` (about ``FASTST_BENCH_GB`` GB, default 1) vs
  ``sha256sum`` of the same file: throughput ratio, target >= 0.8;
- ``fastst verify`` (no ``--values``) on a 1,500,000-tensor header vs the
  reference package's ``safe_open`` + ``keys()``: time ratio, target <= 1.

Sizes shrink with ``FASTST_BENCH_GB`` and ``FASTST_BENCH_TENSORS`` (default
1500000). Run with
``python -m pytest benches/test_bench_cli.py --benchmark-only -s``.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, List

import fastst.tools.inspect as fi
import pytest
import safetensors

TENSORS = int(os.environ.get("FASTST_BENCH_TENSORS", "1500000"))
ROUNDS = int(os.environ.get("FASTST_BENCH_ROUNDS", "3"))


def _write(path: Path, header: bytes, data_len: int, fill: Callable[[int], bytes]) -> None:
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        left = data_len
        while left:
            chunk = fill(min(left, 64 << 20))
            f.write(chunk)
            left -= len(chunk)


def _name(i: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        i, r = divmod(i, 36)
        out = digits[r] + out
        if i == 0:
            return "t" + out


@pytest.fixture(scope="module")
def huge_table(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """TENSORS one-byte U8 tensors (a header just under the 100 MB cap)."""
    path = tmp_path_factory.mktemp("many") / "many.safetensors"
    parts = [
        f'"{_name(i)}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}'
        for i in range(TENSORS)
    ]
    header = ("{" + ",".join(parts) + "}").encode()
    assert len(header) < 100_000_000, len(header)
    _write(path, header, TENSORS, lambda n: bytes(n))
    yield path
    path.unlink()


def _best(fn: Callable[[], object], rounds: int = ROUNDS) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _fastst_command() -> List[str]:
    exe = shutil.which("fastst", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "fastst"]


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs coreutils sha256sum")
def test_hash_vs_sha256sum(benchmark: pytest.FixtureRequest, llama_bf16: Path) -> None:
    checkpoint = llama_bf16
    size = checkpoint.stat().st_size
    fastst_cmd = [*_fastst_command(), "hash", "--no-progress", str(checkpoint)]
    sha_cmd = ["sha256sum", str(checkpoint)]
    # Warm the page cache once so that both read from memory.
    subprocess.run(sha_cmd, check=True, capture_output=True)

    def fastst_hash() -> str:
        return subprocess.run(fastst_cmd, check=True, capture_output=True, text=True).stdout

    out = benchmark.pedantic(fastst_hash, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    expected = subprocess.run(sha_cmd, check=True, capture_output=True, text=True).stdout.split()[0]
    assert f"sha256         {expected}" in out
    fastst_s = benchmark.stats.stats.min
    sha_s = _best(lambda: subprocess.run(sha_cmd, check=True, capture_output=True))
    api_s = _best(lambda: fi.hash_file(checkpoint))
    ratio = sha_s / fastst_s
    gib = size / (1 << 30)
    benchmark.extra_info.update(
        {
            "file_bytes": size,
            "fastst_hash_s": fastst_s,
            "fastst_hash_api_s": api_s,
            "sha256sum_s": sha_s,
            "throughput_ratio": ratio,
        }
    )
    print(
        f"\nhash {gib:.2f} GiB: fastst hash {fastst_s:.3f} s ({gib / fastst_s:.2f} GiB/s, "
        f"API {api_s:.3f} s), sha256sum {sha_s:.3f} s ({gib / sha_s:.2f} GiB/s); "
        f"fastst/sha256sum throughput = {ratio:.2f} (target >= 0.8)"
    )
    assert ratio >= 0.8


def test_verify_vs_reference_keys(benchmark: pytest.FixtureRequest, huge_table: Path) -> None:
    many_tensors = huge_table

    def reference() -> int:
        with safetensors.safe_open(str(many_tensors), "numpy") as f:
            return len(f.keys())

    def verify() -> dict:
        return fi.verify_file(many_tensors)

    report = benchmark.pedantic(verify, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    assert report["accepted"] and report["tensors"] == TENSORS
    assert report["findings"] == []
    fastst_s = benchmark.stats.stats.min
    assert reference() == TENSORS
    reference_s = _best(reference)
    ratio = fastst_s / reference_s
    benchmark.extra_info.update(
        {
            "tensors": TENSORS,
            "fastst_verify_s": fastst_s,
            "reference_safe_open_keys_s": reference_s,
            "time_ratio": ratio,
        }
    )
    print(
        f"\nverify {TENSORS} tensors: fastst verify {fastst_s:.3f} s, reference safe_open+keys "
        f"{reference_s:.3f} s; fastst/reference time = {ratio:.2f} (target <= 1)"
    )
    assert ratio <= 1.0
