"""The ``fastst.cli`` package docstring, the command's overview, names every
subcommand the parser declares, ``fastst run``, and every module of the
package, so a new command or module cannot be left out of it."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Set

import fastst.cli
from fastst.cli import build_parser


def _subcommands() -> Set[str]:
    parser = build_parser()
    found: Set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found |= set(action.choices)
    return found


def _named(doc: str) -> Set[str]:
    return set(re.findall(r"``([a-z_]+)``", doc))


def test_the_overview_names_every_subcommand() -> None:
    doc = fastst.cli.__doc__ or ""
    commands = _subcommands()
    assert len(commands) >= 10
    assert commands - _named(doc) == set()
    count = {10: "ten", 11: "eleven", 12: "twelve"}.get(len(commands), str(len(commands)))
    assert doc.splitlines()[0].startswith(f"The ``fastst`` command and its {count} subcommands")
    assert "``fastst run``" in doc


def test_the_overview_names_every_module() -> None:
    doc = fastst.cli.__doc__ or ""
    folder = Path(fastst.cli.__file__).parent
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__", "__main__"}
    assert modules - _named(doc) == set()
