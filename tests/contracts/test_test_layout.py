"""The tests mirror the package's rooms: a test named for a module sits in its room's folder.

As docs/testing.md states it: ``tests/<folder>/test_<name>.py`` named for a
module of one room of the package (and of none in the room ``<folder>``
mirrors) belongs in that room's test folder. A name several rooms share
(``remote``) names a feature of the room whose folder holds the test."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Set

import fastst

PACKAGE = Path(fastst.__file__).resolve().parent
TESTS = Path(__file__).resolve().parent.parent

#: Test folder -> the room of the package it mirrors.
ROOMS: Dict[str, str] = {
    "sources": "_sources",
    "read": "_read",
    "write": "_write",
    "frameworks": "_frameworks",
    "dropin": "_dropin",
    "distributed": "_distributed",
    "dcp": "_dcp",
    "tools": "tools",
    "cli": "cli",
}


def modules_of(room: str) -> Set[str]:
    """Names of the modules of ``room`` (subfolders' modules included)."""
    folder = PACKAGE / room
    return (
        {p.stem for p in folder.rglob("*.py") if p.stem != "__init__"} if folder.is_dir() else set()
    )


def misplaced() -> List[str]:
    """Test files named for a module of one other room and none of their own."""
    found = []
    homes = {room: modules_of(room) for room in ROOMS.values()}
    for folder, room in ROOMS.items():
        for test in sorted((TESTS / folder).glob("test_*.py")):
            name = test.stem[len("test_") :]
            if name in homes[room]:
                continue
            elsewhere = [ROOMS_BY_ROOM[r] for r, names in homes.items() if name in names]
            if len(elsewhere) == 1:
                found.append(f"tests/{folder}/{test.name} tests a module of tests/{elsewhere[0]}/")
    return found


ROOMS_BY_ROOM = {room: folder for folder, room in ROOMS.items()}


def test_every_test_folder_names_a_room() -> None:
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    unmapped = folders - set(ROOMS) - {"contracts", "helpers"}
    assert not unmapped, f"test folders {sorted(unmapped)} mirror no room: add them to ROOMS"


def test_tests_named_for_a_module_sit_in_its_room() -> None:
    assert misplaced() == []
    # Guards the check against passing whatever the layout is.
    assert "layers" in modules_of("tools") and "checkpoint" in modules_of("tools")
