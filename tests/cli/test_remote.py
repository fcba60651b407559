"""The ``fastst`` command on whole remote checkpoints (an index URL, a prefix), ``meta`` and
``stats`` of URLs, and presigned URLs (their query sent with every GET, never shown), against
the real servers of remote_servers.py behind their counting proxy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import fastst
import fastst.numpy
import fastst.tools.inspect
import numpy as np
import pytest
from fastst._paths import readable
from fastst._sources import remote as _remote
from helpers.remote_servers import Site, fastst_cli, local_cli

# Real servers (SeaweedFS, HTTP, a proxy) started for these tests: outside the inner loop.
pytestmark = pytest.mark.slow

FIRST = 64 << 10  # what opening may fetch besides the size prefix and the header


def _tensors() -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        f"model.layers.{i}.w": rng.standard_normal((128, 96), dtype=np.float32) for i in range(4)
    } | {"embed": rng.standard_normal((64, 32)).astype(np.float16), "ids": np.arange(50)}


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sharded checkpoint on disk (index + 3 shards or more)."""
    folder = tmp_path_factory.mktemp("ckpt")
    index = fastst.numpy.save_sharded(
        _tensors(), folder, max_shard_size=60_000, metadata={"format": "pt"}
    )
    assert len(list(folder.iterdir())) >= 4
    return Path(index)


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("single") / "model.safetensors"
    metadata = {"format": "pt", "modelspec.title": "tiny", "ss_output_name": "x"}
    fastst.numpy.save_file(_tensors(), str(path), metadata=metadata)
    return path


@pytest.fixture(scope="module")
def published(local: Path, single: Path) -> Dict[str, Path]:
    """What the site holds: the checkpoint under ``ckpt/``, ``single`` as ``one/``."""
    ckpt = {f"ckpt/{f.name}": f for f in sorted(local.parent.iterdir())}
    return ckpt | {"one/model.safetensors": single}


def _cli(remote: Site, *args: str) -> subprocess.CompletedProcess[str]:
    return fastst_cli(*args, env=remote.env)


def _unnamed(value: Any) -> Any:
    """``value`` without the keys naming inputs (paths, URLs), at any depth."""
    if isinstance(value, dict):
        return {k: _unnamed(v) for k, v in value.items() if k not in ("path", "a", "b")}
    if isinstance(value, list):
        return [_unnamed(v) for v in value]
    return value


def _results(out: subprocess.CompletedProcess[str]) -> List[Any]:
    doc = json.loads(out.stdout)
    assert doc["errors"] == [], doc["errors"]
    return list(_unnamed(doc["results"]))


def _index_url(site: Site, local: Path) -> str:
    return site.url(f"ckpt/{local.name}")


# whole checkpoints -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["inspect", "--tensors"],
        ["verify", "--values"],
        ["hash", "--tensors", "--check"],
        ["meta"],
        ["stats"],
    ],
)
def test_an_index_url_is_the_whole_checkpoint(
    remote: Site, local: Path, command: List[str]
) -> None:
    out = _cli(remote, *command, "--json", _index_url(remote, local))
    here = local_cli(*command, "--json", str(local))
    assert out.returncode == here.returncode, out.stderr
    got = _results(out)
    assert got == _results(here)
    assert got[0]["kind"] == "checkpoint"


def test_a_prefix_is_the_checkpoint_under_it(remote: Site, local: Path) -> None:
    if remote.kind != "s3":
        pytest.skip("plain HTTP servers do not list")
    for command in (["inspect", "--tensors"], ["hash"], ["verify"]):
        out = _cli(remote, *command, "--json", remote.url("ckpt/"))
        here = local_cli(*command, "--json", str(local.parent))
        assert out.returncode == here.returncode, out.stderr
        assert _results(out) == _results(here)
        assert json.loads(out.stdout)["results"][0]["path"] == _index_url(remote, local)


