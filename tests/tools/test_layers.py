"""The layer view of `fastst inspect`: tensors grouped by repeated structure
(any numeric name component whose instances hold the same tensors), the
same for a file, a sharded checkpoint and a folder; `--tensors` keeps the
flat list; `--json` carries the view."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import fastst.numpy
import numpy as np
import pytest
from fastst.tools.layers import layer_view, span_text
from helpers.cli_files import run, run_envelope

LEAVES = ("self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj", "input_layernorm")


def _llm(layers: int = 4) -> Dict[str, np.ndarray]:
    tensors = {
        "model.embed_tokens.weight": np.zeros((32, 8), np.float16),
        "model.norm.weight": np.zeros(8, np.float16),
        "lm_head.weight": np.zeros((32, 8), np.float16),
    }
    for i in range(layers):
        for leaf in LEAVES:
            tensors[f"model.layers.{i}.{leaf}.weight"] = np.zeros((8, 8), np.float16)
    return tensors


def _rows(names: List[str]) -> List[tuple]:
    return [(n, "F32", [2, 3], 24) for n in names]


def test_blocks_of_every_family() -> None:
    gpt2 = [f"h.{i}.{leaf}" for i in range(12) for leaf in ("attn.c_attn.weight", "ln_1.bias")]
    view = layer_view(_rows(["wte.weight", *gpt2, "ln_f.weight"]))
    (block,) = view["blocks"]
    assert block["pattern"] == "h.{0-11}" and block["repeats"] == 12 and block["tensors"] == 2
    assert block["parameters"] == 24 * 6 and block["bytes"] == 24 * 24
    assert [t["name"] for t in view["single"]] == ["wte.weight", "ln_f.weight"]

    bert = [f"encoder.layer.{i}.attention.self.query.weight" for i in range(3)]
    assert [b["pattern"] for b in layer_view(_rows(bert))["blocks"]] == ["encoder.layer.{0-2}"]

    # diffusers: down_blocks 0-2 alike, block 3 has no attention, so its
    # resnets repeat one level down; a lone upsampler repeats nowhere.
    unet = []
    for b in range(4):
        for r in range(2):
            unet.append(f"down_blocks.{b}.resnets.{r}.conv1.weight")
            if b < 3:
                unet.append(f"down_blocks.{b}.attentions.{r}.proj_in.weight")
    unet.append("up_blocks.0.upsamplers.0.conv.weight")
    view = layer_view(_rows(unet))
    assert [(b["pattern"], b["repeats"]) for b in view["blocks"]] == [
        ("down_blocks.{0-2}", 3),
        ("down_blocks.3.resnets.{0-1}", 2),
    ]
    assert [t["name"] for t in view["single"]] == ["up_blocks.0.upsamplers.0.conv.weight"]

    # kohya LoRA names separate with underscores.
    lora = [
        f"lora_unet_mid_block_attentions_0_transformer_blocks_{i}_attn1_to_k.{leaf}"
        for i in range(10)
        for leaf in ("alpha", "lora_down.weight", "lora_up.weight")
    ]
    (block,) = layer_view(_rows(lora))["blocks"]
    assert block["pattern"] == "lora_unet_mid_block_attentions_0_transformer_blocks_{0-9}"


def test_a_layer_that_differs_is_not_hidden() -> None:
    names = [f"model.layers.{i}.mlp.weight" for i in range(5)]
    names += [f"model.layers.{i}.attn.weight" for i in (0, 1, 2, 4)]  # layer 3 lacks attn
    view = layer_view(_rows(names))
    assert [(b["pattern"], b["indices"]) for b in view["blocks"]] == [
        ("model.layers.{0-2,4}", [0, 1, 2, 4])
    ]
    assert [t["name"] for t in view["single"]] == ["model.layers.3.mlp.weight"]
    assert span_text([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    # Leading zeros are names, not numbers.
    assert layer_view(_rows(["a.01.w", "a.02.w"]))["blocks"] == []


def test_file_checkpoint_and_folder_show_the_same_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    single = tmp_path / "one.safetensors"
    fastst.numpy.save_file(_llm(), single)
    index = fastst.numpy.save_sharded(_llm(), tmp_path / "sharded", max_shard_size=1000)
    views = []
    for target in (single, index, tmp_path / "sharded"):
        code, doc, _ = run_envelope(["inspect", "--json", str(target)], capsys)
        assert code == 0
        (result,) = doc["results"]
        assert "table" not in result
        views.append(result["layers"])
        # Each in the order of its files: the shards order tensors differently.
        views[-1]["single"].sort(key=lambda t: t["name"])
    assert views[0] == views[1] == views[2]
    (block,) = views[0]["blocks"]
    assert block["pattern"] == "model.layers.{0-3}" and block["repeats"] == 4
    assert block["suffixes"] == sorted(f".{leaf}.weight" for leaf in LEAVES)
    assert block["dtypes"] == ["F16"] and block["bytes"] == 4 * 4 * 128
    code, out, _ = run(["inspect", str(index)], capsys)
    assert code == 0
    row = next(line for line in out.splitlines() if "model.layers.{0-3}" in line)
    assert row.split()[1:4] == ["4", "4", "1,024"]
    assert "model.layers.0.self_attn.q_proj.weight" not in out
    assert "lm_head.weight" in out and "model.norm.weight" in out


def test_tensors_keeps_the_flat_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.safetensors"
    fastst.numpy.save_file(_llm(), path)
    code, out, _ = run(["inspect", "--tensors", str(path)], capsys)
    assert code == 0
    assert "model.layers.{0-3}" not in out
    assert "model.layers.3.input_layernorm.weight" in out
    code, doc, _ = run_envelope(["inspect", "--json", "--tensors", str(path)], capsys)
    assert len(doc["results"][0]["table"]) == len(_llm())
    assert doc["results"][0]["layers"]["blocks"][0]["repeats"] == 4


def test_many_other_tensors_are_cut_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "flat.safetensors"
    fastst.numpy.save_file({f"t{i}": np.zeros(1, np.float32) for i in range(30)}, path)
    code, out, _ = run(["inspect", str(path)], capsys)
    assert code == 0 and "... and 10 more (--tensors lists every tensor)" in out
    code, out, _ = run(["inspect", "--wide", str(path)], capsys)
    assert "more" not in out and "t29" in out


def test_hostile_names_cost_linear_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Names of 50,000 numbered components: only the first few numbers are
    # tried (grouping them all would copy the name once per number).
    deep = [".".join(["7"] * 50_000) + f".{i}.w" for i in range(3)]
    view = layer_view(_rows(deep))
    assert view["blocks"] == [] and len(view["single"]) == 3
    path = tmp_path / "deep.safetensors"
    fastst.numpy.save_file({n: np.zeros(1, np.float32) for n in deep}, path)
    code, out, _ = run(["inspect", "--tensors", "--width", "80", str(path)], capsys)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80


def test_long_numbers_in_names_are_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A block number of 5,000 digits (past Python's limit on int() of text)
    # is no number: that tensor stands alone, and every command reads the
    # file the reference loads. Block numbers of up to 18 digits are numbers.
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    big = "9" * 5_000
    tensors = {f"model.layers.{i}.w": np.full(4, i, np.float32) for i in range(2)}
    tensors |= {f"model.layers.{big}.w": np.ones(4, np.float32), f"h_{big}_x.y": np.ones(2)}
    tensors[f"model.layers.{10**17}.w"] = np.ones(4, np.float32)  # far from 0 and 1
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    fastst.numpy.save_file(tensors, a)
    fastst.numpy.save_file(tensors | {f"model.layers.{big}.w": np.zeros(4, np.float32)}, b)
    assert len(safetensors_numpy.load_file(str(a))) == len(tensors)
    view = layer_view(_rows(list(tensors)))
    assert [b["pattern"] for b in view["blocks"]] == [f"model.layers.{{0-1,{10**17}}}"]
    assert {t["name"] for t in view["single"]} == {f"model.layers.{big}.w", f"h_{big}_x.y"}
    for argv in (["inspect"], ["inspect", "--json"], ["stats"], ["stats", "--json"], ["meta"]):
        code, out, err = run([*argv, str(a)], capsys)
        assert code == 0 and not err and "Traceback" not in out, (argv, err)
    code, out, err = run(["stats", str(a)], capsys)
    assert "std by layer" in out and out.count("\n") < 40  # no line per missing layer
    for argv in (["diff"], ["diff", "--json"]):
        code, out, err = run([*argv, str(a), str(b)], capsys)
        assert code == 1 and not err and f"model.layers.{big}.w" in out, (argv, err)
