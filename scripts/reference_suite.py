#!/usr/bin/env python3
"""Runs the reference package's own Python test suite against fastst.

For each reference release in :data:`SUITES` (0.8.0 and 0.9.0rc1), fetches
its source distribution from PyPI (the file itself, found through the
index's JSON page and checked against its pinned SHA-256: nothing is built;
cached under ``target/reference-suite/``, never committed), takes its
``bindings/python/tests`` folder unchanged, and runs every test file, one
pytest process per file (paddle and tensorflow crash each other in one
process), several files at a time (``--jobs``, one per core by default):

- through fastst's drop-in hook (``python -m fastst run -m pytest ...``),
  where ``import safetensors`` is served by fastst;
- then, where fastst did not pass every test of the file, those tests
  against the reference package of that release (the baseline; the whole
  file when the fastst run stopped short), to tell a regression
  from a test the reference does not pass either here (a framework that is
  not installed): 0.8.0 as installed in the environment; 0.9.0rc1 installed
  at test time with pip into ``target/reference-suite/site-0.9.0rc1`` (its
  wheel, no dependencies; the environment keeps 0.8.0) and put first on
  ``PYTHONPATH``. ``--baseline`` runs it on every file, whole.

A test file of a later release that is byte for byte the same as the
earlier release's (with the same ``data`` folder) runs once, with the
earlier suite: through fastst it is the same run (``--all`` runs it again
against the later baseline). Of 0.9.0rc1's files only
``test_pread_backend.py`` differs from 0.8.0's.

Tests that need a GPU are deselected on a machine without CUDA. Fails (exit
status 1) if any test that passes for the reference does not pass for
fastst, if no test of a release passes for fastst, or if the baseline ran
and ``import safetensors`` there is not the reference of that release; a
file the reference cannot run at all (a framework it imports is missing)
is reported and not compared. Prints a
mark per test (. passed, s skipped, F failed) and a line per file, in file
order as the files finish (as the tests run with ``--jobs 1``).

    python scripts/reference_suite.py [-k EXPR] [--version V] [--all] [--baseline] [--keep]
        [--jobs N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Optional, Tuple

from packaging.version import Version

#: Each reference release whose suite runs: its version, the SHA-256 of its
#: sdist as published on PyPI, and whether its baseline is installed at test
#: time (else: the package installed in the environment).
SUITES: List[Tuple[str, str, bool]] = [
    ("0.8.0", "fabaf3e0f18a6618d9b36560682562157f77c2b71fcffc7b432be2baed9d753d", False),
    ("0.9.0rc1", "8a70d139a45d71557e116339f5115afe88af2d80b08701c31ce0478d5bfc8d93", True),
]
INDEX = "https://pypi.org/simple/safetensors/"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, "target", "reference-suite")

#: Tests that put tensors on a CUDA device without skipping themselves when
#: there is none: deselected on machines without CUDA.
GPU_ONLY = [
    "test_paddle_comparison.py::SafeTestCase::test_paddle_tensor_gpu",
    "test_paddle_comparison.py::SafeTestCase::test_paddle_slice_gpu",
]


def _get(url: str, accept: str = "*/*") -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=120) as response:
        data: bytes = response.read()
    return data


def _download_sdist(version: str, sha256: str) -> bytes:
    """The sdist's bytes, located through the index's JSON page (PEP 691)
    and refused unless they match ``sha256``."""
    name = f"safetensors-{version}.tar.gz"
    page = json.loads(_get(INDEX, "application/vnd.pypi.simple.v1+json"))
    urls = [f["url"] for f in page["files"] if f["filename"] == name]
    if not urls:
        raise SystemExit(f"{name} is not listed at {INDEX}")
    print(f"downloading {name}", flush=True)
    data = _get(urls[0])
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SystemExit(f"{name} from {urls[0]} does not match its pinned SHA-256")
    return data


def fetch_sdist(version: str, sha256: str) -> str:
    """Path of the ``version`` sdist's ``bindings/python`` folder,
    downloading and unpacking it on first use."""
    unpacked = os.path.join(CACHE, f"safetensors-{version}")
    tests = os.path.join(unpacked, "bindings", "python")
    if os.path.isdir(os.path.join(tests, "tests")):
        return tests
    os.makedirs(CACHE, exist_ok=True)
    archive = os.path.join(CACHE, f"safetensors-{version}.tar.gz")
    if not os.path.exists(archive):
        data = _download_sdist(version, sha256)
        partial = archive + ".part"
        with open(partial, "wb") as out:
            out.write(data)
        os.replace(partial, archive)
    with tarfile.open(archive) as tar:
        members = [
            m
            for m in tar.getmembers()
            if m.name.startswith(f"safetensors-{version}/bindings/python/tests/")
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


def install_reference(version: str) -> str:
    """A folder holding the reference package ``version`` (its wheel, no
    dependencies), installed with pip on first use."""
    site = os.path.join(CACHE, f"site-{version}")
    if os.path.isdir(os.path.join(site, "safetensors")):
        return site
    partial = site + ".part"
    shutil.rmtree(partial, ignore_errors=True)
    print(f"installing safetensors {version} into {site}", flush=True)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary"]
    command += [":all:", "--target", partial, f"safetensors=={version}"]
    subprocess.run(command, check=True)
    os.replace(partial, site)
    return site


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


_MARK = {"passed": ".", "skipped": "s"}


def _baseline_env(site: Optional[str]) -> Dict[str, str]:
    """The environment of the baseline: the reference package, not a fastst
    checkout (``site``, a folder holding the reference, first when given)."""
    env = dict(os.environ)
    env.pop("FASTST_AS_SAFETENSORS", None)
    env.pop("PYTHONPATH", None)
    if site is not None:
        env["PYTHONPATH"] = site
    return env


def baseline_problem(version: str, site: Optional[str]) -> Optional[str]:
    """Why the baseline of ``version`` would not be the reference package of
    that release (None when it is): what ``import safetensors`` gives there."""
    probe = "import safetensors; print(safetensors.__version__); print(safetensors.__file__)"
    found = subprocess.run(
        [sys.executable, "-c", probe],
        env=_baseline_env(site),
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
    )
    lines = found.stdout.split()
    same = bool(lines) and Version(lines[0]) == Version(version)
    if found.returncode != 0 or not same or "fastst" in found.stdout:
        tail = (found.stdout + found.stderr).strip()[-300:]
        return f"the baseline's safetensors is not the reference {version}: {tail}"
    return None


def _pytest(
    run_dir: str,
    args: List[str],
    through_fastst: bool,
    verbose: bool = True,
    live: bool = True,
    site: Optional[str] = None,
) -> Tuple[int, str]:
    """Runs pytest; returns (exit status, output), printing a mark per test
    result as it comes when ``live``. The baseline sees ``site`` (a folder
    holding the reference package) first, when given."""
    pytest_args = ["-m", "pytest", "-v" if verbose else "-q", "-p", "no:cacheprovider", *args]
    if through_fastst:
        env = dict(os.environ)
        env.pop("FASTST_AS_SAFETENSORS", None)
        command = [sys.executable, "-m", "fastst", "run", *pytest_args]
    else:
        env = _baseline_env(site)
        command = [sys.executable, *pytest_args]
    lines: List[str] = []
    with subprocess.Popen(
        command, cwd=run_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            lines.append(line)
            for outcome in outcomes(line).values() if live else ():
                print(_MARK.get(outcome, "F"), end="", flush=True)
    return proc.returncode, "".join(lines)


def run_file(
    bindings: str,
    test_file: str,
    through_fastst: bool,
    workdir: str,
    live: bool = True,
    site: Optional[str] = None,
    only: Optional[List[str]] = None,
) -> Tuple[Dict[str, str], int, str, float]:
    """Runs one test file (or only its tests ``only``, by id) in a fresh
    copy of ``bindings/python/tests``; returns (outcomes, exit status,
    output tail, seconds). When the process dies (a crash in a framework),
    the tests it did not get to are run one per process and a test that
    crashes on its own counts as failed."""
    run_dir = tempfile.mkdtemp(dir=workdir)
    shutil.copytree(os.path.join(bindings, "tests"), os.path.join(run_dir, "tests"))
    args = list(only) if only else [os.path.join("tests", test_file)]
    if not _has_cuda():
        for test_id in GPU_ONLY:
            if test_id.startswith(test_file + "::"):
                args.append(f"--deselect=tests/{test_id}")
    started = time.monotonic()
    returncode, output = _pytest(run_dir, args, through_fastst, live=live, site=site)
    result = outcomes(output)
    if returncode < 0 or returncode > 5:
        _, listed = _pytest(
            run_dir, [*args, "--collect-only"], through_fastst, verbose=False, site=site
        )
        ids = [
            line.strip()
            for line in listed.splitlines()
            if line.startswith("tests/") and "::" in line
        ]
        for test_id in ids:
            if test_id in result:
                continue
            alone_rc, alone = _pytest(run_dir, [test_id], through_fastst, live=live, site=site)
            result[test_id] = outcomes(alone).get(test_id, f"crashed (exit {alone_rc})")
            output += f"\n{test_id}: {result[test_id]} when run alone"
    took = time.monotonic() - started
    return result, returncode, output[-4000:], took


_CUDA = None


def _has_cuda() -> bool:
    global _CUDA
    if _CUDA is None:
        probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
        _CUDA = subprocess.run([sys.executable, "-c", probe]).returncode == 0
    return _CUDA


def _digest(tests: str, test_file: str) -> str:
    """SHA-256 of a test file and of every file of the ``data`` folder beside it."""
    sha = hashlib.sha256()
    paths = [os.path.join(tests, test_file)]
    for folder, _dirs, names in sorted(os.walk(os.path.join(tests, "data"))):
        paths += [os.path.join(folder, n) for n in sorted(names)]
    for path in paths:
        sha.update(os.path.relpath(path, tests).encode() + b"\0")
        with open(path, "rb") as source:
            sha.update(hashlib.sha256(source.read()).digest())
    return sha.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", dest="only", help="run only test files whose name contains this")
    parser.add_argument(
        "--version",
        choices=[v for v, _sha, _install in SUITES],
        help="run only this release's suite (default: every one)",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="also run a later release's files that are the same as an earlier one's",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="run the reference on every file, not only where fastst does not pass them all",
    )
    parser.add_argument("--keep", action="store_true", help="keep the run folders")
    parser.add_argument(
        "--jobs",
        type=int,
        default=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1,
        help="test files run at a time (default: one per core)",
    )
    args = parser.parse_args()
    # (version, bindings folder, baseline site or None, test file)
    work: List[Tuple[str, str, Optional[str], str]] = []
    seen: Dict[str, str] = {}  # test file name -> digest of it and the data folder, as queued
    for version, sha256, install in SUITES:
        if args.version and version != args.version:
            continue
        bindings = fetch_sdist(version, sha256)
        site = install_reference(version) if install else None
        files = sorted(
            f for f in os.listdir(os.path.join(bindings, "tests")) if f.startswith("test_")
        )
        for test_file in files:
            if args.only and args.only not in test_file:
                continue
            digest = _digest(os.path.join(bindings, "tests"), test_file)
            if not args.all and seen.get(test_file) == digest:
                print(f"{version} {test_file}: the same as an earlier release's, run once")
                continue
            seen[test_file] = digest
            work.append((version, bindings, site, test_file))
    workdir = tempfile.mkdtemp(prefix="fastst-reference-suite-")
    regressions: List[str] = []
    # version -> tests passed by fastst, by the reference (where it ran), files it ran
    totals: Dict[str, Dict[str, int]] = {}
    started = time.monotonic()
    print(
        f"safetensors test suites ({', '.join(sorted({w[0] for w in work}))}), {len(work)} files,"
        " each run by fastst (python -m fastst run), then by the reference where fastst"
        " does not pass it whole",
        flush=True,
    )
    live = args.jobs <= 1  # marks as the tests run; else per file, as each file finishes
    _has_cuda()  # asked once, before any thread asks
    Run = Tuple[Dict[str, str], int, str, float]

    def one_run(
        item: Tuple[str, str, Optional[str], str],
        through_fastst: bool,
        only: Optional[List[str]] = None,
    ) -> Run:
        _version, bindings, site, test_file = item
        return run_file(bindings, test_file, through_fastst, workdir, live, site, only)

    def baseline_of(item: Tuple[str, str, Optional[str], str], ours: Run) -> Optional[Run]:
        """The reference's run of the tests fastst did not pass (of the
        whole file with ``--baseline``, or when the fastst run reported no
        test or stopped short of running them); None when fastst passed
        them all."""
        if whole(ours) and not args.baseline:
            return None
        found, returncode = ours[0], ours[1]
        short = not found or returncode not in (0, 1)
        missed = [t for t, o in found.items() if o != "passed"]
        return one_run(item, False, None if args.baseline or short else missed)

    def whole(run: Run) -> bool:
        """Whether a run passed every test of its file (and ran some)."""
        found, returncode = run[0], run[1]
        return returncode == 0 and bool(found) and set(found.values()) == {"passed"}

    def both(item: Tuple[str, str, Optional[str], str]) -> Tuple[Run, Optional[Run]]:
        """The file run by fastst, then by the reference unless fastst
        passed it whole."""
        ours = one_run(item, True)
        return ours, baseline_of(item, ours)

    def summary(found: Dict[str, str], passed: int, seconds: float) -> str:
        marks = "" if live else "".join(_MARK.get(o, "F") for o in found.values())
        return f"{marks} {passed}/{len(found)} passed, {seconds:.1f} s"

    pool = ThreadPoolExecutor(max(1, args.jobs))
    try:
        pending = [pool.submit(both, item) for item in work] if not live else []
        for number, item in enumerate(work, 1):
            version, _bindings, _site, test_file = item
            counts = totals.setdefault(version, {"fastst": 0, "reference": 0, "baselines": 0})
            print(f"[{number}/{len(work)}] {version} {test_file}\n  fastst    ", end="", flush=True)
            runs = pending[number - 1].result() if pending else None
            ours, our_rc, our_tail, our_s = runs[0] if runs else one_run(item, True)
            our_pass = {t for t, o in ours.items() if o == "passed"}
            print(summary(ours, len(our_pass), our_s), flush=True)
            counts["fastst"] += len(our_pass)
            if runs:
                baseline = runs[1]
            else:
                if not whole((ours, our_rc, our_tail, our_s)) or args.baseline:
                    print("  reference ", end="", flush=True)
                baseline = baseline_of(item, (ours, our_rc, our_tail, our_s))
            if baseline is None:
                print("  reference not run: fastst passed every test of the file")
                continue
            ref, ref_rc, ref_tail, ref_s = baseline
            ref_pass = sorted(t for t, o in ref.items() if o == "passed")
            if not live:
                print("  reference ", end="")
            print(summary(ref, len(ref_pass), ref_s), flush=True)
            counts["reference"] += len(ref_pass)
            counts["baselines"] += 1 if ref else 0
            if not ref and ref_rc not in (0, 5):
                # Nothing to compare with (e.g. a framework the file imports is
                # not installed): reported, not counted.
                last = ref_tail.strip().splitlines()[-1:] or [""]
                print(f"  (the reference could not run this file, exit {ref_rc}: {last[0]})")
            lost = [t for t in ref_pass if t not in our_pass]
            for test_id in lost:
                regressions.append(
                    f"{version} {test_file}: {test_id}: {ours.get(test_id, 'not run')}"
                )
            if lost or (ref and not ours and our_rc not in (0, 5)):
                if not ours:
                    regressions.append(
                        f"{version} {test_file}: the fastst run did not run (exit {our_rc})"
                    )
                print(our_tail)
    finally:
        pool.shutdown(cancel_futures=True)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"run folders kept in {workdir}")
    for version, counts in totals.items():
        site = next(w[2] for w in work if w[0] == version)
        problem = baseline_problem(version, site) if counts["baselines"] else None
        if problem:
            regressions.append(f"{version}: {problem}")
        print(
            f"{version} passed: fastst {counts['fastst']}; the reference ran what fastst"
            f" did not pass in {counts['baselines']} files and passed {counts['reference']}"
        )
        if counts["fastst"] == 0:
            regressions.append(f"{version}: no test passed for fastst: the suite did not run")
    print(f"took {time.monotonic() - started:.0f} s")
    if regressions:
        print("tests passing for the reference but not for fastst:")
        for line in regressions:
            print(f"  {line}")
        return 1
    print("every test passing for the reference passes for fastst")
    return 0


if __name__ == "__main__":
    sys.exit(main())
