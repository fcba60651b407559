"""The command line, metadata editing and checkpoint conversion: behaviour no
other test pinned down, found by the Python mutation pass
(scripts/pymutants.py; the mutant each test kills is named in its docstring,
see docs/python-mutants.md)."""

from __future__ import annotations

import json

import fastst
import fastst.numpy
import numpy as np
import pytest
from cli_files import run

torch = pytest.importorskip("torch")


def _file(path):
    fastst.numpy.save_file({"w": np.arange(4, dtype=np.float32)}, path)
    return path


@pytest.mark.parametrize("updates", [[("a", "b")], "a=b", 3])
def test_update_metadata_needs_a_mapping(tmp_path, updates):
    """``updates`` that is not a mapping is a TypeError saying so, and the
    file is left alone (mutant: the check dropped, failing later with an
    AttributeError)."""
    src = _file(tmp_path / "m.safetensors")
    before = src.read_bytes()
    with pytest.raises(TypeError, match="updates must be a dict of str to str"):
        fastst.update_metadata(src, updates)
    assert src.read_bytes() == before


@pytest.mark.parametrize(
    "content",
    [torch.ones(3), [torch.ones(2)], {}, {"step": 3, "name": "x"}],
    ids=["tensor", "list", "empty-dict", "no-tensors"],
)
def test_convert_refuses_a_checkpoint_without_a_state_dict(tmp_path, capsys, content):
    """A checkpoint holding no dict of tensors (a bare tensor, a list, an
    empty dict, a dict of plain values) is refused with "no state dict" and
    nothing is written (mutants: ``and`` -> ``or`` in the state-dict test,
    which accepts ``{}`` or fails on ``.values()``; the final raise dropped)."""
    src = tmp_path / "c.pt"
    torch.save(content, src)
    out = tmp_path / "c.safetensors"
    code, _, err = run(["convert", str(src), str(out)], capsys)
    assert code == 2 and "no state dict" in err, err
    assert not out.exists()


def test_verify_summary_counts_unreadable_inputs(tmp_path, capsys):
    """With several inputs, the text output ends with a summary line, also
    when some inputs could not be read (mutant: ``reports - errors > 1``)."""
    good = _file(tmp_path / "good.safetensors")
    missing = tmp_path / "missing.safetensors"
    code, out, err = run(["verify", str(good), str(missing)], capsys)
    assert code == 2 and "missing.safetensors" in err
    assert out.rstrip().splitlines()[-1] == (
        "1 input verified: 0 with findings at or above low, 1 unreadable"
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


def test_parameter_counts_in_thousands_millions_billions_trillions(tmp_path, capsys):
    """Counts read as ``n`` with separators and a K/M/B/T figure from a
    thousand up, at each unit's exact boundary (mutant: a unit's scale
    changed); ``fastst inspect`` shows them for the parameter count."""
    from fastst.cli.render import count_text

    assert count_text(999) == "999"
    assert count_text(1000) == "1,000 (1.00K)"
    assert count_text(999_999) == "999,999 (1000.00K)"
    assert count_text(10**6) == "1,000,000 (1.00M)"
    assert count_text(10**9 - 1) == "999,999,999 (1000.00M)"
    assert count_text(10**9) == "1,000,000,000 (1.00B)"
    assert count_text(2_500_000_000) == "2,500,000,000 (2.50B)"
    assert count_text(10**12) == "1,000,000,000,000 (1.00T)"
    path = tmp_path / "p.safetensors"
    fastst.numpy.save_file({"w": np.zeros(1_500_000, dtype=np.uint8)}, path)
    code, out, _ = run(["inspect", str(path)], capsys)
    assert code == 0 and "parameters   1,500,000 (1.50M)" in out


def test_meta_card_shortens_only_long_descriptions(tmp_path, capsys):
    """The card of ``fastst meta`` shows a description of up to 400
    characters whole and cuts a longer one at 400 with "..." (the raw
    metadata below still has it whole) (mutant: the comparison flipped)."""
    long = tmp_path / "long.safetensors"
    short = tmp_path / "short.safetensors"
    for path, text in ((long, "d" * 450), (short, "a model of 400 chars or less")):
        fastst.numpy.save_file(
            {"w": np.zeros(2, dtype=np.float32)},
            path,
            metadata={"modelspec.description": text, "modelspec.title": "T"},
        )
    code, out, _ = run(["meta", str(long), str(short)], capsys)
    assert code == 0
    cards = [
        line.split(None, 1)[1] for line in out.splitlines() if line.startswith("  description")
    ]
    assert cards == ["d" * 400 + "...", "a model of 400 chars or less"]
    assert "modelspec.description: " + "d" * 450 in out


def test_meta_raw_values_cut_after_2000_characters(tmp_path, capsys):
    """Raw metadata values of ``fastst meta`` are shown whole up to 2,000
    characters; a longer one is cut there and says its length (mutant: the
    limit moved by one)."""
    path = tmp_path / "m.safetensors"
    fastst.numpy.save_file(
        {"w": np.zeros(2, dtype=np.float32)},
        path,
        metadata={"at_limit": "a" * 2000, "over_limit": "b" * 2001},
    )
    code, out, _ = run(["meta", "--raw", str(path)], capsys)
    assert code == 0
    assert "    at_limit: " + "a" * 2000 + "\n" in out
    assert "    over_limit: " + "b" * 2000 + "... (2,001 characters)\n" in out


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


def test_provenance_text_escapes_controls_but_not_spaces():
    """The provenance commands' terminal text goes through the one escaping
    rule of the command (fastst._text.escape): control, C1, bidi and
    line-breaking characters escaped, everything printable kept as it is, the
    space included (mutant: the control range stretched over the space)."""
    from fastst._text import escape as clean

    assert clean("model weights/a b.safetensors") == "model weights/a b.safetensors"
    assert clean("~ é 模型") == "~ é 模型"
    assert clean("a\tb\nc\x1b[31m\x7f\x9f") == "a\\tb\\nc\\u{1b}[31m\\u{7f}\\u{9f}"
    assert clean("x\u202ey\u2028z\u0085") == "x\\u{202e}y\\u{2028}z\\u{85}"
    assert clean("bad\udcffname") == "bad\\xFFname"
