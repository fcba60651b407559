"""Under the drop-in switch a name is a path, as for the reference package: ``safe_open``,
``load_file`` and ``save_file`` given ``http://...`` look for (or write) a local file and make no
request, unless ``FASTST_DROPIN_URLS`` opts in; the ``fastst`` command reads the URLs it is
given. Checked against a loopback server, started here, that records every request."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator, List

import fastst
import fastst.numpy
import numpy as np
import pytest
from fastst import _settings
from fastst._dropin import facade
from helpers.cli_files import run
from helpers.remote_servers import RangeHTTPServer

T = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}


class RecordingServer(RangeHTTPServer):
    """:class:`RangeHTTPServer` keeping the request line of every request it answers."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.requests: List[str] = []
        seen = self.requests
        handler = self.server.RequestHandlerClass

        def record(self: object, format: str, *args: object) -> None:
            seen.append(getattr(self, "requestline", "?"))

        handler.log_message = record  # type: ignore[attr-defined,method-assign]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RecordingServer]:
    root = tmp_path_factory.mktemp("served")
    fastst.numpy.save_file(T, str(root / "m.safetensors"))
    srv = RecordingServer(root)
    yield srv
    srv.stop()


@pytest.fixture
def switched_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The switch on in this process (the flag the hook sets), no opt-in, and a fresh working
    folder (a URL taken as a relative path resolves there)."""
    monkeypatch.setattr(_settings, "dropin_active", True)
    monkeypatch.delenv(_settings.DROPIN_URLS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_urls_are_paths_under_the_switch(server: RecordingServer, switched_on: Path) -> None:
    url = f"{server.url}/m.safetensors"
    server.requests.clear()
    for call in (
        lambda: fastst.safe_open(url, "numpy"),
        lambda: facade.safe_open(url, "np"),
        lambda: fastst.numpy.load_file(url),
        lambda: fastst.numpy.save_file(T, f"{server.url}/written.safetensors"),
    ):
        with pytest.raises(FileNotFoundError) as info:
            call()
        assert "No such file or directory" in str(info.value) or info.value.errno
    assert server.requests == []
    # The reference's reading of such a name: a relative path ("http:/host/m.safetensors").
    local = switched_on / "http:" / server.url.removeprefix("http://") / "m.safetensors"
    local.parent.mkdir(parents=True)
    fastst.numpy.save_file({"local": np.zeros(2, np.uint8)}, str(local))
    with facade.safe_open(url, "np") as f:
        assert f.keys() == ["local"]
    assert list(fastst.numpy.load_file(url)) == ["local"]
    assert server.requests == []


def test_a_url_shown_as_a_path_loses_its_password(switched_on: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        fastst.safe_open("http://user:PASSWD@127.0.0.1:9/m.safetensors?sig=SECRETSIG", "numpy")
    assert "PASSWD" not in str(info.value) and "SECRETSIG" not in str(info.value)


@pytest.mark.parametrize("value", ["1", "true", " YES ", "on"])
def test_the_opt_in_reads_urls(
    server: RecordingServer, switched_on: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(_settings.DROPIN_URLS_ENV, value)
    server.requests.clear()
    with facade.safe_open(f"{server.url}/m.safetensors", "np") as f:
        assert (f.get_tensor("w") == T["w"]).all()
    assert server.requests and all(r.startswith("GET /m.safetensors") for r in server.requests)


@pytest.mark.parametrize("value", ["0", "", "no", "garbage"])
def test_other_values_do_not_opt_in(
    server: RecordingServer, switched_on: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(_settings.DROPIN_URLS_ENV, value)
    server.requests.clear()
    with pytest.raises(FileNotFoundError):
        fastst.safe_open(f"{server.url}/m.safetensors", "numpy")
    assert server.requests == []


def test_without_the_switch_urls_are_read(
    server: RecordingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_settings, "dropin_active", False)
    server.requests.clear()
    assert list(fastst.numpy.load_file(f"{server.url}/m.safetensors")) == ["w"]
    assert server.requests


def test_the_command_reads_the_urls_it_is_given(
    server: RecordingServer, switched_on: Path, capsys: pytest.CaptureFixture
) -> None:
    server.requests.clear()
    code, out, err = run(["inspect", f"{server.url}/m.safetensors"], capsys)
    assert code == 0 and "1 tensor" in out, err
    assert server.requests
    assert _settings.command_running is False  # the command's own setting ends with it
    with pytest.raises(FileNotFoundError):
        fastst.safe_open(f"{server.url}/m.safetensors", "numpy")


@pytest.mark.slow
def test_the_environment_switch_makes_no_request(server: RecordingServer, tmp_path: Path) -> None:
    """``FASTST_AS_SAFETENSORS=1`` as a program meets it: ``import safetensors`` served by
    fastst, a user-chosen name given to ``safetensors.safe_open``; then the same program run
    with the reference package. Both say FileNotFoundError, neither makes a request."""
    code = textwrap.dedent(
        f"""
        import sys, warnings
        warnings.simplefilter("ignore")
        if sys.argv[1] == "switch":
            import fastst._dropin.hook
            fastst._dropin.hook.install_from_environment()
        import safetensors, safetensors.numpy
        print(hasattr(safetensors, "__fastst_version__"))
        for call in (
            lambda: safetensors.safe_open("{server.url}/m.safetensors", "np"),
            lambda: safetensors.numpy.load_file("{server.url}/m.safetensors"),
        ):
            try:
                call()
            except FileNotFoundError as exc:
                print("FileNotFoundError", exc)
        """
    )
    env = {**os.environ, "FASTST_AS_SAFETENSORS": "1"}
    env.pop(_settings.DROPIN_URLS_ENV, None)
    server.requests.clear()
    seen = {}
    for mode in ("switch", "reference"):
        result = subprocess.run(
            [sys.executable, "-c", code, mode],
            env=env if mode == "switch" else {**env, "FASTST_AS_SAFETENSORS": "0"},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        seen[mode] = result.stdout.splitlines()
    assert seen["switch"][0] == "True" and seen["reference"][0] == "False"
    for lines in seen.values():
        assert [line.split()[0] for line in lines[1:]] == ["FileNotFoundError"] * 2, lines
    assert server.requests == []
