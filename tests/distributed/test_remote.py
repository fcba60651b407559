"""``load_distributed("s3://…")`` across gloo processes: every rank gets the checkpoint bit for
bit, and each byte of tensor data is fetched from the store by one rank only. Each rank talks to
the SeaweedFS store through a proxy of its own, which counts the bytes it sent that rank."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, List

import pytest
from helpers.ranks import start_ranks
from helpers.remote_servers import Proxy, SeaweedS3

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytest.importorskip("torch.multiprocessing")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (dist.is_available() and dist.is_gloo_available()), reason="torch without gloo"
    ),
]

FIRST = 64 << 10  # what opening may fetch besides the size prefix and the header
TIME_LIMIT = 150


def _worker(rank: int, world: int, port: int, env: List[Dict[str, str]], job: Dict[str, str]):
    os.environ.update(env[rank], MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if sys.platform.startswith("linux"):
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    try:
        from fastst.torch import load_distributed, load_file

        try:
            got = load_distributed(job["url"], chunk_size=1 << 20)
            want = load_file(job["local"])
            differ = [
                k
                for k in want
                if got[k].dtype != want[k].dtype
                or not torch.equal(got[k].view(torch.uint8), want[k].view(torch.uint8))
            ]
            result: Dict[str, Any] = {"differ": differ, "names": list(got) == list(want)}
        except Exception:  # noqa: BLE001 - reported to the test
            result = {"crashed": traceback.format_exc()}
        Path(job["out"], f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("world", [2, 3])
def test_each_byte_is_fetched_by_one_rank(s3_server: SeaweedS3, tmp_path: Path, world: int) -> None:
    from fastst.torch import save_file

    tensors = {
        f"w{i}": torch.randn(512, 1024, generator=torch.Generator().manual_seed(i))
        for i in range(8)
    }  # 16 MiB
    tensors["odd"] = torch.randn(333, 77).to(torch.bfloat16)
    local = tmp_path / "model.safetensors"
    save_file(tensors, str(local))
    url = s3_server.upload("distributed", f"w{world}/model.safetensors", local)
    header_end = 8 + struct.unpack("<Q", local.read_bytes()[:8])[0]
    data_len = local.stat().st_size - header_end
    proxies = [Proxy(s3_server.endpoint) for _ in range(world)]
    try:
        job = {"url": url, "local": str(local), "out": str(tmp_path)}
        env = [s3_server.env(p.url) for p in proxies]
        ctx = start_ranks(_worker, (world, _free_port(), env, job), world)
        deadline = time.monotonic() + TIME_LIMIT
        while not ctx.join(timeout=max(1.0, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                pytest.fail(f"the group of {world} did not finish in {TIME_LIMIT} s")
        fetched = [p.body_bytes() for p in proxies]
    finally:
        for p in proxies:
            p.stop()
    for rank in range(world):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert result.get("crashed") is None, result["crashed"]
        assert result == {"differ": [], "names": True}
    assert sum(fetched) <= data_len + world * (header_end + FIRST), fetched
    assert all(header_end <= f < data_len for f in fetched), fetched  # nobody fetched it all
