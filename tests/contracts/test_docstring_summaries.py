"""A module docstring says its summary line once: the paragraph after it adds
to the summary instead of restating it.

The summary line is what docs/architecture.md's tables show; a second
paragraph opening with the same words again reads as a stutter, and once a
few modules did it the rest copied the habit. The check: a run of
:data:`RUN` or more consecutive words of the summary that recurs in the
opening of the next paragraph (the summary's length and :data:`SLACK` words
more), covering at least :data:`SHARE` of the summary's words, is a
restatement. Calibrated on the 68 texts that restated their summary (every
one is caught; the weakest repeated 4 of its 16 words) and on the texts that
replaced them (no shared run is longer than 3 words)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[2]
#: The folders holding modules whose docstrings are checked.
FOLDERS = ("python", "scripts", "tools")
#: The fewest consecutive words of the summary that make a restatement.
RUN = 4
#: The least share of the summary's words that run must cover.
SHARE = 0.25
#: How many words past the summary's length the opening of paragraph 2 holds.
SLACK = 12

_ROLE = re.compile(r":[a-z]+:`")


def words(text: str) -> List[str]:
    """``text`` as lower-case words, reST roles (``:func:``) dropped."""
    return re.findall(r"[a-z0-9_]+", _ROLE.sub("`", text).lower())


def longest_run(a: List[str], b: List[str]) -> int:
    """The length of the longest run of consecutive words ``a`` and ``b`` share."""
    best = 0
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            if x == y:
                current[j] = previous[j - 1] + 1
                best = max(best, current[j])
        previous = current
    return best


def restated(doc: str) -> Optional[Tuple[int, int]]:
    """``(run, summary words)`` when the paragraph after the summary restates
    it, else None."""
    paragraphs = [p for p in re.split(r"\n\s*\n", doc.strip()) if p.strip()]
    if len(paragraphs) < 2:
        return None
    summary = words(paragraphs[0])
    opening = words(paragraphs[1])[: len(summary) + SLACK]
    run = longest_run(summary, opening)
    if summary and run >= RUN and run >= SHARE * len(summary):
        return run, len(summary)
    return None


def modules(root: Path = ROOT) -> Iterator[Path]:
    for folder in FOLDERS:
        yield from sorted((root / folder).rglob("*.py"))


def test_the_modules_were_found() -> None:
    assert len(list(modules())) > 100


def test_no_module_docstring_restates_its_summary() -> None:
    stutters = []
    for path in modules():
        doc = ast.get_docstring(ast.parse(path.read_text("utf-8")))
        found = restated(doc) if doc else None
        if found:
            stutters.append(f"{path.relative_to(ROOT)}: {found[0]} of {found[1]} words again")
    assert stutters == [], "\n".join(stutters)


def test_the_check_catches_a_restatement_and_passes_an_addition() -> None:
    # Texts the library held, before and after the summary was said once.
    before = (
        "PyTorch support: ``fastst.torch`` has the functions of ``safetensors.torch``.\n\n"
        "PyTorch support: ``fastst.torch`` has the functions of ``safetensors.torch``\n"
        "with the same signatures, results and errors.\n"
    )
    after = (
        "PyTorch support: ``fastst.torch`` has the functions of ``safetensors.torch``.\n\n"
        "Same signatures, results and errors as the reference's.\n"
    )
    assert restated(before) == (10, 10)
    assert restated(after) is None
    # A restatement in other words around the same phrase is caught too.
    reworded = (
        "SARIF logs of ``fastst verify`` reports and signature checks, as SARIF viewers "
        "read them.\n\n"
        "SARIF 2.1.0 logs, as GitHub code scanning and other SARIF viewers read\n"
        "them: of ``fastst verify`` reports.\n"
    )
    assert restated(reworded) is not None
    short = (
        "Sharded checkpoints opened as one logical file.\n\n"
        "Sharded checkpoints: an index (or the folder holding it) opened as one logical file.\n"
    )
    assert restated(short) is not None
    # A single paragraph, or a body that shares a short phrase, passes.
    assert restated("The streaming writer.\n") is None
    assert restated("Owned loads of a file.\n\nEach tensor of a file is read once.") is None