def test_a_prefix_is_read_with_its_key_as_typed(remote: Site, local: Path) -> None:
    """``#``, ``?``, ``%`` and spaces in an object key are characters of it: the checkpoint
    under ``run #1?x=%41/`` is read, its index named as it is named locally."""
    if remote.kind != "s3":
        pytest.skip("plain HTTP servers do not list")
    prefix = "run #1?x=%41/"
    for f in sorted(local.parent.iterdir()):
        remote.put(prefix + f.name, f.read_bytes())
    for command in (["hash", "--tensors"], ["verify"]):
        out = _cli(remote, *command, "--json", remote.url(prefix))
        here = local_cli(*command, "--json", str(local.parent))
        assert out.returncode == here.returncode, out.stderr
        assert _results(out) == _results(here)
        assert json.loads(out.stdout)["results"][0]["path"] == remote.url(prefix + local.name)


def test_diff_of_index_urls_agrees_with_local(remote: Site, local: Path, tmp_path: Path) -> None:
    changed = dict(fastst.numpy.load_file(str(local)))
    changed["embed"] = changed["embed"] + 1
    index = fastst.numpy.save_sharded(changed, tmp_path, max_shard_size=60_000)
    for f in tmp_path.iterdir():
        remote.put(f"changed/{f.name}", f)
    url = remote.url(f"changed/{Path(index).name}")
    out = _cli(remote, "diff", "--json", _index_url(remote, local), url)
    here = local_cli("diff", "--json", str(local), str(index))
    assert out.returncode == here.returncode == 1, out.stderr
    assert _results(out) == _results(here)
    assert _results(out)[0]["different"][0]["name"] == "embed"


# meta and stats of one object ------------------------------------------------------------------


@pytest.mark.parametrize("command", ["meta", "stats"])
def test_meta_and_stats_of_a_url_agree_with_local(remote: Site, single: Path, command: str) -> None:
    """``meta`` reads the header only, ``stats`` each byte once."""
    out = _cli(remote, command, "--json", remote.url("one/model.safetensors"))
    here = local_cli(command, "--json", str(single))
    assert out.returncode == 0, out.stderr
    assert _results(out) == _results(here)
    if command == "meta":
        assert _results(out)[0]["card"]["title"] == "tiny"
        assert remote.proxy.body_bytes() <= FIRST
    else:
        assert remote.proxy.body_bytes() <= single.stat().st_size + FIRST


@pytest.mark.parametrize("edit", [["--in-place"], ["--output", "out.safetensors"]])
def test_meta_set_on_a_url_is_a_usage_error(remote: Site, edit: List[str]) -> None:
    url = remote.url("one/model.safetensors")
    # A secret in the URL: an HTTP URL's signature (its query), a store URL's user part (a
    # store URL has no query: "?" is a character of its key).
    if remote.kind == "s3":
        url = url.replace("s3://", "s3://someone:secret@", 1)
    else:
        url += "?X-Amz-Signature=secret"
    out = _cli(remote, "meta", "--set", "a=b", *edit, url)
    assert out.returncode == 2
    assert "usage:" in out.stderr and "read-only" in out.stderr, out.stderr
    assert "secret" not in out.stderr
    assert remote.proxy.records == []


# presigned URLs --------------------------------------------------------------------------------


def _presigned(remote: Site, key: str, **params: Any) -> str:
    """A URL carrying its authorisation in the query: S3's presigned GET (signed for the
    proxy's address), or a token query on the HTTP server."""
    if remote.kind == "s3":
        import boto3
        from botocore.config import Config
        from helpers.remote_servers import ACCESS_KEY, REGION, SECRET_KEY

        client = boto3.client(
            "s3",
            endpoint_url=remote.proxy.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
        )
        return str(
            client.generate_presigned_url(
                "get_object",
                Params={"Bucket": remote.bucket, "Key": remote.folder + key},
                ExpiresIn=params.get("expires", 600),
            )
        )
    return f"{remote.proxy.url}/{key}?token=abc%2Fdef&X-Amz-Signature=0123"


