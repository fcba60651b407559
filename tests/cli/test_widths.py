"""Every text report fits the terminal it is given: each subcommand is run on
a fake terminal of 60, 80, 120 and 200 columns (``COLUMNS``) over files with
long and hostile names and metadata, and no line may be wider; tables give
way column by column, names keep their layer numbers and leaves, and
``--wide`` shows everything."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Dict, List, Tuple

import fastst.numpy
import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from fastst.cli import main
from fastst.cli.render import abbreviate, affixes
from fastst.cli.text import ELLIPSIS, display_width

HOSTILE = "evil\x1b[2J\u202e名前"
RAW = ("\x1b", "\u202e")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run_on_terminal(
    argv: List[str], columns: int, monkeypatch: pytest.MonkeyPatch
) -> Tuple[int, str, str]:
    out, err = Terminal(), Terminal()
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _llm(n_layers: int, prefix: str = "model.layers") -> Dict[str, np.ndarray]:
    tensors = {"model.embed_tokens.weight": np.zeros((16, 8), np.float32)}
    for i in range(n_layers):
        for leaf in ("self_attn.q_proj", "self_attn.k_proj", "mlp.gate_proj"):
            tensors[f"{prefix}.{i}.{leaf}.weight"] = np.zeros((8, 8), np.float32)
    return tensors


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("widths")
    tensors = _llm(3)
    tensors["x" * 150 + HOSTILE + ".weight"] = np.ones(3, np.float32)
    metadata = {
        "modelspec.title": "t" * 300,
        HOSTILE * 10: HOSTILE * 40,
        "ss_tag_frequency": json.dumps({"1_dog": {HOSTILE * 20: 3, "dog": 7}}),
    }
    single = root / "single.safetensors"
    fastst.numpy.save_file(tensors, single, metadata=metadata)
    other = root / "other.safetensors"
    tensors["model.embed_tokens.weight"] = np.ones((16, 8), np.float32)
    tensors["y" * 120 + HOSTILE] = np.ones(2, np.float16)
    fastst.numpy.save_file(tensors, other, metadata={"modelspec.title": HOSTILE * 30})
    sharded = root / "sharded"
    index = fastst.numpy.save_sharded(_llm(4), sharded, max_shard_size=800)
    key = ec.generate_private_key(ec.SECP256R1())
    (root / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (root / "key.pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return {"root": root, "single": single, "other": other, "index": Path(index)}


def _commands(f: Dict[str, Path]) -> List[List[str]]:
    single, other, index, root = (str(f[k]) for k in ("single", "other", "index", "root"))
    sig = str(f["root"] / "single.sig")
    return [
        ["inspect", single],
        ["inspect", "--tensors", single],
        ["inspect", "--tensors", index],
        ["inspect", "--tensors", str(f["index"].parent)],
        ["inspect", root],
        ["inspect", "--tensor", "model.embed_tokens.weight", single],
        ["verify", "--values", single, index],
        ["hash", "--tensors", "--check", single],
        ["hash", index],
        ["meta", single, other],
        ["meta", index],
        ["diff", single, other],
        ["stats", single, index],
        ["stats", "--tensor", "model.embed_tokens.weight", single],
        ["sign", single, "--key", str(f["root"] / "key.pem"), "--signature", sig],
        ["verify", single, "--signature", sig, "--public-key", str(f["root"] / "key.pub")],
        ["verify", other, "--signature", sig, "--public-key", str(f["root"] / "key.pub")],
    ]


@pytest.mark.parametrize("columns", [60, 80, 120, 200])
def test_every_report_fits_the_terminal(
    files: Dict[str, Path], columns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    for argv in _commands(files):
        code, out, err = run_on_terminal(argv, columns, monkeypatch)
        assert code in (0, 1), (argv, err)
        assert out.strip(), argv
        for line in out.splitlines() + err.splitlines():
            assert display_width(line) <= columns, (argv, line)
            assert not any(ch in line for ch in RAW), (argv, line)


def test_wide_shows_everything(files: Dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    name = "x" * 150 + "evil\\u{1b}[2J\\u{202e}名前.weight"
    code, out, _ = run_on_terminal(["inspect", "--tensors", str(files["single"])], 80, monkeypatch)
    assert name not in out
    code, out, _ = run_on_terminal(
        ["inspect", "--tensors", "--wide", str(files["single"])], 80, monkeypatch
    )
    assert code == 0 and name in out and ELLIPSIS not in out
    assert max(display_width(line) for line in out.splitlines()) > 80


def test_columns_give_way_in_order(files: Dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["inspect", "--tensors", str(files["index"])]
    _, wide, _ = run_on_terminal([*argv, "--wide"], 200, monkeypatch)
    _, at_80, _ = run_on_terminal(argv, 80, monkeypatch)
    _, at_60, _ = run_on_terminal(argv, 60, monkeypatch)

    def rows(out: str) -> List[str]:
        return [line for line in out.split("  name")[1].splitlines()[1:] if line.strip()]

    # At 80 the shard column gave way, the names are whole.
    assert "model.layers.3.self_attn.q_proj.weight" in at_80
    assert any(ELLIPSIS in r.split()[-1] for r in rows(at_80))
    assert not any(ELLIPSIS in r.split()[-1] for r in rows(wide))
    # At 60 the names give way too, keeping the layer number and the leaf.
    assert "model.layers.3.self_attn.q_proj.weight" not in at_60
    assert any(re.fullmatch(r"\S*layers\.3\S*q_proj\.weight", r.split()[0]) for r in rows(at_60))


def test_names_keep_layer_numbers_and_leaves() -> None:
    name = "model.layers.31.self_attn.q_proj.weight"
    assert abbreviate(name, None) == name
    assert abbreviate(name, 31) == f"model.layers.31{ELLIPSIS}q_proj.weight"
    assert abbreviate(name, 26) == f"{ELLIPSIS}layers.31{ELLIPSIS}q_proj.weight"
    deep = "down_blocks.2.resnets.1.conv_shortcut.weight"
    assert abbreviate(deep, 34) == f"{ELLIPSIS}2.resnets.1.conv_shortcut.weight"
    for columns in range(1, 50):
        assert display_width(abbreviate(name, columns)) <= columns
    shorten = affixes(["model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors"])
    assert "1" in shorten("model-00001-of-00004.safetensors", 8)
    assert display_width(shorten("model-00001-of-00004.safetensors", 8)) <= 8
