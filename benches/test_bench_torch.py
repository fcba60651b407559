"""torch: fastst.torch vs safetensors.torch on the same Llama-like BF16 file
(about $FASTST_BENCH_GB GB, default 1.0) and a file of 20,000 small tensors,
same run.

Run: `python -m pytest benches/test_bench_torch.py --benchmark-json=torch.json`
then `python benches/ratios.py torch.json` for the time ratios; the RssAnon
growth of each library is printed and stored in the JSON's extra_info."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Dict

import fastst.torch as ft
import pytest
import safetensors.torch as ref
import torch
from layouts import BENCH_DIR


def touch_pages(tensors: Dict[str, torch.Tensor]) -> int:
    """Reads one byte of every 4 KiB page of each tensor."""
    total = 0
    for t in tensors.values():
        flat = t.reshape(-1).view(torch.uint8)
        total += int(flat[::4096].sum())
    return total


def rss_anon() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


@pytest.mark.benchmark(group="torch-load_file-touch-pages")
def test_load_touch_fastst(benchmark, llama_bf16) -> None:
    benchmark.pedantic(lambda: touch_pages(ft.load_file(llama_bf16)), rounds=5, warmup_rounds=1)


@pytest.mark.benchmark(group="torch-load_file-touch-pages")
def test_load_touch_reference(benchmark, llama_bf16) -> None:
    benchmark.pedantic(lambda: touch_pages(ref.load_file(llama_bf16)), rounds=5, warmup_rounds=1)


def _rss_growth(load, path: Path) -> int:
    gc.collect()
    before = rss_anon()
    tensors = load(path)
    touch_pages(tensors)
    grown = rss_anon() - before
    del tensors
    gc.collect()
    return grown


@pytest.mark.benchmark(group="torch-load_file-rss-anon")
@pytest.mark.parametrize("library", ["fastst", "reference"])
def test_load_rss_anon(benchmark, llama_bf16, library: str) -> None:
    load = ft.load_file if library == "fastst" else ref.load_file
    size = llama_bf16.stat().st_size
    grown = benchmark.pedantic(_rss_growth, args=(load, llama_bf16), rounds=1, iterations=1)
    benchmark.extra_info["rss_anon_growth_bytes"] = grown
    benchmark.extra_info["rss_anon_growth_pct_of_file"] = 100.0 * grown / size
    pct = 100.0 * grown / size
    print(f"\n{library}: RssAnon grew {grown / 2**20:.1f} MiB ({pct:.2f}% of the file)")
    if library == "fastst":
        assert grown < 0.05 * size


@pytest.fixture(scope="module")
def state_dict(llama_bf16) -> Dict[str, torch.Tensor]:
    """The checkpoint's tensors in ordinary (anonymous) memory."""
    return {k: v.clone() for k, v in ref.load_file(llama_bf16).items()}


def _settle(out: Path, state_dict: Dict[str, torch.Tensor]):
    """Before each round (untimed): remove the previous output and flush dirty
    pages, so no round pays for an earlier round's write-back."""

    def setup():
        if out.exists():
            out.unlink()
        os.sync()
        return (state_dict, out), {}

    return setup


@pytest.mark.benchmark(group="torch-save_file")
def test_save_fastst(benchmark, state_dict) -> None:
    out = BENCH_DIR / "torch-save-fastst.safetensors"
    benchmark.pedantic(ft.save_file, setup=_settle(out, state_dict), rounds=5, warmup_rounds=1)
    out.unlink()


@pytest.mark.benchmark(group="torch-save_file")
def test_save_reference(benchmark, state_dict) -> None:
    out = BENCH_DIR / "torch-save-reference.safetensors"
    benchmark.pedantic(ref.save_file, setup=_settle(out, state_dict), rounds=5, warmup_rounds=1)
    out.unlink()


@pytest.mark.benchmark(group="torch-load_file-20000-tensors")
def test_many_fastst(benchmark, many_tensors) -> None:
    assert len(benchmark.pedantic(ft.load_file, args=(many_tensors,), rounds=5)) == 20_000


@pytest.mark.benchmark(group="torch-load_file-20000-tensors")
def test_many_reference(benchmark, many_tensors) -> None:
    assert len(benchmark.pedantic(ref.load_file, args=(many_tensors,), rounds=5)) == 20_000
