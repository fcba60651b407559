"""`fastst meta`: the metadata card from headers written the way kohya
sd-scripts, Stability ModelSpec and sd-webui-additional-networks write them,
and the raw metadata with JSON-in-string values decoded."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Dict

import fastst
import fastst.numpy
import fastst.tools.inspect as fi
import numpy as np
import pytest
import safetensors.numpy
from helpers.cli_files import run, run_json, write_raw
from helpers.metadata_samples import HOSTILE

STARTED = 1700000000  # 2023-11-14T22:13:20Z
FINISHED = 1700003600


def kohya_lora_metadata() -> Dict[str, str]:
    """What sd-scripts' train_network.py writes for a DreamBooth-style LoRA
    (every value a string; dicts JSON-encoded)."""
    return {
        "ss_session_id": "1234567890",
        "ss_training_started_at": f"{STARTED}.25",
        "ss_output_name": "sks_dog_lora",
        "ss_learning_rate": "0.0001",
        "ss_text_encoder_lr": "5e-05",
        "ss_unet_lr": "0.0001",
        "ss_num_train_images": "40",
        "ss_num_reg_images": "0",
        "ss_num_batches_per_epoch": "40",
        "ss_num_epochs": "10",
        "ss_epoch": "10",
        "ss_batch_size_per_device": "1",
        "ss_total_batch_size": "1",
        "ss_gradient_accumulation_steps": "1",
        "ss_max_train_steps": "400",
        "ss_steps": "400",
        "ss_lr_warmup_steps": "0",
        "ss_lr_scheduler": "cosine",
        "ss_network_module": "networks.lora",
        "ss_network_dim": "32",
        "ss_network_alpha": "16.0",
        "ss_network_dropout": "None",
        "ss_mixed_precision": "fp16",
        "ss_full_fp16": "False",
        "ss_v2": "False",
        "ss_base_model_version": "sdxl_base_v1-0",
        "ss_sd_model_name": "sd_xl_base_1.0.safetensors",
        "ss_resolution": "(1024, 1024)",
        "ss_clip_skip": "None",
        "ss_optimizer": "bitsandbytes.optim.adamw.AdamW8bit",
        "ss_training_comment": "None",
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
        "ss_reg_dataset_dirs": json.dumps({"1_dog": {"n_repeats": 1, "img_count": 100}}),
        "ss_bucket_info": json.dumps({"buckets": {"0": {"resolution": [1024, 1024], "count": 40}}}),
        "ss_training_finished_at": str(FINISHED),
        "sshs_model_hash": "0" * 64,
        "sshs_legacy_hash": "00000000",
        "modelspec.sai_model_spec": "1.0.0",
        "modelspec.architecture": "stable-diffusion-xl-v1-base/lora",
        "modelspec.implementation": "https://github.com/Stability-AI/generative-models",
        "modelspec.title": "sks_dog_lora",
        "modelspec.resolution": "1024x1024",
        "modelspec.date": "2023-11-14T23:13:20",
    }


def _thumbnail(size: int = 300) -> str:
    return "data:image/png;base64," + base64.b64encode(b"\x89PNG" + b"\0" * (size - 4)).decode()


def modelspec_metadata() -> Dict[str, str]:
    """A ModelSpec-only header (e.g. an SDXL checkpoint or a LoRA exported
    by a ModelSpec-aware trainer)."""
    return {
        "modelspec.sai_model_spec": "1.0.0",
        "modelspec.architecture": "stable-diffusion-xl-v1-base",
        "modelspec.implementation": "sgm",
        "modelspec.title": "Example Model Version 1.0",
        "modelspec.description": "# Example\nA model that draws examples.",
        "modelspec.author": "Example Corp",
        "modelspec.date": "2023-07-16",
        "modelspec.license": "CreativeML Open RAIL++-M",
        "modelspec.trigger_phrase": "exmpl style, exmpl",
        "modelspec.thumbnail": _thumbnail(),
        "modelspec.hash_sha256": "0x" + "ab" * 32,
    }


def addnet_metadata() -> Dict[str, str]:
    """What sd-webui-additional-networks' metadata editor adds (ssmd_*) on
    top of kohya's keys."""
    md = kohya_lora_metadata()
    md.update(
        {
            "ssmd_display_name": "Sks Dog",
            "ssmd_author": "someone",
            "ssmd_source": "https://civitai.com/models/12345/sks-dog?modelVersionId=67890",
            "ssmd_keywords": "sks dog, a photo of sks dog",
            "ssmd_description": "My dog.",
            "ssmd_rating": "4",
            "ssmd_tags": "dog, animal",
            "ssmd_cover_images": json.dumps(["aGVsbG8=", "d29ybGQ="]),
            "ssmd_version": "1.0",
        }
    )
    return md


