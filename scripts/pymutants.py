"""A scripted, reproducible mutation pass over the Python package.

    python scripts/pymutants.py [--seed N] [--only MODULE,...] [--list]
                                [--timeout S] [--report target/python-mutants.md]

For each module of ``MODULES`` it parses the source, lists every place one of
the mutation operators applies, and picks (seeded, so the same source and seed
give the same mutants) a few per module, spread over the operators:

``cmp``     flip a comparison (``<`` -> ``>=``, ``==`` -> ``!=``, ``is`` -> ``is not``,
            ``in`` -> ``not in``...)
``not``     negate the condition of an ``if`` / ``while`` / ``assert`` / conditional
            expression
``const``   change an integer constant (0 -> 1, 1 -> 0, n -> n + 1) or flip a bool
``return``  return ``None`` instead of the value (a bool return is flipped)
``raise``   drop a ``raise`` (replaced by ``pass``)
``call``    drop a call made for its effect (an expression statement), e.g. a check
``boolop``  swap ``and`` / ``or``
``slice``   off by one in a slice bound (``a[:n]`` -> ``a[:n - 1]``, ``a[i:]`` -> ``a[i + 1:]``)
``arith``   swap ``+`` / ``-``

Each mutant is applied to a scratch copy of ``python/`` (the real files are
never written), then only the test files that exercise the module (``MODULES``)
run against it with ``pytest -x -q`` under a timeout, with ``PYTHONPATH``
pointing at the scratch copy (subprocesses started by the tests inherit it) and
no bytecode cache, so that every run compiles the mutated source. A mutant is
*killed* when the tests fail, *timeout* when they run past ``--timeout`` (counted
as killed: the fault is noticed), *survived* when they pass, *invalid* when the
mutated module does not compile. Before any mutant, each test selection must
pass on the unmutated copy (else the script stops).

The report (Markdown) lists every mutant with its status and, for killed ones,
the first failing test; the section between ``<!-- triage -->`` and
``<!-- /triage -->`` of an existing report is kept as it is (the hand-written
triage of the survivors). Run it under ``nice``; it is not part of CI.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "fastst"

READER = ["tests/read/test_safe_open.py", "tests/contracts/test_reader_differential.py"]
CLI_BASIC = ["tests/tools/test_inspect.py", "tests/cli/test_output.py"]
SIGNING = ["tests/tools/test_signing.py", "tests/tools/test_sbom.py"]

#: module (relative to python/fastst) -> (mutants to pick, test files that exercise it)
MODULES: Dict[str, Tuple[int, List[str]]] = {
    "_read/safe_open.py": (
        7,
        READER + ["tests/contracts/test_hardening_files.py", "tests/contracts/test_corpus.py"],
    ),
    "_read/load.py": (
        6,
        [
            "tests/write/test_tensors.py",
            "tests/frameworks/test_other_frameworks.py",
            "tests/read/test_safe_open.py",
        ],
    ),
    "_sources/opener.py": (
        5,
        [
            "tests/sources/test_opener.py",
            "tests/sources/test_folders.py",
            "tests/dropin/test_api.py",
            "tests/contracts/test_corpus.py",  # open_raw: every plain file is opened through it
        ],
    ),
    "_paths.py": (3, ["tests/contracts/test_hardening_paths.py", "tests/read/test_safe_open.py"]),
    "_write/tensors.py": (
        7,
        [
            "tests/write/test_tensors.py",
            "tests/contracts/test_write_differential.py",
            "tests/write/test_atomic_save.py",
        ],
    ),
    "_sources/sharded.py": (
        6,
        [
            "tests/sources/test_sharded.py",
            "tests/write/test_sharded.py",
            "tests/tools/test_checkpoint.py",
        ],
    ),
    "tools/checkpoint.py": (
        6,
        [
            "tests/tools/test_checkpoint.py",
            "tests/cli/test_inputs.py",
            "tests/sources/test_identify.py",
        ],
    ),
    "_sources/folders.py": (
        4,
        [
            "tests/sources/test_folders.py",
            "tests/sources/test_sharded.py",
            "tests/write/test_sharded.py",
        ],
    ),
    "_dropin/hook.py": (
        6,
        ["tests/dropin/test_hook.py", "tests/dropin/test_api.py", "tests/sources/test_folders.py"],
    ),
    "_write/metadata.py": (5, ["tests/write/test_metadata.py", "tests/cli/test_meta_edit.py"]),
    "tools/convert.py": (6, ["tests/cli/test_convert.py"]),
    "_errors.py": (
        4,
        [
            "tests/contracts/test_rules_catalogue.py",
            "tests/contracts/test_corpus.py",
            "tests/read/test_safe_open.py",
        ],
    ),
    "cli/commands.py": (4, CLI_BASIC + ["tests/cli/test_meta.py", "tests/cli/test_hash.py"]),
    "cli/parser.py": (
        3,
        CLI_BASIC + ["tests/cli/test_inputs.py", "tests/sources/test_identify.py"],
    ),
    "cli/render.py": (3, CLI_BASIC + ["tests/cli/test_fuzz.py"]),
    "cli/report.py": (3, ["tests/cli/test_verify.py", "tests/cli/test_output.py"]),
    "cli/sarif.py": (3, ["tests/cli/test_verify.py", "tests/cli/test_output.py"]),
    "cli/text.py": (3, CLI_BASIC + ["tests/cli/test_fuzz.py"]),
    "cli/convert.py": (2, ["tests/cli/test_convert.py"]),
    "tools/provenance/bundle.py": (2, SIGNING),
    "cli/provenance.py": (2, SIGNING),
    "cli/provenance_render.py": (2, SIGNING),
    "tools/provenance/findings.py": (2, SIGNING),
    "tools/provenance/hashing.py": (2, SIGNING),
    "tools/provenance/keys.py": (2, SIGNING),
    "tools/provenance/model.py": (2, SIGNING),
    "tools/provenance/sbom.py": (2, ["tests/tools/test_sbom.py"]),
    "tools/provenance/signing.py": (2, SIGNING),
    "tools/provenance/statement.py": (2, SIGNING),
    "tools/provenance/trust.py": (2, SIGNING),
    "tools/provenance/verifying.py": (2, SIGNING),
}

FLIP = {
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}


@dataclass
class Site:
    """One place an operator applies: replace source bytes [start, end)."""

    kind: str
    line: int
    start: int
    end: int
    before: str
    after: str


@dataclass
class Mutant:
    ident: str
    module: str
    site: Site
    tests: List[str]
    status: str = "pending"
    detail: str = ""
    seconds: float = 0.0


class _Finder(ast.NodeVisitor):
    """Collects the sites of every operator in one module."""

    def __init__(self, source: bytes) -> None:
        self.source = source
        lines = source.splitlines(keepends=True)
        self.line_start = [0]
        for line in lines:
            self.line_start.append(self.line_start[-1] + len(line))
        self.sites: List[Site] = []
        self.docstrings: set = set()

    def span(self, node: ast.AST) -> Tuple[int, int]:
        start = self.line_start[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
        end = self.line_start[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
        return start, end

    def add(self, kind: str, node: ast.AST, after: str) -> None:
        start, end = self.span(node)
        before = self.source[start:end].decode("utf-8")
        self.sites.append(Site(kind, node.lineno, start, end, before, after))  # type: ignore[attr-defined]

    # skipped: type-checking-only code and reprs
    def visit_If(self, node: ast.If) -> None:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        self.add("not", node.test, f"(not ({ast.unparse(node.test)}))")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name == "__repr__":
            return
        self._docstring(node)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._docstring(node)
        self.generic_visit(node)

    def visit_Module(self, node: ast.Module) -> None:
        self._docstring(node)
        self.generic_visit(node)

    def _docstring(self, node: ast.AST) -> None:
        body = getattr(node, "body", [])
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            self.docstrings.add(id(body[0]))

    def visit_While(self, node: ast.While) -> None:
        self.add("not", node.test, f"(not ({ast.unparse(node.test)}))")
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.add("not", node.test, f"(not ({ast.unparse(node.test)}))")
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        self.add("not", node.test, f"(not ({ast.unparse(node.test)}))")
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if len(node.ops) == 1 and type(node.ops[0]) in FLIP:
            new = ast.Compare(node.left, [FLIP[type(node.ops[0])]()], node.comparators)
            self.add("cmp", node, f"({ast.unparse(new)})")
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        self.add("boolop", node, f"({ast.unparse(ast.BoolOp(other, node.values))})")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        text = (ast.JoinedStr, ast.List, ast.ListComp, ast.Tuple)
        operands = (node.left, node.right)
        if any(
            isinstance(o, text)
            or (isinstance(o, ast.Constant) and isinstance(o.value, (str, bytes)))
            for o in operands
        ):
            pass  # concatenation of text or sequences: '-' would only raise TypeError
        elif isinstance(node.op, (ast.Add, ast.Sub)):
            op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
            self.add("arith", node, f"({ast.unparse(ast.BinOp(node.left, op, node.right))})")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bool):
            self.add("const", node, str(not value))
        elif isinstance(value, int):
            self.add("const", node, str(1 if value == 0 else 0 if value == 1 else value + 1))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return  # f-strings: messages, not behaviour

    def visit_Return(self, node: ast.Return) -> None:
        value = node.value
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                self.add("return", node, f"return {not value.value}")
            else:
                self.add("return", node, "return None")
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        self.add("raise", node, "pass")
        # no generic_visit: mutating the message of a dropped raise is noise

    def visit_Expr(self, node: ast.Expr) -> None:
        if id(node) in self.docstrings:
            return
        if isinstance(node.value, ast.Call):
            self.add("call", node, "pass")
        self.generic_visit(node)

    def visit_Slice(self, node: ast.Slice) -> None:
        if node.upper is not None:
            self.add("slice", node.upper, f"({ast.unparse(node.upper)}) - 1")
        elif node.lower is not None:
            self.add("slice", node.lower, f"({ast.unparse(node.lower)}) + 1")
        self.generic_visit(node)


def sites_of(path: Path) -> List[Site]:
    source = path.read_bytes()
    finder = _Finder(source)
    finder.visit(ast.parse(source))
    return finder.sites


def pick(module: str, sites: List[Site], count: int, seed: int) -> List[Site]:
    """``count`` sites, spread over the operators, seeded by module and seed."""
    rng = random.Random(f"{seed}:{module}")
    by_kind: Dict[str, List[Site]] = {}
    for site in sites:
        by_kind.setdefault(site.kind, []).append(site)
    kinds = sorted(by_kind)
    rng.shuffle(kinds)
    for kind in kinds:
        rng.shuffle(by_kind[kind])
    chosen: List[Site] = []
    while len(chosen) < count and any(by_kind.values()):
        for kind in kinds:
            if by_kind[kind] and len(chosen) < count:
                chosen.append(by_kind[kind].pop())
    return sorted(chosen, key=lambda s: (s.start, s.kind))


def mutants(seed: int, only: Optional[Sequence[str]] = None) -> List[Mutant]:
    out: List[Mutant] = []
    for module, (count, tests) in MODULES.items():
        if only and module not in only:
            continue
        for site in pick(module, sites_of(PACKAGE / module), count, seed):
            out.append(Mutant(f"M{len(out) + 1:03d}", module, site, tests))
    return out


def apply(source: bytes, site: Site) -> bytes:
    return source[: site.start] + site.after.encode("utf-8") + source[site.end :]


# --- running --------------------------------------------------------------------------------


def scratch_copy(dest: Path) -> Path:
    """A copy of python/ (package, compiled module, .pth) without bytecode."""
    target = dest / "python"
    shutil.copytree(ROOT / "python", target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def pytest_env(python_dir: Path) -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(python_dir)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("FASTST_AS_SAFETENSORS", None)
    return env


def run_tests(tests: Sequence[str], env: Dict[str, str], timeout: float) -> Tuple[str, str, float]:
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        "--no-header",
        "-rf",
        *tests,
    ]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return "timeout", f"over {timeout:.0f} s", time.perf_counter() - start
    took = time.perf_counter() - start
    if proc.returncode == 0:
        return "survived", "", took
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
    detail = failed[0] if failed else (proc.stdout + proc.stderr).strip().splitlines()[-1:]
    return "killed", detail if isinstance(detail, str) else " ".join(detail), took


def check_baseline(
    selections: Sequence[Tuple[str, ...]], env: Dict[str, str], timeout: float
) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import fastst; print(fastst.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    where = probe.stdout.strip()
    if not where.startswith(env["PYTHONPATH"]):
        raise SystemExit(f"the tests would import fastst from {where}, not the scratch copy")
    for tests in selections:
        status, detail, took = run_tests(tests, env, timeout * 2)
        print(f"baseline {' '.join(tests)}: {status} ({took:.0f} s) {detail}", flush=True)
        if status != "survived":
            raise SystemExit("the unmutated package fails these tests: fix that first")


# --- report ---------------------------------------------------------------------------------

TRIAGE_START, TRIAGE_END = "<!-- triage -->", "<!-- /triage -->"


def short(text: str, limit: int = 70) -> str:
    one = " ".join(text.split())
    one = one.replace("|", "\\|").replace("`", "'")
    return one if len(one) <= limit else one[: limit - 3] + "..."


def report(path: Path, found: List[Mutant], seed: int, commit: str, seconds: float) -> None:
    kept = ""
    if path.exists():
        old = path.read_text()
        if TRIAGE_START in old and TRIAGE_END in old:
            kept = old[old.index(TRIAGE_START) : old.index(TRIAGE_END) + len(TRIAGE_END)]
    if not kept:
        kept = f"{TRIAGE_START}\n(survivors not triaged yet)\n{TRIAGE_END}"
    counts: Dict[str, int] = {}
    for m in found:
        counts[m.status] = counts.get(m.status, 0) + 1
    now = datetime.datetime.now(datetime.UTC)
    noticed = counts.get("killed", 0) + counts.get("timeout", 0)
    valid = len(found) - counts.get("invalid", 0)
    lines = [
        "# Python mutation pass",
        "",
        "Generated by `scripts/pymutants.py` (the triage section is written by hand",
        "and kept when the report is regenerated). Reproduce with:",
        "",
        "```sh",
        f"nice -n 19 python scripts/pymutants.py --seed {seed}",
        "```",
        "",
        f"Source: commit `{commit}`, seed {seed}, {now:%Y-%m-%d %H:%M} UTC, "
        f"{seconds / 60:.0f} min.",
        "",
        f"**{len(found)} mutants: {counts.get('killed', 0)} killed, {counts.get('timeout', 0)} "
        f"timed out (noticed), {counts.get('survived', 0)} survived, "
        f"{counts.get('invalid', 0)} invalid; score {noticed}/{valid}"
        + (f" = {noticed / valid:.1%}" if valid else "")
        + ".**",
        "",
        "## Triage of the survivors",
        "",
        kept,
        "",
        "## Per module",
        "",
        "| module | mutants | killed | survived |",
        "|---|---|---|---|",
    ]
    for module in MODULES:
        mine = [m for m in found if m.module == module]
        if mine:
            k = sum(m.status in ("killed", "timeout") for m in mine)
            s = sum(m.status == "survived" for m in mine)
            lines.append(f"| {module} | {len(mine)} | {k} | {s} |")
    lines += [
        "",
        "## Every mutant",
        "",
        "| id | module:line | op | before | after | status | first failing test |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in found:
        s = m.site
        lines.append(
            f"| {m.ident} | {m.module}:{s.line} | {s.kind} | `{short(s.before, 50)}` | "
            f"`{short(s.after, 50)}` | {m.status} | {short(m.detail, 80)} |"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--only", help="comma-separated modules (keys of MODULES)")
    parser.add_argument("--ids", help="comma-separated mutant ids to run (e.g. M003,M017)")
    parser.add_argument(
        "--tests",
        help="comma-separated test files to run instead of the module's own (triage: does a "
        "wider selection kill a survivor?)",
    )
    parser.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant")
    parser.add_argument(
        "--report",
        type=Path,
        help="where the report goes (default target/python-mutants.md; none for --only/--ids "
        "unless given)",
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated runs")
    args = parser.parse_args(argv)

    only = [m.strip() for m in args.only.split(",")] if args.only else None
    unknown = [m for m in only or [] if m not in MODULES]
    if unknown:
        raise SystemExit(f"unknown module(s) {unknown}")
    found = mutants(args.seed, only)
    if args.ids:
        wanted = {i.strip() for i in args.ids.split(",")}
        found = [m for m in found if m.ident in wanted]
    if args.tests:
        tests = [t.strip() for t in args.tests.split(",") if t.strip()]
        for m in found:
            m.tests = tests
    if args.list:
        for m in found:
            s = m.site
            print(f"{m.ident} {m.module}:{s.line} {s.kind}: {short(s.before)} -> {short(s.after)}")
        print(f"{len(found)} mutants")
        return 0

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pymutants-") as tmp:
        python_dir = scratch_copy(Path(tmp))
        env = pytest_env(python_dir)
        if not args.no_baseline:
            check_baseline(sorted({tuple(m.tests) for m in found}), env, args.timeout)
        for m in found:
            target = python_dir / "fastst" / m.module
            original = target.read_bytes()
            mutated = apply(original, m.site)
            try:
                compile(mutated, str(target), "exec")
            except SyntaxError as exc:
                m.status, m.detail = "invalid", str(exc)
            else:
                target.write_bytes(mutated)
                try:
                    m.status, m.detail, m.seconds = run_tests(m.tests, env, args.timeout)
                finally:
                    target.write_bytes(original)
            s = m.site
            print(
                f"{m.ident} {m.module}:{s.line} {s.kind:6s} {m.status:8s} {m.seconds:5.0f} s  "
                f"{short(s.before, 40)} -> {short(s.after, 40)}  {short(m.detail, 60)}",
                flush=True,
            )
    path = args.report
    if path is None and not (only or args.ids):
        path = ROOT / "target" / "python-mutants.md"
        path.parent.mkdir(exist_ok=True)
    if path is not None:
        report(path, found, args.seed, commit, time.perf_counter() - started)
        print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
