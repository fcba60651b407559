"""``fastst meta``: the metadata of files and checkpoints, shown and edited.

Shown as a card and as decoded values; ``--set``/``--unset`` edit them
(atomic, in place or to ``--output``)."""

from __future__ import annotations

import argparse

from .._paths import shown
from .._write.metadata import update_metadata
from ..tools import inspect as fi
from ..tools.card import strict_json
from . import render, report
from .exits import EXIT_ERROR, EXIT_OK
from .inputs import READ_ERRORS, config_beside, inputs, not_safetensors


def cmd_meta(args: argparse.Namespace, out: render.Out) -> int:
    if args.set or args.unset:
        return edit_meta(args, out)
    results = []
    for kind, path in inputs(out, args.files):
        index_metadata = None
        try:
            if kind == "checkpoint":
                metadata, index_metadata = fi.checkpoint_metadata(path, header_cap=args.header_cap)
            else:
                if not_safetensors(out, path):
                    continue
                metadata = fi.read_metadata(path, header_cap=args.header_cap)
        except READ_ERRORS as exc:
            out.error(path, exc)
            continue
        card = fi.metadata_card(metadata)
        decoded = fi.decode_metadata(metadata)
        config = config_beside(kind, path, args.header_cap)
        if args.json:
            entry = {"path": shown(path), "kind": kind, "card": card, "metadata": decoded}
            if index_metadata is not None:
                entry["index_metadata"] = strict_json(index_metadata)
            if config is not None:
                entry["config"] = config
            results.append(entry)
        else:
            report.print_meta(out, shown(path), metadata, card, decoded, args.raw, config)
    if args.json:
        out.json(render.envelope("meta", results, out))
    return EXIT_ERROR if out.errors else EXIT_OK


def edit_meta(args: argparse.Namespace, out: render.Out) -> int:
    """``meta --set/--unset``: rewrites each file (or ``--output``)."""
    results = []
    updates = dict(args.set)
    for kind, path in inputs(out, args.files):
        if kind == "checkpoint":
            out.error(path, "metadata editing takes single files, not a checkpoint index")
            continue
        if not_safetensors(out, path):
            continue
        try:
            written = update_metadata(
                path,
                updates,
                remove=args.unset,
                output=args.output,
                header_cap=args.header_cap,
            )
        except (*READ_ERRORS, TypeError) as exc:
            out.error(path, exc)
            continue
        metadata = written.pop("metadata") or None
        target = written.pop("path")
        written["source"] = path
        if args.json:
            results.append(
                {
                    "path": target,
                    "kind": "file",
                    "card": fi.metadata_card(metadata),
                    "metadata": fi.decode_metadata(metadata),
                    "written": written,
                }
            )
        else:
            report.print_written(out, target, written)
    if args.json:
        out.json(render.envelope("meta", results, out))
    return EXIT_ERROR if out.errors else EXIT_OK