def _save(path: Path, metadata: Dict[str, str]) -> Path:
    safetensors.numpy.save_file(
        {"lora_unet_down.lora_down.weight": np.zeros((4, 4), np.float16)},
        str(path),
        metadata=metadata,
    )
    return path


def test_kohya_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path / "lora.safetensors", kohya_lora_metadata())
    code, (doc,) = run_json(["meta", "--json", str(path)], capsys)
    assert code == 0
    card = doc["card"]
    assert card["title"] == "sks_dog_lora"
    assert card["name"] == "sks_dog_lora"
    assert card["base_model"] == "sdxl_base_v1-0"
    assert card["sd_model_name"] == "sd_xl_base_1.0.safetensors"
    assert card["architecture"] == "stable-diffusion-xl-v1-base/lora"
    assert card["network"] == {
        "type": "LoRA",
        "module": "networks.lora",
        "dim": 32,
        "alpha": 16.0,
        "args": None,
    }
    training = card["training"]
    assert training["started"] == "2023-11-14T22:13:20Z"
    assert training["finished"] == "2023-11-14T23:13:20Z"
    assert training["duration_s"] == pytest.approx(3599.75)
    assert training["steps"] == 400 and training["max_train_steps"] == 400
    assert training["epochs"] == 10 and training["images"] == 40
    assert card["dreambooth_tokens"] == [
        {"token": "sks dog", "repeats": 10},
        {"token": "sks dog sitting", "repeats": 5},
    ]
    assert card["trigger_words"] == ["sks dog", "sks dog sitting"]
    assert card["top_tags"][0] == ["sks dog", 30]
    assert ["grass", 7] in card["top_tags"]
    assert card["embedded_hashes"]["sshs_model_hash"] == "0" * 64
    assert card["thumbnail"] is None
    assert card["civitai_model_id"] is None
    # Raw metadata: JSON-in-string decoded, everything else kept as text.
    raw = doc["metadata"]
    assert raw["ss_tag_frequency"]["10_sks dog"]["grass"] == 7
    assert raw["ss_bucket_info"]["buckets"]["0"]["count"] == 40
    assert raw["ss_network_dim"] == "32"
    assert raw["ss_resolution"] == "(1024, 1024)"


def test_kohya_dataset_config_class_tokens() -> None:
    md = {
        "ss_datasets": json.dumps(
            [
                {
                    "is_dreambooth": True,
                    "num_train_images": 40,
                    "subsets": [
                        {"img_count": 20, "num_repeats": 2, "class_tokens": "ohwx man"},
                        {"img_count": 50, "num_repeats": 1, "class_tokens": "man", "is_reg": True},
                    ],
                }
            ]
        ),
        "ss_network_module": "lycoris.kohya",
        "ss_network_args": json.dumps({"algo": "locon", "conv_dim": "8"}),
        "ss_network_dim": "16",
    }
    card = fi.metadata_card(md)
    assert card["dreambooth_tokens"] == [{"token": "ohwx man", "repeats": 2}]
    assert card["network"]["type"] == "LyCORIS (locon)"
    assert card["network"]["args"] == {"algo": "locon", "conv_dim": "8"}


def test_modelspec_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path / "spec.safetensors", modelspec_metadata())
    code, (doc,) = run_json(["meta", "--json", str(path)], capsys)
    assert code == 0
    card = doc["card"]
    assert card["title"] == "Example Model Version 1.0"
    assert card["author"] == "Example Corp"
    assert card["description"].startswith("# Example")
    assert card["license"] == "CreativeML Open RAIL++-M"
    assert card["date"] == "2023-07-16"
    assert card["trigger_phrase"] == "exmpl style, exmpl"
    assert card["trigger_words"] == ["exmpl style", "exmpl"]
    assert card["thumbnail"] == {"mime": "image/png", "bytes": 300}
    assert card["network"] is None and card["training"] is None
    assert card["embedded_hashes"] == {"modelspec.hash_sha256": "0x" + "ab" * 32}


