"""transformers ``from_pretrained`` of a ~1 GB checkpoint: the reference
package vs fastst serving ``import safetensors`` through the drop-in hook.

    python benches/bench_dropin_from_pretrained.py [--folder DIR] [--rounds N]

Builds (once, cached in DIR) a BERT-style model of about 1.1 GB in F32 saved
with ``save_pretrained``, then times ``AutoModel.from_pretrained`` in fresh
interpreters, alternating reference and fastst runs in the same session:

- hot: the checkpoint's pages are in the page cache (read once before);
- cold: the checkpoint's pages are evicted first with
  ``posix_fadvise(POSIX_FADV_DONTNEED)`` (this file only; nothing else on
  the machine is touched); before each cold run, ``cat`` of the evicted
  checkpoint is timed too (the disk's limit, printed with the medians).

Each run reports the time of ``from_pretrained`` itself (interpreter and
library start-up excluded, the model's module imported before the clock
starts) and checks that every weight was loaded (a sum
over all parameters equal between the two). Prints medians and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

LOAD = r"""
import json, sys, time
import torch
import transformers.core_model_loading  # noqa: F401
from transformers import AutoConfig, AutoModel
torch.set_num_threads(1)
# transformers imports a model's module on first use (seconds: torch._dynamo,
# kernels...): done before the clock starts, so that the load is timed.
AutoModel._model_mapping[type(AutoConfig.from_pretrained(sys.argv[1]))]
start = time.perf_counter()
model = AutoModel.from_pretrained(sys.argv[1])
took = time.perf_counter() - start
checksum = float(sum(p.double().sum() for p in model.parameters()))
served = sys.modules["safetensors"]
print(json.dumps({"seconds": took, "checksum": checksum,
                  "fastst": hasattr(served, "__fastst_version__")}))
"""


def build(folder: str) -> None:
    if os.path.exists(os.path.join(folder, "model.safetensors")):
        return
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=1024,
        num_hidden_layers=20,
        num_attention_heads=16,
        intermediate_size=4096,
    )
    model = BertModel(config)
    model.save_pretrained(folder, max_shard_size="10GB")


def evict(folder: str) -> None:
    for name in os.listdir(folder):
        if name.endswith(".safetensors"):
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def read_cold(folder: str) -> float:
    """Seconds ``cat`` takes to read the (evicted) checkpoint: the disk's limit."""
    names = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".safetensors")]
    start = time.perf_counter()
    with open(os.devnull, "wb") as null:
        subprocess.run(["cat", *names], stdout=null, check=True)
    return time.perf_counter() - start


def warm(folder: str) -> None:
    for name in os.listdir(folder):
        if name.endswith(".safetensors"):
            with open(os.path.join(folder, name), "rb") as fh:
                while fh.read(64 << 20):
                    pass


def run(folder: str, through_fastst: bool, read_ahead: bool = True) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if not read_ahead:
        env["FASTST_READ_AHEAD"] = "0"
    env.pop("FASTST_AS_SAFETENSORS", None)
    script = os.path.join(tempfile.gettempdir(), "fastst_bench_load.py")
    with open(script, "w") as fh:
        fh.write(LOAD)
    if through_fastst:
        command = [sys.executable, "-m", "fastst", "run", script, folder]
    else:
        command = [sys.executable, script, folder]
        env.pop("PYTHONPATH", None)  # the reference, not a fastst checkout
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--folder", default=os.path.join(tempfile.gettempdir(), "fastst-bench-bert")
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--no-read-ahead-too",
        action="store_true",
        help="also time fastst with its read-ahead off (FASTST_READ_AHEAD=0)",
    )
    args = parser.parse_args()
    variants = ["reference", "fastst"] + (
        ["fastst-no-read-ahead"] if args.no_read_ahead_too else []
    )
    build(args.folder)
    size = sum(
        os.path.getsize(os.path.join(args.folder, n))
        for n in os.listdir(args.folder)
        if n.endswith(".safetensors")
    )
    print(f"checkpoint: {args.folder} ({size / 1e9:.2f} GB)")
    results: dict = {}
    disk: list = []
    for cache in ("hot", "cold"):
        for _ in range(args.rounds):
            for who in variants:
                if cache == "hot":
                    warm(args.folder)
                else:
                    evict(args.folder)
                    disk.append(read_cold(args.folder))
                    evict(args.folder)
                ours = who.startswith("fastst")
                got = run(args.folder, ours, read_ahead=who != "fastst-no-read-ahead")
                assert got["fastst"] == ours
                results.setdefault((cache, who), []).append(got)
    checksums = {r["checksum"] for runs in results.values() for r in runs}
    assert len(checksums) == 1, checksums
    for cache in ("hot", "cold"):
        ref = statistics.median(r["seconds"] for r in results[(cache, "reference")])
        ours = statistics.median(r["seconds"] for r in results[(cache, "fastst")])
        print(
            f"{cache:4}: reference {ref:6.3f} s  fastst {ours:6.3f} s  "
            f"speed-up {ref / ours:4.2f}x  ({args.rounds} rounds, medians)"
        )
        if args.no_read_ahead_too:
            off = statistics.median(r["seconds"] for r in results[(cache, "fastst-no-read-ahead")])
            print(f"      fastst without read-ahead {off:6.3f} s  speed-up {ref / off:4.2f}x")
    ref_cold = statistics.median(r["seconds"] for r in results[("cold", "reference")])
    hot = statistics.median(r["seconds"] for r in results[("hot", "fastst")])
    print(
        f"limits: reading the evicted checkpoint (cat) {statistics.median(disk):6.3f} s; "
        f"fastst hot {hot:6.3f} s: a cold load can be at most "
        f"{ref_cold / hot:4.2f}x the reference's cold load"
    )


if __name__ == "__main__":
    main()
