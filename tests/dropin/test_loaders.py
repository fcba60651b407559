"""Real loaders through the hook: transformers (2-layer BERT with tied
weights, single file and sharded with ``max_shard_size``) and diffusers (a
small UNet) save and load with fastst serving ``safetensors``, and give the
same files, weights and outputs as with the reference package.

Both runs happen in fresh interpreters (tests/helpers/dropin_loaders.py): the hook
cannot be installed in a process that has imported the reference."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("transformers")
pytest.importorskip("diffusers")

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "helpers", "dropin_loaders.py")


def _start(out: str, through_fastst: bool) -> subprocess.Popen:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("FASTST_AS_SAFETENSORS", None)
    if through_fastst:
        command = [sys.executable, "-m", "fastst", "run", SCRIPT, out]
    else:
        command = [sys.executable, SCRIPT, out]
        # The reference run must not see a fastst checkout on PYTHONPATH
        # (it would not matter for `import safetensors`, but keep it clean).
        env.pop("PYTHONPATH", None)
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _result(proc: subprocess.Popen) -> dict:
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-4000:]
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The reference's run and fastst's, side by side (separate folders and processes)."""
    reference = _start(str(tmp_path_factory.mktemp("reference")), through_fastst=False)
    ours = _start(str(tmp_path_factory.mktemp("fastst")), through_fastst=True)
    try:
        return _result(reference), _result(ours)
    finally:
        for proc in (reference, ours):
            proc.kill()
            proc.wait()


def test_the_hook_served_fastst(runs) -> None:
    reference, ours = runs
    assert ours["served_by"] == "fastst"
    assert reference["served_by"] != "fastst"


@pytest.mark.parametrize("case", ["bert-single", "bert-sharded", "unet"])
def test_files_and_weights_are_identical(runs, case) -> None:
    reference, ours = runs
    assert ours[case]["files"] == reference[case]["files"]
    assert ours[case]["weights"] == reference[case]["weights"]


def test_sharded_bert_really_is_sharded(runs) -> None:
    _reference, ours = runs
    names = ours["bert-sharded"]["files"]
    assert "model.safetensors.index.json" in names
    assert sum(n.endswith(".safetensors") for n in names) > 1


@pytest.mark.parametrize("case", ["bert-single", "bert-sharded"])
def test_bert_outputs_are_bit_identical_and_weights_stay_tied(runs, case) -> None:
    reference, ours = runs
    assert ours[case]["output"] == reference[case]["output"]
    assert ours[case]["same_as_model"] and ours[case]["tied"]


def test_unet_output_is_the_reference_output_bit_for_bit(runs) -> None:
    # CPU convolution kernels take different paths by the address of the
    # weights modulo 64: every parameter sits where the reference puts it
    # (small tensors, copies in fastst, at their file offset's alignment
    # like the reference's views), so the outputs are the same bits. (Both
    # may differ in the last bits from the in-memory model's output, whose
    # weights torch placed elsewhere.)
    reference, ours = runs
    assert ours["unet"]["weights_as_saved"]
    assert ours["unet"]["alignment"] == reference["unet"]["alignment"]
    assert ours["unet"]["output"] == reference["unet"]["output"]
    assert ours["unet"]["same_as_model"] == reference["unet"]["same_as_model"]


def test_save_sharded_with_tied_weights_loads_with_from_pretrained(runs) -> None:
    _reference, ours = runs
    case = ours["bert-save-sharded"]
    assert case["same_as_model"]
    assert {"total_size", "total_parameters"} <= set(case["index_metadata"])
    # The tied decoder weight is stored once and counted once.
    assert case["total_parameters"] == case["model_parameters"]


READ_MODE_SCRIPT = r"""
import json, os, sys
import torch
import fastst
import fastst._sources.file as source

fastst.install()
import safetensors
import safetensors.torch
from transformers import BertConfig, BertModel

opened = []
real = source.RawFile


def spy(path, name, backend, cap):
    opened.append(backend)
    return real(path, name, backend, cap)


source.RawFile = spy


def mapped(path):
    with open("/proc/self/maps") as f:
        return sum(line.rstrip().endswith(path) for line in f)


def backends(load):
    opened.clear()
    load()
    return sorted(set(opened))


folder = sys.argv[1]
torch.manual_seed(0)
config = BertConfig(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
    vocab_size=1000,
)
model = BertModel(config)
model.save_pretrained(folder)
file = os.path.join(folder, "model.safetensors")
expected = model.state_dict()
result = {}
for mode in ("", "pread", "mmap", " PREAD "):
    os.environ["FASTST_READ"] = mode
    opened.clear()
    loaded = BertModel.from_pretrained(folder)
    got = loaded.state_dict()
    result[mode] = {
        "backends": sorted(set(opened)),
        "mapped": mapped(file),
        "same": got.keys() == expected.keys()
        and all(torch.equal(got[k], v) for k, v in expected.items()),
        "load_file": backends(lambda: safetensors.torch.load_file(file)),
    }
    del loaded, got
os.environ["FASTST_READ"] = "mmap"
result["asked_pread"] = backends(lambda: safetensors.safe_open(file, "pt", backend="pread"))
os.environ["FASTST_READ"] = "nfs"
try:
    BertModel.from_pretrained(folder)
    result["invalid"] = None
except ValueError as e:
    result["invalid"] = str(e)
fastst.uninstall()
os.environ["FASTST_READ"] = "pread"
result["hook_off"] = backends(lambda: fastst.torch.load_file(file))
print(json.dumps(result))
"""


def test_fastst_read_picks_how_transformers_reads_under_the_hook(tmp_path) -> None:
    """FASTST_READ=pread makes an unchanged from_pretrained (which passes
    backend="mmap" itself) and load_file read with positioned reads: no file
    opened with a mapping, none left in the process, the same weights as the
    saved model's. Unset or mmap keeps the map; a caller's pread stays; a bad
    value is a ValueError naming the variable at the first load; with the
    hook off the variable is not read."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("FASTST_AS_SAFETENSORS", None)
    env.pop("FASTST_READ", None)
    result = subprocess.run(
        [sys.executable, "-c", READ_MODE_SCRIPT, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for mode in ("", "mmap"):
        assert out[mode]["backends"] == ["mmap"] and out[mode]["mapped"] > 0
        assert out[mode]["load_file"] == ["mmap"] and out[mode]["same"]
    for mode in ("pread", " PREAD "):
        assert out[mode]["backends"] == ["pread"] and out[mode]["mapped"] == 0
        assert out[mode]["load_file"] == ["pread"] and out[mode]["same"]
    assert out["asked_pread"] == ["pread"]
    assert out["invalid"] == (
        "FASTST_READ='nfs' is not a read mode: use mmap or pread (default mmap)"
    )
    assert out["hook_off"] == ["mmap"]
