"""The model beside the weights: `inspect`, `meta` and `sbom` show what the
config.json next to the weights declares and where the weights disagree;
the config is read as untrusted data (cap, strict JSON, no FIFO, no link
out of the folder, values of the wrong type left out, text escaped)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import fastst.numpy
import numpy as np
import pytest
from fastst.tools.config import CONFIG_CAP, read_config
from helpers.cli_files import run, run_envelope

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8,
    "num_hidden_layers": 4,
    "torch_dtype": "float16",
    "auto_map": {"AutoModelForCausalLM": "modeling_evil.EvilModel"},
}


def _model(folder: Path, layers: int = 4, config: Any = LLAMA) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {"model.embed_tokens.weight": np.zeros((32, 8), np.float16)}
    for i in range(layers):
        for leaf in ("self_attn.q_proj", "mlp.up_proj"):
            tensors[f"model.layers.{i}.{leaf}.weight"] = np.zeros((8, 8), np.float16)
    fastst.numpy.save_file(tensors, folder / "model.safetensors")
    if config is not None:
        text = config if isinstance(config, str) else json.dumps(config)
        (folder / "config.json").write_text(text)
    return folder


def _config(capsys: Any, target: Path) -> Dict[str, Any]:
    code, doc, _ = run_envelope(["inspect", "--json", str(target)], capsys)
    assert code == 0
    return doc["results"][0]["config"]


def test_a_matching_config_is_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _model(tmp_path / "m")
    config = _config(capsys, folder)
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert (config["hidden_size"], config["num_hidden_layers"]) == (8, 4)
    assert config["dtype"] == "float16" and config["mismatches"] == [] and config["problem"] is None
    code, out, _ = run(["inspect", str(folder)], capsys)
    assert (
        "config       LlamaForCausalLM, model_type llama, 4 layers, hidden size 8, float16" in out
    )
    assert "mismatch" not in out and "evil" not in out
    # No config: nothing said.
    (folder / "config.json").unlink()
    assert _config(capsys, folder) is None


def test_disagreements_are_flagged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = dict(LLAMA, num_hidden_layers=6, hidden_size=16, torch_dtype="bfloat16")
    folder = _model(tmp_path / "m", layers=4, config=wrong)
    mismatches = _config(capsys, folder)["mismatches"]
    assert mismatches == [
        "config.json declares 6 layers; the weights hold 4 (model.layers.{0-3}); missing 4-5",
        "config.json declares dtype bfloat16 (BF16); the weights hold F16",
        "config.json declares hidden_size 16; embedding 'model.embed_tokens.weight' is 32 x 8",
    ]
    code, out, _ = run(["inspect", str(folder)], capsys)
    assert code == 0 and "  mismatch     config.json declares 6 layers" in out
    # More layers than declared, and a layer unlike the others.
    folder = _model(tmp_path / "n", layers=5)
    with fastst.safe_open(folder / "model.safetensors", "numpy") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    del tensors["model.layers.2.mlp.up_proj.weight"]
    fastst.numpy.save_file(tensors, folder / "model.safetensors")
    (mismatch,) = _config(capsys, folder)["mismatches"]
    assert mismatch == (
        "config.json declares 4 layers; the weights hold 5 (model.layers.{0-4}); "
        "beyond the count 4; unlike the others 2"
    )


def test_one_layer_is_no_mismatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A single layer has nothing to repeat with: that is what the config says.
    folder = _model(tmp_path / "m", layers=1, config=dict(LLAMA, num_hidden_layers=1))
    assert _config(capsys, folder)["mismatches"] == []
    folder = _model(tmp_path / "n", layers=1, config=dict(LLAMA, num_hidden_layers=3))
    assert _config(capsys, folder)["mismatches"] == [
        "config.json declares 3 layers; no block of the weights repeats"
    ]


def test_diffusers_class_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "unet"
    folder.mkdir()
    fastst.numpy.save_file(
        {f"down_blocks.{i}.resnets.0.conv1.weight": np.zeros(4, np.float32) for i in range(2)},
        folder / "diffusion_pytorch_model.safetensors",
    )
    (folder / "config.json").write_text('{"_class_name": "UNet2DConditionModel"}')
    assert _config(capsys, folder)["class_name"] == "UNet2DConditionModel"
    _, out, _ = run(["inspect", str(folder)], capsys)
    assert "config       UNet2DConditionModel\n" in out


@pytest.mark.parametrize(
    "text,problem",
    [
        ('{"hidden_size": NaN}', "NaN is not JSON"),
        ('{"a": 1, "a": 2}', "repeated"),
        ("[1, 2]", "not a JSON object"),
        ('{"a":' * 100_000, "nested too deeply"),
        (b"\xff{}", "codec"),
        ('{"a": "' + "x" * CONFIG_CAP + '"}', "cap on config files"),
    ],
)
def test_unreadable_configs_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: Any, problem: str
) -> None:
    folder = _model(tmp_path / "m", config=None)
    path = folder / "config.json"
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    config = _config(capsys, folder)
    assert problem in config["problem"] and config["architectures"] == []
    code, out, _ = run(["inspect", str(folder)], capsys)
    assert code == 0 and "config.json not read: " in out


def test_special_files_and_links(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _model(tmp_path / "m", config=None)
    os.mkfifo(folder / "config.json")  # never opened for a blocking read
    assert read_config(str(folder))["problem"] == "not a regular file"  # type: ignore[index]
    (folder / "config.json").unlink()
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps(LLAMA))
    (folder / "config.json").symlink_to(outside)
    assert "outside the model's folder" in _config(capsys, folder)["problem"]
    (folder / "config.json").unlink()
    (folder / "real.json").write_text(json.dumps(LLAMA))
    (folder / "config.json").symlink_to("real.json")
    assert _config(capsys, folder)["model_type"] == "llama"


def test_hostile_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evil = "Llama\x1b[2J\u202eForCausalLM"
    config = {"architectures": [evil], "model_type": 7, "hidden_size": "8", "num_hidden_layers": 4}
    folder = _model(tmp_path / "m", config=config)
    got = _config(capsys, folder)
    assert got["architectures"] == [evil]
    assert got["model_type"] is None and got["hidden_size"] is None
    assert got["notes"] == [
        "model_type is not a string: left out",
        "hidden_size is not an integer: left out",
    ]
    code, out, _ = run(["inspect", str(folder)], capsys)
    assert code == 0 and "\x1b" not in out and "\u202e" not in out
    assert "Llama\\u{1b}[2J\\u{202e}ForCausalLM" in out


def test_meta_and_the_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _model(tmp_path / "m", config=dict(LLAMA, num_hidden_layers=2))
    code, doc, _ = run_envelope(["meta", "--json", str(folder)], capsys)
    assert code == 0 and doc["results"][0]["config"]["num_hidden_layers"] == 2
    assert "beyond the count 2-3" in doc["results"][0]["config"]["mismatches"][0]
    fastst.numpy.save_file(
        {"a": np.zeros(1, np.float32)}, folder / "model.safetensors", metadata={"format": "pt"}
    )
    code, out, _ = run(["meta", str(folder)], capsys)
    assert code == 0 and "config       LlamaForCausalLM" in out
    # An LLM's card has no thumbnail line; a LoRA's says it has none.
    assert "thumbnail" not in out
    lora = tmp_path / "lora.safetensors"
    fastst.numpy.save_file(
        {"a": np.zeros(1, np.float32)}, lora, metadata={"ss_network_module": "networks.lora"}
    )
    _, out, _ = run(["meta", str(lora)], capsys)
    assert "thumbnail         none" in out


def test_sbom_model_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("cyclonedx")
    from fastst.tools.provenance.sbom import sbom, validate

    folder = _model(tmp_path / "m", config=dict(LLAMA, num_hidden_layers=3))
    result = sbom(folder)
    assert validate(result.document) == []
    (model,) = [c for c in result.document["components"] if "modelCard" in c]
    card = model["modelCard"]
    assert card["modelParameters"] == {
        "modelArchitecture": "LlamaForCausalLM",
        "architectureFamily": "llama",
    }
    props = {p["name"]: p["value"] for p in card["properties"]}
    assert props["fastst:config.num_hidden_layers"] == "3"
    assert "beyond the count 3" in json.loads(props["fastst:config.mismatches"])[0]


@pytest.mark.slow
def test_config_counts_are_compared_not_enumerated(tmp_path: Path) -> None:
    # A 36-byte config.json declaring 10**12 layers beside a model of 4
    # repeated layers: the count is compared arithmetically, so each command
    # ends at once, under a memory cap, with the mismatch said.
    folder = _model(tmp_path / "m", layers=4, config='{"num_hidden_layers": 1000000000000}')
    assert (folder / "config.json").stat().st_size < 50

    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    said = (
        "config.json declares 1,000,000,000,000 layers; the weights hold 4 "
        "(model.layers.{0-3}); missing 4-999999999999"
    )
    for argv, expected in (
        (["inspect", "--json"], 0),
        (["inspect"], 0),
        (["meta"], 0),
        (["sbom", "--output", str(tmp_path / "bom.json")], 0),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "fastst", *argv, str(folder / "model.safetensors")],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=capped,
        )
        assert result.returncode == expected, (argv, result.stderr[-2000:])
        assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr
        if argv[0] == "inspect":
            assert said in result.stdout.replace("\n" + " " * 15, " "), result.stdout
