"""The benchmarks' inputs: Llama-like layouts, files written from them byte by byte into
$FASTST_BENCH_DIR (default /tmp/fastst-bench) at about $FASTST_BENCH_GB GB (default 1.0), and
in-memory state dicts of the same layout (imported by the benchmarks, their scripts and
conftest.py's fixtures)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Dict, List, Tuple

import ml_dtypes
import numpy as np

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


def llama_like(scale: float, seed: int = 0) -> Dict[str, np.ndarray]:
    """An in-memory BF16 state dict with the benchmark checkpoint's layout
    (a small Llama: d=2048, ff=5632, 32k vocabulary, about ``scale`` GB)."""
    rng = np.random.default_rng(seed)
    out: Dict[str, np.ndarray] = {}
    for name, shape in llama_layout(scale):
        n = int(np.prod(shape))
        bits = rng.integers(0x3000, 0x3C00, n, dtype=np.uint16)
        out[name] = bits.view(ml_dtypes.bfloat16).reshape(shape)
    return out


def tofile(arrays: List[np.ndarray], path: Path, sync: bool) -> None:
    with open(path, "wb") as f:
        for a in arrays:
            a.tofile(f)
        if sync:
            f.flush()
            os.fsync(f.fileno())


def touch_pages(arrays) -> int:
    """Reads one byte of every 4 KiB page of each array."""
    total = 0
    for a in arrays:
        flat = a.reshape(-1).view(np.uint8)
        total += int(flat[::4096].sum())
    return total
