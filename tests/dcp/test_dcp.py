"""torch.distributed.checkpoint on fastst, across gloo processes: save, load, reshard, consolidate.

The slow tests spawn 2 or 3 local processes (gloo over loopback) that save
DTensors (``Shard(0)``, ``Shard(1)``, ``Replicate``, uneven, FSDP2), BF16 /
F32 / F8 and tied weights with ``fastst.torch.dcp.StorageWriter`` and with
torch's ``HuggingFaceStorageWriter``, load each with the other's reader,
load into another world size and placement, and write what they saw to
JSON; the assertions run here. One test kills a rank in the middle of a
save. The quick tests check the commit protocol, the chunk table's rules
and the consolidation's assembly in this process.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Dict, List

import fastst
import numpy as np
import pytest
import torch
import torch.distributed as dist
from fastst._dcp import commit as dcp_commit
from fastst._dcp import consolidate as C
from fastst._dcp.files import Chunk, Tensor, chunk_table, file_metadata
from fastst._read import pool as read_pool
from fastst.torch import dcp as fdcp
from fastst.torch import save_file
from helpers.dcp_states import (
    MAPPING,
    bits,
    differ,
    full_tensors,
    local_bytes,
    state_dict,
    tensors_of,
)
from helpers.ranks import run_ranks

pytestmark = [
    pytest.mark.skipif(
        not (dist.is_available() and dist.is_gloo_available()), reason="torch without gloo"
    ),
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning"),
]

TIME_LIMIT = 240  # seconds for one spawned group


class CountingReader(fdcp.StorageReader):
    """The reader, counting the bytes each read of a chunk asks for."""

    asked = 0

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        meta = super().read_metadata(*args, **kwargs)
        self._files = {p: _Counting(raw, self) for p, raw in self._files.items()}
        return meta


class _Counting:
    def __init__(self, raw: Any, owner: CountingReader) -> None:
        self._raw = raw
        self._owner = owner

    def read_into(self, name: str, out: Any) -> None:
        self._owner.asked += out.nbytes
        self._raw.read_into(name, out)

    def read_slice_into(self, name: str, dims: Any, out: Any) -> None:
        self._owner.asked += out.nbytes
        self._raw.read_slice_into(name, dims, out)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


# scenarios (in the spawned processes) ------------------------------------------------


def _fsdp2(root: str) -> Dict[str, Any]:
    """An FSDP2 model on the CPU saved, then loaded into a fresh one."""
    from torch.distributed.fsdp import fully_shard

    def model() -> torch.nn.Module:
        torch.manual_seed(3)
        m = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.Linear(10, 4))
        fully_shard(m[0])
        fully_shard(m[1])
        fully_shard(m)
        return m

    saved = model()
    import torch.distributed.checkpoint as dcp

    dcp.save(saved.state_dict(), storage_writer=fdcp.StorageWriter(root, save_distributed=True))
    fresh = model()
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    sd = fresh.state_dict()
    dcp.load(sd, storage_reader=fdcp.StorageReader(root))
    fresh.load_state_dict(sd)
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(1))
    same = torch.equal(saved(x), fresh(x))
    return {"same_output": same, "differ": differ(fresh.state_dict(), saved.state_dict())}


def _tiny_llama(root: str) -> Dict[str, Any]:
    """A tiny Llama with tied embeddings, its weights as Shard(0) DTensors,
    saved with consolidation: the parent loads it with from_pretrained."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    model = tiny_llama()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    sd = {
        k: distribute_tensor(v.detach(), mesh, [Shard(0)], src_data_rank=None)
        for k, v in model.state_dict().items()
    }
    if "lm_head.weight" in sd:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    writer = fdcp.StorageWriter(root, save_distributed=True, enable_consolidation=True)
    dcp.save(sd, storage_writer=writer)
    if dist.get_rank() == 0:
        model.config.save_pretrained(root)
    return {"saved": sorted(sd)}


def tiny_llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(11)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).eval()