def test_presigned_urls_are_fetched_with_their_query(remote: Site, single: Path) -> None:
    url = _presigned(remote, "one/model.safetensors")
    query = url.split("?", 1)[1]
    want = fastst.numpy.load_file(str(single))
    with fastst.safe_open(url, framework="np") as f:
        assert f.metadata()["modelspec.title"] == "tiny"
        assert np.array_equal(f.get_tensor("embed"), want["embed"])
    got = fastst.numpy.load_file(url)
    assert list(got) == list(want) and all(np.array_equal(got[k], want[k]) for k in want)
    out = subprocess.run(
        [sys.executable, "-m", "fastst", "inspect", "--json", url],
        capture_output=True,
        text=True,
    )  # no credentials in the environment: the query is the authorisation
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["results"][0]["tensors"] == len(want)
    assert "?" not in doc["results"][0]["path"]
    assert remote.proxy.records
    for record in remote.proxy.records:
        assert record.method == "GET", record
        assert record.path.endswith("?" + query), record


def test_a_bad_signature_is_permission_error_without_the_query(remote: Site) -> None:
    if remote.kind != "s3":
        pytest.skip("the HTTP server checks no signature")
    url = _presigned(remote, "one/model.safetensors")
    good = url.split("X-Amz-Signature=")[1].split("&")[0]
    bad = url.replace(good, "f" * len(good))
    with pytest.raises(PermissionError) as caught:
        fastst.safe_open(bad, framework="np")
    text = str(caught.value)
    assert readable(bad) in text
    assert "X-Amz" not in text and good not in text and "ffff" not in text
    out = subprocess.run(
        [sys.executable, "-m", "fastst", "inspect", bad], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert "X-Amz" not in out.stdout + out.stderr
    assert readable(bad) in out.stdout + out.stderr


# hostile indexes and prefixes ------------------------------------------------------------------


def test_shard_names_of_a_remote_index_are_checked_and_escaped(remote: Site) -> None:
    index = {
        "metadata": {},
        "weight_map": {
            "a": "../../escape.safetensors",
            "b": "evil\x1b[31mred.safetensors",
            "c": "gone\u202e.safetensors",
        },
    }
    url = remote.put("hostile/model.safetensors.index.json", json.dumps(index).encode())
    out = _cli(remote, "verify", "--json", url)
    assert out.returncode == 1, out.stderr
    found = {f["tensor"] or f["shard"]: f["rule"] for f in _results(out)[0]["findings"]}
    assert found == {
        "a": "shard-path",
        "evil\x1b[31mred.safetensors": "shard-path",
        "gone\u202e.safetensors": "shard-missing",
    }, found
    assert all("escape" not in r.path for r in remote.proxy.records)
    text = _cli(remote, "verify", url)
    assert "\x1b" not in text.stdout + text.stderr and "\u202e" not in text.stdout + text.stderr
    assert "shard-path" in text.stdout
    out = _cli(remote, "inspect", "--json", url)
    assert out.returncode == 2
    assert [e["rule"] for e in json.loads(out.stdout)["errors"]] == ["shard-path"]


def test_a_prefix_with_too_many_objects_is_not_listed_whole(
    remote: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    if remote.kind != "s3":
        pytest.skip("plain HTTP servers do not list")
    for i in range(4):
        remote.put(f"crowd/sub/{i}.bin", b"x")
    for name, value in remote.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(_remote, "LIST_CAP", 3)
    with pytest.raises(fastst.FolderError, match="folder-over-cap|more than 3 objects") as caught:
        list(fastst.tools.inspect.iter_inputs([remote.url("crowd/")]))
    assert caught.value.rule == "folder-over-cap"
    monkeypatch.setattr(_remote, "LIST_CAP", 4)
    with pytest.raises(FileNotFoundError):  # 4 objects, none of them a checkpoint
        list(fastst.tools.inspect.iter_inputs([remote.url("crowd/")]))
