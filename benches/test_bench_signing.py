"""Benchmarks of model signing against the `model_signing` command, on the
same files in the same run (EC P-256 key generated here, page cache warm):

- sign + verify of a ~1 GB model folder (the shared Llama-like BF16
  checkpoint of ``layouts.py``, about ``FASTST_BENCH_GB`` GB, hard-linked
  into a folder with a config file): ``fastst sign`` / ``fastst verify
  --signature`` vs ``model_signing sign key`` / ``model_signing verify key``,
  whole commands (start-up included), both in the ``files`` serialization;
  and ``fastst sign --shard-size`` (the ``shards`` serialization, which
  hashes one large file in parallel pieces);
- a 10-file folder (10 x ``FASTST_BENCH_GB / 10`` GB) hashed in parallel
  across files (fastst with one thread per core vs one thread) and by
  model_signing's hashing API.

Run with ``python -m pytest benches/test_bench_signing.py --benchmark-only -s``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import pytest
from layouts import BENCH_DIR, SCALE

ROUNDS = int(os.environ.get("FASTST_BENCH_ROUNDS", "3"))
MODEL_SIGNING = str(Path(sys.executable).with_name("model_signing"))


def _best(fn: Callable[[], object], rounds: int = ROUNDS) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _fastst() -> List[str]:
    exe = shutil.which("fastst", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "fastst"]


def _run(cmd: List[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert r.returncode == 0, (cmd, r.stdout, r.stderr)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    folder = tmp_path_factory.mktemp("keys")
    key = ec.generate_private_key(ec.SECP256R1())
    priv, pub = folder / "key.pem", folder / "key.pub"
    priv.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pub.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return {"priv": priv, "pub": pub}


@pytest.fixture(scope="module")
def model_1gb(llama_bf16: Path) -> Path:
    folder = BENCH_DIR / f"signing-model-{SCALE:g}gb"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "model.safetensors"
    if not target.exists():
        os.link(llama_bf16, target)
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    return folder


@pytest.fixture(scope="module")
def ten_files() -> Path:
    folder = BENCH_DIR / f"ten-files-{SCALE:g}gb"
    folder.mkdir(parents=True, exist_ok=True)
    size = int(SCALE * (1 << 30)) // 10
    block = os.urandom(1 << 20)
    for i in range(10):
        path = folder / f"part-{i:02d}.bin"
        if path.exists() and path.stat().st_size == size:
            continue
        with open(path, "wb") as f:
            left = size
            while left:
                n = min(left, len(block))
                f.write(block[:n])
                left -= n
    return folder


def test_sign_and_verify_vs_model_signing(
    benchmark: pytest.FixtureRequest, model_1gb: Path, keys: Dict[str, Path], tmp_path: Path
) -> None:
    size = sum(p.stat().st_size for p in model_1gb.iterdir() if p.is_file() and p.suffix != ".sig")
    sig_f, sig_m, sig_s = tmp_path / "f.sig", tmp_path / "m.sig", tmp_path / "s.sig"
    f_sign = [
        *_fastst(),
        "sign",
        str(model_1gb),
        "--key",
        str(keys["priv"]),
        "--signature",
        str(sig_f),
    ]
    f_verify = [*_fastst(), "verify", str(model_1gb), "--signature", str(sig_f),
                "--public-key", str(keys["pub"])]  # fmt: skip
    m_sign = [MODEL_SIGNING, "sign", "key", str(model_1gb), "--private_key", str(keys["priv"]),
              "--signature", str(sig_m)]  # fmt: skip
    m_verify = [MODEL_SIGNING, "verify", "key", str(model_1gb), "--signature", str(sig_m),
                "--public_key", str(keys["pub"])]  # fmt: skip
    shard = str(max(1 << 20, size // (os.cpu_count() or 1) + 1))
    s_sign = [*_fastst(), "sign", str(model_1gb), "--key", str(keys["priv"]), "--signature",
              str(sig_s), "--shard-size", shard]  # fmt: skip
    s_verify = [*_fastst(), "verify", str(model_1gb), "--signature", str(sig_s),
                "--public-key", str(keys["pub"])]  # fmt: skip
    _run(m_sign)  # warms the page cache, and checks that each side works
    _run(f_sign)

    def fastst_round() -> None:
        _run(f_sign)
        _run(f_verify)

    benchmark.pedantic(fastst_round, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    commands = {
        "fastst sign": f_sign,
        "fastst verify": f_verify,
        "model_signing sign": m_sign,
        "model_signing verify": m_verify,
        "fastst sign (shards)": s_sign,
        "fastst verify (shards)": s_verify,
    }
    # Interleaved rounds, best of each, so that a change in the machine's
    # load does not favour one side.
    times = {name: float("inf") for name in commands}
    for _ in range(ROUNDS):
        for name, cmd in commands.items():
            t0 = time.perf_counter()
            _run(cmd)
            times[name] = min(times[name], time.perf_counter() - t0)
    fastst_s = times["fastst sign"] + times["fastst verify"]
    # cross-checks in the same run: each verifies the other's signature
    _run([MODEL_SIGNING, "verify", "key", str(model_1gb), "--signature", str(sig_f),
          "--public_key", str(keys["pub"])])  # fmt: skip
    _run([*_fastst(), "verify", str(model_1gb), "--signature", str(sig_m),
          "--public-key", str(keys["pub"])])  # fmt: skip
    ms_s = times["model_signing sign"] + times["model_signing verify"]
    ratio = ms_s / fastst_s
    shard_ratio = ms_s / (times["fastst sign (shards)"] + times["fastst verify (shards)"])
    benchmark.extra_info.update(
        {"model_bytes": size, "sign_plus_verify_ratio": ratio, "shards_ratio": shard_ratio, **times}
    )
    gib = size / (1 << 30)
    print(f"\nsign + verify of a {gib:.2f} GiB model folder (best of {ROUNDS}):")
    for name, t in times.items():
        print(f"  {name:24s} {t:7.3f} s  ({gib / t:.2f} GiB/s)")
    print(
        f"  model_signing / fastst (sign + verify, files): {ratio:.2f}x; "
        f"with fastst's shards serialization: {shard_ratio:.2f}x (target >= 2)"
    )
    assert ratio > 1.0


def test_ten_files_hashed_in_parallel(benchmark: pytest.FixtureRequest, ten_files: Path) -> None:
    from fastst.tools.provenance.hashing import Piece, hash_pieces, list_model
    from model_signing import hashing as ms_hashing

    files, problems = list_model(str(ten_files))
    assert len(files) == 10 and not problems
    pieces = [Piece(f.name, f.path, 0, None) for f in files]
    sizes = {f.name: f.size for f in files}
    total = sum(sizes.values())

    def parallel() -> Dict[str, str]:
        return hash_pieces(pieces, threads=0, sizes=sizes)[0]

    digests = benchmark.pedantic(parallel, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    parallel_s = benchmark.stats.stats.min
    serial_s = _best(lambda: hash_pieces(pieces, threads=1, sizes=sizes))
    manifest = ms_hashing.Config().hash(ten_files)
    expected = {rd.identifier: rd.digest.digest_hex for rd in manifest.resource_descriptors()}
    assert expected == digests
    ms_s = _best(lambda: ms_hashing.Config().hash(ten_files))
    gib = total / (1 << 30)
    benchmark.extra_info.update(
        {
            "bytes": total,
            "parallel_s": parallel_s,
            "one_thread_s": serial_s,
            "model_signing_s": ms_s,
        }
    )
    print(
        f"\n10 files, {gib:.2f} GiB, {os.cpu_count()} cores: fastst parallel {parallel_s:.3f} s "
        f"({gib / parallel_s:.2f} GiB/s), one thread {serial_s:.3f} s "
        f"(x{serial_s / parallel_s:.2f}), "
        f"model_signing API {ms_s:.3f} s (x{ms_s / parallel_s:.2f})"
    )
    assert serial_s / parallel_s > 1.0 or (os.cpu_count() or 1) == 1
