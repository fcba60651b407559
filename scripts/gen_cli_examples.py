"""Writes every example file docs/cli.md uses into a folder.

    python scripts/gen_cli_examples.py FOLDER

The files are deterministic (fixed seeds, fixed metadata), so the outputs
shown in docs/cli.md can be checked: tests/cli/test_docs.py runs this script,
then every `$ fastst ...` command of docs/cli.md in FOLDER, and compares the
outputs with the documented ones.

- sks_dog.safetensors: a kohya-trained LoRA with additional-networks
  metadata (its sshs_model_hash a placeholder);
- finetuned.safetensors: the same LoRA trained a little further, with edited
  metadata (for `fastst diff`);
- suspicious.safetensors: a tampered file: a tensor named like a path, a
  hole, a NaN, a weight stored as I32, an unknown metadata key and a pickle
  appended after the last tensor;
- llama/: a small sharded checkpoint (two shards and an index);
- tiny-llama/: a model folder of 4 repeated layers whose config.json declares 6;
- decoder-bf16.safetensors: four BF16 decoder layers, a NaN in the last (for `fastst stats`);
- model.bin: a PyTorch checkpoint with tied weights (needs torch);
- downloaded-model/: a model folder holding a pytorch_model.bin (a zip with
  a pickle) beside its model.safetensors;
- page.safetensors: an HTML error page saved under a model's name.
"""

from __future__ import annotations

import json
import pickle
import struct
import sys
import zipfile
from pathlib import Path
from typing import Dict

import numpy as np

STARTED = 1700000000  # 2023-11-14T22:13:20Z


def lora_metadata() -> Dict[str, str]:
    """What kohya's sd-scripts and additional-networks' editor write."""
    return {
        "ss_session_id": "1234567890",
        "ss_training_started_at": f"{STARTED}.25",
        "ss_training_finished_at": str(STARTED + 3600),
        "ss_output_name": "sks_dog_lora",
        "ss_learning_rate": "0.0001",
        "ss_num_train_images": "40",
        "ss_num_epochs": "10",
        "ss_epoch": "10",
        "ss_max_train_steps": "400",
        "ss_steps": "400",
        "ss_network_module": "networks.lora",
        "ss_network_dim": "32",
        "ss_network_alpha": "16.0",
        "ss_base_model_version": "sdxl_base_v1-0",
        "ss_sd_model_name": "sd_xl_base_1.0.safetensors",
        "ss_resolution": "(1024, 1024)",
        "ss_optimizer": "bitsandbytes.optim.adamw.AdamW8bit",
        "ss_tag_frequency": json.dumps(
            {
                "10_sks dog": {"sks dog": 20, "grass": 7, "running": 3},
                "5_sks dog sitting": {"sks dog": 10, "sofa": 4},
            }
        ),
        "ss_dataset_dirs": json.dumps(
            {
                "10_sks dog": {"n_repeats": 10, "img_count": 20},
                "5_sks dog sitting": {"n_repeats": 5, "img_count": 10},
            }
        ),
        "sshs_model_hash": "0" * 64,
        "sshs_legacy_hash": "00000000",
        "modelspec.sai_model_spec": "1.0.0",
        "modelspec.architecture": "stable-diffusion-xl-v1-base/lora",
        "modelspec.title": "sks_dog_lora",
        "modelspec.resolution": "1024x1024",
        "modelspec.date": "2023-11-14T23:13:20",
        "ssmd_display_name": "Sks Dog",
        "ssmd_author": "someone",
        "ssmd_source": "https://civitai.com/models/12345/sks-dog?modelVersionId=67890",
        "ssmd_keywords": "sks dog, a photo of sks dog",
        "ssmd_description": "My dog.",
        "ssmd_cover_images": json.dumps(["aGVsbG8=", "d29ybGQ="]),
    }


def lora_tensors(seed: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "lora_te_text_model_encoder_layers_0_mlp_fc1.lora_down.weight": rng.standard_normal(
            (32, 768)
        ).astype(np.float16),
        "lora_unet_down_blocks_0_attentions_0_proj_in.alpha": np.array(16.0, np.float16),
        "lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight": rng.standard_normal(
            (32, 320)
        ).astype(np.float16),
        "lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight": rng.standard_normal(
            (320, 32)
        ).astype(np.float16),
    }


