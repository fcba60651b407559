"""The metadata card: the facts a person wants from a file's
``__metadata__`` (title, trigger words, base model, network, training...),
following the conventions of the tools that write them. Pure functions of
the metadata map; :mod:`fastst.tools.inspect` exports :func:`metadata_card` and
:func:`decode_metadata`.

Metadata is foreign text: JSON found inside values is parsed with
:mod:`json`, never evaluated.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple, Union

__all__ = ["metadata_card", "decode_metadata"]


def _maybe_json(value: str) -> Any:
    text = value.strip()
    if not text or text[0] not in "{[":
        return value
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return value


def decode_metadata(metadata: Optional[Dict[str, str]]) -> Dict[str, Any]:
    """``metadata`` with values that hold a JSON object or list (kohya's
    ``ss_tag_frequency``, ``ss_dataset_dirs``...) decoded; other values,
    and values that are not valid JSON, stay strings."""
    return {k: _maybe_json(v) for k, v in (metadata or {}).items()}


_CIVITAI = re.compile(r"civitai\.com/models/(\d+)", re.IGNORECASE)
_CIVITAI_VERSION = re.compile(r"modelVersionId=(\d+)", re.IGNORECASE)
_FOLDER = re.compile(r"^(\d+)_(.+)$")

_NETWORK_TYPES = {
    "networks.lora": "LoRA",
    "networks.dylora": "DyLoRA",
    "networks.oft": "OFT",
    "networks.lora_fa": "LoRA-FA",
    "networks.lora_flux": "LoRA (FLUX)",
    "networks.lora_sd3": "LoRA (SD3)",
    "lycoris.kohya": "LyCORIS",
}


def _first(metadata: Dict[str, str], *keys: str) -> Optional[str]:
    for key in keys:
        value = metadata.get(key)
        if value is not None and value.strip() and value.strip() not in ("None", "null"):
            return value.strip()
    return None


def _number(value: Optional[str]) -> Optional[Union[int, float]]:
    if value is None:
        return None
    try:
        f = float(value)
    except ValueError:
        return None
    if f != f or f in (float("inf"), float("-inf")):
        return None
    return int(f) if f.is_integer() and "." not in value and "e" not in value.lower() else f


def _timestamp(value: Optional[str]) -> Optional[str]:
    n = _number(value)
    if n is None:
        return None
    try:
        moment = _dt.datetime.fromtimestamp(float(n), tz=_dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _split_words(value: Optional[str]) -> List[str]:
    if not value:
        return []
    return [w.strip() for w in value.split(",") if w.strip()]


def _folder_token(folder: str) -> Optional[Tuple[int, str]]:
    base = re.split(r"[\\/]", folder.rstrip("\\/"))[-1]
    m = _FOLDER.match(base)
    if not m:
        return None
    token = m.group(2).strip()
    return (int(m.group(1)), token) if token else None


def _as_dict(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dreambooth(decoded: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Folder tokens (``10_sks dog`` -> repeats 10, token ``sks dog``) from
    ``ss_dataset_dirs``/``ss_tag_frequency`` folder names and the
    ``class_tokens`` of ``ss_datasets`` subsets."""
    tokens: Dict[str, int] = {}
    # Regularisation folders (ss_reg_dataset_dirs) name the class, not the
    # trigger, so they are left out.
    for key in ("ss_dataset_dirs", "ss_tag_frequency"):
        for folder in _as_dict(decoded.get(key)):
            parsed = _folder_token(str(folder))
            if parsed:
                tokens.setdefault(parsed[1], parsed[0])
    datasets = decoded.get("ss_datasets")
    if isinstance(datasets, list):
        for dataset in datasets:
            for subset in _as_dict(dataset).get("subsets", []) or []:
                sub = _as_dict(subset)
                if sub.get("is_reg"):
                    continue
                token = sub.get("class_tokens")
                if isinstance(token, str) and token.strip():
                    repeats = sub.get("num_repeats")
                    tokens.setdefault(token.strip(), repeats if isinstance(repeats, int) else 1)
    return [{"token": t, "repeats": r} for t, r in tokens.items()]


def _top_tags(decoded: Dict[str, Any], limit: int = 10) -> List[Tuple[str, int]]:
    counts: Counter[str] = Counter()
    for tags in _as_dict(decoded.get("ss_tag_frequency")).values():
        for tag, count in _as_dict(tags).items():
            if isinstance(count, (int, float)) and not isinstance(count, bool):
                counts[str(tag).strip()] += int(count)
    return [(t, c) for t, c in counts.most_common(limit) if t]


