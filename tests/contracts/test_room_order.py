"""The library's own rooms stand in one order, and a room imports only rooms
below it: the order is stated once here (:data:`FLOORS`), and a module of a
room the list does not name fails with a message saying where to add it."""

from __future__ import annotations

from typing import Dict, List, Tuple

from tests.contracts.test_package_layout import MODULES, imports

#: The floors of the package, from the ground up. A room (a top-level module
#: or folder of ``fastst``) imports rooms of lower floors only: never a room
#: of its own floor, never one above. ``_fastst`` is the compiled module.
FLOORS: Tuple[Tuple[str, ...], ...] = (
    ("_fastst",),
    # The ground: the error tree, text and path display, dtypes, settings.
    ("_errors",),
    ("_text",),
    ("_settings",),
    ("_paths", "_dtypes"),
    ("_layout",),  # checkpoint naming facts and the checkpoint chooser
    ("_sources",),  # everything safe_open accepts, made one RawSource
    ("_frameworks",),  # framework backends: a leaf below reading and writing
    ("_read", "_write"),  # siblings: neither imports the other
    ("_faces",),  # reading and writing composed for one framework
    ("_dropin",),  # the drop-in switch and the reference's compat names
    ("_distributed",),  # one checkpoint loaded into many processes
    ("_dcp",),  # torch DCP storage
    ("fastst",),  # the package root
    # The framework modules: each imports the root whole first (see
    # fastst._dropin.hook._FacadeLoader.exec_module).
    ("numpy", "torch", "flax", "tensorflow", "paddle", "mlx"),
    ("tools",),  # the tools wing, built on the library
    ("cli",),  # the command
    ("__main__",),  # python -m fastst
)

FLOOR: Dict[str, int] = {room: n for n, rooms in enumerate(FLOORS) for room in rooms}


def room(module: str) -> str:
    """The room of a dotted module name: the first name under ``fastst``
    (``fastst`` itself for the package root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def climbs(module: str, targets: List[str]) -> List[str]:
    """The imports among ``targets`` (modules ``module`` imports) that run to
    a room of ``module``'s floor or above (rooms on no floor are left to
    :func:`test_every_room_is_on_a_floor`)."""
    here = room(module)
    found = []
    for target in targets:
        there = room(target)
        if there == here or here not in FLOOR or there not in FLOOR:
            continue
        if FLOOR[there] >= FLOOR[here]:
            found.append(
                f"{module} ({here}, floor {FLOOR[here]}) imports {target} "
                f"({there}, floor {FLOOR[there]})"
            )
    return found


def test_every_room_is_on_a_floor() -> None:
    unlisted = sorted({room(m) for m in MODULES} - set(FLOOR))
    assert not unlisted, (
        f"rooms {unlisted} are on no floor: add each to FLOORS in {__file__}, "
        "above every room it imports and below every room that imports it"
    )


def test_no_room_imports_a_room_of_its_floor_or_above() -> None:
    found = [c for m in MODULES for c in climbs(m, [t for t, _ in imports(m)])]
    assert found == [], "imports that run back up:\n" + "\n".join(found)


def test_a_climb_is_caught() -> None:
    # Guards the test above against passing whatever the imports are.
    assert climbs("fastst._frameworks.torch", ["fastst._read.load"])  # up
    assert climbs("fastst._read.load", ["fastst._write.tensors"])  # a sibling
    assert not climbs("fastst._read.load", ["fastst._frameworks", "fastst._fastst.read"])
    assert any(t.startswith("fastst._frameworks") for t, _ in imports("fastst._read.safe_open"))
