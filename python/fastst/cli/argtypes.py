"""Argument types every subcommand shares, which argparse calls on the command-line text.

argparse turns their ``ArgumentTypeError`` into a usage error (exit 2)."""

from __future__ import annotations

import argparse
from typing import Callable, Tuple


def _integer(low: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low or value >= 1 << 64:
            raise argparse.ArgumentTypeError(f"must be {what} below 2^64: {text}")
        return value

    return parse


#: A count or size: 0 to 2^64 - 1.
non_negative = _integer(0, "a non-negative integer")
#: A count or size that cannot be 0.
positive = _integer(1, "a positive integer")


def key_value(text: str) -> Tuple[str, str]:
    """``KEY=VALUE`` (the value may be empty or hold ``=``)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value
