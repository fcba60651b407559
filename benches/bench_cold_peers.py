"""Whole owned loads against the fastest peers, cold and warm, one file and sharded.

    python benches/bench_cold_peers.py [--dir DIR] [--rounds N] [--modes cold,warm]
                                       [--inputs single,sharded] [--cases a,b,...] [--json PATH]
                                       [--busy quiet,churn,build,suite] [--settle SECONDS]
                                       [--builds NAME=PYTHONPATH,...]

Inputs (generated into ``--dir``, default ``/tmp/fastst-cold-peers``): a TinyLlama-shaped BF16
checkpoint (22 layers, hidden 2048, MLP 5632, 4 KV heads of 64, vocabulary 32000: about 2.2
GB) as one file, and the same tensors in 3 shards with a ``model.safetensors.index.json``.

Every measurement is a FRESH interpreter that imports everything first, then (``cold``) runs
``sync; echo 3 > /proc/sys/vm/drop_caches`` (root) or (``warm``) reads the input once with
``cat``, then times the load and a pass reading one byte of every page of every tensor
(``touch``), and checks a checksum of those bytes against one computed here. Reported per case:
median and min-max seconds, time to the first tensor (peers that yield tensors as their reads
complete report when the first arrived, as do fastst's ``*-stream`` cases, ``iter_tensors``;
fastst's other whole loads return every tensor at once, so ``fastst-first`` measures opening
the file and loading its first tensor alone), peak RSS
(``VmHWM``) and ``AnonHugePages`` of ``/proc/self/smaps_rollup`` after the load. Measurements
run in rounds, every case once per round.

Peers, at their defaults: ``runai-model-streamer`` (``SafetensorsStreamer().stream_file``,
tensors iterated with ``get_tensors``), ``fastsafetensors`` on the CPU
(``fastsafe_open(files, "pt", device="cpu", nogds=True)``, every tensor with ``get_tensor``),
the reference ``safetensors.torch.load_file`` (tensors mapped from the file, touched), and
``cat FILE > /dev/null`` (the disk's limit cold, the page cache's warm). Floors (bytes, not
tensors): ``floor`` reads the files with ``O_DIRECT`` preads of 8 MiB by 16 threads into fresh
private anonymous memory advised ``MADV_HUGEPAGE``, ``floor-nohuge`` the same without the
advice, ``floor-touched`` into such memory allocated and touched before the clock: what no
loader of fresh memory can beat, and what fresh memory costs. ``floor-moved`` is ``floor``
with each 8 MiB read then moved by 56 bytes in place (``memmove``): the limit of owned copies
64-byte aligned when the file's offsets are not (a direct read lands on whole disk blocks, so
such copies are moved once; the inputs' offsets are 56 modulo 64, as in most files).
``floor-tensors`` is ``floor`` into memory of each tensor's own (numpy's allocator, the
tensor at its file offset modulo 4096 as fastst places large copies, advised 4 KiB pages but
for the whole pages of each tensor of 2 MiB or more, advised ``MADV_HUGEPAGE``, as fastst
advises a cold load's destinations), read in pieces of at most 8 MiB that end at tensor ends:
the limit of a loader handing out tensors that each own their memory, as the reference's
``load_file`` does. Huge pages cannot cross from one tensor into the next there, so each large
tensor keeps up to 2 MiB at either end on 4 KiB pages; "vs own floor" compares with the faster
of it and ``floor-nohuge`` (4 KiB pages lose nothing at tensor ends).
``fastst-np-4k`` and ``fastst-np-huge`` are numpy ``copy=True`` with the page size forced
(4 KiB pages; huge pages throughout): both sides of the choice fastst makes per load.

``--builds NAME=PYTHONPATH,...`` (other builds of fastst, e.g. a checkout's ``python/`` folder
with its extension built) adds every fastst case once more per build as ``CASE@NAME``, run with
that build first on the path: both sides of a change in the same rounds.

Busy hosts (``--busy``, see ``benches/busy.py``): every case is measured with the machine quiet
and beside each busy mode asked for (``churn``: a spinning core and a process allocating,
touching and freeing memory; ``build``: interpreters started back to back and a reader of many
small files; ``suite``: the project's tests in a loop), all rounds of one mode together. Each
measurement records the load average, the free memory in 2 MiB blocks (``/proc/buddyinfo``)
before it and the growth of the huge-page and compaction counters of ``/proc/vmstat`` during
it, and its CPU seconds (every thread, and child processes such as ``cat``). ``--settle S``
waits S seconds between emptying the cache and the load: on a virtual machine whose host takes
back free memory, memory freed just before a load (by ``drop_caches``) is still backed by the
host for a few seconds, which a long-running host's free memory is not. Peers that are not
installed are left out, with a line saying so. ``--freed GB``: after emptying the cache, each
cold load's process has that much fresh memory taken in huge pages, touched and given back
before its clock, by a process of its own that then ends: memory that a job which just ended
gave back, still backed by the host (on such a virtual machine huge pages are then at their
cheapest).

The cases of a round run in a new order each round (``--seed``): what the process before
freed decides what memory a cold load gets. ``drop_caches`` frees the page cache the case
before filled (``cat`` fills 2.2 GB, direct reads nothing), and on a virtual machine whose host
takes back free memory, memory freed a moment ago is still backed (cheap to fault in, huge
pages most of all) where memory freed seconds ago is not. In a fixed order every case would
follow the same neighbour (``floor`` always after ``cat``) and inherit its luck.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from busy import MODES, busy, growth, host_state, thp_settings  # noqa: E402
from layouts import write_file  # noqa: E402

#: A prime below the page size: every 4 KiB page of every tensor is read.
STRIDE = 4093
SHARDS = 3
INDEX = "model.safetensors.index.json"


def tinyllama() -> List[Tuple[str, Tuple[int, ...]]]:
    hidden, inter, vocab, kv = 2048, 5632, 32000, 256
    out: List[Tuple[str, Tuple[int, ...]]] = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(22):
        p = f"model.layers.{i}."
        out += [
            (p + "self_attn.q_proj.weight", (hidden, hidden)),
            (p + "self_attn.k_proj.weight", (kv, hidden)),
            (p + "self_attn.v_proj.weight", (kv, hidden)),
            (p + "self_attn.o_proj.weight", (hidden, hidden)),
            (p + "mlp.gate_proj.weight", (inter, hidden)),
            (p + "mlp.up_proj.weight", (inter, hidden)),
            (p + "mlp.down_proj.weight", (hidden, inter)),
            (p + "input_layernorm.weight", (hidden,)),
            (p + "post_attention_layernorm.weight", (hidden,)),
        ]
    return out + [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]


def prepare(folder: Path) -> Dict[str, List[Path]]:
    """The input files: ``single`` (one file) and ``sharded`` (shards, then the index)."""
    folder.mkdir(parents=True, exist_ok=True)
    layout = sorted(tinyllama())
    single = folder / "tinyllama-bf16.safetensors"
    if not single.exists():
        print(f"writing {single} ...", flush=True)
        write_file(single, layout, "BF16", 2)
    sharded = folder / "sharded"
    index = sharded / INDEX
    per = -(-len(layout) // SHARDS)
    names = [f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors" for i in range(SHARDS)]
    if not index.exists():
        sharded.mkdir(exist_ok=True)
        weight_map = {}
        for i, name in enumerate(names):
            part = layout[i * per : (i + 1) * per]
            print(f"writing {sharded / name} ...", flush=True)
            write_file(sharded / name, part, "BF16", 2)
            weight_map.update({t: name for t, _ in part})
        index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return {"single": [single], "sharded": [sharded / n for n in names] + [index]}


SETUP = "import numpy as np, torch\n"
CASES: Dict[str, Tuple[str, str]] = {
    # name: (imports, timed snippet leaving a dict name -> tensor in `out`)
    "cat": ("", "cat(SHARDS)\nout = {}"),
    "floor": (SETUP + "import mmap, concurrent.futures\n", "out = {'all': floor(SHARDS)}"),
    "floor-nohuge": (
        SETUP + "import mmap, concurrent.futures\n",
        "out = {'all': floor(SHARDS, huge=False)}",
    ),
    "floor-tensors": (
        SETUP + "import mmap, concurrent.futures\n",
        "out = dict(enumerate(floor_tensors(SHARDS)))",  # every tensor's bytes, checked
    ),
    "floor-moved": (
        SETUP + "import mmap, concurrent.futures\n",
        "out = {'all': floor(SHARDS, move=56)}",
    ),
    "floor-touched": (
        SETUP + "import mmap, concurrent.futures\n",
        "out = {'all': floor(SHARDS, READY)}",
    ),
    "fastst-np-copy": (
        SETUP + "import fastst, fastst.numpy\n",
        "out = fastst.numpy.load_file(OPEN, copy=True)",
    ),
    "fastst-pt-copy": (
        SETUP + "import fastst, fastst.torch\n",
        "out = fastst.torch.load_file(OPEN, copy=True)",
    ),
    # Both sides of the page-size choice, forced (numpy copy=True, the core's load called as
    # load_file calls it, huge_pages=False: 4 KiB pages; True: numpy's own advice, huge pages).
    "fastst-np-4k": (
        SETUP + "import fastst\nfrom fastst._fastst.read import load_into\n",
        "out = forced(OPEN, False)",
    ),
    "fastst-np-huge": (
        SETUP + "import fastst\nfrom fastst._fastst.read import load_into\n",
        "out = forced(OPEN, True)",
    ),
    "fastst-np-stream": (
        SETUP + "import fastst\n",
        "out = {}\n"
        "with fastst.safe_open(OPEN, 'np') as f:\n"
        "    for k, t in f.iter_tensors():\n"
        "        mark()\n"
        "        out[k] = t",
    ),
    "fastst-pt-stream": (
        SETUP + "import fastst\n",
        "out = {}\n"
        "with fastst.safe_open(OPEN, 'pt') as f:\n"
        "    for k, t in f.iter_tensors():\n"
        "        mark()\n"
        "        out[k] = t",
    ),
    "fastst-pt": (
        SETUP + "import fastst, fastst.torch\n",
        "out = fastst.torch.load_file(OPEN)",
    ),
    "fastst-first": (
        SETUP + "import fastst\n",
        "with fastst.safe_open(OPEN, 'pt') as f:\n"
        "    k = f.offset_keys()[0]\n"
        "    out = {k: f.get_tensor(k, copy=True)}\n"
        "mark()",
    ),
    "runai": (
        SETUP + "from runai_model_streamer import SafetensorsStreamer\n",
        "out = {}\n"
        "with SafetensorsStreamer() as s:\n"
        "    s.stream_files(SHARDS)\n"
        "    for k, t in s.get_tensors():\n"
        "        mark()\n"
        "        out[k] = t\n"
        "    touched = touch(out)",
    ),
    "fastsafetensors": (
        SETUP + "from fastsafetensors import fastsafe_open\n",
        "f = fastsafe_open(SHARDS, 'pt', device='cpu', nogds=True)\n"
        "out = {}\n"
        "for k in f.keys():\n"
        "    out[k] = f.get_tensor(k)\n"
        "    mark()",
    ),
    "reference": (
        SETUP + "import safetensors.torch\n",
        "out = {}\nfor s in SHARDS:\n    out.update(safetensors.torch.load_file(s))\n    mark()",
    ),
}

#: The module each peer needs (a peer whose module is missing is left out).
NEEDS = {
    "runai": "runai_model_streamer",
    "fastsafetensors": "fastsafetensors",
    "reference": "safetensors",
}

#: Cases that read the files as bytes, not as tensors (no checksum to compare).
UNCHECKED = ("cat", "floor", "floor-nohuge", "floor-moved", "floor-touched")

WORKER = r"""
import json, os, subprocess, sys, time
spec = json.loads(sys.argv[1])
SHARDS, OPEN, STRIDE = spec["shards"], spec["open"], spec["stride"]
first = None

