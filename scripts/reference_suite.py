#!/usr/bin/env python3
"""Runs the reference package's own Python test suite against fastst.

Fetches the safetensors 0.8.0 source distribution from the package registry
(``pip download``; cached under ``target/reference-suite/``, never
committed), takes its ``bindings/python/tests`` folder unchanged, and runs
every test file twice, one pytest process per file (paddle and tensorflow
crash each other in one process):

- against the reference package as installed (the baseline), and
- through fastst's drop-in hook (``python -m fastst run -m pytest ...``),
  where ``import safetensors`` is served by fastst.

Tests that need a GPU are deselected on a machine without CUDA. Fails (exit
status 1) if any test that passes for the reference does not pass for
fastst, or if no test passes for the reference (the baseline did not run);
a file the reference cannot run at all (a framework it imports is missing)
is reported and not compared. Prints a table either way.

    python scripts/reference_suite.py [-k EXPR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Dict, List, Tuple

VERSION = "0.8.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, "target", "reference-suite")

#: Tests that put tensors on a CUDA device without skipping themselves when
#: there is none: deselected on machines without CUDA.
GPU_ONLY = [
    "test_paddle_comparison.py::SafeTestCase::test_paddle_tensor_gpu",
    "test_paddle_comparison.py::SafeTestCase::test_paddle_slice_gpu",
]


def fetch_sdist() -> str:
    """Path of the 0.8.0 sdist's ``bindings/python`` folder, downloading and
    unpacking it on first use."""
    unpacked = os.path.join(CACHE, f"safetensors-{VERSION}")
    tests = os.path.join(unpacked, "bindings", "python")
    if os.path.isdir(os.path.join(tests, "tests")):
        return tests
    os.makedirs(CACHE, exist_ok=True)
    archive = os.path.join(CACHE, f"safetensors-{VERSION}.tar.gz")
    if not os.path.exists(archive):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--dest",
                CACHE,
                f"safetensors=={VERSION}",
            ],
            check=True,
        )
    with tarfile.open(archive) as tar:
        members = [
            m
            for m in tar.getmembers()
            if m.name.startswith(f"safetensors-{VERSION}/bindings/python/tests/")
            and (m.isfile() or m.isdir())
        ]
        for member in members:
            # Only plain files and folders under the expected prefix, no
            # absolute paths or '..' (the archive comes from the network).
            parts = member.name.split("/")
            if member.name.startswith("/") or ".." in parts:
                raise SystemExit(f"refusing archive member {member.name!r}")
            target = os.path.join(CACHE, *parts)
            if member.isdir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            with open(target, "wb") as out:
                shutil.copyfileobj(source, out)
    return tests


_RESULT = re.compile(r"^(tests/\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_OUTCOME = {"PASSED": "passed", "XPASS": "passed", "SKIPPED": "skipped", "XFAIL": "skipped"}


def outcomes(output: str) -> Dict[str, str]:
    """test id -> "passed" / "failed" / "skipped", read from ``pytest -v``
    output (which, unlike a report file, survives a crashing process)."""
    result: Dict[str, str] = {}
    for line in output.splitlines():
        found = _RESULT.match(line)
        if found:
            result.setdefault(found.group(1), _OUTCOME.get(found.group(2), "failed"))
    return result


def _pytest(
    run_dir: str, args: List[str], through_fastst: bool, verbose: bool = True
) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    env.pop("FASTST_AS_SAFETENSORS", None)
    pytest_args = ["-m", "pytest", "-v" if verbose else "-q", "-p", "no:cacheprovider", *args]
    if through_fastst:
        command = [sys.executable, "-m", "fastst", "run", *pytest_args]
    else:
        command = [sys.executable, *pytest_args]
        # The baseline must see the reference package, not a fastst checkout.
        env.pop("PYTHONPATH", None)
    return subprocess.run(
        command, cwd=run_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def run_file(
    bindings: str, test_file: str, through_fastst: bool, workdir: str
) -> Tuple[Dict[str, str], int, str, float]:
    """Runs one test file in a fresh copy of ``bindings/python/tests``;
    returns (outcomes, exit status, output tail, seconds). When the process
    dies (a crash in a framework), the tests it did not get to are run one
    per process and a test that crashes on its own counts as failed."""
    run_dir = tempfile.mkdtemp(dir=workdir)
    shutil.copytree(os.path.join(bindings, "tests"), os.path.join(run_dir, "tests"))
    args = [os.path.join("tests", test_file)]
    if not _has_cuda():
        for test_id in GPU_ONLY:
            if test_id.startswith(test_file + "::"):
                args.append(f"--deselect=tests/{test_id}")
    started = time.monotonic()
    proc = _pytest(run_dir, args, through_fastst)
    output = proc.stdout.decode("utf-8", "replace")
    result = outcomes(output)
    if proc.returncode < 0 or proc.returncode > 5:
        listed = _pytest(run_dir, [*args, "--collect-only"], through_fastst, verbose=False)
        ids = [
            line.strip()
            for line in listed.stdout.decode("utf-8", "replace").splitlines()
            if line.startswith("tests/") and "::" in line
        ]
        for test_id in ids:
            if test_id in result:
                continue
            alone = _pytest(run_dir, [test_id], through_fastst)
            got = outcomes(alone.stdout.decode("utf-8", "replace"))
            result[test_id] = got.get(test_id, f"crashed (exit {alone.returncode})")
            output += f"\n{test_id}: {result[test_id]} when run alone"
    took = time.monotonic() - started
    return result, proc.returncode, output[-4000:], took


_CUDA = None


def _has_cuda() -> bool:
    global _CUDA
    if _CUDA is None:
        probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
        _CUDA = subprocess.run([sys.executable, "-c", probe]).returncode == 0
    return _CUDA


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", dest="only", help="run only test files whose name contains this")
    parser.add_argument("--keep", action="store_true", help="keep the run folders")
    args = parser.parse_args()
    bindings = fetch_sdist()
    files = sorted(f for f in os.listdir(os.path.join(bindings, "tests")) if f.startswith("test_"))
    if args.only:
        files = [f for f in files if args.only in f]
    workdir = tempfile.mkdtemp(prefix="fastst-reference-suite-")
    regressions: List[str] = []
    totals = {"reference": 0, "fastst": 0}
    print(f"safetensors {VERSION} test suite: reference vs fastst (python -m fastst run)")
    print(f"{'file':34} {'reference':>10} {'fastst':>10}  seconds")
    try:
        for test_file in files:
            ref, ref_rc, ref_tail, ref_s = run_file(bindings, test_file, False, workdir)
            ours, our_rc, our_tail, our_s = run_file(bindings, test_file, True, workdir)
            ref_pass = sorted(t for t, o in ref.items() if o == "passed")
            our_pass = {t for t, o in ours.items() if o == "passed"}
            totals["reference"] += len(ref_pass)
            totals["fastst"] += len(our_pass)
            print(
                f"{test_file:34} {len(ref_pass):>4}/{len(ref):<5} {len(our_pass):>4}/{len(ours):<5}"
                f"  {ref_s:5.1f} {our_s:5.1f}"
            )
            if not ref and ref_rc not in (0, 5):
                # Nothing to compare with (e.g. a framework the file imports is
                # not installed): reported, not counted.
                last = ref_tail.strip().splitlines()[-1:] or [""]
                print(f"  (the reference could not run this file, exit {ref_rc}: {last[0]})")
            lost = [t for t in ref_pass if t not in our_pass]
            for test_id in lost:
                regressions.append(f"{test_file}: {test_id}: {ours.get(test_id, 'not run')}")
            if lost or (ref and not ours and our_rc not in (0, 5)):
                if not ours:
                    regressions.append(f"{test_file}: the fastst run did not run (exit {our_rc})")
                print(our_tail)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"run folders kept in {workdir}")
    print(f"passed: reference {totals['reference']}, fastst {totals['fastst']}")
    if totals["reference"] == 0:
        regressions.append("no test passed for the reference: the baseline did not run")
    if regressions:
        print("tests passing for the reference but not for fastst:")
        for line in regressions:
            print(f"  {line}")
        return 1
    print("every test passing for the reference passes for fastst")
    return 0


if __name__ == "__main__":
    sys.exit(main())
