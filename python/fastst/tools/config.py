"""The model beside the weights: its ``config.json`` read as data and compared with the tensors.

That is the ``config.json`` transformers and diffusers keep next to a
checkpoint.

The file is as untrusted as the weights: only ``config.json`` in the
weights' own folder is read, under the containment rule of checkpoint
indexes (a symbolic link may only lead inside that folder or to the
Hugging Face cache's blobs), without blocking, when it is a regular file of
at most :data:`CONFIG_CAP` bytes holding strict JSON (UTF-8, no NaN or
infinities, no repeated keys, bounded nesting). Nothing in it is run or
imported (``auto_map`` and custom code are never looked at); values of the
wrong type are left out with a note. A config that cannot be read is
reported, never an error of the command.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set

from .._sources.folders import shard_problem
from . import results
from .layers import number_after, span_text

__all__ = ["CONFIG_CAP", "CONFIG_NAME", "read_config", "compare_config"]

CONFIG_NAME = "config.json"
#: The most bytes a config.json may hold (real ones hold a few KB).
CONFIG_CAP = 1 << 20

#: Keys naming the layer count and the hidden size, in the order they are tried.
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers")
_HIDDEN = ("hidden_size", "n_embd", "d_model")
#: torch dtype names as configs write them -> safetensors dtypes.
_DTYPES = {
    "float32": "F32",
    "float": "F32",
    "float16": "F16",
    "half": "F16",
    "bfloat16": "BF16",
    "float64": "F64",
    "double": "F64",
}


def _strict_pairs(pairs: List[Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} repeated")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _read(path: str) -> Dict[str, Any]:
    with open(path, "rb", opener=lambda p, f: os.open(p, f | getattr(os, "O_NONBLOCK", 0))) as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        raw = fh.read(CONFIG_CAP + 1)
    if len(raw) > CONFIG_CAP:
        raise ValueError(f"larger than {CONFIG_CAP:,} bytes, the cap on config files")
    try:
        data = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_strict_pairs, parse_constant=_no_constant
        )
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _pick(data: Dict[str, Any], keys: Sequence[str], kind: type, notes: List[str]) -> Any:
    for key in keys:
        if key not in data or data[key] is None:
            continue
        value = data[key]
        if isinstance(value, kind) and not isinstance(value, bool):
            return value
        notes.append(f"{key} is not {'an integer' if kind is int else 'a string'}: left out")
        return None
    return None


def read_config(folder: str) -> Optional[results.ModelConfig]:
    """The facts of ``folder``'s ``config.json`` (see the module's
    description); None when there is no such file. ``problem`` says why a
    config could not be read (its facts are then empty)."""
    path = os.path.join(folder, CONFIG_NAME)
    if not os.path.lexists(path):
        return None
    config: results.ModelConfig = {
        "path": path,
        "problem": None,
        "class_name": None,
        "architectures": [],
        "model_type": None,
        "hidden_size": None,
        "num_hidden_layers": None,
        "dtype": None,
        "notes": [],
        "mismatches": [],
    }
    try:
        outside = shard_problem(folder, CONFIG_NAME)
        if outside is not None:
            raise ValueError("a symbolic link leads outside the model's folder")
        data = _read(path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        config["problem"] = getattr(exc, "strerror", None) or str(exc)
        return config
    notes = config["notes"]
    config["class_name"] = _pick(data, ("_class_name",), str, notes)
    archs = data.get("architectures")
    if isinstance(archs, list) and all(isinstance(a, str) for a in archs):
        config["architectures"] = list(archs)
    elif archs is not None:
        notes.append("architectures is not a list of strings: left out")
    config["model_type"] = _pick(data, ("model_type",), str, notes)
    config["hidden_size"] = _pick(data, _HIDDEN, int, notes)
    config["num_hidden_layers"] = _pick(data, _LAYERS, int, notes)
    config["dtype"] = _pick(data, ("torch_dtype", "dtype"), str, notes)
    return config


def _span(numbers: Set[int]) -> str:
    return span_text(sorted(numbers))


def _gaps(held: Sequence[int], count: int) -> List[range]:
    """The runs of ``range(count)`` missing from ``held`` (sorted, distinct),
    computed from ``held`` alone: ``count`` comes from the config, and a
    hostile one (``10**12``) must cost nothing."""
    gaps: List[range] = []
    start = 0
    for n in held:
        if n >= count:
            break
        if n > start:
            gaps.append(range(start, n))
        start = max(start, n + 1)
    if start < count:
        gaps.append(range(start, count))
    return gaps


def _gaps_text(gaps: Sequence[range]) -> str:
    """``0-3,7`` for the runs ``gaps``, the first :data:`_LISTED` of them
    (then how many more)."""
    parts = [str(g.start) if len(g) == 1 else f"{g.start}-{g.stop - 1}" for g in gaps[:_LISTED]]
    more = f" and {len(gaps) - _LISTED:,} more runs" if len(gaps) > _LISTED else ""
    return ",".join(parts) + more


#: Runs of missing layers named one by one in a mismatch.
_LISTED = 50


def compare_config(
    config: results.ModelConfig,
    layers: results.LayerView,
    by_dtype: Sequence[Mapping[str, Any]],
    shapes: Dict[str, Sequence[int]],
) -> List[str]:
    """Where the weights disagree with ``config`` (also stored in its
    ``mismatches``): the layer count against the most repeated block
    (missing and extra layers named), the declared dtype against the
    floating-point dtypes held (``by_dtype``: ``dtype`` and ``bytes`` each),
    and ``hidden_size`` against the width of the embedding tables."""
    found: List[str] = []
    declared = config["num_hidden_layers"]
    if declared is not None:
        found += _layer_mismatches(declared, layers)
    dtype = config["dtype"]
    floats = [d for d in by_dtype if d["dtype"].startswith(("F", "BF")) and d["bytes"]]
    wanted = _DTYPES.get(dtype) if dtype is not None else None
    if wanted is not None and floats and wanted not in {d["dtype"] for d in floats}:
        held = ", ".join(d["dtype"] for d in floats)
        found.append(f"config.json declares dtype {dtype} ({wanted}); the weights hold {held}")
    hidden = config["hidden_size"]
    embeddings = {
        name: shape for name, shape in shapes.items() if "embed" in name and len(shape) == 2
    }
    if hidden is not None and embeddings and all(s[1] != hidden for s in embeddings.values()):
        name, shape = next(iter(embeddings.items()))
        found.append(
            f"config.json declares hidden_size {hidden}; embedding {name!r} is "
            f"{shape[0]} x {shape[1]}"
        )
    config["mismatches"] = found
    return found


def _layer_mismatches(declared: int, layers: results.LayerView) -> List[str]:
    """The layer count ``declared`` (a value from the config: compared
    arithmetically, never enumerated) against the most repeated block."""
    by_prefix: Dict[str, Set[int]] = {}
    for block in layers["blocks"]:
        by_prefix.setdefault(block["prefix"], set()).update(block["indices"])
    if not by_prefix:
        # One layer cannot repeat: nothing to compare it with.
        if declared <= 1:
            return []
        return [f"config.json declares {declared:,} layers; no block of the weights repeats"]
    prefix, alike = max(by_prefix.items(), key=lambda item: (len(item[1]), item[0]))
    # Layers whose tensors differ from their siblings' are among the others.
    odd = {n for n in (number_after(t["name"], prefix) for t in layers["single"]) if n is not None}
    held = alike | odd
    within = sorted(n for n in held if 0 <= n < declared)
    beyond = {n for n in held if n >= declared}
    if len(within) == declared and not beyond and not odd:
        return []
    parts = [
        f"config.json declares {declared:,} layers; the weights hold {len(held):,} "
        f"({prefix}{{{_span(held)}}})"
    ]
    missing = _gaps(within, declared)
    if missing:
        parts.append(f"missing {_gaps_text(missing)}")
    if beyond:
        parts.append(f"beyond the count {_span(beyond)}")
    if odd - alike:
        parts.append(f"unlike the others {_span(odd - alike)}")
    return ["; ".join(parts)]