def _two_ranks(root: str) -> Dict[str, Callable[[], Dict[str, Any]]]:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader, HuggingFaceStorageWriter

    ours = os.path.join(root, "ours")
    theirs = os.path.join(root, "theirs")

    def save() -> Dict[str, Any]:
        writer = fdcp.StorageWriter(
            ours,
            fqn_to_index_mapping=MAPPING,
            save_distributed=True,
            enable_consolidation=True,
            thread_count=2,
        )
        dcp.save(state_dict("saved"), storage_writer=writer)
        dcp.save(
            state_dict("saved"),
            storage_writer=HuggingFaceStorageWriter(
                theirs, fqn_to_index_mapping=MAPPING, save_distributed=True
            ),
        )
        return {}

    def load(folder: str, reader: Any) -> Dict[str, Any]:
        got = state_dict("saved", empty=True)
        dcp.load(got, storage_reader=reader)
        return {"differ": differ(got, state_dict("saved"))}

    def async_save() -> Dict[str, Any]:
        where = os.path.join(root, "async")
        writer = fdcp.StorageWriter(where, save_distributed=True)
        dcp.async_save(state_dict("saved"), storage_writer=writer).result()
        return load(where, fdcp.StorageReader(where))

    def on_every_rank() -> Dict[str, Any]:
        out = os.path.join(root, "every")
        fdcp.consolidate_on_every_rank(os.path.join(ours, "sharded"), out, MAPPING)
        return {}

    return {
        "save": save,
        "load_ours": lambda: load(ours, fdcp.StorageReader(os.path.join(ours, "sharded"))),
        "we_read_theirs": lambda: load(theirs, fdcp.StorageReader(theirs, thread_count=3)),
        "they_read_ours": lambda: load(
            ours, HuggingFaceStorageReader(os.path.join(ours, "sharded"))
        ),
        "async_save": async_save,
        "every_rank": on_every_rank,
        "fsdp2": lambda: _fsdp2(os.path.join(root, "fsdp2")),
        "llama": lambda: _tiny_llama(os.path.join(root, "llama")),
    }


def _three_ranks(root: str) -> Dict[str, Callable[[], Dict[str, Any]]]:
    import torch.distributed.checkpoint as dcp

    def reshard(folder: str) -> Dict[str, Any]:
        got = state_dict("other", empty=True)
        reader = CountingReader(folder)
        dcp.load(got, storage_reader=reader)
        return {
            "differ": differ(got, state_dict("other")),
            "asked": reader.asked,
            "local": local_bytes(got),
        }

    def on_every_rank() -> Dict[str, Any]:
        src = os.path.join(root, "ours", "sharded")
        fdcp.consolidate_on_every_rank(src, os.path.join(root, "every3"), MAPPING)
        return {}

    return {
        "reshard_ours": lambda: reshard(os.path.join(root, "ours", "sharded")),
        "reshard_theirs": lambda: reshard(os.path.join(root, "theirs")),
        "every_rank": on_every_rank,
    }


