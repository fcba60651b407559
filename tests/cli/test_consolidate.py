"""``fastst consolidate IN OUT``: a DCP save's rank files become index + shards; errors exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import fastst
import fastst.numpy
import numpy as np
import pytest
from helpers.cli_files import run

torch = pytest.importorskip("torch")


def _rank_files(folder: Path) -> np.ndarray:
    """Two ranks' files of a (4, 3) tensor saved row-sharded, as DCP writes them."""
    from fastst._dcp.files import file_metadata

    whole = np.arange(12, dtype=np.float32).reshape(4, 3)
    folder.mkdir()
    for rank in (0, 1):
        part = whole[2 * rank : 2 * rank + 2]
        fastst.numpy.save_file(
            {"w": part, "b": np.ones(2, np.float32)} if rank == 0 else {"w": part},
            folder / f"shard-0000{rank + 1}-model-00001-of-00001.safetensors",
            metadata=file_metadata({"w": [2 * rank, 0], "b": [0]} if rank == 0 else {"w": [2, 0]}),
        )
    return whole


def test_consolidate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = _rank_files(tmp_path / "sharded")
    code, out, err = run(["consolidate", str(tmp_path / "sharded"), str(tmp_path / "out")], capsys)
    assert code == 0, err
    assert "2 tensors, 56 B, in 1 file and model.safetensors.index.json" in out
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == {
        "b": "model-00001-of-00001.safetensors",
        "w": "model-00001-of-00001.safetensors",
    }
    got = fastst.numpy.load_file(tmp_path / "out" / "model-00001-of-00001.safetensors")
    assert np.array_equal(got["w"], whole) and np.array_equal(got["b"], np.ones(2))


def test_consolidate_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run(["consolidate", str(tmp_path / "none"), str(tmp_path / "out")], capsys)
    assert code == 2 and "none" in err
    _rank_files(tmp_path / "sharded")
    (tmp_path / "sharded" / "shard-00001-model-00001-of-00001.safetensors").unlink()
    code, _out, err = run(["consolidate", str(tmp_path / "sharded"), str(tmp_path / "out")], capsys)
    assert code == 2 and "tensor 'w' of shape [4, 3]: its chunks hold 6 of its 12" in err, err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
