"""``fastst consolidate IN OUT``: a DCP-sharded checkpoint to whole tensors in index + shards.

IN holds the ranks' ``.safetensors`` files of a
``torch.distributed.checkpoint`` save in the Hugging Face layout (a folder,
or the URL prefix of a save to object storage, the store configured by the
environment); OUT gets the checkpoint inference loads
(``model-*.safetensors`` and ``model.safetensors.index.json``), by
:func:`fastst.torch.dcp.consolidate`, whole or not at all."""

from __future__ import annotations

import argparse
import json
import os

from .._errors import SafetensorError
from .._paths import shown
from . import render


def run(args: argparse.Namespace, out: render.Out) -> int:
    """Consolidates ``args.source`` into ``args.output``; returns the exit code."""
    try:
        from .._dcp.consolidate import consolidate
    except ImportError as exc:
        out.error(args.source, f"consolidate needs PyTorch: {exc}")
        return 2
    try:
        index = consolidate(
            args.source,
            args.output,
            max_shard_size=args.max_shard_size,
            thread_count=args.threads or None,
        )
        with open(index, encoding="utf-8") as fh:
            body = json.load(fh)
    except (SafetensorError, OSError, ValueError, TypeError, RuntimeError, MemoryError) as exc:
        out.error(args.source, exc)
        return 2
    files = sorted(set(body["weight_map"].values()))
    out.print("consolidated ", ("bold", shown(args.source)), " -> ", ("bold", args.output))
    out.print(
        f"  written      {render.plural(len(body['weight_map']), 'tensor')}, "
        f"{render.size_text(body['metadata']['total_size'])}, in "
        f"{render.plural(len(files), 'file')} and {os.path.basename(index)}"
    )
    out.blank()
    return 0
