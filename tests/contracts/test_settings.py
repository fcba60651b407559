"""The one size grammar and the FASTST_* variables read through it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import fastst
import fastst.numpy
import numpy as np
import pytest
from fastst import _settings
from fastst._settings import parse_size

MIB = 1 << 20


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        (4096, 4096),
        (0, 0),
        ("0", 0),
        ("5GB", 5 * 10**9),
        ("5gb", 5 * 10**9),
        ("5 GB", 5 * 10**9),
        ("5GiB", 5 * 2**30),
        ("5G", 5 * 2**30),
        ("512M", 512 * MIB),
        ("512MiB", 512 * MIB),
        ("500MB", 500 * 10**6),
        ("1.5g", 3 << 29),
        ("2KiB", 2048),
        ("2kb", 2000),
        ("7B", 7),
        ("1TB", 10**12),
        ("1T", 2**40),
    ],
)
def test_size_grammar(text: object, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "bad",
    ["", "lots", "-1M", "nanG", "infGB", "5XB", "1e400", "5 G B", "G", "9" * 38 + "TiB"],
)
def test_bad_size_strings_are_value_errors_naming_the_setting(bad: str) -> None:
    with pytest.raises(ValueError, match="max_shard_size"):
        parse_size(bad, "max_shard_size")


@pytest.mark.parametrize("bad", [True, 1.5, None, b"5GB"])
def test_other_types_are_type_errors(bad: object) -> None:
    with pytest.raises(TypeError, match="FASTST_INDEX_CAP"):
        parse_size(bad, "FASTST_INDEX_CAP")


def test_negative_int_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        parse_size(-1)


def test_max_shard_size_and_index_cap_read_5gb_as_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "5GB" is 5 * 10**9 bytes for both (Hugging Face's reading of max_shard_size).
    monkeypatch.setenv("FASTST_INDEX_CAP", "5GB")
    assert _settings.index_cap() == 5 * 10**9 == parse_size("5GB", "max_shard_size")
    # A shard limit between two tensors' sizes, given in each unit family,
    # splits where its byte count says.
    tensors = {f"t{i}": np.zeros(250_000, dtype=np.uint8) for i in range(4)}
    for limit, shards in (("0.5MB", 2), ("0.5MiB", 2), ("1MB", 1), ("600KB", 2), ("499KB", 4)):
        folder = tmp_path / limit
        index = fastst.numpy.save_sharded(tensors, folder, max_shard_size=limit)
        names = set(json.loads(Path(index).read_text())["weight_map"].values())
        assert len(names) == shards, limit


def test_bad_max_shard_size(tmp_path: Path) -> None:
    tensors = {"a": np.zeros(4, dtype=np.float32)}
    with pytest.raises(ValueError, match="max_shard_size"):
        fastst.numpy.save_sharded(tensors, tmp_path, max_shard_size="lots")
    with pytest.raises(ValueError, match="max_shard_size must be positive"):
        fastst.numpy.save_sharded(tensors, tmp_path, max_shard_size=0)
    with pytest.raises(TypeError, match="max_shard_size"):
        fastst.numpy.save_sharded(tensors, tmp_path, max_shard_size=True)


def test_env_sizes_name_their_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTST_INDEX_CAP", "lots")
    with pytest.raises(ValueError, match="FASTST_INDEX_CAP"):
        _settings.index_cap()
    monkeypatch.setenv("FASTST_PREFETCH_BUDGET", "2M")
    assert _settings.prefetch_budget() == 2 * MIB
    monkeypatch.delenv("FASTST_PREFETCH_BUDGET")
    assert _settings.prefetch_budget() is None
    monkeypatch.setenv("FASTST_READ_AHEAD_BUDGET", "3M")
    assert _settings.read_ahead_budget() == 3 * MIB and _settings.prefetch_budget() is None
    monkeypatch.setenv("FASTST_READ_AHEAD_BUDGET", "lots")
    with pytest.raises(ValueError, match="FASTST_READ_AHEAD_BUDGET"):
        _settings.read_ahead_budget()
    monkeypatch.delenv("FASTST_INDEX_CAP")
    assert _settings.index_cap() == _settings.DEFAULT_INDEX_CAP


def test_the_read_side_asks_the_flag_not_the_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    # Loads read the drop-in state from _settings; no reading module imports the hook.
    package = Path(fastst.__file__).parent
    for path in [*(package / "_read").glob("*.py"), *(package / "_sources").glob("*.py")]:
        assert "_dropin" not in path.read_text("utf-8"), path
    monkeypatch.setenv("FASTST_READ", "pread")
    monkeypatch.setattr(_settings, "dropin_active", False)
    assert _settings.read_backend("mmap") == "mmap"
    monkeypatch.setattr(_settings, "dropin_active", True)
    assert _settings.read_backend("mmap") == "pread"
    monkeypatch.setenv("FASTST_READ", "bogus")
    with pytest.raises(ValueError, match="FASTST_READ"):
        _settings.read_backend("mmap")


def test_install_sets_the_flag() -> None:
    # In a fresh interpreter: this one may have imported the reference.
    code = (
        "import fastst\n"
        "from fastst import _settings\n"
        "assert not _settings.dropin_active\n"
        "with fastst.install():\n"
        "    assert _settings.dropin_active\n"
        "assert not _settings.dropin_active\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