def mark():
    global first
    if first is None:
        first = time.perf_counter() - start

def touch(tensors):
    import numpy as np
    total = 0
    for t in tensors.values():
        if hasattr(t, "numpy"):
            t = t.reshape(-1).view(__import__("torch").uint8).numpy()
        total += int(t.reshape(-1).view(np.uint8)[::STRIDE].sum(dtype=np.uint64))
    return total

def floor(files, ready=None, huge=True, move=0):
    # The disk's limit into memory: O_DIRECT preads by 16 threads, 8 MiB each, into private
    # anonymous memory advised MADV_HUGEPAGE (fresh, or `ready`: allocated and touched before
    # the clock; `huge=False`: fresh, no advice; `move`: each read then moved down by that
    # many bytes, every read with a block of room of its own).
    import ctypes
    import numpy as np
    from concurrent.futures import ThreadPoolExecutor
    room = 4096 if move else 0
    sizes = [-(-os.path.getsize(f) // 4096) * 4096 for f in files]
    slots = sum(-(-size // (8 << 20)) for size in sizes)
    mem = ready if ready is not None else fresh(sum(sizes) + slots * room, huge)
    jobs, at = [], 0
    for f, size in zip(files, sizes):
        fd = os.open(f, os.O_RDONLY | os.O_DIRECT)
        for o in range(0, size, 8 << 20):
            n = min(8 << 20, size - o)
            jobs.append((fd, at + room, o, n))
            at += n + room
    view = memoryview(mem)
    base = np.frombuffer(mem, np.uint8).ctypes.data
    def read(job):
        fd, where, offset, n = job
        os.preadv(fd, [view[where:where + n]], offset)
        if move:
            ctypes.memmove(base + where - move, base + where, n)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(read, jobs))
    return np.frombuffer(mem, np.uint8)

def floor_tensors(files):
    # `floor` into memory of each tensor's own (see the module's docstring).
    import ctypes
    import numpy as np
    from concurrent.futures import ThreadPoolExecutor
    libc = ctypes.CDLL(None)
    jobs, outs = [], []
    for f in files:
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            table = json.loads(fh.read(n))
        table.pop("__metadata__", None)
        fd = os.open(f, os.O_RDONLY | os.O_DIRECT)
        for begin, end in sorted(v["data_offsets"] for v in table.values()):
            if end == begin:
                outs.append(np.empty(0, np.uint8))
                continue
            at = 8 + n + begin
            lo, hi = at // 4096 * 4096, -(-(8 + n + end) // 4096) * 4096
            block = np.empty(hi - lo + 4096, np.uint8)
            skip = (lo - block.ctypes.data) % 4096
            where = block.ctypes.data + skip
            # 4 KiB pages (numpy's allocator advises huge pages on the whole of its large
            # arrays), huge pages on the whole pages of a large tensor.
            page0 = block.ctypes.data // 4096 * 4096
            libc.madvise(ctypes.c_void_p(page0), ctypes.c_size_t(where + hi - lo - page0), 15)
            if end - begin >= 2 << 20:
                first = where + 4096 * (at > lo)
                last = (where + at - lo + end - begin) // 4096 * 4096
                libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), 14)
            outs.append(block[skip + at - lo : skip + at - lo + end - begin])
            for o in range(lo, hi, 8 << 20):
                jobs.append((fd, block, skip + o - lo, o, min(8 << 20, hi - o)))
    def read(job):
        fd, block, where, offset, n = job
        try:
            os.preadv(fd, [memoryview(block)[where:where + n]], offset)
        except OSError:  # a last block the file system reads short: through the cache
            os.pread(fd, n, offset)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(read, jobs))
    return outs

