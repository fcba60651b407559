"""Run by tests/dropin/test_loaders.py in a fresh interpreter, once with the
reference package and once through ``python -m fastst run``: builds tiny
models locally (no downloads), saves them with ``save_pretrained`` (single
file, sharded, tied weights), loads them back with ``from_pretrained`` and
prints, as JSON, SHA-256 digests of every file written and of the outputs.

    python tests/helpers/dropin_loaders.py OUT_DIR
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import torch


def digest(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def files(folder: str) -> dict:
    return {
        name: digest(os.path.join(folder, name))
        for name in sorted(os.listdir(folder))
        if name.endswith((".safetensors", ".json")) and name != "config.json"
    }


def tensor_digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()


def weights_digest(model: torch.nn.Module) -> str:
    """One digest over every parameter and buffer (name, dtype, shape, bytes)."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(f"{name}:{t.dtype}:{list(t.shape)}".encode())
        h.update(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def bert(out: str, report: dict) -> None:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=64,
    )
    model = BertForMaskedLM(config).eval()
    ids = torch.arange(12).reshape(2, 6) % 99
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    for name, options in (("single", {}), ("sharded", {"max_shard_size": "40KB"})):
        folder = os.path.join(out, f"bert-{name}")
        model.save_pretrained(folder, **options)
        loaded = BertForMaskedLM.from_pretrained(folder).eval()
        tied = (
            loaded.cls.predictions.decoder.weight.data_ptr()
            == loaded.bert.embeddings.word_embeddings.weight.data_ptr()
        )
        with torch.no_grad():
            got = loaded(input_ids=ids).logits
        report[f"bert-{name}"] = {
            "files": files(folder),
            "weights": weights_digest(loaded),
            "output": tensor_digest(got),
            "same_as_model": bool(torch.equal(got, expected)),
            "tied": bool(tied),
        }


def bert_from_save_sharded(out: str, report: dict) -> None:
    """fastst.torch.save_sharded of a model with tied weights, loaded by
    transformers (only when fastst serves ``safetensors``)."""
    import fastst.torch
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=64,
    )
    model = BertForMaskedLM(config).eval()
    ids = torch.arange(12).reshape(2, 6) % 99
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    folder = os.path.join(out, "bert-save-sharded")
    index = fastst.torch.save_sharded(model.state_dict(), folder, max_shard_size="40KB")
    config.save_pretrained(folder)
    loaded = BertForMaskedLM.from_pretrained(folder).eval()
    with torch.no_grad():
        got = loaded(input_ids=ids).logits
    with open(index) as fh:
        meta = json.load(fh)["metadata"]
    report["bert-save-sharded"] = {
        "same_as_model": bool(torch.equal(got, expected)),
        "index_metadata": sorted(meta),
        "total_parameters": meta.get("total_parameters"),
        "model_parameters": int(model.num_parameters()),
    }


def unet(out: str, report: dict) -> None:
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    model = UNet2DModel(
        sample_size=8,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
    ).eval()
    sample = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(sample, timestep=3).sample
    folder = os.path.join(out, "unet")
    model.save_pretrained(folder)
    loaded = UNet2DModel.from_pretrained(folder).eval()
    with torch.no_grad():
        got = loaded(sample, timestep=3).sample
    report["unet"] = {
        "files": files(folder),
        "weights": weights_digest(loaded),
        "weights_as_saved": weights_digest(loaded) == weights_digest(model),
        "output": tensor_digest(got),
        "same_as_model": bool(torch.equal(got, expected)),
        "alignment": {k: t.data_ptr() % 64 for k, t in sorted(loaded.state_dict().items())},
    }


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    report: dict = {}
    bert(out, report)
    unet(out, report)
    served = sys.modules.get("safetensors")
    if hasattr(served, "__fastst_version__"):
        bert_from_save_sharded(out, report)
    report["served_by"] = (
        "fastst" if hasattr(served, "__fastst_version__") else getattr(served, "__file__", None)
    )
    print(json.dumps(report, sort_keys=True))


if __name__ == "__main__":
    main()
