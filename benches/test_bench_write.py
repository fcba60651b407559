"""Writer benchmarks: ``save_file`` of a Llama-like BF16 state dict (about
1 GB; FASTST_BENCH_GB scales it, as for the read benchmarks) by fastst and
by the reference, against the raw write limit (``ndarray.tofile`` of the
same bytes, with and without fsync), a 20 000-tensor file, and the peak
extra memory of a save (measured in a subprocess).

Run: ``pytest benches/test_bench_write.py -s -p no:randomly``; the ratios
are printed by the last test (and the raw timings by pytest-benchmark).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable, Dict

import fastst
import fastst.numpy as fnp
import numpy as np
import pytest
import safetensors.numpy as ref_numpy
from layouts import SCALE, llama_like, tofile

ROUNDS = int(os.environ.get("FASTST_BENCH_ROUNDS", "3"))
RESULTS: Dict[str, float] = {}


@pytest.fixture(scope="module")
def state_dict() -> Dict[str, np.ndarray]:
    return llama_like(SCALE)


@pytest.fixture(scope="module")
def small_tensors() -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        f"blocks.{i // 10}.t{i % 10}": rng.standard_normal(int(rng.integers(16, 512))).astype(
            np.float32
        )
        for i in range(20_000)
    }


def run(benchmark, name: str, target: Path, write: Callable[[Path], None]) -> None:
    def setup():
        if target.exists():
            target.unlink()
        os.sync()  # start each round without a backlog of dirty pages
        return (target,), {}

    benchmark.pedantic(write, setup=setup, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    RESULTS[name] = benchmark.stats.stats.min
    target.unlink(missing_ok=True)


# ------------------------------------------------------------- 1 GB file


def test_fastst_save_file(benchmark, state_dict, tmp_path: Path) -> None:
    # A new file: the default does not flush it to disk (nothing to lose).
    run(benchmark, "fastst", tmp_path / "f.safetensors", lambda p: fnp.save_file(state_dict, p))


def test_fastst_save_file_durable(benchmark, state_dict, tmp_path: Path) -> None:
    # What replacing an existing file costs by default: fsync before rename.
    run(
        benchmark,
        "fastst_durable",
        tmp_path / "f.safetensors",
        lambda p: fastst.serialize_file(state_dict, p, durable=True),
    )


def test_fastst_save_file_no_fsync(benchmark, state_dict, tmp_path: Path) -> None:
    run(
        benchmark,
        "fastst_nosync",
        tmp_path / "f.safetensors",
        lambda p: fastst.serialize_file(state_dict, p, durable=False),
    )


def test_reference_save_file(benchmark, state_dict, tmp_path: Path) -> None:
    run(
        benchmark,
        "reference",
        tmp_path / "r.safetensors",
        lambda p: ref_numpy.save_file(state_dict, p),
    )


def test_tofile_raw_limit(benchmark, state_dict, tmp_path: Path) -> None:
    arrays = list(state_dict.values())
    run(benchmark, "tofile", tmp_path / "t.bin", lambda p: tofile(arrays, p, False))


def test_tofile_fsync_raw_limit(benchmark, state_dict, tmp_path: Path) -> None:
    arrays = list(state_dict.values())
    run(benchmark, "tofile_fsync", tmp_path / "t.bin", lambda p: tofile(arrays, p, True))


def test_same_bytes_as_reference(state_dict, tmp_path: Path) -> None:
    ours, theirs = tmp_path / "o.safetensors", tmp_path / "t.safetensors"
    fnp.save_file(state_dict, ours, metadata={"format": "pt"})
    ref_numpy.save_file(state_dict, theirs, metadata={"format": "pt"})
    assert ours.stat().st_size == theirs.stat().st_size
    with open(ours, "rb") as a, open(theirs, "rb") as b:
        while True:
            x, y = a.read(64 << 20), b.read(64 << 20)
            assert x == y
            if not x:
                break


# ------------------------------------------------------ 20 000 tensors


def test_fastst_many_tensors(benchmark, small_tensors, tmp_path: Path) -> None:
    # A new file each round (the setup removes it), as for the reference.
    run(
        benchmark,
        "fastst_20k",
        tmp_path / "m.safetensors",
        lambda p: fnp.save_file(small_tensors, p),
    )


def test_reference_many_tensors(benchmark, small_tensors, tmp_path: Path) -> None:
    run(
        benchmark,
        "reference_20k",
        tmp_path / "m.safetensors",
        lambda p: ref_numpy.save_file(small_tensors, p),
    )


# --------------------------------------------------------- peak memory

PEAK_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {bench_dir!r})
    import numpy as np
    from layouts import llama_like

    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise KeyError(key)

    which, layout, path, gb = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    sd = llama_like(gb)
    if layout == "bigendian":
        sd = {{k: v.view(np.uint16).astype(">u2") for k, v in sd.items()}}
    if which == "fastst":
        import fastst.numpy as m
    else:
        import safetensors.numpy as m
    payload = sum(v.nbytes for v in sd.values())
    m.save_file({{"warm": np.zeros(4, np.float32)}}, path)  # import-time work
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak RSS to the current RSS
    base = status("VmRSS")
    m.save_file(sd, path)
    print(json.dumps({{"payload": payload, "extra": status("VmHWM") - base}}))
    """
)


@pytest.mark.parametrize(
    "which, layout",
    [("fastst", "contiguous"), ("reference", "contiguous"), ("fastst", "bigendian")],
)
def test_peak_extra_memory(which: str, layout: str, tmp_path: Path) -> None:
    script = PEAK_SCRIPT.format(bench_dir=str(Path(__file__).parent))
    out = subprocess.run(
        [sys.executable, "-c", script, which, layout, str(tmp_path / "p.safetensors"), str(SCALE)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    share = result["extra"] / result["payload"]
    RESULTS[f"peak_{which}_{layout}"] = share
    print(
        f"\npeak extra memory during save_file ({which}, {layout}): "
        f"{result['extra'] / 2**20:.1f} MiB = {100 * share:.2f}% of "
        f"{result['payload'] / 2**30:.2f} GiB"
    )
    if which == "fastst":
        # Under 5% of the payload, or the fixed conversion window for tiny runs.
        assert share < 0.05 or result["extra"] < 48 << 20


def test_report_ratios() -> None:
    """Prints the ratios of the timings gathered above (min of the rounds)."""
    r = RESULTS
    lines = []

    def ratio(label: str, num: str, den: str) -> None:
        if num in r and den in r:
            lines.append(f"{label}: {r[num] / r[den]:.2f}")

    ratio("reference time / fastst time (save_file, new file)", "reference", "fastst")
    ratio("reference time / fastst time (durable=False)", "reference", "fastst_nosync")
    ratio("reference time / fastst time (durable=True)", "reference", "fastst_durable")
    ratio("fastst throughput / tofile throughput", "tofile", "fastst")
    ratio("fastst durable=False throughput / tofile throughput", "tofile", "fastst_nosync")
    ratio("fastst durable throughput / tofile+fsync throughput", "tofile_fsync", "fastst_durable")
    ratio("reference throughput / tofile throughput", "tofile", "reference")
    ratio("reference time / fastst time (20k tensors)", "reference_20k", "fastst_20k")
    for key in sorted(r):
        lines.append(f"  {key}: {r[key]:.4f}")
    print("\n" + "\n".join(lines))
