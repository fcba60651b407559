"""`--html REPORT.html`: one self-contained static page. It is parsed, and
nothing in it may load anything (no src/href to another resource, no CSS
url() or @import, no script); hostile names, metadata and config values
come out as text, never markup; a headless browser (when one is installed)
renders it without fetching anything."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import fastst.numpy
import numpy as np
import pytest
from fastst.cli import html
from helpers.cli_files import run

EVIL = '<script>alert(1)</script><img src="http://evil.example/x.png">\x1b[2J\u202eevil'


class Page(HTMLParser):
    """Every tag with its attributes, the text, and what sits in <style>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: List[Tuple[str, Dict[str, Optional[str]]]] = []
        self.text: List[str] = []
        self.styles: List[str] = []
        self._in: List[str] = []

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data: str) -> None:
        (self.styles if self._in[-1:] == ["style"] else self.text).append(data)


def _parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text("utf-8"))
    page.close()
    return page


def assert_self_contained(page: Page) -> None:
    names = {tag for tag, _ in page.tags}
    assert not names & {"script", "img", "link", "iframe", "object", "embed", "image", "use"}
    for tag, attrs in page.tags:
        for key, value in attrs.items():
            assert key not in ("src", "href", "xlink:href", "srcset", "action", "style"), tag
            assert not key.startswith("on"), (tag, key)
            if tag == "meta" and key == "content":
                continue
            assert "http" not in (value or "") and "//" not in (value or ""), (tag, key, value)
    css = "".join(page.styles)
    assert "url(" not in css and "@import" not in css and "//" not in css


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    tensors = {"model.embed_tokens.weight": np.zeros((16, 8), np.float16)}
    for i in range(3):
        tensors[f"model.layers.{i}.q_proj.weight"] = np.zeros((8, 8), np.float16)
    tensors[EVIL] = np.zeros(2, np.float32)
    fastst.numpy.save_file(tensors, folder / "model.safetensors", metadata={EVIL: EVIL})
    config = {"architectures": [EVIL], "model_type": "llama", "num_hidden_layers": 4}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _hostile_text_stays_text(page: Page) -> None:
    shown = "".join(page.text)
    assert "<script>alert(1)</script>" in shown  # as text, escaped in the file
    assert "\x1b" not in shown and "\u202e" not in shown
    assert "\\u{1b}[2J\\u{202e}evil" in shown


def test_inspect_page(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.html"
    code, out, err = run(["inspect", "--html", str(report), str(model)], capsys)
    assert code == 0 and err == "" and "model.layers.{0-2}" in out  # the text report too
    page = _parse(report)
    assert_self_contained(page)
    _hostile_text_stays_text(page)
    shown = "".join(page.text)
    for fact in ("model.layers.{0-2}", "By dtype", "F16", "config.json", "mismatch"):
        assert fact in shown, fact
    assert sum(1 for tag, _ in page.tags if tag == "svg") >= 2
    # --tensors adds the flat table.
    run(["inspect", "--tensors", "--html", str(report), str(model)], capsys)
    assert "model.layers.2.q_proj.weight" in "".join(_parse(report).text)


def test_diff_page(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.safetensors"
    with fastst.safe_open(model / "model.safetensors", "numpy") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    tensors["model.layers.1.q_proj.weight"] = np.ones((8, 8), np.float16)
    tensors[EVIL + "2"] = np.zeros(1, np.float32)
    fastst.numpy.save_file(tensors, other)
    report = tmp_path / "diff.html"
    code, _, _ = run(
        ["diff", "--html", str(report), str(model / "model.safetensors"), str(other)], capsys
    )
    assert code == 1
    page = _parse(report)
    assert_self_contained(page)
    _hostile_text_stays_text(page)
    assert "model.layers.1.q_proj.weight" in "".join(page.text)


def test_stats_page(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "stats.html"
    code, _, err = run(["stats", "--html", str(report), str(model)], capsys)
    assert code == 0, err
    page = _parse(report)
    assert_self_contained(page)
    _hostile_text_stays_text(page)
    assert "model.layers.2.q_proj.weight" in "".join(page.text)
    assert sum(1 for tag, _ in page.tags if tag == "svg") >= 4  # a histogram per tensor


def test_stats_section_and_checker_are_not_vacuous() -> None:
    row: Dict[str, Any] = {
        "name": EVIL,
        "dtype": "F32",
        "min": -1.0,
        "max": 1.0,
        "mean": 0.0,
        "std": 0.5,
        "nan": 1,
        "inf": 0,
        "zero": 2,
        "histogram": {"lo": -1.0, "hi": 1.0, "counts": [1, 3, 2], "exact": True},
    }
    text = html.page("stats", [html.stats_section("x.safetensors", [row])])
    page = Page()
    page.feed(text)
    assert_self_contained(page)
    _hostile_text_stays_text(page)
    for bad in ('<img src="http://x/y.png">', "<style>a{background:url(x.png)}</style>"):
        page = Page()
        page.feed(text.replace("</body>", bad + "</body>"))
        with pytest.raises(AssertionError):
            assert_self_contained(page)


def test_unwritable_report_is_an_error(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["inspect", "--html", str(tmp_path / "no" / "r.html"), str(model)], capsys)
    assert code == 2 and "r.html" in err


def _browser() -> Optional[str]:
    for name in ("chromium", "chromium-browser", "google-chrome", "headless_shell"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.mark.skipif(_browser() is None, reason="no headless browser installed")
def test_a_browser_renders_it_offline(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.html"
    run(["inspect", "--html", str(report), str(model)], capsys)
    result = subprocess.run(
        [
            str(_browser()),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=1",
            "--dump-dom",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, HOME=str(tmp_path)),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    assert "model.layers.{0-2}" in dom and "<svg" in dom
    assert "<script>alert" not in dom  # the hostile name stayed text
    # Nothing but the page itself was requested.
    requested = [
        line for line in result.stderr.splitlines() if "http://" in line or "https://" in line
    ]
    assert not [line for line in requested if "evil.example" in line], requested


def test_diff_section_shows_the_change_profile() -> None:
    difference = {
        "name": EVIL,
        "dtype": "F32",
        "shape": [2],
        "elements": 2,
        "differing": 1,
        "max_abs": 0.5,
        "max_rel": 0.25,
        "rel_l2": 0.125,
        "cosine": 0.99,
    }
    d: Dict[str, Any] = {
        "a": "a.safetensors",
        "b": "b.safetensors",
        "identical": False,
        "tensors": 1,
        "identical_tensors": 0,
        "only_in_a": [],
        "only_in_b": [],
        "dtype_changed": [],
        "shape_changed": [],
        "different": [difference],
        "layers": [{"layer": "model.layers.3", "tensors": 4, "changed": 1, "max_rel_l2": 0.125}],
    }
    page = Page()
    page.feed(html.page("diff", [html.diff_section(d)]))
    assert_self_contained(page)
    _hostile_text_stays_text(page)
    shown = "".join(page.text)
    assert "Largest relative L2 change per layer" in shown and "model.layers.3" in shown
    assert "0.125" in shown and "0.99" in shown
