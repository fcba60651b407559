"""Busy hosts for the cold benchmarks: a shared machine's background work, and the host's state.

A benchmark that only runs on a quiet machine measures a machine nobody deploys on. Each mode
starts its background processes before the measurements and stops them after (``with
busy(mode): ...``):

- ``quiet``: nothing.
- ``churn``: one process spinning a core, and one that keeps allocating memory in 64 MiB pieces,
  touching every page and freeing the oldest piece once 2 GiB are held (fresh memory taken and
  given back all the time, as by a job with a large working set).
- ``build``: a build-like load: short-lived interpreters started back to back (each imports a few
  modules and exits), and a reader of many small files (every file under the interpreter's
  standard library, read in turn, over and over).
- ``suite``: a real load: the project's test suite (``SUITE``, a few test folders) run in a loop.

:func:`host_state` reads what decides how costly fresh memory is at a given moment: the load
average, the free memory in blocks of 2 MiB or more (``/proc/buddyinfo``: what a transparent
huge page needs) and the huge-page and compaction counters of ``/proc/vmstat``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List

MODES = ("quiet", "churn", "build", "suite")

#: Test folders the ``suite`` mode runs in a loop (quick ones, no servers).
SUITE = ("tests/write", "tests/sources", "tests/contracts")

#: Counters of /proc/vmstat reported for each measurement (their growth during it).
COUNTERS = ("thp_fault_alloc", "thp_fault_fallback", "compact_stall", "pgscan_direct")

SPIN = "while True:\n    pass\n"

CHURN = r"""
import mmap, collections
held = collections.deque()
while True:
    m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for i in range(0, 64 << 20, 4096):
        m[i] = 1
    held.append(m)
    if len(held) > 32:
        held.popleft().close()
"""

INTERPRETERS = r"""
import subprocess, sys
while True:
    subprocess.run([sys.executable, "-c", "import json, email.parser, decimal, argparse"])
"""

SMALL_FILES = r"""
import os, sys
root = sys.argv[1]
while True:
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                with open(os.path.join(folder, name), "rb") as fh:
                    fh.read()
            except OSError:
                pass
"""


def _commands(mode: str, repo: Path) -> List[List[str]]:
    py = sys.executable
    if mode == "quiet":
        return []
    if mode == "churn":
        return [[py, "-c", SPIN], [py, "-c", CHURN]]
    if mode == "build":
        stdlib = sysconfig.get_paths()["stdlib"]
        return [[py, "-c", INTERPRETERS], [py, "-c", SMALL_FILES, stdlib]]
    if mode == "suite":
        loop = (
            "import subprocess, sys\n"
            "while True:\n"
            "    subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',"
            f" *{list(SUITE)!r}], cwd={str(repo)!r}, stdout=subprocess.DEVNULL,"
            " stderr=subprocess.DEVNULL)\n"
        )
        return [[py, "-c", loop]]
    raise ValueError(f"unknown busy mode {mode!r}; modes: {', '.join(MODES)}")


@contextmanager
def busy(mode: str, repo: Path, warmup: float = 5.0) -> Iterator[None]:
    """Runs the background work of ``mode`` (see the module's docstring) around the block,
    ``warmup`` seconds ahead of it; ``repo`` is the checkout the ``suite`` mode tests."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(repo / "python"), env.get("PYTHONPATH")) if p
    )
    procs = [
        subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for cmd in _commands(mode, repo)
    ]
    try:
        if procs:
            time.sleep(warmup)
        yield
    finally:
        for p in procs:
            # Each started in a session of its own: its children (interpreters, pytest) go too.
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait()


def free_huge_mib() -> int:
    """Free memory in blocks of 2 MiB or more (orders 9 and 10 of /proc/buddyinfo), MiB."""
    total = 0
    try:
        with open("/proc/buddyinfo") as fh:
            for line in fh:
                counts = [int(x) for x in line.split()[4:]]
                total += sum(c << (order + 2) for order, c in enumerate(counts) if order >= 9)
    except OSError:
        return -1
    return total // 1024


def vmstat() -> Dict[str, int]:
    out: Dict[str, int] = {}
    try:
        with open("/proc/vmstat") as fh:
            for line in fh:
                key, value = line.split()
                if key in COUNTERS:
                    out[key] = int(value)
    except OSError:
        pass
    return out


def thp_settings() -> Dict[str, str]:
    """The transparent huge page settings (``enabled``, ``defrag``) as the kernel shows them."""
    out = {}
    for key in ("enabled", "defrag"):
        try:
            text = Path(f"/sys/kernel/mm/transparent_hugepage/{key}").read_text()
        except OSError:
            continue
        out[key] = text.split("[")[1].split("]")[0] if "[" in text else text.strip()
    return out


def host_state() -> Dict[str, object]:
    """The load average (1 minute), free 2 MiB blocks (MiB) and the counters, now."""
    return {"load": os.getloadavg()[0], "free_2m_mib": free_huge_mib(), **vmstat()}


def growth(before: Dict[str, object], after: Dict[str, object]) -> Dict[str, int]:
    """How much each counter of :data:`COUNTERS` grew between two :func:`host_state` readings."""
    return {
        k: int(after[k]) - int(before[k])  # type: ignore[call-overload]
        for k in COUNTERS
        if k in before and k in after
    }
