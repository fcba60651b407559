"""One rule set for an index against its shards, two sinks: the reader raises the first problem
that ``fastst verify`` lists, for the same broken checkpoints."""

from __future__ import annotations

import os

import fastst
import fastst.numpy
import fastst.tools.inspect
import numpy as np
import pytest
from fastst._sources.shard_rules import ShardProblem, Table, check_shards
from helpers.checkpoints import index_with

S1, S2, S3 = "s1.safetensors", "s2.safetensors", "s3.safetensors"
#: The rules of the index against its shards (verify's other findings are the shards' own).
INDEX_RULES = {
    "index-shape",
    "shard-path",
    "shard-missing",
    "shard-lacks-tensor",
    "shard-extra-tensor",
    "shard-duplicate-tensor",
}
GOOD = {"a": S1, "b": S1, "c": S2}

#: Broken checkpoints: the shards' contents, the index's weight_map, and the
#: (rule, shard) pairs verify lists, in order.
BROKEN = {
    "missing shard": (
        {S1: ["a", "b"], S2: ["c"]},
        {**GOOD, "d": S3},
        [("shard-missing", S3)],
    ),
    "tensor in the index, not in its shard": (
        {S1: ["a", "b"], S2: ["c"]},
        {**GOOD, "ghost": S1},
        [("shard-lacks-tensor", S1)],
    ),
    "extra tensor in a shard": (
        {S1: ["a", "b"], S2: ["c"]},
        {"a": S1, "c": S2},
        [("shard-extra-tensor", S1)],
    ),
    "tensor in two shards": (
        {S1: ["a", "b"], S2: ["a", "c"]},
        GOOD,
        [("shard-duplicate-tensor", S2)],
    ),
    "tensor moved to the shard the index does not name": (
        {S1: ["b"], S2: ["a", "c"]},
        GOOD,
        [("shard-lacks-tensor", S1), ("shard-extra-tensor", S2)],
    ),
    "path outside the folder": (
        {S1: ["a", "b"], S2: ["c"]},
        {**GOOD, "c": "../s2.safetensors"},
        [("shard-path", None)],
    ),
    "absolute path": (
        {S1: ["a", "b"], S2: ["c"]},
        {**GOOD, "b": "/etc/passwd"},
        [("shard-path", None), ("shard-extra-tensor", S1)],
    ),
    "not a file name": (
        {S1: ["a", "b"], S2: ["c"]},
        {**GOOD, "c": 7},
        [("index-shape", None)],
    ),
    "several at once": (
        {S1: ["a", "b"], S2: ["c", "a"]},
        {"a": S1, "ghost": S1, "d": S3, "x": "../x.safetensors", "c": S2},
        [
            ("shard-path", None),
            ("shard-lacks-tensor", S1),
            ("shard-missing", S3),
            ("shard-extra-tensor", S1),
            ("shard-duplicate-tensor", S2),
        ],
    ),
}


def _checkpoint(folder, shards, weight_map):
    folder.mkdir()
    for shard, names in shards.items():
        tensors = {n: np.full(2, i, np.float32) for i, n in enumerate(names)}
        fastst.numpy.save_file(tensors, folder / shard)
    return index_with(folder, weight_map)


def _collected(folder, weight_map):
    """Every problem of the rule set, collected, the tables read from the shards' files."""

    def table(shard, _placed):
        path = folder / shard
        if not path.exists():
            return Table.MISSING
        with fastst.safe_open(path, "np") as f:
            return f.keys()

    problems = []
    check_shards(str(folder), weight_map, table, problems.append)
    return problems


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_reader_raises_the_first_problem_verify_lists(tmp_path, case) -> None:
    shards, weight_map, expected = BROKEN[case]
    index = _checkpoint(tmp_path / "ckpt", shards, weight_map)

    report = fastst.tools.inspect.verify_checkpoint(index)
    listed = [(f["rule"], f["shard"]) for f in report["findings"]]
    assert listed == expected and not report["accepted"]
    problems = _collected(index.parent, weight_map)
    assert [(p.rule, p.shard) for p in problems] == listed  # the same walk, collected

    with pytest.raises(fastst.ShardIndexError) as info:
        fastst.safe_open(index, "np")
    first, first_finding = problems[0], report["findings"][0]
    assert info.value.rule == first_finding["rule"]
    assert str(info.value) == f"{info.value.filename}: {first.message}"
    assert info.value.tensor == first.tensor
    if first.shard is not None and first.rule != "shard-missing":  # the shard's file at fault
        assert info.value.filename == str(index.parent / first.shard)
    else:
        assert os.path.basename(info.value.filename) == index.name
    named = [first.shard] if first.rule == "shard-missing" else first.tensors[:5]
    assert all(repr(name) in str(info.value) for name in named)


def test_the_reader_keeps_its_messages(tmp_path) -> None:
    # The texts the reader raised before its rules moved to one walk.
    shards, weight_map, _ = BROKEN["tensor in the index, not in its shard"]
    index = _checkpoint(tmp_path / "lacks", shards, weight_map)
    with pytest.raises(fastst.ShardIndexError) as info:
        fastst.safe_open(index, "np")
    assert str(info.value).endswith(
        "s1.safetensors: tensors the index places in this shard are not in it: ['ghost']"
    )
    shards, weight_map, _ = BROKEN["missing shard"]
    index = _checkpoint(tmp_path / "missing", shards, weight_map)
    with pytest.raises(fastst.ShardIndexError) as info:
        fastst.safe_open(index, "np")
    assert str(info.value).endswith(
        "model.safetensors.index.json: shard 's3.safetensors' listed in the index is missing"
    )
    shards, weight_map, _ = BROKEN["path outside the folder"]
    index = _checkpoint(tmp_path / "outside", shards, weight_map)
    with pytest.raises(fastst.ShardIndexError) as info:
        fastst.safe_open(index, "np")
    assert str(info.value).endswith(
        "model.safetensors.index.json: tensor 'c': "
        "shard '../s2.safetensors' is outside the index's folder"
    )
    assert info.value.tensor == "c"


def test_a_duplicate_is_raised_as_itself(tmp_path) -> None:
    # One rule, two sinks: verify lists shard-duplicate-tensor and the reader
    # raises it, naming both shards.
    shards, weight_map, _ = BROKEN["tensor in two shards"]
    index = _checkpoint(tmp_path / "ckpt", shards, weight_map)
    (dup,) = _collected(index.parent, weight_map)
    assert dup == ShardProblem(
        "shard-duplicate-tensor",
        dup.message,
        shard=S2,
        tensors=("a",),
        tensor="a",
        others=(S1,),
        placed=S1,
    )
    with pytest.raises(fastst.ShardIndexError) as info:
        fastst.safe_open(index, "np")
    assert info.value.rule == "shard-duplicate-tensor" and info.value.tensor == "a"
    assert "does not place" in str(info.value) and repr(S1) in str(info.value)


def test_clean_checkpoint_has_no_problem(tmp_path) -> None:
    shards, _, _ = BROKEN["missing shard"]
    index = _checkpoint(tmp_path / "ckpt", shards, GOOD)
    assert _collected(index.parent, GOOD) == []
    assert fastst.tools.inspect.verify_checkpoint(index)["findings"] == []
    with fastst.safe_open(index, "np") as f:
        assert f.keys() == ["a", "b", "c"]


def test_every_rule_of_the_set_is_exercised() -> None:
    seen = {rule for _, _, expected in BROKEN.values() for rule, _ in expected}
    assert seen == INDEX_RULES