def test_additional_networks_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path / "addnet.safetensors", addnet_metadata())
    code, (doc,) = run_json(["meta", "--json", str(path)], capsys)
    card = doc["card"]
    assert card["title"] == "Sks Dog"
    assert card["name"] == "sks_dog_lora"
    assert card["author"] == "someone"
    assert card["description"] == "My dog."
    assert card["source_url"] == "https://civitai.com/models/12345/sks-dog?modelVersionId=67890"
    assert card["civitai_model_id"] == 12345
    assert card["civitai_version_id"] == 67890
    assert card["keywords"] == ["sks dog", "a photo of sks dog"]
    assert card["trigger_words"] == ["sks dog", "a photo of sks dog", "sks dog sitting"]
    assert card["cover_images"] == 2


def test_civitai_id_found_in_any_value() -> None:
    card = fi.metadata_card({"ss_training_comment": "see https://civitai.com/models/777/x"})
    assert card["civitai_model_id"] == 777
    assert card["source_url"] == "https://civitai.com/models/777/x"


def test_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path / "addnet.safetensors", addnet_metadata())
    code, out, err = run(["meta", str(path)], capsys)
    assert code == 0 and err == ""
    assert "  title             Sks Dog" in out
    assert "  trigger words     sks dog, a photo of sks dog, sks dog sitting" in out
    assert "  network           LoRA, dim 32, alpha 16.0" in out
    assert "  trained           2023-11-14T22:13:20Z -> 2023-11-14T23:13:20Z" in out
    assert "  civitai model     12345" in out
    assert "  raw metadata:" in out
    # ss_tag_frequency pretty-printed as JSON.
    assert '        "10_sks dog": {' in out
    code, out, _err = run(["meta", "--raw", str(path)], capsys)
    assert "title" not in out.split("raw metadata:")[0]


