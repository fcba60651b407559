"""``fastst convert IN OUT``: a PyTorch checkpoint to safetensors, through a restricted unpickler.

Only torch's restricted unpickler loads it (see :mod:`fastst.tools.convert`)."""

from __future__ import annotations

import argparse
import os
from typing import Any, Callable, Dict

from .._settings import parse_size
from ..tools.convert import MAX_PICKLE_BYTES, convert_pickle
from . import render
from .report import print_converted


def run(
    args: argparse.Namespace,
    out: render.Out,
    envelope: Callable[..., Dict[str, Any]],
    progress: bool,
) -> int:
    """Converts ``args.source`` to ``args.output``; returns the exit code."""
    results = []
    target = args.output
    if os.path.lexists(target) and not args.force:
        out.error(target, "exists; give --force to replace it")
    else:

        def tell(message: str) -> None:
            if progress:
                out.stderr.write(f"fastst: {render.escape(message)}\n")

        try:
            shard_size = (
                parse_size(args.max_shard_size, "--max-shard-size") if args.max_shard_size else None
            )
            pickle_size = (
                parse_size(args.max_pickle_size, "--max-pickle-size")
                if args.max_pickle_size
                else MAX_PICKLE_BYTES
            )
            result = convert_pickle(
                args.source,
                target,
                key=args.key,
                dtype=args.dtype,
                max_shard_size=shard_size,
                max_pickle_bytes=pickle_size,
                progress=tell,
            )
        except ImportError as exc:
            out.error(args.source, f"convert needs PyTorch: {exc}")
        except (OSError, ValueError, TypeError, RuntimeError, MemoryError) as exc:
            out.error(args.source, exc)
        else:
            if args.json:
                results.append(result)
            else:
                print_converted(out, result)
    if args.json:
        out.json(envelope("convert", results, out))
    return 2 if out.errors else 0
