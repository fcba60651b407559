"""Prints, for each benchmark group of a pytest-benchmark JSON file, the
ratio of every benchmark's median time to the fastest one's (so the figures
quoted are ratios measured in one run, not absolute times)."""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(path: str) -> None:
    with open(path) as fh:
        data = json.load(fh)
    groups = defaultdict(list)
    for b in data["benchmarks"]:
        groups[b["group"] or b["name"]].append((b["stats"]["median"], b["name"]))
    for group, rows in sorted(groups.items()):
        rows.sort()
        fastest = rows[0][0]
        print(f"[{group}]")
        for median, name in rows:
            print(f"  {name:40s} {median / fastest:8.2f}x  (median {median * 1e3:.3f} ms)")


if __name__ == "__main__":
    main(sys.argv[1])