def test_no_metadata_and_broken_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "plain.safetensors"
    safetensors.numpy.save_file({"x": np.zeros(2, np.float32)}, str(plain))
    code, (doc,) = run_json(["meta", "--json", str(plain)], capsys)
    assert code == 0 and doc["metadata"] == {} and doc["card"]["title"] is None
    code, out, _ = run(["meta", str(plain)], capsys)
    assert "(no __metadata__)" in out
    # The reader rejects this file (a hole), but its metadata still reads.
    broken = tmp_path / "broken.safetensors"
    write_raw(
        broken,
        '{"__metadata__":{"modelspec.title":"Broken"},'
        '"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
        b"\0" * 8,
    )
    code, (doc,) = run_json(["meta", "--json", str(broken)], capsys)
    assert code == 0 and doc["card"]["title"] == "Broken"
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x80\x04\x95" + b"\0" * 20)
    code, out, err = run(["meta", str(garbage)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1


def test_decode_metadata_leaves_non_json_alone() -> None:
    decoded = fi.decode_metadata({"a": "{bad", "b": "[1, 2]", "c": "12", "d": ' {"k": 1}'})
    assert decoded == {"a": "{bad", "b": [1, 2], "c": "12", "d": {"k": 1}}
    deep = "[" * 100_000 + "]" * 100_000
    assert fi.decode_metadata({"x": deep})["x"] == deep


# Hostile metadata: a card with notes, never a traceback -------------------


def _strict(text: str) -> object:
    def refuse(name: str) -> object:
        raise AssertionError(f"{name} in the output")

    return json.loads(text, parse_constant=refuse)


def test_hostile_metadata_gives_cards_with_notes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = [str(_save(tmp_path / f"{name}.safetensors", md)) for name, md in HOSTILE.items()]
    good = str(_save(tmp_path / "z_good.safetensors", addnet_metadata()))
    # Every file is reported, the good one after the hostile ones.
    code, out, err = run(["meta", *paths, good], capsys)
    assert code == 0 and err == ""
    for path in paths + [good]:
        assert f"{path}\n" in out
    assert "  title             Sks Dog" in out
    assert "  not understood    ss_tag_frequency: tag counts that are not whole counts" in out
    code, out, err = run(["meta", "--json", *paths, good], capsys)
    assert code == 0 and err == ""
    doc = _strict(out)
    non_finite, huge, kinds, clean = (r["card"] for r in doc["results"])  # type: ignore[index]
    assert non_finite["top_tags"] == [["sun", 3]]
    assert non_finite["dreambooth_tokens"] == [{"token": "sks", "repeats": 10}]
    assert non_finite["notes"] == [
        "ss_tag_frequency: tag counts that are not whole counts; left out"
    ]
    # The numbers JSON cannot hold are shown as their text.
    raw = doc["results"][0]["metadata"]["ss_tag_frequency"]["10_sks"]  # type: ignore[index]
    assert raw == {"sks": "1e400", "dog": "NaN", "grass": "-Infinity", "sun": 3}
    assert huge["civitai_model_id"] is None and huge["dreambooth_tokens"] == []
    assert any(n.startswith("civitai: a model id of more than 18 digits") for n in huge["notes"])
    assert kinds["network"]["type"] == "LyCORIS"
    assert kinds["merged_from"] == "m"
    assert "ss_datasets: a dataset without a list of subsets; left out" in kinds["notes"]
    assert "ss_network_args: algo is not a string; left out" in kinds["notes"]
    assert clean["notes"] == []


def test_checkpoint_index_metadata_stays_strict_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = "model-00001-of-00001.safetensors"
    _save(tmp_path / shard, {})
    index = tmp_path / "model.safetensors.index.json"
    weights = json.dumps({"lora_unet_down.lora_down.weight": shard})
    index.write_text(
        '{"metadata": {"total_size": 1e400, "x": [NaN]}, "weight_map": ' + weights + "}"
    )
    code, out, _err = run(["meta", "--json", str(index)], capsys)
    assert code == 0
    (entry,) = _strict(out)["results"]  # type: ignore[index]
    assert entry["index_metadata"] == {"total_size": "Infinity", "x": ["NaN"]}
    # An index nested past the parser's stack is an error about that input.
    index.write_text('{"metadata": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, out, err = run(["meta", str(index)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "model.safetensors.index.json: index is not valid UTF-8 JSON" in err


def test_meta_card_shortens_only_long_descriptions(tmp_path, capsys):
    """The card of ``fastst meta`` shows a description of up to 400
    characters whole and cuts a longer one at 400 with "..." (the raw
    metadata below still has it whole) (mutant: the comparison flipped)."""
    long = tmp_path / "long.safetensors"
    short = tmp_path / "short.safetensors"
    for path, text in ((long, "d" * 450), (short, "a model of 400 chars or less")):
        fastst.numpy.save_file(
            {"w": np.zeros(2, dtype=np.float32)},
            path,
            metadata={"modelspec.description": text, "modelspec.title": "T"},
        )
    code, out, _ = run(["meta", str(long), str(short)], capsys)
    assert code == 0
    cards = [
        line.split(None, 1)[1] for line in out.splitlines() if line.startswith("  description")
    ]
    assert cards == ["d" * 400 + "...", "a model of 400 chars or less"]
    assert "modelspec.description: " + "d" * 450 in out


def test_meta_raw_values_cut_after_2000_characters(tmp_path, capsys):
    """Raw metadata values of ``fastst meta`` are shown whole up to 2,000
    characters; a longer one is cut there and says its length (mutant: the
    limit moved by one)."""
    path = tmp_path / "m.safetensors"
    fastst.numpy.save_file(
        {"w": np.zeros(2, dtype=np.float32)},
        path,
        metadata={"at_limit": "a" * 2000, "over_limit": "b" * 2001},
    )
    code, out, _ = run(["meta", "--raw", str(path)], capsys)
    assert code == 0
    assert "    at_limit: " + "a" * 2000 + "\n" in out
    assert "    over_limit: " + "b" * 2000 + "... (2,001 characters)\n" in out