def _killed(root: str) -> Dict[str, Callable[[], Dict[str, Any]]]:
    """A first save, then a second one whose rank 1 is killed after writing
    part of its tensors; rank 0 reports the files as they were between."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import DefaultSavePlanner

    folder = os.path.join(root, "killed")

    class Killing(DefaultSavePlanner):
        calls = 0

        def resolve_data(self, write_item: Any) -> Any:
            Killing.calls += 1
            if dist.get_rank() == 1 and Killing.calls == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            return super().resolve_data(write_item)

    def run() -> Dict[str, Any]:
        dcp.save(
            state_dict("saved"), storage_writer=fdcp.StorageWriter(folder, save_distributed=True)
        )
        dist.barrier()
        before = hashes(folder) if dist.get_rank() == 0 else {}
        if dist.get_rank() == 0:
            Path(root, "before.json").write_text(json.dumps(before))
        changed = {
            k: v if v.dtype == torch.float8_e4m3fn else v * 2
            for k, v in state_dict("saved").items()
        }
        try:
            dcp.save(
                changed,
                storage_writer=fdcp.StorageWriter(folder, save_distributed=True, thread_count=1),
                planner=Killing(),
            )
        except Exception as exc:  # noqa: BLE001 - what rank 0 sees
            return {"raised": type(exc).__name__}
        return {"raised": None}

    return {"killed": run}


def hashes(folder: str) -> Dict[str, str]:
    """SHA-256 of each file a reader lists in ``folder``."""
    out = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            out[name] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return out


SCENARIOS = {"two": _two_ranks, "three": _three_ranks, "killed": _killed}


def _worker(rank: int, world: int, port: int, which: str, root: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if sys.platform.startswith("linux"):
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    results: Dict[str, Any] = {}
    try:
        for name, scenario in SCENARIOS[which](root).items():
            try:
                results[name] = scenario()
            except Exception:  # noqa: BLE001 - reported to the test
                results[name] = {"crashed": traceback.format_exc()}
        Path(root, f"{which}-rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def spawn(which: str, world: int, root: Path) -> List[Any]:
    """Runs the scenarios ``which`` on ``world`` ranks; each rank's results
    (None for a rank that died), and the exit codes."""
    return run_ranks(_worker, world, (which, str(root)), root, which, TIME_LIMIT)


def ok(result: Dict[str, Any]) -> Dict[str, Any]:
    assert "crashed" not in result, result["crashed"]
    return result


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    root = tmp_path_factory.mktemp("dcp")
    results, codes = spawn("two", 2, root)
    assert codes == [0, 0]
    return {"root": root, "results": results}


# the spawned tests ---------------------------------------------------------------


@pytest.mark.slow
def test_two_ranks_save_load_interop(saved: Dict[str, Any]) -> None:
    for res in saved["results"]:
        ok(res["save"])
        assert ok(res["load_ours"])["differ"] == []
        assert ok(res["we_read_theirs"])["differ"] == []
        assert ok(res["they_read_ours"])["differ"] == []
        assert ok(res["async_save"])["differ"] == []
        ok(res["every_rank"])
    sharded = saved["root"] / "ours" / "sharded"
    # The layout of torch's writer, nothing else left behind.
    assert sorted(os.listdir(sharded)) == sorted(os.listdir(saved["root"] / "theirs"))
    assert sorted(os.listdir(sharded)) == [
        f"shard-0000{r}-model-0000{i}-of-00002.safetensors" for r in (1, 2) for i in (1, 2)
    ]


@pytest.mark.slow
def test_fsdp2_on_cpu(saved: Dict[str, Any]) -> None:
    for res in saved["results"]:
        got = ok(res["fsdp2"])
        assert got["same_output"] and got["differ"] == []


@pytest.mark.slow
def test_consolidation_equals_torchs(saved: Dict[str, Any], tmp_path: Path) -> None:
    from torch.distributed.checkpoint._consolidate_hf_safetensors import (
        consolidate_safetensors_files,
    )

    root = saved["root"]
    (tmp_path / "torch").mkdir()
    consolidate_safetensors_files(str(root / "ours" / "sharded"), str(tmp_path / "torch"), MAPPING)
    theirs = tensors_of(tmp_path / "torch")
    assert tensors_of(root / "ours") == theirs  # consolidated by dcp.save
    assert tensors_of(root / "every") == theirs  # split over 2 ranks
    # and the whole tensors are the ones saved
    want = full_tensors()
    for name, entry in theirs.items():
        if name == "index":
            continue
        for k, (_dtype, _shape, data) in entry["tensors"].items():
            assert data == bits(want[k]).numpy().tobytes(), k


@pytest.mark.slow
def test_three_ranks_reshard_read_each_byte_once(saved: Dict[str, Any]) -> None:
    results, codes = spawn("three", 3, saved["root"])
    assert codes == [0, 0, 0]
    for res in results:
        for name in ("reshard_ours", "reshard_theirs"):
            got = ok(res[name])
            assert got["differ"] == [], name
            # exactly this rank's part of each tensor was read, each byte once
            assert got["asked"] == got["local"], (name, got)
        ok(res["every_rank"])
    # the consolidation split over 3 ranks (one has no file to write) equals the one by dcp.save
    assert tensors_of(saved["root"] / "every3") == tensors_of(saved["root"] / "ours")


@pytest.mark.slow
def test_consolidated_loads_with_transformers(saved: Dict[str, Any]) -> None:
    from transformers import AutoModelForCausalLM

    folder = saved["root"] / "llama"
    for res in saved["results"]:
        ok(res["llama"])
    model = tiny_llama()
    loaded = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    ids = torch.tensor([[1, 5, 9, 2, 33, 63]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)


@pytest.mark.slow
def test_a_rank_killed_mid_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    results, codes = spawn("killed", 2, tmp_path)
    assert codes[1] == -signal.SIGKILL
    assert results[1] is None
    assert results[0]["killed"]["raised"] is not None
    folder = tmp_path / "killed"
    before = json.loads((tmp_path / "before.json").read_text())
    # the previous checkpoint, byte for byte; the staging folder aside
    now = hashes(str(folder))
    assert now == before
    stages = [e for e in os.listdir(folder) if e.endswith(".fastst-tmp")]
    assert len(stages) == 1
    # the previous checkpoint still loads, and whole
    table = chunk_table(dcp_commit.open_files(dcp_commit.checkpoint_files(str(folder))))
    assert sorted(table) == sorted(full_tensors())
    # the next save clears the unfinished one
    import torch.distributed.checkpoint as dcp

    dcp.save(
        {"x": torch.ones(2)},
        storage_writer=fdcp.StorageWriter(folder, save_distributed=True),
        no_dist=True,
    )
    assert not [e for e in os.listdir(folder) if e.endswith(".fastst-tmp")]
    assert sorted(os.listdir(folder)) == ["shard-00001-model-00001-of-00001.safetensors"]


@pytest.mark.slow
def test_importing_fastst_torch_leaves_dcp_unimported() -> None:
    code = (
        "import sys, fastst.torch as t\n"
        "assert 'torch.distributed.checkpoint' not in sys.modules\n"
        "from fastst.torch import dcp\n"
        "assert not hasattr(dcp, '__file__')  # what tools scanning sys.modules ask\n"
        "assert 'torch.distributed.checkpoint' not in sys.modules\n"
        "w = dcp.StorageWriter\n"
        "assert 'torch.distributed.checkpoint' in sys.modules\n"
        "import fastst.torch.dcp as d\n"
        "assert d is dcp and d.StorageWriter is w\n"
        "from fastst._dcp import storage as real\n"
        "assert d.__all__ == real.__all__\n"
        "assert all(getattr(d, n) is getattr(real, n) for n in real.__all__)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# quick tests in this process -------------------------------------------------------


def _save_no_dist(sd: Dict[str, torch.Tensor], folder: Path, **options: Any) -> None:
    import torch.distributed.checkpoint as dcp

    dcp.save(sd, storage_writer=fdcp.StorageWriter(folder, **options), no_dist=True)


def test_commit_in_progress_is_read_whole(tmp_path: Path) -> None:
    """A coordinator killed in the middle of the renames: readers see the
    new checkpoint whole, and the next save completes the commit."""
    folder = tmp_path / "ck"
    _save_no_dist({"a": torch.zeros(3), "b": torch.zeros(2)}, folder, save_distributed=True)
    old = folder / "shard-00001-model-00001-of-00001.safetensors"
    token = "0123456789abcdef"
    stage = Path(dcp_commit.staging_dir(str(folder), token))
    stage.mkdir()
    finals = [
        "shard-00001-model-00001-of-00002.safetensors",
        "shard-00001-model-00002-of-00002.safetensors",
    ]
    for i, final in enumerate(finals):
        save_file(
            {f"t{i}": torch.full((2,), float(i + 1))},
            dcp_commit.staged_path(str(folder), token, final),
        )
    assert dcp_commit.checkpoint_files(str(folder)) == [str(old)]  # not committed yet
    record = {
        "token": token,
        "files": finals,
        "kind": "rank",
        "index": None,
    }
    (stage / "commit.json").write_text(json.dumps(record))
    os.replace(
        dcp_commit.staged_path(str(folder), token, finals[0]), folder / finals[0]
    )  # half done
    files = dcp_commit.checkpoint_files(str(folder))
    assert [os.path.basename(f) for f in files] == [
        finals[0],
        os.path.basename(dcp_commit.staged_path(str(folder), token, finals[1])),
    ]
    assert sorted(chunk_table(dcp_commit.open_files(files))) == ["t0", "t1"]
    dcp_commit.recover(str(folder))
    assert sorted(os.listdir(folder)) == finals


def test_uncommitted_save_is_invisible_and_cleaned(tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    _save_no_dist({"a": torch.zeros(3)}, folder, save_distributed=True)
    stage = Path(dcp_commit.staging_dir(str(folder), "fedcba9876543210"))
    stage.mkdir()
    save_file(
        {"z": torch.ones(1)},
        dcp_commit.staged_path(
            str(folder), "fedcba9876543210", "shard-00002-model-00001-of-00001.safetensors"
        ),
    )
    assert [os.path.basename(p) for p in dcp_commit.checkpoint_files(str(folder))] == [
        "shard-00001-model-00001-of-00001.safetensors"
    ]
    # fastst verify finds the staged file as a stale temporary
    from fastst.tools.stale_temp import stale_temp_files

    assert len(stale_temp_files([str(folder)])) == 1
    _save_no_dist({"a": torch.ones(3)}, folder, save_distributed=True)
    assert os.listdir(folder) == ["shard-00001-model-00001-of-00001.safetensors"]


def test_single_writer_layout_and_index(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader

    sd = {"a": torch.randn(4, 3), "b": torch.randn(2).to(torch.bfloat16), "c": torch.randn(5)}
    _save_no_dist(sd, tmp_path / "ck", fqn_to_index_mapping={"a": 1, "b": 2, "c": 2})
    assert sorted(os.listdir(tmp_path / "ck")) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    index = json.loads((tmp_path / "ck" / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == {
        "a": "model-00001-of-00002.safetensors",
        "b": "model-00002-of-00002.safetensors",
        "c": "model-00002-of-00002.safetensors",
    }
    assert index["metadata"]["total_size"] == 48 + 4 + 20
    got = {k: torch.empty_like(v) for k, v in sd.items()}
    dcp.load(got, storage_reader=HuggingFaceStorageReader(str(tmp_path / "ck")), no_dist=True)
    assert all(torch.equal(got[k], sd[k]) for k in sd)
    # a plain Hugging Face checkpoint (no sharding metadata) loads too
    got = {k: torch.empty_like(v) for k, v in sd.items()}
    dcp.load(got, storage_reader=fdcp.StorageReader(tmp_path / "ck"), no_dist=True)
    assert all(torch.equal(got[k], sd[k]) for k in sd)


def test_non_tensor_values_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BaseException, match="not a tensor"):
        _save_no_dist({"a": torch.zeros(2), "step": 3}, tmp_path / "ck", save_distributed=True)
    assert not (tmp_path / "ck").exists() or not [
        e for e in os.listdir(tmp_path / "ck") if e.endswith(".safetensors")
    ]


def _chunk_file(
    path: Path, tensors: Dict[str, torch.Tensor], offsets: Dict[str, List[int]]
) -> None:
    save_file(tensors, str(path), metadata=file_metadata(offsets))


def _open(folder: Path) -> Any:
    return dcp_commit.open_files(dcp_commit.checkpoint_files(str(folder)))


@pytest.mark.parametrize(
    "second, rule",
    [
        ({"w": ([2, 0], torch.zeros(2, 3))}, None),  # tiles: fine
        ({"w": ([1, 0], torch.zeros(2, 3))}, "dcp-chunks"),  # overlap
        ({"w": ([2, 0], torch.zeros(1, 3))}, "dcp-chunks"),  # hole... the size says 3 rows
        ({"w": ([2, 0], torch.zeros(2, 3, dtype=torch.float16))}, "dcp-chunks"),  # dtype
        ({"w": ([2], torch.zeros(2, 3))}, "dcp-sharding-info"),  # offsets of another rank
        ({"w": ([2, -1], torch.zeros(2, 3))}, "dcp-sharding-info"),
    ],
)
def test_chunk_table_rules(tmp_path: Path, second: Dict[str, Any], rule: Any) -> None:
    _chunk_file(tmp_path / "a.safetensors", {"w": torch.zeros(2, 3)}, {"w": [0, 0]})
    ((name, (off, t)),) = second.items()
    if rule == "dcp-chunks" and t.shape[0] == 1:
        _chunk_file(tmp_path / "c.safetensors", {"w": torch.zeros(1, 3)}, {"w": [4, 0]})
    _chunk_file(tmp_path / "b.safetensors", {name: t}, {name: off})
    files = _open(tmp_path)
    if rule is None:
        table = chunk_table(files)
        assert table["w"].shape == (4, 3) and len(table["w"].chunks) == 2
        return
    with pytest.raises(fastst.SafetensorError) as info:
        chunk_table(files)
    assert info.value.rule == rule


def test_sharding_info_not_json(tmp_path: Path) -> None:
    save_file(
        {"w": torch.zeros(2)}, str(tmp_path / "a.safetensors"), metadata={"DCP_SHARDING_INFO": "[1"}
    )
    with pytest.raises(fastst.SafetensorError) as info:
        chunk_table(_open(tmp_path))
    assert info.value.rule == "dcp-sharding-info"


class _Rows:
    """A chunk's file as the assembly reads it: positioned reads of its bytes, counted."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data.reshape(-1).view(np.uint8)
        self.read = 0
        self.name = "mem"

    def read_range_into(self, _name: str, offset: int, out: np.ndarray) -> None:
        out[:] = self.data[offset : offset + out.nbytes]
        self.read += out.nbytes


