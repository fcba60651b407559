"""Benchmark inputs, generated once into $FASTST_BENCH_DIR (default
/tmp/fastst-bench) and reused: a Llama-like BF16 checkpoint of about
$FASTST_BENCH_GB GB (default 1.0), its F16 twin (same layout and bytes,
for the reference's numpy path, which cannot read BF16), and a file of
20,000 small tensors."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

BENCH_DIR = Path(os.environ.get("FASTST_BENCH_DIR", "/tmp/fastst-bench"))
SCALE = float(os.environ.get("FASTST_BENCH_GB", "1.0"))


HIDDEN, INTER, VOCAB = 2048, 5632, 32000


def llama_layout(scale: float, layers: int = 0) -> List[Tuple[str, Tuple[int, ...]]]:
    """A Llama-like layout: ``layers`` decoder layers (default ``8 * scale``,
    about ``scale`` GB in BF16)."""
    hidden, inter, vocab = HIDDEN, INTER, VOCAB
    layers = layers or max(1, round(8 * scale))
    out: List[Tuple[str, Tuple[int, ...]]] = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [
            (p + "self_attn.q_proj.weight", (hidden, hidden)),
            (p + "self_attn.k_proj.weight", (hidden, hidden)),
            (p + "self_attn.v_proj.weight", (hidden, hidden)),
            (p + "self_attn.o_proj.weight", (hidden, hidden)),
            (p + "mlp.gate_proj.weight", (inter, hidden)),
            (p + "mlp.up_proj.weight", (inter, hidden)),
            (p + "mlp.down_proj.weight", (hidden, inter)),
            (p + "input_layernorm.weight", (hidden,)),
            (p + "post_attention_layernorm.weight", (hidden,)),
        ]
    out += [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]
    return out


def write_file(
    path: Path, layout: List[Tuple[str, Tuple[int, ...]]], dtype: str, itemsize: int
) -> None:
    header: Dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in sorted(layout):
        n = int(np.prod(shape)) * itemsize
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    # bf16/f16 bit patterns of small normal values: never NaN, cheap to make.
    rng = np.random.default_rng(0)
    pattern = (rng.integers(0x3000, 0x3C00, 1 << 22, dtype=np.uint16)).tobytes()
    tmp = path.with_suffix(".partial")
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(hb)) + hb)
        left = offset
        while left:
            chunk = pattern[: min(left, len(pattern))]
            fh.write(chunk)
            left -= len(chunk)
    os.replace(tmp, path)


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


def touch_pages(arrays) -> int:
    """Reads one byte of every 4 KiB page of each array."""
    total = 0
    for a in arrays:
        flat = a.reshape(-1).view(np.uint8)
        total += int(flat[::4096].sum())
    return total
