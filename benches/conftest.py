"""Benchmark inputs as fixtures, generated once into $FASTST_BENCH_DIR (default
/tmp/fastst-bench) and reused: a Llama-like BF16 checkpoint of about
$FASTST_BENCH_GB GB (default 1.0), its F16 twin (same layout and bytes,
for the reference's numpy path, which cannot read BF16), and a file of
20,000 small tensors. (What they are made of: layouts.py; nothing imports
this file.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from layouts import BENCH_DIR, SCALE, llama_layout, write_file


@pytest.fixture(scope="session")
def llama_bf16() -> Path:
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    path = BENCH_DIR / f"llama-{SCALE:g}gb-bf16.safetensors"
    if not path.exists():
        write_file(path, llama_layout(SCALE), "BF16", 2)
    return path


@pytest.fixture(scope="session")
def llama_f16() -> Path:
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    path = BENCH_DIR / f"llama-{SCALE:g}gb-f16.safetensors"
    if not path.exists():
        write_file(path, llama_layout(SCALE), "F16", 2)
    return path


@pytest.fixture(scope="session")
def many_tensors() -> Path:
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    path = BENCH_DIR / "20000-tensors.safetensors"
    if not path.exists():
        layout = [(f"blocks.{i // 10}.sub.{i % 10}.weight", (4, 4)) for i in range(20_000)]
        write_file(path, layout, "F32", 4)
    return path