def test_pieces_gather_columns_in_bounded_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Column chunks are gathered a few rows at a time, row chunks read in
    blocks; each byte is read once and no piece exceeds the block."""
    full = np.arange(7 * 10, dtype=np.float32).reshape(7, 10)
    monkeypatch.setattr(C, "BLOCK", 3 * 40)
    for cut, chunks in (
        ("columns", [((0, 0), full[:, :4]), ((0, 4), full[:, 4:])]),
        ("rows", [((0, 0), full[:3]), ((3, 0), full[3:])]),
        ("mixed", [((0, 0), full[:2]), ((2, 0), full[2:, :5]), ((2, 5), full[2:, 5:])]),
    ):
        files = {f"f{i}": _Rows(np.ascontiguousarray(d)) for i, (_o, d) in enumerate(chunks)}
        t = Tensor(
            "w",
            "F32",
            (7, 10),
            [Chunk(f"f{i}", o, d.shape) for i, (o, d) in enumerate(chunks)],
        )
        got = [bytes(p) for p in C.pieces(t, C.parts(t, files))]
        assert b"".join(got) == full.tobytes(), cut
        assert max(len(p) for p in got) <= 3 * 40, cut
        assert sum(f.read for f in files.values()) == full.nbytes, cut


def test_rows_read_in_place_name_the_input_that_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows of a local file go to the writer as ranges of it (no buffer of the consolidation's
    own); an input cut short under the consolidation fails naming that input, and the output
    folder is left as it was."""
    src = tmp_path / "src"
    _save_no_dist({"a": torch.randn(4096), "b": torch.randn(64, 64)}, src, save_distributed=True)
    files, table = C._open_input(str(src), str(tmp_path / "o"), None)
    try:
        got = list(C.pieces(table["b"], C.parts(table["b"], files)))
    finally:
        for raw in files.values():
            raw.close()
    assert [
        (type(p).__name__, type(p.file).__name__, p.tensor, p.offset, p.length) for p in got
    ] == [("TensorRange", "RawFile", "b", 0, 64 * 64 * 4)]
    real = C.parts

    def cut_short(t: Any, files: Dict[str, Any]) -> Any:
        for raw in files.values():
            os.truncate(raw.name, raw.data_start + 8)
        return real(t, files)

    monkeypatch.setattr(C, "parts", cut_short)
    with pytest.raises(fastst.SafetensorError) as info:
        fdcp.consolidate(src, tmp_path / "out")
    (rank_file,) = [p for p in os.listdir(src) if p.endswith(".safetensors")]
    assert rank_file in str(info.value)
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_consolidation_writes_through_write_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Consolidation gives each tensor to the writer's public ``write_parts``: rows a chunk of a
    local file holds whole as a range of that file (which the writer reads in place, no buffer
    of the consolidation's), rows split between chunks gathered into a buffer, in one tensor."""
    full = torch.arange(6 * 4, dtype=torch.float32).reshape(6, 4)
    _chunk_file(tmp_path / "a.safetensors", {"w": full[:2].clone()}, {"w": [0, 0]})
    _chunk_file(tmp_path / "b.safetensors", {"w": full[2:, :1].clone()}, {"w": [2, 0]})
    _chunk_file(tmp_path / "c.safetensors", {"w": full[2:, 1:].clone()}, {"w": [2, 1]})
    seen: List[Any] = []
    real = fastst.TensorWriter.write_parts

    def spy(self: fastst.TensorWriter, name: str, parts: Any) -> None:
        def watched() -> Any:
            for p in parts:
                if isinstance(p, fastst.TensorRange):
                    seen.append((name, os.path.basename(p.file.name), p.offset, p.length))
                else:
                    seen.append((name, type(p).__name__, len(memoryview(p).cast("B"))))
                yield p

        real(self, name, watched())

    monkeypatch.setattr(fastst.TensorWriter, "write_parts", spy)
    fdcp.consolidate(tmp_path, tmp_path / "out")
    assert seen == [("w", "a.safetensors", 0, 32), ("w", "ndarray", 64)]
    with fastst.safe_open(str(tmp_path / "out" / "model-00001-of-00001.safetensors"), "pt") as f:
        assert torch.equal(f.get_tensor("w"), full)


def test_consolidate_max_shard_size_and_failure_keeps_old(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _save_no_dist(
        {"a": torch.randn(64), "b": torch.randn(64), "c": torch.randn(64)},
        src,
        save_distributed=True,
    )
    out = tmp_path / "out"
    fdcp.consolidate(src, out, max_shard_size=600)  # a and b (256 bytes each), then c
    assert sorted(os.listdir(out)) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    before = hashes(str(out))
    with pytest.raises(ValueError, match="lacks"):
        fdcp.consolidate(src, out, {"a": 1, "b": 1, "c": 1, "zz": 2})
    with pytest.raises(ValueError, match="not in fqn_to_index_mapping"):
        fdcp.consolidate(src, out, {"a": 1})
    assert hashes(str(out)) == before


def test_consolidate_threads_follow_the_job_not_the_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without thread_count, a consolidation runs one thread per THREAD_BYTES of output, at
    most THREADS even on one core (its threads wait on the disk), and no more than tensors:
    a small job runs on the calling thread alone; an explicit thread_count is kept."""
    src = tmp_path / "src"
    state = {f"t{i:02d}": torch.randn(16) for i in range(12)}
    _save_no_dist(state, src, save_distributed=True)
    asked: List[int] = []

    class Recording(read_pool.ThreadPoolExecutor):
        def __init__(self, workers: int, **kw: Any) -> None:
            asked.append(workers)
            super().__init__(workers, **kw)

    monkeypatch.setattr(read_pool, "ThreadPoolExecutor", Recording)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    fdcp.consolidate(src, tmp_path / "out")  # 768 bytes: one thread, no pool
    assert asked == []
    monkeypatch.setattr(C, "THREAD_BYTES", 64)  # 12 tensors of 64 bytes: THREADS
    fdcp.consolidate(src, tmp_path / "out8")
    monkeypatch.setattr(C, "THREAD_BYTES", 64 * 5)  # 3 threads
    fdcp.consolidate(src, tmp_path / "out3")
    fdcp.consolidate(src, tmp_path / "out2", thread_count=2)
    assert asked == [C.THREADS, 3, 2]
    for out in ("out", "out8", "out3", "out2"):
        with fastst.safe_open(str(tmp_path / out / "model-00001-of-00001.safetensors"), "pt") as f:
            assert all(torch.equal(f.get_tensor(n), state[n]) for n in state)


CONSOLIDATE_PEAK = """
import sys
from fastst.torch import dcp

def peak() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no VmHWM")

src, out = sys.argv[1], sys.argv[2]
dcp.consolidate(src + "-warm", out + "-warm")  # imports and first allocations
base = peak()
dcp.consolidate(src, out)
print(peak() - base)
"""


def test_consolidation_memory_follows_its_threads(tmp_path: Path) -> None:
    """Rows a local chunk holds whole are read in place by the writer: the peak memory a
    consolidation of 96 MiB gains stays near its threads' aligned write buffers (6 threads of
    4 MiB), not two buffers of BLOCK bytes per thread on top of them (8 threads, 96 MiB)."""
    state = {f"w{i}": torch.full((1024, 3072), float(i)) for i in range(8)}  # 12 MiB each
    _save_no_dist(state, tmp_path / "src", save_distributed=True)
    _save_no_dist({"w": torch.zeros(4)}, tmp_path / "src-warm", save_distributed=True)
    result = subprocess.run(
        [sys.executable, "-c", CONSOLIDATE_PEAK, str(tmp_path / "src"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    growth = int(result.stdout.split()[-1])
    assert growth < 40 << 20, growth
    with fastst.safe_open(str(tmp_path / "out" / "model-00001-of-00001.safetensors"), "pt") as f:
        assert all(torch.equal(f.get_tensor(n), state[n]) for n in state)


def test_hostile_folders(tmp_path: Path) -> None:
    """A file linked from outside the folder, and a commit record fastst did not write."""
    outside = tmp_path / "outside.safetensors"
    save_file({"w": torch.zeros(2)}, str(outside))
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "shard-00001-model-00001-of-00001.safetensors").symlink_to(outside)
    with pytest.raises(fastst.SafetensorError) as info:
        dcp_commit.checkpoint_files(str(folder))
    assert info.value.rule == "shard-path"
    (folder / "shard-00001-model-00001-of-00001.safetensors").unlink()
    stage = Path(dcp_commit.staging_dir(str(folder), "00000000000000aa"))
    stage.mkdir()
    record = {"token": "00000000000000aa", "files": ["../x.safetensors"], "kind": "rank"}
    (stage / "commit.json").write_text(json.dumps({**record, "index": None}))
    for call in (dcp_commit.checkpoint_files, dcp_commit.recover):
        with pytest.raises(fastst.SafetensorError, match="not one fastst wrote"):
            call(str(folder))


def test_commit_record_through_a_link_is_refused(tmp_path: Path) -> None:
    """A commit record whose staged file is a symbolic link out of the folder:
    the reader and consolidation refuse it as they refuse the same link at the
    top level (``shard-path``), and copy nothing of it."""
    private = tmp_path / "private"
    private.mkdir()
    secret = private / "x.safetensors"
    save_file({"secret": torch.arange(4, dtype=torch.float32)}, str(secret))
    folder = tmp_path / "ck"
    _save_no_dist({"a": torch.zeros(3)}, folder, save_distributed=True)
    token = "00000000000000bb"
    stage = Path(dcp_commit.staging_dir(str(folder), token))
    stage.mkdir()
    final = "shard-00001-model-00001-of-00001.safetensors"
    Path(dcp_commit.staged_path(str(folder), token, final)).symlink_to(
        os.path.join("..", "..", "private", "x.safetensors")
    )
    record = {"token": token, "files": [final], "kind": "rank", "index": None}
    (stage / "commit.json").write_text(json.dumps(record))
    with pytest.raises(fastst.SafetensorError) as info:
        dcp_commit.checkpoint_files(str(folder))
    assert info.value.rule == "shard-path"
    with pytest.raises(fastst.SafetensorError) as info:
        fdcp.consolidate(folder, tmp_path / "out")
    assert info.value.rule == "shard-path"
    copied = (
        [p for p in (tmp_path / "out").rglob("*.safetensors")]
        if (tmp_path / "out").exists()
        else []
    )
    assert copied == []


def test_tiling_overlap_with_the_right_volume() -> None:
    """Chunks holding as many elements as the tensor, one overlapping another (and so a hole)."""
    from fastst._dcp.files import _check

    column = Chunk("a", (0, 0), (2, 1))
    row = Chunk("b", (0, 0), (1, 2))
    with pytest.raises(fastst.SafetensorError, match="overlaps another") as info:
        _check(Tensor("w", "F32", (2, 2), [column, row]))
    assert info.value.rule == "dcp-chunks"
    grid = [Chunk("f", (i, j), (1, 1)) for i in range(2) for j in range(2)]
    _check(Tensor("w", "F32", (2, 2), grid))  # a 2-d mesh's tiling


def test_storage_options_for_a_local_folder_are_refused_naming_it(tmp_path: Path) -> None:
    # The writer, the reader and consolidation refuse storage_options for a
    # local folder with the one rule (a ValueError too), before touching it.
    folder = tmp_path / "ckpt"
    opts = {"region": "us-east-1"}
    calls: Dict[str, Callable[[], Any]] = {
        "writer": lambda: fdcp.StorageWriter(folder, storage_options=opts),
        "reader": lambda: fdcp.StorageReader(folder, storage_options=opts),
        "consolidate": lambda: fdcp.consolidate(folder, tmp_path / "out", storage_options=opts),
    }
    for what, call in calls.items():
        with pytest.raises(fastst.StorageOptionsError) as refused:
            call()
        assert isinstance(refused.value, ValueError), what
        assert refused.value.rule == "storage-options-local", what
        assert str(refused.value).startswith(f"{folder}: storage_options apply to URLs"), what
    assert list(tmp_path.iterdir()) == []
