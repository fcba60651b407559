"""CycloneDX 1.6 ML-BOMs: provenance.sbom and `fastst sbom`, validated against the
CycloneDX 1.6 JSON schema shipped with cyclonedx-python-lib."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any, Dict, List

import fastst
import fastst.numpy
import numpy as np
import pytest
from fastst.cli import main
from fastst.tools import provenance
from fastst.tools.provenance import ProvenanceError
from fastst.tools.provenance.sbom import validate
from helpers.metadata_samples import HOSTILE, metadata
from helpers.raw_files import raw_file
from hypothesis import HealthCheck, given, settings

KOHYA = {
    "ss_output_name": "cat_lora",
    "ss_network_module": "networks.lora",
    "ss_network_dim": "16",
    "ss_network_alpha": "8",
    "ss_base_model_version": "sdxl_base_v1-0",
    "ss_tag_frequency": json.dumps({"10_sks cat": {"cat": 5, "sitting": 2}}),
    "modelspec.author": "Alice",
    "modelspec.description": "A cat style",
    "modelspec.trigger_phrase": "catstyle",
    "modelspec.architecture": "stable-diffusion-xl-v1-base/lora",
    "modelspec.license": "CreativeML Open RAIL++-M",
    "ssmd_source": "https://civitai.com/models/12345?modelVersionId=678",
}


def _props(component: Dict[str, Any]) -> Dict[str, str]:
    return {p["name"]: p["value"] for p in component.get("properties", [])}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def lora(tmp_path: Path) -> Path:
    path = tmp_path / "cat.safetensors"
    path.write_bytes(
        raw_file(
            {
                "w": ("F16", [2, 3], b"\x01" * 12),
                "b": ("BF16", [4], b"\x02" * 8),
                "s": ("F32", [], b"\x00\x00\x80\x3f"),
            },
            KOHYA,
        )
    )
    return path


def _sharded(folder: Path) -> Path:
    folder.mkdir()
    (folder / "model-00001-of-00002.safetensors").write_bytes(
        raw_file({"a": ("F32", [4, 4], b"\x00" * 64)}, {"format": "pt"})
    )
    (folder / "model-00002-of-00002.safetensors").write_bytes(
        raw_file({"b": ("I8", [8], b"\x01" * 8), "c": ("F32", [2], b"\x00" * 8)}, {"format": "pt"})
    )
    index = {
        "metadata": {"total_size": 80},
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
            "c": "model-00002-of-00002.safetensors",
        },
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text('{"hidden_size": 4}')
    return folder


def test_single_file_bom_is_valid_cyclonedx_1_6(lora: Path) -> None:
    result = provenance.sbom(lora)
    assert validate(result.document) == []
    assert validate(result.text) == []
    doc = result.document
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    assert [t["name"] for t in doc["metadata"]["tools"]["components"]] == ["fastst"]
    (c,) = doc["components"]
    assert c["type"] == "machine-learning-model"
    assert c["name"] == "cat_lora"
    assert c["description"] == "A cat style"
    assert c["authors"] == [{"name": "Alice"}]
    assert c["hashes"] == [{"alg": "SHA-256", "content": _sha(lora)}]
    assert c["licenses"] == [{"license": {"name": "CreativeML Open RAIL++-M"}}]
    assert c["externalReferences"][0]["url"].startswith("https://civitai.com/models/12345")
    props = _props(c)
    assert props["fastst:tensors"] == "3"
    assert props["fastst:parameters"] == "11"
    assert props["fastst:dtypes"] == "BF16,F16,F32"
    assert props["fastst:autov2"] == _sha(lora)[:10]
    header_len = int.from_bytes(lora.read_bytes()[:8], "little")
    assert props["fastst:autov3"] == hashlib.sha256(lora.read_bytes()[8 + header_len :]).hexdigest()
    assert props["fastst:trigger_words"] == "catstyle, sks cat"
    assert props["fastst:base_model"] == "sdxl_base_v1-0"
    assert props["fastst:civitai_model_id"] == "12345"
    assert props["fastst:civitai_version_id"] == "678"
    assert json.loads(props["fastst:network"])["dim"] == 16
    card = c["modelCard"]
    assert card["modelParameters"] == {
        "modelArchitecture": "stable-diffusion-xl-v1-base/lora",
        "architectureFamily": "sdxl_base_v1-0",
    }
    card_props = {p["name"]: p["value"] for p in card["properties"]}
    assert json.loads(card_props["fastst:dtypes"]) == {
        "BF16": {"parameters": 4, "tensors": 1},
        "F16": {"parameters": 6, "tensors": 1},
        "F32": {"parameters": 1, "tensors": 1},
    }


def test_sharded_checkpoint_is_one_component_with_its_shards(tmp_path: Path) -> None:
    folder = _sharded(tmp_path / "llm")
    for target in (folder, folder / "model.safetensors.index.json"):
        result = provenance.sbom(target)
        assert validate(result.document) == []
        models = [c for c in result.document["components"] if c["type"] == "machine-learning-model"]
        assert len(models) == 1
        (m,) = models
        assert m["hashes"][0]["content"] == _sha(folder / "model.safetensors.index.json")
        shards = {s["name"]: s for s in m["components"]}
        assert set(shards) == {
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        }
        for name, s in shards.items():
            assert s["type"] == "file"
            assert s["hashes"][0]["content"] == _sha(folder / name)
            assert _props(s)["fastst:autov2"] == _sha(folder / name)[:10]
        props = _props(m)
        assert props["fastst:tensors"] == "3" and props["fastst:parameters"] == "26"
        assert props["fastst:dtypes"] == "F32,I8" and props["fastst:shards"] == "2"
        files = [c for c in result.document["components"] if c["type"] == "file"]
        if target == folder:
            assert [f["name"] for f in files] == ["config.json"]
            assert files[0]["hashes"][0]["content"] == _sha(folder / "config.json")
        else:
            assert files == []


def test_folder_with_several_checkpoints(tmp_path: Path, lora: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(3):
        (folder / f"m{i}.safetensors").write_bytes(
            raw_file({"x": ("U8", [i + 1], b"\x07" * (i + 1))})
        )
    result = provenance.sbom(folder)
    assert validate(result.document) == []
    names = sorted(c["name"] for c in result.document["components"])
    assert names == ["m0.safetensors", "m1.safetensors", "m2.safetensors"]
    assert result.checkpoints == 3


def test_validator_is_not_vacuous(lora: Path) -> None:
    doc = provenance.sbom(lora).document
    doc["components"][0]["type"] = "not-a-type"
    assert validate(doc)
    doc = provenance.sbom(lora).document
    doc["components"][0]["modelCard"]["modelParameters"]["unknown"] = 1
    assert validate(doc)


def test_hostile_metadata_stays_valid(tmp_path: Path) -> None:
    md = {
        "modelspec.title": "evil\x1b[2J\u202ename",
        "modelspec.author": "",
        "ssmd_source": "not a url \x00 with spaces",
        "modelspec.description": "x" * 10000,
    }
    path = tmp_path / "h.safetensors"
    path.write_bytes(raw_file({"w": ("F32", [1], b"\0" * 4)}, md))
    result = provenance.sbom(path)
    assert validate(result.document) == []
    assert result.document["components"][0]["name"] == "evil\x1b[2J\u202ename"
    assert "\x1b" not in result.text  # JSON escapes control characters


def test_bad_inputs_raise_clear_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{")
    with pytest.raises(fastst.SafetensorError):
        provenance.sbom(bad)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ProvenanceError):
        provenance.sbom(empty)
    with pytest.raises(ProvenanceError):
        provenance.sbom(tmp_path / "absent")
    folder = _sharded(tmp_path / "broken")
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ProvenanceError) as info:
        provenance.sbom(folder)
    assert info.value.rule == "signature-missing-shard"
    link_dir = tmp_path / "links"
    link_dir.mkdir()
    (link_dir / "a.safetensors").symlink_to(bad)
    with pytest.raises(ProvenanceError) as info:
        provenance.sbom(link_dir)
    assert info.value.rule == "signature-symlink"


def run(argv: List[str], capsys: Any) -> Any:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_sbom_stdout_and_output(lora: Path, tmp_path: Path, capsys: Any) -> None:
    code, out, err = run(["sbom", str(lora)], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert validate(doc) == []
    target = tmp_path / "bom.json"
    code, out, err = run(["sbom", str(lora), "--output", str(target)], capsys)
    assert code == 0 and out == ""
    assert "CycloneDX 1.6" in err
    assert validate(target.read_text()) == []


def test_cli_sbom_errors_exit_2(tmp_path: Path, capsys: Any) -> None:
    code, out, err = run(["sbom", str(tmp_path / "absent.safetensors")], capsys)
    assert code == 2 and "Traceback" not in err and "absent.safetensors" in err
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00" * 4)
    code, out, err = run(["sbom", str(bad)], capsys)
    assert code == 2 and "bad.safetensors" in err


# Hostile metadata and files that hold pickles ------------------------------


def _bom_of(tmp_path: Path, md: Dict[str, str], name: str = "m.safetensors") -> Any:
    path = tmp_path / name
    path.write_bytes(raw_file({"w": ("F32", [1], b"\0" * 4)}, md))
    return provenance.sbom(path).document


def test_hostile_metadata_cases_give_valid_boms(tmp_path: Path, capsys: Any) -> None:
    for name, md in HOSTILE.items():
        doc = _bom_of(tmp_path, md, f"{name}.safetensors")
        assert validate(doc) == []
        code, out, err = run(["sbom", str(tmp_path / f"{name}.safetensors")], capsys)
        assert code == 0 and err == "", err
        json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the BOM"))
    props = _props(_bom_of(tmp_path, HOSTILE["wrong_kinds"])["components"][0])
    assert props["fastst:network"] == '{"type":"LyCORIS","module":"lycoris.kohya",' + (
        '"dim":null,"alpha":null,"args":{"algo":{"nested":[1]}}}'
    )


def _storable(md: Dict[str, str]) -> bool:  # a header is UTF-8: no lone surrogates
    return not any("\ud800" <= c <= "\udfff" for t in [*md, *md.values()] for c in t)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(metadata.filter(_storable))
def test_any_metadata_gives_a_valid_bom(tmp_path: Path, md: Dict[str, str]) -> None:
    assert validate(_bom_of(tmp_path, md)) == []


PICKLE = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s."  # pickle.dumps({"a": 1}, 2)


def test_files_holding_pickles_are_marked(tmp_path: Path) -> None:
    model = _sharded(tmp_path / "model")
    with zipfile.ZipFile(model / "pytorch_model.bin", "w") as z:
        z.writestr("archive/data.pkl", PICKLE)
    (model / "legacy.weights").write_bytes(PICKLE)
    with zipfile.ZipFile(model / "images.zip", "w") as z:
        z.writestr("a.png", b"x")
    doc = provenance.sbom(model).document
    assert validate(doc) == []
    marks = {c["name"]: _props(c).get("fastst:pickle") for c in doc["components"]}
    assert marks["pytorch_model.bin"] == (
        "a PyTorch checkpoint (zip with pickles): loading it can run code; "
        "convert it with fastst convert"
    )
    assert (marks["legacy.weights"] or "").startswith("a raw pickle stream (protocol 2)")
    assert marks["images.zip"] is None and marks["config.json"] is None


def _sharded_folder(folder):
    folder.mkdir()
    fastst.numpy.save_sharded(
        {"a": np.zeros(16, dtype=np.float32), "b": np.ones(16, dtype=np.float32)},
        folder,
        max_shard_size=100,
    )
    (folder / "config.json").write_text('{"hidden_size": 4}')
    return folder


def test_sbom_counts_every_file_it_describes(tmp_path):
    """``SbomResult.files`` counts the safetensors files, the indexes and the
    other files of the model (mutant: the others subtracted)."""
    folder = _sharded_folder(tmp_path / "llm")
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    assert len(shards) == 2
    whole = provenance.sbom(folder)
    assert (whole.checkpoints, whole.files) == (1, 4)  # 2 shards + index + config.json
    index = provenance.sbom(folder / "model.safetensors.index.json")
    assert (index.checkpoints, index.files) == (1, 3)
    single = provenance.sbom(folder / shards[0])
    assert (single.checkpoints, single.files) == (1, 1)


def test_sbom_model_card_trigger_words_only_when_there_are_some(tmp_path):
    """The model card carries ``fastst:trigger_words`` (comma-separated) when
    the metadata names trigger words, and no such property otherwise
    (mutant: ``or`` -> ``and``, which drops real ones and emits empty ones)."""
    with_words = tmp_path / "lora.safetensors"
    fastst.numpy.save_file(
        {"w": np.zeros(2, dtype=np.float32)},
        with_words,
        metadata={"modelspec.trigger_phrase": "catstyle, sks cat"},
    )
    without = tmp_path / "plain.safetensors"
    fastst.numpy.save_file({"w": np.zeros(2, dtype=np.float32)}, without)

    def card_props(path):
        (component,) = provenance.sbom(path).document["components"]
        return {p["name"]: p["value"] for p in component["modelCard"]["properties"]}

    assert card_props(with_words)["fastst:trigger_words"] == "catstyle, sks cat"
    props = card_props(without)
    assert "fastst:trigger_words" not in props and props["fastst:tensors"] == "1"
