"""The `fastst` command's text output: untrusted text escaped everywhere,
terminal width and middle-ellipsis tables, display width of wide and
combining characters, numbers and plurals, colour, the JSON envelope, usage
errors, bare `fastst`, a closed pipe."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import fastst.numpy
import numpy as np
import pytest
from fastst.cli import render
from fastst.cli.text import ELLIPSIS, display_width, escape, fit, json_text, wrap
from helpers.cli_files import run, run_envelope, validate_envelope

#: Bytes that must never reach a terminal raw: C0 (but newline), DEL, and the
#: UTF-8 forms of C1 controls, bidi controls, zero-width characters and
#: line/paragraph separators.
RAW = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f\x80-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)

EVIL: Dict[str, str] = {
    "esc": "a\x1b]0;pwned\x07b",
    "csi": "clear\x1b[2J\x1b[H",
    "newline": "x\nfastst: forged line",
    "cr": "ok\roverwritten",
    "c1": "c1\x9b31m",
    "bidi": "\u202etxt.exe",
    "isolate": "a\u2066b\u2069",
    "zw": "zero\u200bwidth",
    "bom": "\ufeffbom",
    "sep": "line\u2028sep",
}


def _evil_file(path: Path) -> Path:
    tensors = {name: np.zeros(2, np.float32) for name in EVIL.values()}
    metadata = {f"k{i}{v}": v for i, v in enumerate(EVIL.values())}
    fastst.numpy.save_file(tensors, path, metadata=metadata)
    return path


def test_escape() -> None:
    assert escape("plain name.weight") == "plain name.weight"
    assert escape("a\x1b[2Jb") == "a\\u{1b}[2Jb"
    assert escape("x\ny\rz\tw\0") == "x\\ny\\rz\\tw\\0"
    assert escape("\u202eabc") == "\\u{202e}abc"
    assert escape("\x9b") == "\\u{9b}"
    assert escape("\u2028") == "\\u{2028}"
    # Undecodable bytes of a POSIX path (surrogate-escaped) are shown as bytes.
    assert escape(os.fsdecode(b"caf\xe9")) == "caf\\xE9"
    # Printable text (wide, combining, emoji, backslashes) is left alone, so
    # escaping is idempotent.
    for text in ("名前", "e\u0301", "\U0001f600", "a\\nb", "\\u{1b}"):
        assert escape(text) == text
    for text in EVIL.values():
        once = escape(text)
        assert escape(once) == once and not RAW.search(once) and "\n" not in once


def test_display_width_and_fit() -> None:
    assert display_width("abc") == 3
    assert display_width("名前") == 4
    assert display_width("e\u0301") == 1
    assert display_width("\uff21") == 2  # fullwidth A
    name = "model.layers.0.self_attn.q_proj.weight"
    short = fit(name, 20)
    assert display_width(short) == 20 and ELLIPSIS in short
    assert short.startswith("model.laye") and short.endswith("oj.weight")
    assert fit(name, None) == name and fit(name, len(name)) == name
    wide = fit("名" * 30, 11)
    assert display_width(wide) <= 11 and wide.startswith("名") and wide.endswith("名")
    assert fit("x", 0) == "" and fit("xy", 1) == ELLIPSIS
    # A combining mark never starts the kept tail.
    assert not unicodedata_combining(fit("a\u0301" * 20, 7).split(ELLIPSIS)[1][:1])
    assert wrap("aaa bbb ccc ddd", 8) == ["aaa bbb", "ccc ddd"]
    assert wrap("x" * 12, 8) == ["x" * 8, "x" * 4]


def unicodedata_combining(ch: str) -> bool:
    import unicodedata

    return bool(ch) and unicodedata.combining(ch) != 0


def test_json_text_is_exact_and_terminal_safe() -> None:
    data = {"names": list(EVIL.values()), "cjk": "名前", "lone": "\udcff", "astral": "\U000e0041"}
    text = json_text(data)
    assert not RAW.search(text.replace("\n", " ")) and "名前" in text
    assert json.loads(text) == data


def test_json_text_escapes_delete_in_ascii_text() -> None:
    # JSON escapes the other ASCII controls itself; DEL it leaves raw.
    text = json_text({"name": "a\x7fb", "rows": [1, 2]})
    assert "\x7f" not in text and json.loads(text) == {"name": "a\x7fb", "rows": [1, 2]}


def test_json_text_is_strict_json_whatever_a_file_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An index's metadata is parsed JSON: it may hold NaN and infinities,
    # which strict JSON cannot; inspect --json must still print valid JSON.
    text = json_text({"a": float("nan"), "b": [float("inf"), -float("inf")], "c": 1.5})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {
        "a": "NaN",
        "b": ["Infinity", "-Infinity"],
        "c": 1.5,
    }
    index = tmp_path / "model.safetensors.index.json"
    fastst.numpy.save_file({"w": np.zeros(2, np.float32)}, tmp_path / "s.safetensors")
    index.write_text('{"metadata": {"total_size": NaN}, "weight_map": {"w": "s.safetensors"}}')
    code, out, err = run(["inspect", str(index), "--json"], capsys)
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(c))
    assert "NaN" in json.dumps(doc), (code, err)


def test_numbers_and_plurals() -> None:
    assert render.plural(1, "tensor") == "1 tensor"
    assert render.plural(0, "tensor") == "0 tensors"
    assert render.plural(45057, "byte") == "45,057 bytes"
    assert render.size_text(1) == "1 B"
    assert render.size_text(2048) == "2.00 KiB"
    assert render.count_text(521330) == "521,330 (521.33K)"


@pytest.mark.parametrize(
    "command", [["inspect", "--tensors"], ["verify"], ["hash", "--tensors"], ["meta"]]
)
def test_untrusted_text_is_escaped_in_every_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: List[str]
) -> None:
    path = _evil_file(tmp_path / "evil\x1b[31m.safetensors")
    missing = tmp_path / "gone\u202e.safetensors"
    code, out, err = run([*command, "--width", "0", str(path), str(missing)], capsys)
    assert code in (1, 2)
    assert not RAW.search(out), RAW.findall(out)
    assert not RAW.search(err), RAW.findall(err)
    # One error, on one line, naming the missing path in its escaped form.
    assert err.count("\n") == 1 and "gone\\u{202e}.safetensors" in err
    assert "evil\\u{1b}[31m.safetensors" in out
    # No output line starts with text a name forged.
    assert not any(line.startswith("fastst: forged") for line in out.splitlines())


def test_json_round_trips_hostile_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _evil_file(tmp_path / "evil.safetensors")
    code, doc, _ = run_envelope(["inspect", "--json", "--tensors", str(path)], capsys)
    assert code == 0
    (info,) = doc["results"]
    assert {r["name"] for r in info["table"]} == set(EVIL.values())
    assert set(info["metadata"].values()) == set(EVIL.values())
    code, doc, _ = run_envelope(["hash", "--json", "--tensors", str(path)], capsys)
    assert set(doc["results"][0]["tensors"]) == set(EVIL.values())


def _long_file(path: Path) -> Path:
    tensors = {
        "short": np.zeros(1, np.float32),
        "x" * 150 + "END": np.zeros(4, np.float32),
        "名前" * 40 + "末尾": np.zeros(2, np.float32),
    }
    fastst.numpy.save_file(tensors, path)
    return path


def test_width_truncates_tables_in_the_middle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _long_file(tmp_path / "m.safetensors")
    code, out, _ = run(["inspect", "--tensors", "--width", "80", str(path)], capsys)
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("  ") and ELLIPSIS in line]
    assert len(rows) == 2
    for line in out.splitlines():
        assert display_width(line) <= 80, line
    assert any(r.lstrip().startswith("xxx") and "xEND " in r for r in rows)
    assert any("末尾" in r for r in rows)
    # Rows stay aligned: the dtype column starts at the same display column.
    table = out.split("  name ")[1].splitlines()[1:]
    starts = {display_width(line.split(" F32 ")[0]) for line in table if " F32 " in line}
    assert len(starts) == 1
    # --full and piped output (no --width, not a terminal) keep whole names.
    for argv in (["--width", "80", "--full"], []):
        _, out, _ = run(["inspect", "--tensors", *argv, str(path)], capsys)
        assert "x" * 150 + "END" in out and ELLIPSIS not in out


def test_width_from_columns_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

        def fileno(self) -> int:
            raise OSError

    monkeypatch.setenv("COLUMNS", "93")
    assert render.terminal_width(Tty()) == 93
    assert render.terminal_width(Tty(), 40) == 40
    assert render.terminal_width(Tty(), 0) is None
    assert render.terminal_width(sys.stdout if not sys.stdout.isatty() else None) is None


def test_color_only_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _evil_file(tmp_path / "m.safetensors")
    monkeypatch.delenv("NO_COLOR", raising=False)
    _, out, _ = run(["verify", str(path)], capsys)
    assert "\x1b[" not in out  # captured output is not a terminal
    _, out, _ = run(["verify", "--color", "always", str(path)], capsys)
    assert "\x1b[33mMEDIUM" in out
    # The only escape sequences are our own SGR codes.
    assert not RAW.search(re.sub(r"\x1b\[[0-9;]*m", "", out))
    assert render.use_color(None, "never") is False

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("TERM", "xterm")
    assert render.use_color(Tty(), "auto") is True
    monkeypatch.setenv("NO_COLOR", "1")
    assert render.use_color(Tty(), "auto") is False
    assert render.use_color(Tty(), "always") is True
    _, out, _ = run(["verify", "--color", "never", str(path)], capsys)
    assert "\x1b[" not in out


def test_plural_in_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "one.safetensors"
    fastst.numpy.save_file({"w": np.zeros(1, np.float32)}, path, metadata={"format": "np"})
    _, out, _ = run(["inspect", str(path)], capsys)
    assert "1 tensor " in out and "1 tensors" not in out
    assert "1 key: format" in out and "(1 bytes)" not in out
    _, out, _ = run(["verify", "--values", str(path)], capsys)
    assert "values of 1 tensor checked" in out


def test_envelope_for_every_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "m.safetensors"
    fastst.numpy.save_file({"w": np.zeros(2, np.float32)}, good)
    missing = str(tmp_path / "missing.safetensors")
    for command in ("inspect", "verify", "hash", "meta"):
        code, doc, err = run_envelope([command, "--json", str(good), missing], capsys)
        assert code == 2, command
        assert doc["command"] == command
        assert doc["fastst"]["schema"] == 2 and doc["fastst"]["version"] == fastst.__version__
        assert len(doc["results"]) == 1
        (error,) = doc["errors"]
        assert error["path"] == missing and "No such file" in error["message"]
        assert err.count("\n") == 1


def test_schema_rejects_a_wrong_shape() -> None:
    import jsonschema

    bad = {"fastst": {"version": "0", "schema": 2}, "command": "inspect", "results": [{}]}
    with pytest.raises(jsonschema.ValidationError):
        validate_envelope(bad)


def test_conflicting_flags_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "m.safetensors"
    fastst.numpy.save_file({"w": np.zeros(2, np.float32)}, good)
    for argv in (
        ["verify", "--json", "--format", "sarif", str(good)],
        ["verify", "--json", "--format", "text", str(good)],
        ["meta", "--json", "--raw", str(good)],
        ["inspect", "--width", "-3", str(good)],
        ["inspect", "--color", "sometimes", str(good)],
    ):
        code, out, err = run(argv, capsys)
        assert code == 2 and out == "" and "usage:" in err, argv
    assert run(["verify", "--json", "--format", "json", str(good)], capsys)[0] == 0


def test_bare_fastst_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run([], capsys)
    assert code == 2 and "usage: fastst" in out and "inspect" in out and "exit codes" in out
    code, out, _ = run(["--help"], capsys)
    assert code == 0 and "usage: fastst" in out


@pytest.mark.parametrize("command", ["inspect", "verify", "hash", "meta"])
def test_no_progress_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    good = tmp_path / "m.safetensors"
    fastst.numpy.save_file({"w": np.zeros(2, np.float32)}, good)
    assert run([command, "--no-progress", str(good)], capsys)[0] == 0


def test_sort_by_size_name_offset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.safetensors"
    fastst.numpy.save_file(
        {"b": np.zeros(5, np.float32), "a": np.zeros(1, np.float32), "c": np.zeros(9, np.int8)},
        path,
    )
    order = {}
    for sort in ("size", "name", "offset"):
        _, doc, _ = run_envelope(
            ["inspect", "--json", "--tensors", "--sort", sort, str(path)], capsys
        )
        order[sort] = [r["name"] for r in doc["results"][0]["table"]]
    assert order["size"] == ["b", "c", "a"]
    assert order["name"] == ["a", "b", "c"]
    rows = doc["results"][0]["table"]
    assert [r["begin"] for r in rows] == sorted(r["begin"] for r in rows)


def test_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    fastst.numpy.save_file({f"t{i:05d}": np.zeros(1, np.float32) for i in range(20000)}, path)
    script = (
        f"{sys.executable} -m fastst inspect --tensors {path} | head -n 1 >/dev/null; "
        'echo "status=${PIPESTATUS[0]}"'
    )
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "status=141"
    assert result.stderr == ""