def decoder_bf16() -> Dict[str, np.ndarray]:
    """Four BF16 decoder layers whose weights grow with depth, a NaN in the
    last one (for `fastst stats`)."""
    import ml_dtypes

    rng = np.random.default_rng(11)
    out: Dict[str, np.ndarray] = {}
    for n in range(4):
        for name, shape in (
            ("self_attn.q_proj.weight", (32, 32)),
            ("mlp.up_proj.weight", (64, 32)),
        ):
            w = rng.standard_normal(shape) * 0.02 * (1 + n)
            if n == 3 and name.startswith("mlp"):
                w[0, 0] = np.nan
            out[f"model.layers.{n}.{name}"] = w.astype(ml_dtypes.bfloat16)
        out[f"model.layers.{n}.input_layernorm.weight"] = np.ones(32, ml_dtypes.bfloat16)
    return out


def suspicious() -> bytes:
    entries = {
        "__metadata__": {"format": "pt", "mine": "x"},
        "model.embed.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
        "../../.ssh/authorized_keys": {"dtype": "U8", "shape": [4], "data_offsets": [24, 28]},
        "model.norm.weight": {"dtype": "I32", "shape": [1], "data_offsets": [28, 32]},
    }
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    data = np.array([1.0, np.nan, np.inf, 2.0], np.float32).tobytes()
    data += b"\xde\xad\xbe\xef\xde\xad\xbe\xef"  # the hole
    data += b"ssh-" + struct.pack("<i", 1)
    data += pickle.dumps({"payload": "print('pwned')"}, protocol=4)[:31]
    return struct.pack("<Q", len(header)) + header + data


def main(folder: Path) -> None:
    try:
        import fastst.numpy
    except ImportError:
        # Not installed: the checkout's package (with its extension built in place).
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
        import fastst.numpy

    folder.mkdir(parents=True, exist_ok=True)
    fastst.numpy.save_file(lora_tensors(0), folder / "sks_dog.safetensors", lora_metadata())
    tuned = lora_tensors(0)
    up = "lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight"
    tuned[up] = (tuned[up].astype(np.float32) * 1.01).astype(np.float16)
    meta = lora_metadata()
    meta.update({"ss_epoch": "12", "ss_steps": "480", "ssmd_description": "My dog, again."})
    fastst.numpy.save_file(tuned, folder / "finetuned.safetensors", meta)
    (folder / "suspicious.safetensors").write_bytes(suspicious())
    rng = np.random.default_rng(7)
    llama = {
        "model.embed_tokens.weight": rng.standard_normal((256, 64)).astype(np.float32),
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((64, 64)).astype(np.float32),
        "model.layers.0.mlp.up_proj.weight": rng.standard_normal((128, 64)).astype(np.float32),
        "model.norm.weight": np.ones(64, np.float32),
        "lm_head.weight": rng.standard_normal((256, 64)).astype(np.float32),
    }
    fastst.numpy.save_sharded(
        llama, folder / "llama", max_shard_size=80_000, metadata={"format": "pt"}
    )
    fastst.numpy.save_file(decoder_bf16(), folder / "decoder-bf16.safetensors")
    (folder / "downloaded-model").mkdir()
    fastst.numpy.save_file(llama, folder / "downloaded-model" / "model.safetensors")
    with zipfile.ZipFile(folder / "downloaded-model" / "pytorch_model.bin", "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({}, protocol=2))
    (folder / "tiny-llama").mkdir()
    layers = {"model.embed_tokens.weight": np.zeros((256, 32), np.float16)}
    for i in range(4):
        for leaf in ("self_attn.q_proj", "self_attn.k_proj", "mlp.up_proj", "mlp.down_proj"):
            layers[f"model.layers.{i}.{leaf}.weight"] = np.zeros((32, 32), np.float16)
        layers[f"model.layers.{i}.input_layernorm.weight"] = np.ones(32, np.float16)
    layers["model.norm.weight"] = np.ones(32, np.float16)
    fastst.numpy.save_file(layers, folder / "tiny-llama" / "model.safetensors")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 32,
        "num_hidden_layers": 6,
        "torch_dtype": "float16",
    }
    (folder / "tiny-llama" / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "page.safetensors").write_text(
        "<!DOCTYPE html>\n<html><head><title>403 Forbidden</title></head>"
        "<body>Access denied</body></html>\n"
    )
    try:
        import torch
    except ImportError:
        return
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(100, 16, generator=g)
    state = {
        "model.embed_tokens.weight": emb,
        "lm_head.weight": emb,
        "model.norm.weight": torch.ones(16),
    }
    torch.save({"state_dict": state, "epoch": 3}, folder / "model.bin")


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