# A job that ends: takes memory in huge pages, touches it, exits.
GIVE_BACK = '''
import mmap, sys
n = int(sys.argv[1])
m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
m.madvise(mmap.MADV_HUGEPAGE)
for i in range(0, n, 4096):
    m[i] = 1
'''

def fresh(n, huge=True):
    import mmap
    mem = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge:
        mem.madvise(mmap.MADV_HUGEPAGE)
    return mem

def forced(path, huge):
    # fastst.numpy.load_file(path, copy=True) with the page size forced (load_into's huge_pages).
    with fastst.safe_open(path, "np") as f:
        made, plans = f._allocate(f.offset_keys(), None)
        for p in plans:
            load_into(p.file, p.names, p.outs, p.targets, None, None, huge_pages=huge)
        return {name: f._finish(name, made[name]) for name in made}

def cat(files):
    with open(os.devnull, "wb") as sink:
        subprocess.run(["cat", *files], stdout=sink, check=True)

exec(compile(spec["setup"], "<setup>", "exec"))
if spec["ready"]:
    READY = fresh(sum(-(-os.path.getsize(f) // 4096) * 4096 for f in SHARDS))
    __import__("numpy").frombuffer(READY, "u1")[::4096] = 1
load = compile(spec["load"], "<load>", "exec")
if spec["mode"] == "cold":
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")
    time.sleep(spec["settle"])
    if spec["freed"]:
        size = str(int(spec["freed"] * (1 << 30)))
        subprocess.run([sys.executable, "-c", GIVE_BACK, size], check=True)
else:
    cat(spec["files"])
import resource
def cpu():
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime
cpu0 = cpu()
start = time.perf_counter()
exec(load)
touched = touch(out) if out and "touched" not in globals() else globals().get("touched", 0)
took = time.perf_counter() - start
cpu_s = cpu() - cpu0
fields = {}
for name, key in (("/proc/self/status", "VmHWM:"), ("/proc/self/smaps_rollup", "AnonHugePages:")):
    with open(name) as fh:
        fields[key] = next(int(l.split()[1]) for l in fh if l.startswith(key))
print("RESULT " + json.dumps({
    "seconds": took, "cpu": cpu_s, "first": first if first is not None else took, "count": len(out),
    "checksum": touched, "hwm_mb": fields["VmHWM:"] / 1024,
    "huge_mb": fields["AnonHugePages:"] / 1024,
}))
"""


def expected(shards: List[Path]) -> Tuple[int, int]:
    """(tensor count, checksum of every tensor's sampled bytes) computed from the files."""
    import numpy as np

    count = total = 0
    for path in shards:
        with open(path, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        header.pop("__metadata__", None)
        data = np.memmap(path, dtype=np.uint8, mode="r")
        for v in header.values():
            a, b = v["data_offsets"]
            total += int(data[8 + n + a : 8 + n + b][::STRIDE].sum(dtype=np.uint64))
            count += 1
        del data
    return count, total


def measure(
    case: str,
    files: List[Path],
    mode: str,
    settle: float = 0.0,
    builds: Optional[Dict[str, str]] = None,
    freed: float = 0.0,
) -> dict:
    """One fresh interpreter's measurement of ``case``; ``CASE@BUILD`` runs CASE with the
    PYTHONPATH ``builds[BUILD]`` (another build of fastst)."""
    shards = [str(f) for f in files if f.name != INDEX]
    env = None
    if "@" in case:
        case, build = case.split("@", 1)
        env = {**os.environ, "PYTHONPATH": (builds or {})[build]}
    spec = {
        "shards": shards,
        "files": shards,
        "open": str(files[-1]),
        "stride": STRIDE,
        "ready": case == "floor-touched",
        "mode": mode,
        "settle": settle,
        "freed": freed,
        "setup": CASES[case][0],
        "load": CASES[case][1],
    }
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"{case} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return dict(json.loads(lines[-1][len("RESULT ") :]))


def ratio(base: Dict[str, float], case: str, med: float) -> str:
    """How many times faster than ``case`` (its median over this one's)."""
    return f"{base[case] / med:5.2f}x" if case in base else "    -"


FLOORS = ("floor", "floor-nohuge")
#: The floors into memory of each tensor's own (see the module's docstring).
OWN_FLOORS = ("floor-tensors", "floor-nohuge")
PEERS = ("runai", "fastsafetensors")


def installed(case: str) -> bool:
    """Whether the module a peer needs can be imported here."""
    module = NEEDS.get(case)
    if module is None:
        return True
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)",
        ],
        capture_output=True,
    )
    return found.returncode == 0


def report(
    runs: Dict[Tuple[str, str, str, str], List[dict]], key: Tuple[str, str, str], cases: List[str]
) -> None:
    """One table: every case of one busy mode, cache mode and input."""
    how, mode, inp = key
    rows = {c: runs[(how, mode, inp, c)] for c in cases if runs.get((how, mode, inp, c))}
    base = {c: statistics.median(x["seconds"] for x in xs) for c, xs in rows.items()}
    floors = [base[f] for f in FLOORS if f in base]
    peers = [base[p] for p in PEERS if p in base]
    if floors:
        base["faster floor"] = min(floors)
    own = [base[f] for f in OWN_FLOORS if f in base]
    if own:
        base["own floor"] = min(own)
    if peers:
        base["best peer"] = min(peers)
    print(
        f"\n{how}, {mode}, {inp}: median (min-max) s | worst | CPU s | vs faster floor | vs cat | "
        "vs best peer | vs own floor | first s | HWM MB | AnonHugePages MB"
    )
    for case, xs in rows.items():
        secs = [x["seconds"] for x in xs]
        med = statistics.median(secs)
        first = statistics.median(x["first"] for x in xs)
        cpu = statistics.median(x.get("cpu", 0.0) for x in xs)
        print(
            f"  {case:21s} {med:6.2f} ({min(secs):.2f}-{max(secs):.2f}) | "
            f"{max(secs):5.2f} | {cpu:5.2f} | "
            f"{ratio(base, 'faster floor', med)} | {ratio(base, 'cat', med)} | "
            f"{ratio(base, 'best peer', med)} | {ratio(base, 'own floor', med)} | "
            f"{first:5.2f} | "
            f"{max(x['hwm_mb'] for x in xs):6.0f} | {max(x['huge_mb'] for x in xs):5.0f}"
        )


def host_summary(runs: Dict[Tuple[str, str, str, str], List[dict]], how: str) -> None:
    """The host's state during the measurements of one busy mode."""
    xs = [x for (h, *_rest), v in runs.items() if h == how for x in v]
    if not xs:
        return
    loads = [x["host"]["load"] for x in xs]
    free = [x["host"]["free_2m_mib"] for x in xs]
    mid = statistics.median(loads)
    line = f"\n{how}: load average {min(loads):.1f}-{max(loads):.1f} (median {mid:.1f}); "
    line += f"free in 2 MiB blocks before each run {min(free)}-{max(free)} MiB"
    for counter in ("thp_fault_alloc", "thp_fault_fallback", "compact_stall", "pgscan_direct"):
        grown = [x["grew"].get(counter, 0) for x in xs]
        line += f"; {counter} +{statistics.median(grown):.0f}/run (max {max(grown)})"
    print(line)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dir", type=Path, default=Path(tempfile.gettempdir()) / "fastst-cold-peers"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--modes", default="cold,warm")
    parser.add_argument("--inputs", default="single,sharded")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--busy", default="quiet", help=f"busy modes, of {','.join(MODES)}")
    parser.add_argument(
        "--settle", type=float, default=0.0, help="seconds between drop_caches and a cold load"
    )
    parser.add_argument(
        "--freed", type=float, default=0.0, help="GB taken and given back before each cold load"
    )
    parser.add_argument("--seed", type=int, default=1, help="of the order of each round")
    parser.add_argument("--json", help="also write every measurement as JSON to this file")
    parser.add_argument(
        "--builds",
        default="",
        help="NAME=PYTHONPATH,...: other fastst builds; every fastst case also runs as CASE@NAME",
    )
    args = parser.parse_args(argv)
    # Stopped by a signal, the busy mode's processes are stopped too (its `finally`).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if os.geteuid() != 0 or not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        print("bench_cold_peers: skipped, cannot write /proc/sys/vm/drop_caches (needs root)")
        return 0
    inputs = prepare(args.dir)
    cases = []
    for c in (c for c in args.cases.split(",") if c):
        if installed(c):
            cases.append(c)
        else:
            print(f"bench_cold_peers: {c} left out: module {NEEDS[c]} is not installed")
    builds = dict(b.split("=", 1) for b in args.builds.split(",") if b)
    cases += [f"{c}@{b}" for b in builds for c in list(cases) if c.startswith("fastst")]
    sums = {name: expected([f for f in files if f.name != INDEX]) for name, files in inputs.items()}
    units = [
        (mode, inp, case)
        for mode in args.modes.split(",")
        for inp in args.inputs.split(",")
        for case in cases
    ]
    runs: Dict[Tuple[str, str, str, str], List[dict]] = {}
    modes = [m for m in args.busy.split(",") if m]
    shuffler = random.Random(args.seed)
    print(f"transparent huge pages: {thp_settings()}")
    for how in modes:
        with busy(how, HERE.parent):
            for r in range(args.rounds):
                # A new order each round: what the case before freed decides what memory a
                # cold load gets (see the module's docstring).
                order = list(units)
                shuffler.shuffle(order)
                for mode, inp, case in order:
                    before = host_state()
                    got = measure(case, inputs[inp], mode, args.settle, builds, args.freed)
                    got["host"], got["grew"] = before, growth(before, host_state())
                    want = sums[inp]
                    if case == "fastst-first":
                        want = (1, got["checksum"])
                    if case not in UNCHECKED and (got["count"], got["checksum"]) != want:
                        raise AssertionError(
                            f"{case} {inp}: {got['count']}, {got['checksum']} != {want}"
                        )
                    runs.setdefault((how, mode, inp, case), []).append(got)
                    print(
                        f"{how:5s} round {r + 1} {mode:4s} {inp:7s} {case:21s} "
                        f"{got['seconds']:7.3f} s cpu {got['cpu']:6.2f} s "
                        f"first {got['first']:6.3f} s  load {before['load']:.1f} "
                        f"free2M {before['free_2m_mib']} MiB "
                        f"thp +{got['grew'].get('thp_fault_alloc', 0)}",
                        flush=True,
                    )
    for how in modes:
        host_summary(runs, how)
        for mode in args.modes.split(","):
            for inp in args.inputs.split(","):
                report(runs, (how, mode, inp), cases)
    if args.json:
        doc = [
            {"busy": h, "mode": m, "input": i, "case": c, "runs": v}
            for (h, m, i, c), v in runs.items()
        ]
        Path(args.json).write_text(
            json.dumps({"settle": args.settle, "freed": args.freed, "results": doc}, indent=1)
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
