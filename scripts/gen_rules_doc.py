"""Writes docs/rules.md, the table of every rule, from the core's catalogue.

    python scripts/gen_rules_doc.py          # rewrite docs/rules.md
    python scripts/gen_rules_doc.py --check  # exit 1 if it is out of date

The catalogue lives in rust/fastst-core/src/rules.rs and reaches Python as
``fastst._fastst.catalogue.rule_catalogue()``; tests/contracts/test_rules_catalogue.py checks that
the file matches it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict, List, Optional

DOC = Path(__file__).resolve().parents[1] / "docs" / "rules.md"

INTRO = """\
# Rules

Every rule fastst enforces or reports, one line each. The table is generated
from the catalogue in `rust/fastst-core/src/rules.rs` by
`scripts/gen_rules_doc.py`; do not edit it by hand (a test compares the two).

- **id**: the stable identifier. Exceptions carry it as `rule`, `fastst verify`
  findings as `rule`, SARIF output as `ruleId`.
- **family**: the Python exception raised when the rule is broken (classes of
  `fastst`, all subclasses of `SafetensorError`, or a builtin: `ValueError`,
  `MemoryError`, `OSError`). `Finding` rules are never raised: only
  `fastst verify` reports them.
- **severity**: what `fastst verify` reports a finding of the rule at, by default.
- **verdict**: what a `fastst verify` finding of the rule says about the file:
  `malformed` (it breaks the format: the verdict is inconclusive, exit 2, since
  a broken file is not evidence of an attack) or `red-flag` (it carries
  something worth a look, counted against `--fail-on`, exit 1); `-` for the
  rules `verify` does not report.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(catalogue: List[Dict[str, Optional[str]]]) -> str:
    """The whole text of docs/rules.md for ``catalogue``."""
    lines = [INTRO, "| id | family | severity | verdict | summary |", "|---|---|---|---|---|"]
    for rule in catalogue:
        verdict = rule["verdict"] or "-"
        lines.append(
            f"| `{rule['id']}` | {rule['family']} | {rule['severity']} | {verdict} "
            f"| {_cell(str(rule['summary']))} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: List[str]) -> int:
    from fastst import _fastst

    text = render(list(_fastst.catalogue.rule_catalogue()))
    if "--check" in argv:
        if not DOC.exists() or DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is out of date: run python scripts/gen_rules_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