def _data_url_size(value: str) -> Optional[Dict[str, Any]]:
    m = re.match(r"data:([\w.+-]+/[\w.+-]+)?(;[^,]*)?,", value)
    if not m:
        return None
    payload = value[m.end() :]
    params = m.group(2) or ""
    if ";base64" in params:
        stripped = "".join(payload.split())
        padding = len(stripped) - len(stripped.rstrip("="))
        size = max(0, len(stripped) * 3 // 4 - padding)
    else:
        size = len(payload.encode("utf-8"))
    return {"mime": m.group(1) or "text/plain", "bytes": size}


def _cover_images(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


def metadata_card(metadata: Optional[Dict[str, str]]) -> Dict[str, Any]:
    """The facts a person wants from a file's metadata, following the
    conventions of Hugging Face (``format``), kohya sd-scripts (``ss_*``,
    ``sshs_*``), sd-webui-additional-networks (``ssmd_*``), Stability
    ModelSpec (``modelspec.*``) and the webui merger (``sd_merge_*``).

    Where conventions overlap, values a person set afterwards in
    additional-networks' editor (``ssmd_*``) win over what the trainer
    wrote (``modelspec.*``, then ``ss_*``).

    Keys: ``title``, ``name``, ``description``, ``author``, ``license``,
    ``date``, ``format``, ``trigger_words`` (merged: trigger phrase,
    keywords, DreamBooth folder tokens), ``trigger_phrase``, ``keywords``,
    ``dreambooth_tokens``, ``top_tags``, ``base_model``, ``sd_model_name``,
    ``architecture``, ``resolution``, ``network`` (type/module/dim/alpha/
    args), ``training`` (started/finished UTC, duration, steps, epochs,
    images, optimizer, learning rate), ``source_url``, ``civitai_model_id``,
    ``civitai_version_id``, ``thumbnail`` (mime and decoded size, or None),
    ``cover_images``, ``embedded_hashes``, ``merged_from``. Missing facts
    are None (or empty lists).
    """
    md = dict(metadata or {})
    decoded = decode_metadata(md)

    trigger_phrase = _first(md, "modelspec.trigger_phrase")
    keywords = _split_words(_first(md, "ssmd_keywords"))
    dreambooth = _dreambooth(decoded)
    merged: List[str] = []
    for word in _split_words(trigger_phrase) + keywords + [d["token"] for d in dreambooth]:
        if word not in merged:
            merged.append(word)

    module = _first(md, "ss_network_module")
    args = decoded.get("ss_network_args")
    net_type = _NETWORK_TYPES.get(module or "", module)
    if module == "lycoris.kohya" and isinstance(args, dict) and args.get("algo"):
        net_type = f"LyCORIS ({args['algo']})"
    network = None
    if module or _first(md, "ss_network_dim"):
        network = {
            "type": net_type,
            "module": module,
            "dim": _number(_first(md, "ss_network_dim")),
            "alpha": _number(_first(md, "ss_network_alpha")),
            "args": args if isinstance(args, dict) else None,
        }

    started = _number(_first(md, "ss_training_started_at"))
    finished = _number(_first(md, "ss_training_finished_at"))
    duration = None
    if started is not None and finished is not None and finished >= started:
        duration = round(float(finished) - float(started), 3)
    fields: Dict[str, Any] = {
        "started": _timestamp(_first(md, "ss_training_started_at")),
        "finished": _timestamp(_first(md, "ss_training_finished_at")),
        "duration_s": duration,
        "steps": _number(_first(md, "ss_steps")),
        "max_train_steps": _number(_first(md, "ss_max_train_steps")),
        "epochs": _number(_first(md, "ss_epoch", "ss_num_epochs")),
        "images": _number(_first(md, "ss_num_train_images")),
        "optimizer": _first(md, "ss_optimizer"),
        "learning_rate": _number(_first(md, "ss_learning_rate", "ss_unet_lr")),
    }
    training = None if all(v is None for v in fields.values()) else fields

    source = _first(md, "ssmd_source", "modelspec.source", "modelspec.url")
    civitai_id = None
    civitai_version = None
    for value in ([source] if source else []) + list(md.values()):
        if civitai_id is None:
            m = _CIVITAI.search(value)
            if m:
                civitai_id = int(m.group(1))
                if source is None:
                    url = re.search(r"https?://\S*civitai\.com/models/\d+\S*", value)
                    source = url.group(0) if url else None
        if civitai_version is None:
            v = _CIVITAI_VERSION.search(value)
            if v:
                civitai_version = int(v.group(1))

    thumb = _first(md, "modelspec.thumbnail")
    thumbnail = _data_url_size(thumb) if thumb else None

    embedded = {
        k: md[k]
        for k in ("sshs_model_hash", "sshs_legacy_hash", "modelspec.hash_sha256")
        if k in md
    }
    merged_from = _first(md, "modelspec.merged_from")
    if merged_from is None and isinstance(decoded.get("sd_merge_models"), dict):
        names = [str(_as_dict(v).get("name", k)) for k, v in decoded["sd_merge_models"].items()]
        merged_from = ", ".join(names) or None

    return {
        "title": _first(md, "ssmd_display_name", "modelspec.title", "ss_output_name"),
        "name": _first(md, "ss_output_name", "ssmd_display_name"),
        "description": _first(md, "ssmd_description", "modelspec.description"),
        "author": _first(md, "ssmd_author", "modelspec.author"),
        "license": _first(md, "modelspec.license"),
        "date": _first(md, "modelspec.date"),
        "format": _first(md, "format"),
        "trigger_words": merged,
        "trigger_phrase": trigger_phrase,
        "keywords": keywords,
        "dreambooth_tokens": dreambooth,
        "top_tags": [[t, c] for t, c in _top_tags(decoded)],
        "base_model": _first(md, "ss_base_model_version"),
        "sd_model_name": _first(md, "ss_sd_model_name"),
        "architecture": _first(md, "modelspec.architecture"),
        "resolution": _first(md, "modelspec.resolution", "ss_resolution"),
        "network": network,
        "training": training,
        "source_url": source,
        "civitai_model_id": civitai_id,
        "civitai_version_id": civitai_version,
        "thumbnail": thumbnail,
        "cover_images": _cover_images(decoded.get("ssmd_cover_images")),
        "embedded_hashes": embedded,
        "merged_from": merged_from,
    }
