"""The inputs a subcommand reads, and how reading one is expected to fail.

Inputs are files, checkpoints and folders scanned for them."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

from .._errors import SafetensorError
from .._paths import shown
from .._sources.remote import is_url
from ..tools import inspect as fi
from ..tools import results
from ..tools.config import CONFIG_NAME, compare_config, read_config
from ..tools.layers import layer_view
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
        except READ_ERRORS as exc:  # a prefix URL holding no checkpoint, or several
            out.error(path, exc)
            found = True
        if not found:
            out.error(path, f"no .safetensors file or checkpoint index under {shown(path)}")


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


def model_config(path: str, info: Dict[str, Any]) -> Optional[results.ModelConfig]:
    """The ``config.json`` beside the file or index ``path``, compared with
    what ``info`` (an inspect summary with ``layers`` and ``table``) holds;
    None when there is none (a URL's checkpoint has none: nothing beside
    it is fetched)."""
    if is_url(path):
        return None
    config = read_config(os.path.dirname(os.path.abspath(path)))
    if config is not None and config["problem"] is None:
        shapes = {r[0]: r[2] for r in info["table"]}
        compare_config(config, info["layers"], info["by_dtype"], shapes)
    return config


def config_beside(kind: str, path: str, header_cap: int) -> Optional[results.ModelConfig]:
    """:func:`model_config` for ``meta``, which reads no tensor table: the
    table is read here; when the reader refuses the file, the config is
    shown without the comparison."""
    if is_url(path):
        return None
    if not os.path.lexists(os.path.join(os.path.dirname(os.path.abspath(path)), CONFIG_NAME)):
        return None
    info: Dict[str, Any]
    try:
        if kind == "checkpoint":
            info = dict(fi.inspect_checkpoint(path, tensors=True, header_cap=header_cap))
        else:
            info = dict(fi.inspect_file(path, tensors=True, header_cap=header_cap))
    except READ_ERRORS:
        return read_config(os.path.dirname(os.path.abspath(path)))
    info["layers"] = layer_view((r[0], r[1], r[2], r[4] - r[3]) for r in info["table"])
    return model_config(path, info)
