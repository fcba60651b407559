"""The JSON Schema of every ``--json`` output, generated from :mod:`fastst.tools.results`.

It is made from the TypedDicts there; ``output.schema.json`` beside this
module is what :func:`render` writes, never edited by hand:

    python -m fastst.cli.schema          # rewrite output.schema.json
    python -m fastst.cli.schema --check  # exit 1 if it is out of date

Each TypedDict becomes an object under ``$defs`` (named after its class in
snake case, or by :data:`NAMES`) that lists its keys, requires those that are
always there and allows no other; ``Optional``/``Union`` become a ``null``
type or ``anyOf``, ``Literal`` a ``const`` or ``enum``, ``List`` and
``Tuple`` arrays, ``Dict[str, X]`` an object of X, and
``Annotated[X, Schema(...)]`` adds its keywords to X's.
"""

from __future__ import annotations

import json
import re
import sys
import typing
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..tools import results as r

PATH = Path(__file__).with_name("output.schema.json")

HEADER: Dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://github.com/fastst/fastst/blob/main/python/fastst/cli/output.schema.json",
    "title": "fastst --json output",
    "description": "The envelope every `fastst SUBCOMMAND --json` prints (schema version 1): "
    "who made it, the command, one result per input, one error per input that could not be "
    "read.",
}

#: The ``$defs`` others may point at (``output.schema.json#/$defs/NAME``),
#: under the names they have always had.
NAMES: Dict[str, Any] = {
    "producer": r.Producer,
    "error": r.ErrorEntry,
    "finding": r.Finding,
    "inspect": r.InspectReport,
    "verify": r.VerifyReport,
    "hash": r.HashReport,
    "meta": r.MetaReport,
    "diff": r.DiffReport,
    "convert": r.ConvertReport,
}

_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


class _Defs:
    def __init__(self) -> None:
        self.defs: Dict[str, Any] = {}
        self.names = {tp: name for name, tp in NAMES.items()}

    def ref(self, tp: Any) -> Dict[str, Any]:
        """The schema of ``tp``: a ``$ref`` for a named type or a TypedDict."""
        name: Optional[str] = self.names.get(tp)
        if name is None and _is_typeddict(tp):
            name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", tp.__name__).lower()
        if name is None:
            return self.inline(tp)
        if name not in self.defs:
            self.defs[name] = {}  # taken, in case of recursion
            self.defs[name] = self.inline(tp)
        return {"$ref": f"#/$defs/{name}"}

    def inline(self, tp: Any) -> Dict[str, Any]:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if tp is Any:
            return {}
        if tp in _TYPES:
            return {"type": _TYPES[tp]}
        if _is_typeddict(tp):
            hints = typing.get_type_hints(tp, include_extras=True)
            return {
                "type": "object",
                "required": [k for k in hints if k in tp.__required_keys__],
                "properties": {k: self.ref(v) for k, v in hints.items()},
                "additionalProperties": False,
            }
        if origin is typing.Annotated:
            out: Dict[str, Any] = self.ref(args[0])
            for extra in tp.__metadata__:
                if isinstance(extra, r.Schema):
                    out = {**out, **extra.keywords}
            return out
        if origin is typing.Literal:
            return {"const": args[0]} if len(args) == 1 else {"enum": list(args)}
        if origin is typing.Union:
            members = [a for a in args if a is not type(None)]
            options: List[Dict[str, Any]] = [self.ref(a) for a in members]
            out = options[0] if len(options) == 1 else {"anyOf": options}
            if len(members) == len(args):
                return out
            if isinstance(out.get("type"), str):
                return {**out, "type": [out["type"], "null"]}
            return {"anyOf": out.get("anyOf", [out]) + [{"type": "null"}]}
        if origin is list or (origin is tuple and args[1:] == (...,)):
            return {"type": "array", "items": self.ref(args[0])}
        if origin is tuple:
            items = [self.ref(a) for a in args]
            return {"type": "array", "prefixItems": items, "items": False, "minItems": len(items)}
        if origin is dict and args[0] is str:
            if args[1] is Any:
                return {"type": "object"}
            return {"type": "object", "additionalProperties": self.ref(args[1])}
        raise TypeError(f"no JSON Schema for {tp!r}")


def schema_of(tp: Any) -> Dict[str, Any]:
    """A schema document for values of type ``tp`` (a TypedDict...)."""
    defs = _Defs()
    top = defs.inline(tp)
    return {"$defs": defs.defs, **top}


def document() -> Dict[str, Any]:
    """The schema of every ``fastst SUBCOMMAND --json`` document."""
    defs = _Defs()
    for tp in NAMES.values():
        defs.ref(tp)
    top = defs.inline(r.Envelope)
    return {**HEADER, "$defs": defs.defs, **top}


def render() -> str:
    """The text of ``output.schema.json``."""
    return json.dumps(document(), indent=2, ensure_ascii=False) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if args == ["--check"]:
        if PATH.read_text("utf-8") != text:
            sys.stderr.write(f"{PATH} is out of date: run python -m fastst.cli.schema\n")
            return 1
        return 0
    if args:
        sys.stderr.write("usage: python -m fastst.cli.schema [--check]\n")
        return 2
    PATH.write_text(text, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
