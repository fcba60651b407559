"""Loads from a cold page cache, with the disk's own limit measured in the same run.

    python benches/bench_cold.py [--dir DIR] [--rounds N] [--cases a,b,...]
                                 [--transformers] [--evict drop|fadvise] [--json PATH]

Every measurement is one FRESH interpreter that

1. imports everything first (numpy, ml_dtypes, torch, fastst, safetensors,
   transformers...) and compiles the snippet it will time;
2. empties the page cache: ``sync; echo 3 > /proc/sys/vm/drop_caches``
   (``--evict drop``, the default: needs root) or, with ``--evict fadvise``,
   ``fsync`` + ``posix_fadvise(POSIX_FADV_DONTNEED)`` on the case's own input
   files only (no root needed, leaves the rest of the machine's cache alone;
   use it when other people measure on the same machine);
3. checks with ``mincore`` what share of its input is still resident (reported
   as ``resident``: a case that was not really cold shows up);
4. times the load alone (imports excluded);
5. checks the result outside the timed part: the tensor count and a checksum
   of sampled bytes, compared with one computed here from the file itself (or,
   for model loads, equal across all runs of the group), so that a broken case
   cannot look fast.

The disk limit is ``cat FILE > /dev/null`` measured the same way (fresh
process, cache emptied, then the ``cat`` timed), once per input file and per
round. All measurements of a round run round-robin, each round starting one
place further on; figures are medians over ``--rounds`` rounds. Printed per
case: median seconds, GB/s (file size / time), the share of the disk limit
(``cat`` time / case time: 1.0 = as fast as the disk) and, where the case has a
reference counterpart, the speed-up over it (reference time / case time).

Without the rights to empty the cache (``--evict drop`` when not root, or
``/proc/sys/vm/drop_caches`` not writable, e.g. in a container) the script says
why and exits 0 without measuring: it is a benchmark, never a test.

Inputs are the files of ``benches/layouts.py`` (a Llama-like BF16 checkpoint
of about ``$FASTST_BENCH_GB`` GB and its F16 twin with the same bytes, for the
reference's numpy path, which cannot read BF16) and, with ``--transformers``,
the BERT-style checkpoint of ``benches/bench_dropin_from_pretrained.py``; they
are generated into ``--dir`` (default ``/tmp/fastst-bench-cold``), a folder of
this benchmark's own, so that nobody else reading the same files warms them.

Cases live in ``CASES`` below: add a :class:`Case` to measure another path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from layouts import SCALE, llama_layout, write_file  # noqa: E402

DROP_CACHES = "/proc/sys/vm/drop_caches"

#: Sampling stride of the checksum: a prime below the page size, so every
#: 4 KiB page is read and every byte position of a 2- or 4-byte element is
#: sampled (a multiple of 4 would only ever see the low byte of an F32, which
#: is 0 for every value converted from BF16).
STRIDE = 4093


@dataclass(frozen=True)
class Case:
    """One way to load a file.

    ``setup`` runs before the cache is emptied (imports); ``load`` is the timed
    part and must leave the loaded tensors in ``out`` (a dict name -> tensor,
    or for ``check="model"`` the model); ``check`` names how the result is
    verified after the clock stops: ``"bytes"`` (the file's own bytes, sampled),
    ``"f32"`` (the BF16 values converted to F32, sampled) or ``"model"`` (the
    sum of the model's parameters, equal across every run in ``group``).
    ``touch`` names the function of the timed part that reads every page
    (``touch_np`` / ``touch_pt``): it also makes the checksum. ``reference``
    names the reference package's case it is compared with. Snippets see
    ``PATH`` (their input file) and ``FOLDER`` (its folder).
    """

    name: str
    input: str  # key of INPUTS
    setup: str
    load: str
    check: str = "bytes"
    reference: Optional[str] = None
    is_reference: bool = False
    transformers: bool = False
    group: str = ""
    note: str = ""


NP = "import numpy as np, ml_dtypes\n"
PT = "import numpy as np, ml_dtypes, torch\n"
FASTST_NP = NP + "import fastst, fastst.numpy\n"
FASTST_PT = PT + "import fastst, fastst.torch\n"
REF_NP = NP + "import safetensors, safetensors.numpy\nassert_reference()\n"
REF_PT = PT + "import safetensors, safetensors.torch\nassert_reference()\n"
HF = (
    "import torch, transformers\n"
    "from transformers import AutoModel\n"
    "import transformers.models.bert.modeling_bert\n"
    "import safetensors, safetensors.torch\n"
)

#: The limit of an owned load measured the same way: the file's data read
#: into fresh memory by plain threads (what every owned load must at least do).
LIMIT = NP + (
    "import json, struct, threading\n"
    "def read_fresh(path, threads=4, piece=8 << 20):\n"
    "    with open(path, 'rb') as fh:\n"
    "        (n,) = struct.unpack('<Q', fh.read(8))\n"
    "        header = json.loads(fh.read(n))\n"
    "    header.pop('__metadata__', None)\n"
    "    base = 8 + n\n"
    "    size = os.path.getsize(path) - base\n"
    "    buf = np.empty(size, dtype=np.uint8)\n"
    "    fd = os.open(path, os.O_RDONLY)\n"
    "    todo = list(range(0, size, piece))\n"
    "    lock = threading.Lock()\n"
    "    def work():\n"
    "        while True:\n"
    "            with lock:\n"
    "                if not todo:\n"
    "                    return\n"
    "                at = todo.pop(0)\n"
    "            view = memoryview(buf[at:at + piece])\n"
    "            got = 0\n"
    "            while got < len(view):\n"
    "                n = os.preadv(fd, [view[got:]], base + at + got)\n"
    "                if not n:\n"
    "                    raise EOFError(path)\n"
    "                got += n\n"
    "    ts = [threading.Thread(target=work) for _ in range(threads)]\n"
    "    [t.start() for t in ts]\n"
    "    [t.join() for t in ts]\n"
    "    os.close(fd)\n"
    "    return {k: buf[v['data_offsets'][0]:v['data_offsets'][1]] for k, v in header.items()}\n"
)

CASES: List[Case] = [
    # --- the reference package -----------------------------------------------------------
    Case(
        "ref-np-load",
        "llama-f16",
        REF_NP,
        "out = safetensors.numpy.load_file(PATH)\ntouched = touch_np(out)",
        is_reference=True,
        note="reference numpy load_file (copies; F16 twin, same bytes)",
    ),
    Case(
        "ref-pt-touch",
        "llama-bf16",
        REF_PT,
        "out = safetensors.torch.load_file(PATH)\ntouched = touch_pt(out)",
        is_reference=True,
        note="reference torch load_file + touching every page",
    ),
    Case(
        "ref-pt-pread",
        "llama-bf16",
        REF_PT,
        "out = safetensors.torch.load_file(PATH, backend='pread')",
        is_reference=True,
        note="reference torch load_file(backend='pread') (owned tensors)",
    ),
    Case(
        "ref-pt-f32",
        "llama-bf16",
        REF_PT,
        "with safetensors.safe_open(PATH, 'pt') as f:\n"
        "    out = {k: f.get_tensor(k).to(torch.float32) for k in f.keys()}",
        check="f32",
        is_reference=True,
        note="reference torch get_tensor().to(torch.float32)",
    ),
    # --- fastst ---------------------------------------------------------------------------
    Case(
        "np-views-touch",
        "llama-bf16",
        FASTST_NP,
        "out = fastst.numpy.load_file(PATH)\ntouched = touch_np(out)",
        reference="ref-np-load",
        note="numpy load_file (views) + touching every page",
    ),
    Case(
        "pt-views-touch",
        "llama-bf16",
        FASTST_PT,
        "out = fastst.torch.load_file(PATH)\ntouched = touch_pt(out)",
        reference="ref-pt-touch",
        note="torch load_file + touching every page",
    ),
    Case(
        "np-copy",
        "llama-bf16",
        FASTST_NP,
        "out = fastst.numpy.load_file(PATH, copy=True)",
        reference="ref-np-load",
        note="numpy load_file(copy=True)",
    ),
    Case(
        "pt-copy",
        "llama-bf16",
        FASTST_PT,
        "out = fastst.torch.load_file(PATH, copy=True)",
        reference="ref-pt-pread",
        note="torch load_file(copy=True)",
    ),
    Case(
        "np-bf16-f32",
        "llama-bf16",
        FASTST_NP,
        "out = fastst.numpy.load_file(PATH, dtype=np.float32)",
        check="f32",
        reference="ref-pt-f32",
        note="numpy load_file(dtype=np.float32), BF16 -> F32",
    ),
    Case(
        "pt-bf16-f32",
        "llama-bf16",
        FASTST_PT,
        "out = fastst.torch.load_file(PATH, dtype=torch.float32)",
        check="f32",
        reference="ref-pt-f32",
        note="torch load_file(dtype=torch.float32), BF16 -> F32",
    ),
    Case(
        "np-pread-copy",
        "llama-bf16",
        FASTST_NP,
        "with fastst.safe_open(PATH, 'np', backend='pread') as f:\n"
        "    out = f.get_tensors(copy=True)",
        reference="ref-pt-pread",
        note="numpy safe_open(backend='pread').get_tensors(copy=True)",
    ),
    Case(
        "fresh-read",
        "llama-bf16",
        LIMIT + "np._core.multiarray._set_madvise_hugepage(False)\n",
        "out = read_fresh(PATH)",
        note="limit: 4 threads of 8 MiB preadv into one fresh array (no huge pages)",
    ),
    # --- transformers through the drop-in hook (--transformers) ---------------------------
    Case(
        "ref-hf-bert",
        "bert",
        HF + "assert_reference()\n",
        "out = AutoModel.from_pretrained(FOLDER)",
        check="model",
        is_reference=True,
        transformers=True,
        group="bert",
        note="reference: transformers AutoModel.from_pretrained",
    ),
    Case(
        "hf-bert",
        "bert",
        "import fastst\nfastst.install()\n" + HF + "assert_fastst()\n",
        "out = AutoModel.from_pretrained(FOLDER)",
        check="model",
        reference="ref-hf-bert",
        transformers=True,
        group="bert",
        note="transformers AutoModel.from_pretrained, safetensors served by fastst (hook)",
    ),
]

BY_NAME = {c.name: c for c in CASES}


# --- the worker: one fresh interpreter per measurement -----------------------------------

WORKER = r"""
import ctypes, json, mmap, os, subprocess, sys, time

spec = json.loads(sys.argv[1])
PATH, FOLDER, STRIDE = spec["path"], os.path.dirname(spec["path"]), spec["stride"]


def assert_reference():
    assert not hasattr(sys.modules["safetensors"], "__fastst_version__"), "hook active"


def assert_fastst():
    assert hasattr(sys.modules["safetensors"], "__fastst_version__"), "hook not active"


def touch_np(arrays):
    # one sampled byte of every page of each array; the sum is the checksum
    return sum(int(a.reshape(-1).view(np.uint8)[::STRIDE].sum(dtype=np.uint64))
               for a in arrays.values())


def touch_pt(tensors):
    return sum(int(t.reshape(-1).view(torch.uint8)[::STRIDE].sum(dtype=torch.int64))
               for t in tensors.values())


def evict(mode, files):
    os.sync()
    if mode == "drop":
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return
    for name in files:
        fd = os.open(name, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident(files):
    # share of the files' pages in the page cache (mincore over a mapping
    # that is never touched, so nothing is read)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    page = os.sysconf("SC_PAGE_SIZE")
    total = hot = 0
    for name in files:
        size = os.path.getsize(name)
        if not size:
            continue
        fd = os.open(name, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return -1.0
            pages = (size + page - 1) // page
            vec = (ctypes.c_ubyte * pages)()
            rc = libc.mincore(ctypes.c_void_p(addr), size, vec)
            libc.munmap(ctypes.c_void_p(addr), size)
            if rc:
                return -1.0
            hot += sum(1 for v in bytes(vec) if v & 1)
            total += pages
        finally:
            os.close(fd)
    return hot / total if total else 0.0


def cat():
    with open(os.devnull, "wb") as sink:
        subprocess.run(["cat", PATH], stdout=sink, check=True)


ns = globals()  # the snippets and the helpers above share one namespace
exec(compile(spec["setup"], "<setup>", "exec"), ns)
load = compile(spec["load"], "<load>", "exec")
evict(spec["evict"], spec["files"])
was_resident = resident(spec["files"])
start = time.perf_counter()
exec(load, ns)
took = time.perf_counter() - start

result = {"seconds": took, "resident": was_resident}
check = spec["check"]
if check in ("bytes", "f32"):
    out = ns["out"]
    result["count"] = len(out)
    if "torch" in sys.modules and any(isinstance(v, sys.modules["torch"].Tensor)
                                      for v in out.values()):
        import torch
        result["checksum"] = touch_pt(out)
    else:
        import numpy as np
        result["checksum"] = touch_np(out)
    if "touched" in ns:
        assert ns["touched"] == result["checksum"], "touch and checksum differ"
elif check == "model":
    params = list(ns["out"].parameters())
    result["count"] = len(params)
    result["checksum"] = float(sum(p.double().sum() for p in params))
print("RESULT " + json.dumps(result))
"""


# --- inputs --------------------------------------------------------------------------------


@dataclass
class Input:
    name: str
    path: Path
    files: List[Path]
    expected: Dict[str, object] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(f.stat().st_size for f in self.files)


def tensor_table(path: Path) -> List[Tuple[str, str, int, int]]:
    """(name, dtype, start, end) of each tensor, absolute file offsets."""
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    header.pop("__metadata__", None)
    base = 8 + n
    return [
        (k, v["dtype"], base + v["data_offsets"][0], base + v["data_offsets"][1])
        for k, v in header.items()
    ]


def expected_sums(path: Path) -> Dict[str, object]:
    """The checksums a correct load gives: the sampled bytes of every tensor
    as stored, and as F32 after BF16 -> F32 (exact: the bits shifted left by 16)."""
    import numpy as np

    table = tensor_table(path)
    raw = f32 = 0
    data = np.memmap(path, dtype=np.uint8, mode="r")
    for _, dtype, start, end in table:
        region = data[start:end]
        raw += int(region[::STRIDE].sum(dtype=np.uint64))
        if dtype == "BF16":
            wide = region.view(np.uint16).astype(np.uint32) << 16
            f32 += int(wide.view(np.uint8)[::STRIDE].sum(dtype=np.uint64))
    del data
    return {"count": len(table), "bytes": raw, "f32": f32}


def prepare(folder: Path, names: List[str]) -> Dict[str, Input]:
    folder.mkdir(parents=True, exist_ok=True)
    inputs: Dict[str, Input] = {}
    layout = llama_layout(SCALE)
    for name, dtype in (("llama-bf16", "BF16"), ("llama-f16", "F16")):
        if name not in names:
            continue
        path = folder / f"llama-{SCALE:g}gb-{dtype.lower()}.safetensors"
        if not path.exists():
            print(f"writing {path} ...", flush=True)
            write_file(path, layout, dtype, 2)
        inputs[name] = Input(name, path, [path], expected_sums(path))
    if "bert" in names:
        from bench_dropin_from_pretrained import build

        bert = folder / "bert"
        if not (bert / "model.safetensors").exists():
            print(f"building {bert} ...", flush=True)
            build(str(bert))
        files = sorted(bert.glob("*.safetensors"))
        inputs["bert"] = Input("bert", files[0], files)
    return inputs


# --- running -------------------------------------------------------------------------------


def cannot_evict(mode: str) -> Optional[str]:
    """Why the cache cannot be emptied here, or None."""
    if mode == "drop":
        if os.geteuid() != 0:
            return f"not root (euid {os.geteuid()}): cannot write {DROP_CACHES}"
        if not os.access(DROP_CACHES, os.W_OK):
            return f"{DROP_CACHES} is not writable here (read-only /proc/sys?)"
    elif not hasattr(os, "posix_fadvise"):
        return "os.posix_fadvise is not available on this platform"
    return None


def measure(setup: str, load: str, check: str, inp: Input, mode: str, env: Dict[str, str]) -> dict:
    spec = {
        "path": str(inp.path),
        "files": [str(f) for f in inp.files],
        "setup": setup,
        "load": load,
        "check": check,
        "evict": mode,
        "stride": STRIDE,
    }
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(
            f"worker failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return json.loads(lines[-1][len("RESULT ") :])


def verify(case: Case, inp: Input, got: dict, models: Dict[str, Tuple[int, float]]) -> None:
    if case.check == "model":
        key = (got["count"], got["checksum"])
        seen = models.setdefault(case.group, key)
        if seen != key:
            raise AssertionError(f"{case.name}: model checksum {key} != {seen} of the group")
        return
    want = (inp.expected["count"], inp.expected[case.check])
    if (got["count"], got["checksum"]) != want:
        raise AssertionError(
            f"{case.name}: {got['count']} tensors, checksum {got['checksum']}; expected {want}"
        )


def select(names: Optional[str], transformers: bool, with_reference: bool) -> List[Case]:
    if names:
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in BY_NAME]
        if unknown:
            raise SystemExit(f"unknown case(s) {unknown}; known: {', '.join(BY_NAME)}")
        chosen = [BY_NAME[n] for n in wanted]
    else:
        chosen = [c for c in CASES if transformers or not c.transformers]
    if with_reference:
        for c in list(chosen):
            if c.reference and BY_NAME[c.reference] not in chosen:
                chosen.append(BY_NAME[c.reference])
    return [c for c in CASES if c in chosen]  # table order


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "fastst-bench-cold",
        help="where the input files are generated and read (a folder of this benchmark's own)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", help=f"comma-separated subset of: {', '.join(BY_NAME)}")
    parser.add_argument(
        "--no-reference",
        action="store_true",
        help="do not add the reference counterparts of the chosen cases",
    )
    parser.add_argument(
        "--transformers",
        action="store_true",
        help="add transformers from_pretrained, reference vs fastst through the drop-in hook",
    )
    parser.add_argument(
        "--evict",
        choices=("drop", "fadvise"),
        default="drop",
        help="drop: sync + drop_caches (root); fadvise: evict only the inputs (no root)",
    )
    parser.add_argument("--json", help="also write the results as JSON to this file ('-': stdout)")
    args = parser.parse_args(argv)

    why = cannot_evict(args.evict)
    if why:
        print(f"bench_cold: skipped, cannot empty the page cache: {why}")
        return 0
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")

    cases = select(args.cases, args.transformers, not args.no_reference)
    inputs = prepare(args.dir, sorted({c.input for c in cases}))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("FASTST_AS_SAFETENSORS", None)

    # one unit per case, plus the disk limit of each input right before its first case
    units: List[Tuple[str, Optional[Case], Input]] = []
    for c in cases:
        if not any(u[0] == "cat:" + c.input for u in units):
            units.append(("cat:" + c.input, None, inputs[c.input]))
        units.append((c.name, c, inputs[c.input]))

    times: Dict[str, List[float]] = {u[0]: [] for u in units}
    resident: Dict[str, List[float]] = {u[0]: [] for u in units}
    models: Dict[str, Tuple[int, float]] = {}
    print(
        f"cold loads: {len(units)} measurements x {args.rounds} rounds, evict={args.evict}, "
        f"inputs in {args.dir}",
        flush=True,
    )
    for r in range(args.rounds):
        k = r % len(units)
        for label, case, inp in units[k:] + units[:k]:
            if case is None:
                got = measure("", "cat()", "none", inp, args.evict, env)
            else:
                got = measure(case.setup, case.load, case.check, inp, args.evict, env)
                verify(case, inp, got, models)
            times[label].append(got["seconds"])
            resident[label].append(got["resident"])
            print(
                f"  round {r + 1}: {label:16s} {got['seconds']:7.3f} s  "
                f"(resident before: {got['resident']:.1%})",
                flush=True,
            )

    rows = []
    for label, case, inp in units:
        med = statistics.median(times[label])
        disk = statistics.median(times["cat:" + inp.name])
        ref = case.reference if case else None
        ratio = statistics.median(times[ref]) / med if ref and ref in times and times[ref] else None
        rows.append(
            {
                "case": label,
                "input": inp.name,
                "file": str(inp.path),
                "bytes": inp.size,
                "median_s": med,
                "runs_s": times[label],
                "gb_per_s": inp.size / med / 1e9,
                "disk_share": disk / med,
                "reference": ref,
                "vs_reference": ratio,
                "max_resident_before": max(resident[label]),
                "note": case.note if case else f"cat {inp.path.name} > /dev/null (disk limit)",
            }
        )

    print()
    print(f"{'case':16s} {'median s':>9s} {'GB/s':>6s} {'disk share':>10s} {'vs ref':>7s}  what")
    for row in rows:
        vs = f"{row['vs_reference']:6.2f}x" if row["vs_reference"] else "      -"
        print(
            f"{row['case']:16s} {row['median_s']:9.3f} {row['gb_per_s']:6.2f} "
            f"{row['disk_share']:10.2f} {vs}  {row['note']}"
        )
    warm = [row["case"] for row in rows if row["max_resident_before"] > 0.05]
    if warm:
        print(f"WARNING: not cold before timing (over 5% resident): {', '.join(warm)}")
    print(
        "disk share = cat time / case time (1.0 = the disk's speed); "
        "vs ref = reference time / case time"
    )
    if args.json:
        doc = {
            "rounds": args.rounds,
            "evict": args.evict,
            "dir": str(args.dir),
            "python": sys.executable,
            "results": rows,
        }
        text = json.dumps(doc, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
