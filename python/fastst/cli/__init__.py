"""The ``fastst`` command and its ten subcommands, from argument parsing to exit code.

The subcommands: ``inspect``, ``verify``, ``hash``, ``diff``, ``stats``,
``convert``, ``consolidate``, ``meta``, ``sign`` and ``sbom``. Besides them,
``fastst run`` runs a program with the drop-in hook on (as ``python -m
fastst run``), answered before the arguments are parsed.

Human-readable text by default (untrusted text escaped, laid out for the
terminal), ``--json`` for machines (one envelope, ``output.schema.json``),
SARIF 2.1.0 for ``verify --format sarif``. Exit codes: 0 clean (``diff``:
identical), 1 findings at or above ``--fail-on`` (``diff``: different), 2 an
error (unreadable or non-safetensors input, bad usage) or an inconclusive
verification, 130 interrupted, 141 output pipe closed. Index files and
folders holding one are checkpoints, treated as wholes. Nothing in a file is
ever executed; only ``convert`` reads pickles, with torch's restricted
unpickler.

``parser`` declares the arguments (``argtypes`` the types they share);
``commands`` holds the entry point and ``inspect``, ``verify``, ``hash`` and
``diff``; ``stats``, ``convert``, ``consolidate`` and ``meta`` each have the
module of their name, ``sign``, ``sbom`` and ``verify --signature`` the
``provenance`` module; ``inputs`` reads what a subcommand is given,
``exits`` lists the exit codes. Text: ``text`` escapes and measures
untrusted text, ``render`` is where text goes (width, colour, numbers),
``report``, ``model_text`` and ``provenance_render`` lay out each
subcommand's text, ``charts`` draws in text, ``html`` writes ``--html``
pages; ``sarif`` builds SARIF logs and ``schema`` the JSON Schema of
``--json``. The facts themselves come from :mod:`fastst.tools`.
"""

from __future__ import annotations

from .commands import build_parser, main
from .exits import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from .sarif import SARIF_SCHEMA, sarif_log

__all__ = [
    "main",
    "build_parser",
    "sarif_log",
    "SARIF_SCHEMA",
    "EXIT_OK",
    "EXIT_FINDINGS",
    "EXIT_ERROR",
]
