"""`fastst convert IN OUT`: PyTorch checkpoints to safetensors with torch's
restricted unpickler only: code in a pickle is refused (and never runs),
shared tensors stored once as the hub's converter does, nested state dicts,
--dtype, --max-shard-size, a bit-for-bit check of what was written."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any, Dict

import fastst.numpy
import pytest
from cli_files import run, run_envelope

torch = pytest.importorskip("torch")

import fastst.torch as ft  # noqa: E402


def _state() -> Dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(16, 8, generator=g)
    return {
        "model.embed_tokens.weight": emb,
        "lm_head.weight": emb,  # tied: one storage
        "layer.weight": torch.randn(8, 8, generator=g).to(torch.bfloat16),
        "layer.bias": torch.tensor([float("nan"), -0.0, 1.0]),
        "ids": torch.arange(5),
        "t": torch.randn(4, 6, generator=g).t(),  # not contiguous
    }


def _same(a: Any, b: Any) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(
            a.contiguous().reshape(-1).view(torch.uint8),
            b.contiguous().reshape(-1).view(torch.uint8),
        )
    )


@pytest.mark.parametrize("legacy", [False, True])
def test_convert_plain_and_legacy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], legacy: bool
) -> None:
    src = tmp_path / "model.bin"
    torch.save(_state(), src, _use_new_zipfile_serialization=not legacy)
    out = tmp_path / "model.safetensors"
    code, doc, err = run_envelope(["convert", "--json", str(src), str(out)], capsys)
    assert code == 0, err
    (c,) = doc["results"]
    assert c["format"] == ("pickle" if legacy else "pytorch-zip")
    assert c["picked"] is None and c["tensors"] == 5 and c["verified"]
    assert c["removed_shared"] == {"model.embed_tokens.weight": "lm_head.weight"}
    loaded = ft.load_file(out)
    state = _state()
    for name, tensor in loaded.items():
        assert _same(tensor, state[name]), name
    with fastst.safe_open(out, "pt") as f:
        assert f.metadata() == {"format": "pt", "model.embed_tokens.weight": "lm_head.weight"}
    # The reference reads it too.
    import safetensors.torch

    assert set(safetensors.torch.load_file(str(out))) == set(loaded)


def test_nested_state_dicts_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "trainer.ckpt"
    state = {"w": torch.ones(2), "step": 7}
    torch.save({"state_dict": state, "epoch": 3, "optimizer": {"lr": 0.1}}, src)
    code, doc, _ = run_envelope(
        ["convert", "--json", str(src), str(tmp_path / "a.safetensors")], capsys
    )
    (c,) = doc["results"]
    assert code == 0 and c["picked"] == "state_dict" and c["skipped"] == ["step"]
    both = tmp_path / "both.pt"
    torch.save({"student": {"w": torch.ones(2)}, "teacher": {"w": torch.zeros(2)}}, both)
    code, _, err = run(["convert", str(both), str(tmp_path / "b.safetensors")], capsys)
    assert code == 2 and "--key" in err and "'student'" in err
    code, doc, _ = run_envelope(
        ["convert", "--json", "--key", "teacher", str(both), str(tmp_path / "b.safetensors")],
        capsys,
    )
    assert code == 0 and doc["results"][0]["picked"] == "teacher"
    assert torch.equal(ft.load_file(tmp_path / "b.safetensors")["w"], torch.zeros(2))
    code, _, err = run(
        ["convert", "--key", "nope", str(both), str(tmp_path / "c.safetensors")], capsys
    )
    assert code == 2 and "no entry 'nope'" in err


class _Payload:
    """Runs ``touch MARKER`` when unpickled by a loader that runs code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def test_code_in_a_pickle_is_refused_and_never_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "pwned"
    src = tmp_path / "evil.pt"
    torch.save({"w": torch.zeros(2), "payload": _Payload(marker)}, src)
    out = tmp_path / "evil.safetensors"
    code, text, err = run(["convert", str(src), str(out)], capsys)
    assert code == 2 and text == "" and err.count("\n") == 1
    assert "refused by torch's restricted unpickler" in err and "GLOBAL" in err
    assert not marker.exists() and not out.exists()


def test_dtype_and_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "model.pt"
    torch.save(_state(), src)
    folder = tmp_path / "sharded"
    code, doc, _ = run_envelope(
        ["convert", "--json", "--dtype", "bf16", "--max-shard-size", "300", str(src), str(folder)],
        capsys,
    )
    assert code == 0
    (c,) = doc["results"]
    assert c["dtype"] == "bfloat16" and c["converted"] == 3  # emb, bias, t (layer is bf16)
    assert len(c["files"]) > 2 and c["output"].endswith(".index.json")
    loaded = ft.load_file(c["output"])
    assert loaded["ids"].dtype == torch.int64
    assert torch.equal(loaded["lm_head.weight"], _state()["lm_head.weight"].to(torch.bfloat16))


def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = tmp_path / "x.safetensors"
    fastst.numpy.save_file({"w": __import__("numpy").zeros(2)}, st)
    code, _, err = run(["convert", str(st), str(tmp_path / "y.safetensors")], capsys)
    assert code == 2 and "already a safetensors file" in err
    html = tmp_path / "page.bin"
    html.write_text("<html>nope</html>")
    code, _, err = run(["convert", str(html), str(tmp_path / "y.safetensors")], capsys)
    assert code == 2 and "HTML page" in err and "not a PyTorch checkpoint" in err
    src = tmp_path / "m.pt"
    torch.save({"w": torch.ones(1)}, src)
    code, _, err = run(["convert", str(src), str(st)], capsys)
    assert code == 2 and "--force" in err
    code, _, err = run(
        ["convert", "--dtype", "int3", str(src), str(tmp_path / "z.safetensors")], capsys
    )
    assert code == 2 and "unknown dtype" in err
    code, doc, _ = run_envelope(
        ["convert", "--json", str(tmp_path / "missing.pt"), str(tmp_path / "q")], capsys
    )
    assert code == 2 and doc["results"] == [] and len(doc["errors"]) == 1
