"""The inputs a subcommand reads (files, checkpoints, folders scanned for
them) and how reading one is expected to fail."""

from __future__ import annotations

import os
from typing import Iterator, Sequence, Tuple

from .._errors import SafetensorError
from ..tools import inspect as fi
from ..tools.walk import TOO_DEEP
from . import render

#: Errors reading an input is expected to raise (anything else is a bug).
READ_ERRORS = (OSError, SafetensorError, ValueError, KeyError, MemoryError)


def inputs(
    out: render.Out, paths: Sequence[str], too_deep: bool = False, pickles: bool = False
) -> Iterator[Tuple[str, str]]:
    """``(kind, path)`` for each input (see :func:`fastst.tools.inspect.iter_inputs`);
    a folder without any is an error, and so is a folder nested too deep to
    scan unless ``too_deep`` asks for its ``("too-deep", folder)`` item.
    ``pickles`` adds ``("file", path)`` for each file under a folder that
    holds pickles (:func:`fastst.tools.inspect.pickle_files`)."""
    for path in paths:
        found = False
        try:
            for kind, item in fi.iter_inputs([path]):
                found = True
                if kind == "too-deep" and not too_deep:
                    out.error(item, TOO_DEEP, rule="folder-too-deep")
                    continue
                yield kind, item
            for item in fi.pickle_files(path) if pickles and os.path.isdir(path) else ():
                found = True
                yield "file", item
        except OSError as exc:  # pragma: no cover - os.walk reports through onerror
            out.error(path, exc)
            found = True
        if not found:
            out.error(path, f"no .safetensors file or checkpoint index under {path}")


def not_safetensors(out: render.Out, path: str) -> bool:
    """Records an error and returns True when ``path`` cannot be read or is
    not a safetensors file (a pickle, a FIFO, an HTML page...)."""
    try:
        found = fi.identify(path)
    except OSError as exc:
        out.error(path, exc)
        return True
    if found is None:
        return False
    out.error(path, fi.not_safetensors_message(found), fmt=found["kind"])
    return True
