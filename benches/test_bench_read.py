"""Reading: fastst vs the reference package on the same files, same run.

Run: `python -m pytest benches/test_bench_read.py --benchmark-json=read.json`
then `python benches/ratios.py read.json` for the ratios."""

from __future__ import annotations

import json
import struct

import fastst
import numpy as np
import pytest
from layouts import touch_pages
from safetensors import safe_open as ref_open


def fastst_views(path):
    with fastst.safe_open(path, "np") as f:
        return [f.get_tensor(k) for k in f.keys()]


def reference_numpy(path):
    with ref_open(path, "np") as f:
        return [f.get_tensor(k) for k in f.keys()]


@pytest.mark.benchmark(group="views-all-tensors")
def test_views_fastst(benchmark, llama_bf16):
    arrays = benchmark(fastst_views, llama_bf16)
    assert len(arrays) > 10


@pytest.mark.benchmark(group="views-all-tensors")
def test_views_reference(benchmark, llama_f16):
    # The reference's numpy path cannot read BF16: it reads the F16 twin,
    # identical in layout and bytes.
    arrays = benchmark.pedantic(reference_numpy, args=(llama_f16,), rounds=3, iterations=1)
    assert len(arrays) > 10


def memmap_views(path):
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    header.pop("__metadata__", None)
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    return [mm[v["data_offsets"][0] : v["data_offsets"][1]] for v in header.values()]


@pytest.mark.benchmark(group="views-touch-pages")
def test_touch_fastst(benchmark, llama_bf16):
    benchmark.pedantic(lambda: touch_pages(fastst_views(llama_bf16)), rounds=5, warmup_rounds=1)


@pytest.mark.benchmark(group="views-touch-pages")
def test_touch_memmap(benchmark, llama_bf16):
    benchmark.pedantic(lambda: touch_pages(memmap_views(llama_bf16)), rounds=5, warmup_rounds=1)


@pytest.mark.benchmark(group="open-keys-20000")
def test_keys_fastst(benchmark, many_tensors):
    def run():
        with fastst.safe_open(many_tensors, "np") as f:
            return f.keys()

    assert len(benchmark(run)) == 20_000


@pytest.mark.benchmark(group="open-keys-20000")
def test_keys_reference(benchmark, many_tensors):
    def run():
        with ref_open(many_tensors, "np") as f:
            return f.keys()

    assert len(benchmark(run)) == 20_000


def half_columns(opener, path):
    out = []
    with opener(path, "np") as f:
        for k in f.keys():
            s = f.get_slice(k)
            shape = s.get_shape()
            if len(shape) == 2:
                out.append(s[:, : shape[1] // 2])
    return out


@pytest.mark.benchmark(group="slice-half-columns")
def test_slice_fastst(benchmark, llama_bf16):
    benchmark(half_columns, fastst.safe_open, llama_bf16)


@pytest.mark.benchmark(group="slice-half-columns")
def test_slice_reference(benchmark, llama_f16):
    benchmark.pedantic(half_columns, args=(ref_open, llama_f16), rounds=3, iterations=1)
