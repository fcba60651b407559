"""The ``fastst`` command: ``inspect``, ``verify``, ``hash`` and ``meta``.

Human-readable text by default, ``--json`` for machines, SARIF 2.1.0 for
``verify --format sarif``. Exit codes: 0 clean, 1 findings at or above
``--fail-on``, 2 an error (unreadable file, bad arguments) or an
inconclusive verification. Folders given as arguments are walked for
``*.safetensors`` files. Nothing in a file is ever executed or unpickled.

``commands`` parses arguments and runs the subcommands, ``render`` writes
the human-readable text, ``sarif`` builds the SARIF log; the facts
themselves come from :mod:`fastst.inspect`.
"""

from __future__ import annotations

from .commands import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, build_parser, main
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
