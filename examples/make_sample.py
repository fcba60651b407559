"""Regenerates examples/sample.safetensors: a tiny Llama-shaped checkpoint
with ModelSpec and kohya-style metadata, written byte by byte (no library)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np


def main() -> None:
    rng = np.random.default_rng(7)
    hidden, inter, vocab = 16, 32, 64
    tensors = {"model.embed_tokens.weight": rng.standard_normal((vocab, hidden)).astype(np.float16)}
    for i in range(2):
        p = f"model.layers.{i}."
        tensors[p + "self_attn.q_proj.weight"] = rng.standard_normal((hidden, hidden)).astype(
            np.float16
        )
        tensors[p + "self_attn.k_proj.weight"] = rng.standard_normal((hidden, hidden)).astype(
            np.float16
        )
        tensors[p + "mlp.up_proj.weight"] = rng.standard_normal((inter, hidden)).astype(np.float16)
        tensors[p + "input_layernorm.weight"] = np.ones(hidden, dtype=np.float32)
    tensors["lm_head.weight"] = rng.standard_normal((vocab, hidden)).astype(np.float16)
    metadata = {
        "format": "pt",
        "modelspec.title": "fastst sample",
        "modelspec.architecture": "llama",
        "modelspec.author": "fastst",
        "modelspec.description": "A tiny Llama-shaped checkpoint used by the README.",
        "ss_network_dim": "8",
        "ss_tag_frequency": json.dumps({"10_sks cat": {"sks": 12, "cat": 10, "sitting": 3}}),
    }
    header: dict = {"__metadata__": dict(sorted(metadata.items()))}
    order = sorted(tensors, key=lambda k: (-tensors[k].dtype.itemsize, k))
    offset, blobs = 0, []
    for name in order:
        a = tensors[name]
        dtype = {"float16": "F16", "float32": "F32"}[a.dtype.name]
        header[name] = {
            "dtype": dtype,
            "shape": list(a.shape),
            "data_offsets": [offset, offset + a.nbytes],
        }
        offset += a.nbytes
        blobs.append(a.astype(a.dtype.newbyteorder("<")).tobytes())
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    out = Path(__file__).with_name("sample.safetensors")
    out.write_bytes(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
