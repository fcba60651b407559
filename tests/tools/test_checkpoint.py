"""Sharded checkpoints as wholes in every subcommand: an index file, the
folder holding it; totals, per-shard hashes and one checkpoint digest, and
`verify` checking the index against its shards."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import fastst
import fastst.numpy
import fastst.tools.inspect
import fastst.tools.inspect as fi
import numpy as np
import pytest
from helpers.checkpoints import INSIDE, MALFORMED, OUTSIDE, checkpoint_naming
from helpers.cli_files import run, run_envelope

pytestmark = pytest.mark.slow


def _tensors() -> Dict[str, np.ndarray]:
    return {
        "a.weight": np.arange(64, dtype=np.float32).reshape(8, 8),
        "b.weight": np.ones((16, 4), np.float16),
        "c.ids": np.arange(32, dtype=np.int64),
    }


def _checkpoint(folder: Path) -> Path:
    index = fastst.numpy.save_sharded(
        _tensors(), folder, max_shard_size=400, metadata={"format": "np", "modelspec.title": "T"}
    )
    return Path(index)


def _index(path: Path) -> Dict[str, Any]:
    return json.loads(path.read_text())


def _rewrite(path: Path, index: Dict[str, Any]) -> None:
    path.write_text(json.dumps(index))


def test_inspect_index_and_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = _checkpoint(tmp_path / "ckpt")
    shards = sorted(set(_index(index)["weight_map"].values()))
    assert len(shards) >= 2
    for target in (index, index.parent):
        code, doc, _ = run_envelope(["inspect", "--json", "--tensors", str(target)], capsys)
        assert code == 0
        (info,) = doc["results"]
        assert info["kind"] == "checkpoint" and info["path"] == str(index)
        assert info["tensors"] == 3
        assert info["parameters"] == sum(t.size for t in _tensors().values())
        assert info["data_len"] == sum(t.nbytes for t in _tensors().values())
        sizes = sum((index.parent / s).stat().st_size for s in shards)
        assert info["file_len"] == sizes + index.stat().st_size
        assert sorted(s["file"] for s in info["shards"]) == shards
        assert {r["name"]: r["shard"] for r in info["table"]} == _index(index)["weight_map"]
        assert info["metadata"] == {"format": "np", "modelspec.title": "T"}
        assert info["index_metadata"]["total_size"] == info["data_len"]
    code, out, _ = run(["inspect", "--tensors", str(index.parent)], capsys)
    assert code == 0 and f"checkpoint   {len(shards)} shards" in out
    assert "shards       model-00001-of-" in out and "shard" in out.split("name")[1]
    # Tensor values through the index.
    code, out, _ = run(["inspect", "--tensor", "c.ids", str(index)], capsys)
    assert code == 0 and "31" in out


def test_folder_lists_shards_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = _checkpoint(tmp_path / "ckpt")
    loose = tmp_path / "ckpt" / "extra.safetensors"
    fastst.numpy.save_file({"x": np.zeros(1, np.float32)}, loose)
    inputs = list(fi.iter_inputs([tmp_path]))
    assert inputs == [("checkpoint", str(index)), ("file", str(loose))]


def test_hash_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = _checkpoint(tmp_path / "ckpt")
    code, doc, _ = run_envelope(["hash", "--json", "--tensors", str(index)], capsys)
    assert code == 0
    (h,) = doc["results"]
    listing = []
    for path in sorted(index.parent.iterdir(), key=lambda p: p.name.encode()):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        listing.append(f"{digest}  {path.name}\n")
    assert h["checkpoint_sha256"] == hashlib.sha256("".join(listing).encode()).hexdigest()
    for shard in h["shards"]:
        assert (
            shard["sha256"]
            == hashlib.sha256((index.parent / shard["file"]).read_bytes()).hexdigest()
        )
    assert set(h["tensors"]) == set(_tensors())
    digest = hashlib.sha256(_tensors()["c.ids"].tobytes()).hexdigest()
    assert h["tensors"]["c.ids"] == digest
    code, out, _ = run(["hash", str(index.parent)], capsys)
    assert code == 0 and f"checkpoint     {h['checkpoint_sha256']}" in out
    # Any changed byte changes the digest.
    shard = index.parent / h["shards"][0]["file"]
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 1
    shard.write_bytes(bytes(raw))
    _, doc, _ = run_envelope(["hash", "--json", str(index)], capsys)
    assert doc["results"][0]["checkpoint_sha256"] != h["checkpoint_sha256"]


def test_meta_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = _checkpoint(tmp_path / "ckpt")
    code, doc, _ = run_envelope(["meta", "--json", str(index)], capsys)
    assert code == 0
    (m,) = doc["results"]
    assert m["kind"] == "checkpoint" and m["metadata"]["modelspec.title"] == "T"
    assert "total_size" in m["index_metadata"]


def _verify(capsys: pytest.CaptureFixture[str], index: Path) -> Any:
    code, doc, _ = run_envelope(["verify", "--json", str(index)], capsys)
    (report,) = doc["results"]
    return code, report


def test_verify_clean_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = _checkpoint(tmp_path / "ckpt")
    code, report = _verify(capsys, index)
    assert code == 0 and report["accepted"] and report["complete"]
    assert report["findings"] == [] and report["tensors"] == 3
    code, out, _ = run(["verify", str(index)], capsys)
    assert code == 0 and "OK, no findings" in out


def test_verify_index_against_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = _checkpoint(tmp_path / "ckpt")
    original = _index(index)
    shards = sorted(set(original["weight_map"].values()))

    def rules(index_doc: Dict[str, Any]) -> Any:
        _rewrite(index, index_doc)
        code, report = _verify(capsys, index)
        return code, report, {f["rule"] for f in report["findings"]}

    # A shard the index names is missing.
    bad = json.loads(json.dumps(original))
    bad["weight_map"]["ghost"] = "model-00099-of-00099.safetensors"
    code, report, found = rules(bad)
    # A checkpoint whose index disagrees with its shards is malformed: inconclusive.
    assert code == 2 and "shard-missing" in found and not report["accepted"]
    assert report["inconclusive"] and not report["fails"]
    # The index places a tensor in a shard that lacks it.
    bad = json.loads(json.dumps(original))
    bad["weight_map"]["nowhere"] = shards[0]
    code, report, found = rules(bad)
    assert "shard-lacks-tensor" in found
    (f,) = [f for f in report["findings"] if f["rule"] == "shard-lacks-tensor"]
    assert f["shard"] == shards[0] and f["tensor"] == "nowhere"
    # A shard holds a tensor the index does not list.
    bad = json.loads(json.dumps(original))
    dropped = "b.weight"  # shares its shard with a.weight
    del bad["weight_map"][dropped]
    _, _, found = rules(bad)
    assert "shard-extra-tensor" in found
    # A shard outside the folder, a wrong total, broken JSON and shape.
    bad = json.loads(json.dumps(original))
    bad["weight_map"]["a.weight"] = "../elsewhere.safetensors"
    _, _, found = rules(bad)
    assert "shard-path" in found
    bad = json.loads(json.dumps(original))
    bad["metadata"]["total_size"] += 4
    code, report, found = rules(bad)
    assert found == {"index-total-size"} and code == 1 and report["accepted"]
    index.write_text("{not json")
    code, report = _verify(capsys, index)
    assert {f["rule"] for f in report["findings"]} == {"index-json"} and code == 2
    index.write_text('{"weight_map": []}')
    code, report = _verify(capsys, index)
    assert {f["rule"] for f in report["findings"]} == {"index-shape"}


def test_verify_tensor_in_two_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    fastst.numpy.save_file({"w": np.zeros(2, np.float32)}, folder / "one.safetensors")
    fastst.numpy.save_file(
        {"w": np.ones(2, np.float32), "v": np.ones(1, np.float32)}, folder / "two.safetensors"
    )
    index = folder / "model.safetensors.index.json"
    _rewrite(
        index, {"metadata": {}, "weight_map": {"w": "one.safetensors", "v": "two.safetensors"}}
    )
    code, report = _verify(capsys, index)
    (dup,) = [f for f in report["findings"] if f["rule"] == "shard-duplicate-tensor"]
    assert dup["shard"] == "two.safetensors" and dup["tensor"] == "w" and dup["severity"] == "high"
    assert code == 2 and dup["verdict"] == "malformed"
    code, out, _ = run(["verify", str(folder)], capsys)
    assert "shard-duplicate-tensor" in out and 'two.safetensors: tensor "w"' in out


def test_shard_findings_carry_the_shard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = _checkpoint(tmp_path / "ckpt")
    shard = index.parent / sorted(set(_index(index)["weight_map"].values()))[-1]
    with open(shard, "ab") as fh:
        fh.write(b"\x80\x04\x95junk")
    code, report = _verify(capsys, index)
    assert code == 1 and not report["accepted"]
    assert {f["shard"] for f in report["findings"]} == {shard.name}
    assert "trailing-bytes" in {f["rule"] for f in report["findings"]}


@pytest.mark.parametrize("command", ["inspect", "hash", "meta"])
def test_broken_index_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_text("<html>")
    code, doc, err = run_envelope([command, "--json", str(index)], capsys)
    assert code == 2 and doc["results"] == []
    (error,) = doc["errors"]
    assert error["rule"] == "index-json" and err.count("\n") == 1


def test_sarif_points_at_the_shard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import jsonschema
    from helpers.cli_files import sarif_schema

    index = _checkpoint(tmp_path / "ckpt")
    shard = index.parent / sorted(set(_index(index)["weight_map"].values()))[-1]
    with open(shard, "ab") as fh:
        fh.write(b"junk")
    code, out, _ = run(["verify", "--format", "sarif", str(index)], capsys)
    log = json.loads(out)
    jsonschema.Draft4Validator(sarif_schema()).validate(log)
    run_ = log["runs"][0]
    uris = [a["location"]["uri"] for a in run_["artifacts"]]
    assert len(uris) == 1 + len(set(_index(index)["weight_map"].values()))
    (result,) = [r for r in run_["results"] if r["ruleId"] == "trailing-bytes"]
    where = result["locations"][0]["physicalLocation"]["artifactLocation"]
    assert where["uri"] == uris[where["index"]] and where["uri"].endswith(shard.name)
    assert result["properties"]["shard"] == shard.name and code == 2


# One rule for what an index may name, in every command ---------------------


@pytest.mark.parametrize("shard", OUTSIDE + MALFORMED)
def test_every_command_refuses_a_shard_outside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shard: str
) -> None:
    index = checkpoint_naming(tmp_path, shard)
    for command in ("inspect", "hash", "meta"):
        for target in (index, index.parent):
            code, doc, err = run_envelope([command, "--json", str(target)], capsys)
            assert code == 2 and doc["results"] == [], (command, doc)
            assert [e["rule"] for e in doc["errors"]] == ["shard-path"] and err.count("\n") == 1
            assert "do-not-print" not in json.dumps(doc) + err
    code, out, _ = run(["meta", str(index)], capsys)
    assert code == 2 and "do-not-print" not in out
    code, report = _verify(capsys, index)
    assert code == 1 and not report["accepted"] and not report["complete"]
    assert [(f["rule"], f["tensor"]) for f in report["findings"]] == [("shard-path", "w")]
    code, doc, _ = run_envelope(["diff", "--json", str(index), str(index)], capsys)
    assert code == 2 and [e["rule"] for e in doc["errors"]] == ["shard-path"]
    with pytest.raises(fastst.ShardIndexError) as info:
        fi.checkpoint_metadata(index)
    assert info.value.rule == "shard-path"


@pytest.mark.parametrize("shard", INSIDE)
def test_every_command_accepts_a_shard_inside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shard: str
) -> None:
    index = checkpoint_naming(tmp_path, shard)
    for target in (index, index.parent):
        assert list(fi.iter_inputs([target])) == [("checkpoint", str(index))]
        code, doc, _ = run_envelope(["inspect", "--json", str(target)], capsys)
        assert code == 0 and [s["file"] for s in doc["results"][0]["shards"]] == [shard]
        code, doc, _ = run_envelope(["hash", "--json", "--check", str(target)], capsys)
        assert code == 0 and doc["results"][0]["shards"][0]["file"] == shard
        code, doc, _ = run_envelope(["meta", "--json", str(target)], capsys)
        assert code == 0 and doc["results"][0]["metadata"] == {"format": "np"}
        code, report = _verify(capsys, index)
        assert code == 0 and report["accepted"] and report["findings"] == []
    code, doc, _ = run_envelope(["diff", "--json", str(index), str(index)], capsys)
    assert code == 0


def test_an_index_naming_outside_files_hides_none(tmp_path: Path) -> None:
    # A folder scan lists every file an index does not claim as its own: an
    # index naming a file of another folder leaves that file listed.
    index = _checkpoint(tmp_path / "a")
    other = tmp_path / "b" / "x.safetensors"
    other.parent.mkdir()
    fastst.numpy.save_file({"x": np.zeros(1, np.float32)}, other)
    bad = _index(index)
    bad["weight_map"]["x"] = "../b/x.safetensors"
    _rewrite(index, bad)
    assert list(fi.iter_inputs([tmp_path])) == [("checkpoint", str(index)), ("file", str(other))]


# Index files are read up to a cap ------------------------------------------


def test_every_command_refuses_an_index_over_the_cap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = tmp_path / "model.safetensors.index.json"
    with open(index, "wb") as fh:
        fh.truncate(1 << 30)  # sparse: costs no disk
    for command in ("inspect", "hash", "meta"):
        for target in (index, tmp_path):
            code, doc, err = run_envelope([command, "--json", str(target)], capsys)
            assert code == 2 and [e["rule"] for e in doc["errors"]] == ["index-over-cap"]
            assert err.count("\n") == 1 and "FASTST_INDEX_CAP" in err
    code, report = _verify(capsys, index)
    assert code == 2 and [f["rule"] for f in report["findings"]] == ["index-over-cap"]
    assert "FASTST_INDEX_CAP" in report["findings"][0]["message"]
    code, doc, _ = run_envelope(["diff", "--json", str(index), str(index)], capsys)
    assert code == 2 and [e["rule"] for e in doc["errors"]] == ["index-over-cap"]


def test_an_index_that_is_a_fifo_never_hangs(tmp_path: Path) -> None:
    fifo = tmp_path / "model.safetensors.index.json"
    os.mkfifo(fifo)
    for command in ("inspect", "verify", "hash", "meta"):
        result = subprocess.run(
            [sys.executable, "-m", "fastst", command, str(fifo)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2 and "not a regular file" in result.stderr, command
        assert result.stderr.count("\n") == 1


def test_iter_inputs_lists_a_folder_sorted(tmp_path):
    """Files found under a folder come sorted by name, whatever order the
    filesystem lists them in (mutant: ``files.sort()`` dropped)."""
    names = [f"w{i:02d}.safetensors" for i in range(16)]
    random.Random(3).shuffle(names)
    for name in names:  # created in a shuffled order
        fastst.numpy.save_file({"x": np.zeros(1, np.float32)}, tmp_path / name)
    got = list(fastst.tools.inspect.iter_inputs([tmp_path]))
    assert got == [("file", str(tmp_path / n)) for n in sorted(names)]


def test_checkpoint_metadata_rejects_an_index_of_the_wrong_shape(tmp_path):
    """An index that is JSON but not ``{"weight_map": {...}}`` is refused
    with rule index-shape (mutant: the check dropped, which fails later
    with an unrelated error)."""
    for bad in ([1, 2], {"weight_map": ["a.safetensors"]}, {"metadata": {}}):
        index = tmp_path / "model.safetensors.index.json"
        index.write_text(json.dumps(bad))
        with pytest.raises(fastst.SafetensorError) as err:
            fastst.tools.inspect.checkpoint_metadata(index)
        assert err.value.rule == "index-shape"
        assert "weight_map" in str(err.value)


def _shards(folder, placed, stored):
    """Writes shards (``stored``: shard -> tensor names) and an index
    (``placed``: tensor -> shard); returns the index path."""
    for shard, names in stored.items():
        fastst.numpy.save_file(
            {n: np.full(3, i, dtype=np.float32) for i, n in enumerate(names)}, folder / shard
        )
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": placed}))
    return index


def test_verify_checkpoint_counts_checked_values(tmp_path):
    """``values_checked`` of a checkpoint is the sum over its shards (mutant:
    the count started at 1)."""
    index = _shards(
        tmp_path,
        {"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"},
        {"s1.safetensors": ["a", "b"], "s2.safetensors": ["c"]},
    )
    report = fastst.tools.inspect.verify_checkpoint(index, values=True)
    per_shard = [
        fastst.tools.inspect.verify_file(tmp_path / s, values=True)["values_checked"]
        for s in ("s1.safetensors", "s2.safetensors")
    ]
    assert report["values_checked"] == sum(per_shard) == 3  # tensors whose values were read
    assert fastst.tools.inspect.verify_checkpoint(index)["values_checked"] is None


def test_verify_checkpoint_names_the_other_shard_of_a_duplicate(tmp_path):
    """A tensor stored in two shards: each shard's finding names the *other*
    shard as also holding it (mutant: the shard itself named)."""
    index = _shards(
        tmp_path,
        {"a": "s1.safetensors", "b": "s2.safetensors"},
        {"s1.safetensors": ["a"], "s2.safetensors": ["a", "b"]},
    )
    report = fastst.tools.inspect.verify_checkpoint(index)
    dups = [f for f in report["findings"] if f["rule"] == "shard-duplicate-tensor"]
    assert dups, report["findings"]
    for finding in dups:
        shard = finding["shard"]
        other = "s1.safetensors" if shard.endswith("s2.safetensors") else "s2.safetensors"
        also = finding["message"].split("also stored in", 1)[1].split(";", 1)[0]
        assert other in also and shard.rsplit("/", 1)[-1] not in also


@pytest.mark.parametrize(
    "content", [b"{not json", b"\xff\xfe", b'{"weight_map": []}', b"[]"], ids=str
)
def test_folder_with_an_unreadable_index(tmp_path, content):
    """A folder whose only index is not JSON, not UTF-8 or has no
    ``weight_map`` object opens that index (which then reports what is wrong
    with it) instead of failing while listing the shards it names (mutants:
    ``None`` instead of an empty set of shard names)."""
    (tmp_path / "model.safetensors.index.json").write_bytes(content)
    with pytest.raises(fastst.SafetensorError) as err:
        fastst.safe_open(tmp_path, "np")
    assert "model.safetensors.index.json" in str(err.value)
