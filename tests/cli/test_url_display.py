"""URLs carrying secrets (a presigned signature in the query, ``user:password@``, a fragment),
parsable or not, as the command and the library show them: the one display rule everywhere,
in the ``--html`` page's title and headings, the progress line on a terminal, error messages,
``--json`` and SARIF; and no page for a run that read nothing. Against a loopback HTTP server
started here."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List, Tuple

import fastst
import fastst.numpy
import fastst.tools.inspect as fi
import numpy as np
import pytest
from fastst._paths import progress_label, readable, shown
from helpers.cli_files import run
from helpers.remote_servers import RangeHTTPServer

#: Tokens that stand for secrets: none may appear in anything fastst shows.
SECRETS = ("PASSWD", "SECRETSIG", "CREDENTIAL", "FRAGSECRET")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RangeHTTPServer]:
    root = tmp_path_factory.mktemp("served")
    tensors = {f"model.layers.{i}.w": np.full((32, 16), i, dtype=np.float32) for i in range(3)}
    fastst.numpy.save_file(tensors, str(root / "m.safetensors"))
    fastst.numpy.save_file({"model.layers.0.w": tensors["model.layers.0.w"]}, str(root / "b.st"))
    srv = RangeHTTPServer(root)
    yield srv
    srv.stop()


def _readable_urls(srv: RangeHTTPServer, name: str = "m.safetensors") -> List[str]:
    """URLs the server answers, each carrying a secret."""
    host = srv.url.removeprefix("http://")
    return [
        f"{srv.url}/{name}?X-Amz-Signature=SECRETSIG&X-Amz-Credential=CREDENTIAL",
        f"http://user:PASSWD@{host}/{name}",
        f"{srv.url}/{name}#FRAGSECRET",
    ]


#: URLs no parser takes (a bad port, a broken IPv6 host), with a password.
UNPARSABLE = [
    "http://user:PASSWD@127.0.0.1:99999/m.safetensors",
    "http://user:PASSWD@[::1/m.safetensors",
    "s3://key:PASSWD@[bucket/m.safetensors",
    "https://user:PASS/WD@127.0.0.1:99999/m.safetensors",
]


def _clean(text: str) -> bool:
    return not any(s in text for s in SECRETS) and "WD@" not in text


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://u:PASSWD@h:8/a/m.st?X-Amz-Signature=SECRETSIG#FRAGSECRET", "https://h:8/a/m.st"),
        ("http://user:PASSWD@127.0.0.1:99999/m.st", "http://127.0.0.1:99999/m.st"),
        ("http://user:PASSWD@[::1/m.st", "http://[::1/m.st"),
        ("https://user:PASS/WD@h:99999/m.st?sig=SECRETSIG", "https://h:99999/m.st"),
        # A store's key is taken literally: "?" is a character of it, shown.
        ("s3://key:PASSWD@bucket/m.st?versionId=1", "s3://bucket/m.st?versionId=1"),
        ("s3://key:PASS/WD@bucket/m.st", "s3://bucket/m.st"),
    ],
)
def test_one_rule_for_every_string_that_might_be_a_url(url: str, expected: str) -> None:
    assert readable(url) == shown(url) == expected
    assert progress_label(url, True) == expected
    # File names are left as they are (results keep them exactly).
    assert shown("dir/m?v=1#x.safetensors") == "dir/m?v=1#x.safetensors"
    assert shown("m\udcff.safetensors") == "m\udcff.safetensors"


@pytest.mark.parametrize("url", UNPARSABLE)
def test_errors_of_unparsable_urls_hold_no_secret(url: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ValueError) as info:
        fastst.safe_open(url, "numpy")
    assert _clean(str(info.value)), info.value
    code, out, err = run(["verify", url], capsys)
    assert code == 2 and _clean(out) and _clean(err), (out, err)
    code, out, err = run(["verify", "--json", url], capsys)
    doc = json.loads(out)
    assert code == 2 and doc["errors"] and _clean(out) and _clean(err), out
    code, out, err = run(["verify", "--format", "sarif", url], capsys)
    assert code == 2 and json.loads(out)["runs"] and _clean(out) and _clean(err), out
    code, out, err = run(["inspect", "--json", url], capsys)
    assert code == 2 and _clean(out) and _clean(err), out


def test_html_pages_name_urls_without_secrets(
    server: RangeHTTPServer, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    for n, url in enumerate(_readable_urls(server)):
        for command in ("inspect", "stats"):
            page = tmp_path / f"{command}{n}.html"
            code, out, err = run([command, "--html", str(page), url], capsys)
            assert code == 0, err
            text = page.read_text()
            assert f"<title>fastst {command}: {server.url}/m.safetensors</title>" in text
            assert f"<h1>fastst {command}: {server.url}/m.safetensors</h1>" in text
            assert _clean(text) and _clean(out) and _clean(err)
    a, b = _readable_urls(server)[0], _readable_urls(server, "b.st")[1]
    page = tmp_path / "diff.html"
    code, out, err = run(["diff", "--html", str(page), a, b], capsys)
    assert code == 1 and _clean(page.read_text()) and _clean(out) and _clean(err), err
    code, out, err = run(["verify", "--format", "sarif", a, b], capsys)
    assert code == 0 and _clean(out) and _clean(err)


@pytest.mark.parametrize("command", ["inspect", "stats"])
def test_no_page_for_a_run_that_read_nothing(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    page = tmp_path / "r.html"
    code, out, err = run([command, "--html", str(page), *UNPARSABLE[:2]], capsys)
    assert code == 2 and not page.exists()
    assert "no report written" in err and _clean(out) and _clean(err), err
    code, _out, err = run(
        [command, "--html", str(page), str(tmp_path / "missing.safetensors")], capsys
    )
    assert code == 2 and not page.exists(), err


def test_diff_that_opened_nothing_writes_no_page(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    page = tmp_path / "d.html"
    code, out, err = run(["diff", "--html", str(page), UNPARSABLE[0], UNPARSABLE[1]], capsys)
    assert code == 2 and not page.exists() and _clean(out) and _clean(err), err


def test_library_progress_lines_name_urls_without_secrets(
    server: RangeHTTPServer, capfd: pytest.CaptureFixture
) -> None:
    for url in _readable_urls(server):
        fi.hash_file(url, progress=True)
        fi.verify_file(url, values=True, progress=True)
        err = capfd.readouterr().err
        assert f"{server.url}/m.safetensors: [" in err and _clean(err), err


def _on_terminal(args: List[str]) -> Tuple[int, bytes, bytes]:
    """``python -m fastst ARGS`` with stderr on a pseudo-terminal: (exit code, stdout, what the
    terminal got)."""
    leader, follower = pty.openpty()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "fastst", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=follower,
            timeout=120,
        )
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # the other end is closed
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
    return result.returncode, result.stdout, seen


@pytest.mark.slow
def test_the_progress_line_on_a_terminal_holds_no_secret(server: RangeHTTPServer) -> None:
    url = _readable_urls(server)[0].replace("http://", "http://user:PASSWD@", 1)
    for command in (["hash"], ["stats"], ["verify", "--values"]):
        code, out, seen = _on_terminal([*command, url])
        text = seen.decode("utf-8", "replace")
        assert code == 0, (command, out, text)
        assert f"{server.url}/m.safetensors: [" in text, text  # the line was drawn
        assert _clean(text) and _clean(out.decode()), (command, text)
