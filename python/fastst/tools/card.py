"""The metadata card: the facts a person wants from a file's ``__metadata__``.

Title, trigger words, base model, network, training..., following the
conventions of the tools that write them. Pure functions of the metadata
map; :mod:`fastst.tools.inspect` exports :func:`metadata_card` and
:func:`decode_metadata`.

Metadata is foreign text: JSON found inside values is parsed with
:mod:`json`, never evaluated. Both functions are total: any ``str -> str``
map gives a result (the card lists in ``notes`` what it could not use), and
both results are strict JSON (no NaN or infinities, bounded nesting).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple, Union, cast

from . import results

__all__ = ["metadata_card", "decode_metadata", "strict_json"]

#: Deepest nesting of a decoded value (kohya's go 4 deep); deeper ones stay
#: text, so that whatever prints or serializes them has stack to spare.
MAX_DEPTH = 100

#: Counts and repeats are whole numbers below this; others are left out.
_COUNT_LIMIT = 2**63


def _float(text: str) -> Union[float, str]:
    f = float(text)
    return f if math.isfinite(f) else text


def _int(text: str) -> Union[int, str]:
    try:
        return int(text)
    except ValueError:  # past Python's limit on digits
        return text


def _too_deep(value: Any) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def _maybe_json(value: str) -> Any:
    text = value.strip()
    if not text or text[0] not in "{[":
        return value
    try:
        decoded = json.loads(text, parse_float=_float, parse_int=_int, parse_constant=str)
    except (ValueError, RecursionError):
        return value
    return value if _too_deep(decoded) else decoded


def strict_json(value: Any, depth: int = 0) -> Any:
    """``value`` (parsed JSON, e.g. an index's ``metadata``) as strict JSON
    can hold it: NaN and infinities become the text JSON5 spells them with
    (``"NaN"``, ``"Infinity"``), objects and lists nested more than
    :data:`MAX_DEPTH` deep a note saying so."""
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)
    if not isinstance(value, (dict, list)):
        return value
    if depth >= MAX_DEPTH:
        return f"(nested more than {MAX_DEPTH} deep; left out)"
    # Text, integers, True, False and None as they are, without a call each.
    if isinstance(value, dict):
        return {k: v if type(v) in _AS_IS else strict_json(v, depth + 1) for k, v in value.items()}
    return [v if type(v) in _AS_IS else strict_json(v, depth + 1) for v in value]


_AS_IS = frozenset((str, int, bool, type(None)))


def decode_metadata(metadata: Optional[Dict[str, str]]) -> Dict[str, Any]:
    """``metadata`` with values that hold a JSON object or list (kohya's
    ``ss_tag_frequency``, ``ss_dataset_dirs``...) decoded, as strict JSON:
    numbers it cannot hold (NaN, infinities, ``1e400``, integers of more
    digits than Python converts) are kept as their text. Other values stay
    strings, and so do values that are not valid JSON or are nested more
    than :data:`MAX_DEPTH` deep."""
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


class _Reader:
    """The metadata, its decoded values and the notes on what the card
    could not use (one per key and problem, in the order met)."""

    def __init__(self, metadata: Dict[str, str]) -> None:
        self.md = metadata
        self.decoded = decode_metadata(metadata)
        self.notes: List[str] = []

    def note(self, key: str, problem: str) -> None:
        text = f"{key}: {problem}"
        if text not in self.notes:
            self.notes.append(text)

    def item(self, *keys: str) -> Optional[Tuple[str, str]]:
        """The first of ``keys`` with a value (not blank, "None" or "null")
        and that value, stripped."""
        for key in keys:
            value = self.md.get(key, "").strip()
            if value and value not in ("None", "null"):
                return key, value
        return None

    def first(self, *keys: str) -> Optional[str]:
        found = self.item(*keys)
        return found[1] if found else None

    def json(self, key: str, kind: type) -> Any:
        """The decoded value of ``key`` when it is a JSON ``kind`` (dict or
        list), else None (with a note when the key is there)."""
        value = self.decoded.get(key)
        if isinstance(value, str) and value.strip() in ("", "None", "null"):
            return None
        if value is None or isinstance(value, kind):
            return value
        if isinstance(value, str) and value.strip()[:1] in ("{", "["):
            self.note(
                key,
                f"not valid JSON, or nested more than {MAX_DEPTH} deep; left out",
            )
        else:
            self.note(key, f"not a JSON {'object' if kind is dict else 'list'}; left out")
        return None

    def number(self, *keys: str) -> Optional[Union[int, float]]:
        found = self.item(*keys)
        if found is None:
            return None
        key, value = found
        try:
            f = float(value)
        except ValueError:
            f = math.nan
        if not math.isfinite(f):
            self.note(key, "not a number in range; left out")
            return None
        return int(f) if f.is_integer() and "." not in value and "e" not in value.lower() else f


def _count(value: Any) -> Optional[int]:
    """A whole count from JSON: a non-negative number below 2**63, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if 0 <= value < _COUNT_LIMIT else None


def _small_int(digits: str) -> Optional[int]:
    """``digits`` as an int when it has at most 18 digits (an id, a count)."""
    return int(digits) if len(digits) <= 18 else None


def _timestamp(value: Optional[Union[int, float]]) -> Optional[str]:
    if value is None:
        return None
    try:
        moment = _dt.datetime.fromtimestamp(float(value), tz=_dt.UTC)
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
    repeats = _small_int(m.group(1)) if m else None
    token = m.group(2).strip() if m else ""
    return (repeats, token) if repeats is not None and token else None


def _dreambooth(r: _Reader) -> List[Dict[str, Any]]:
    """Folder tokens (``10_sks dog`` -> repeats 10, token ``sks dog``) from
    ``ss_dataset_dirs``/``ss_tag_frequency`` folder names and the
    ``class_tokens`` of ``ss_datasets`` subsets."""
    tokens: Dict[str, int] = {}
    # Regularisation folders (ss_reg_dataset_dirs) name the class, not the
    # trigger, so they are left out.
    for key in ("ss_dataset_dirs", "ss_tag_frequency"):
        for folder in r.json(key, dict) or {}:
            parsed = _folder_token(folder)
            if parsed:
                tokens.setdefault(parsed[1], parsed[0])
    for dataset in r.json("ss_datasets", list) or []:
        subsets = dataset.get("subsets") if isinstance(dataset, dict) else None
        if not isinstance(subsets, list):
            r.note("ss_datasets", "a dataset without a list of subsets; left out")
            continue
        for sub in subsets:
            if not isinstance(sub, dict) or sub.get("is_reg"):
                continue
            token = sub.get("class_tokens")
            if isinstance(token, str) and token.strip():
                repeats = _count(sub.get("num_repeats"))
                if repeats is None and "num_repeats" in sub:
                    r.note("ss_datasets", "num_repeats that are not counts; taken as 1")
                tokens.setdefault(token.strip(), 1 if repeats is None else repeats)
    return [{"token": t, "repeats": n} for t, n in tokens.items()]


def _top_tags(r: _Reader, limit: int = 10) -> List[Tuple[str, int]]:
    counts: Counter[str] = Counter()
    for tags in (r.json("ss_tag_frequency", dict) or {}).values():
        if not isinstance(tags, dict):
            r.note("ss_tag_frequency", "a folder whose tags are not an object; left out")
            continue
        for tag, count in tags.items():
            n = _count(count)
            if n is None:
                r.note("ss_tag_frequency", "tag counts that are not whole counts; left out")
            else:
                counts[tag.strip()] += n
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
        size = len(payload.encode("utf-8", "surrogatepass"))
    return {"mime": m.group(1) or "text/plain", "bytes": size}


def _network(r: _Reader) -> Optional[Dict[str, Any]]:
    module = r.first("ss_network_module")
    dim = r.number("ss_network_dim")
    if not module and dim is None:
        return None
    args = r.json("ss_network_args", dict)
    net_type = _NETWORK_TYPES.get(module or "", module)
    algo = (args or {}).get("algo")
    if module == "lycoris.kohya" and algo:
        if isinstance(algo, str):
            net_type = f"LyCORIS ({algo})"
        else:
            r.note("ss_network_args", "algo is not a string; left out")
    return {
        "type": net_type,
        "module": module,
        "dim": dim,
        "alpha": r.number("ss_network_alpha"),
        "args": args,
    }


def _training(r: _Reader) -> Optional[Dict[str, Any]]:
    started = r.number("ss_training_started_at")
    finished = r.number("ss_training_finished_at")
    duration = None
    if started is not None and finished is not None and finished >= started:
        span = float(finished) - float(started)
        duration = round(span, 3) if math.isfinite(span) else None
    fields: Dict[str, Any] = {
        "started": _timestamp(started),
        "finished": _timestamp(finished),
        "duration_s": duration,
        "steps": r.number("ss_steps"),
        "max_train_steps": r.number("ss_max_train_steps"),
        "epochs": r.number("ss_epoch", "ss_num_epochs"),
        "images": r.number("ss_num_train_images"),
        "optimizer": r.first("ss_optimizer"),
        "learning_rate": r.number("ss_learning_rate", "ss_unet_lr"),
    }
    return None if all(v is None for v in fields.values()) else fields


def _civitai(r: _Reader, source: Optional[str]) -> Tuple[Optional[str], Any, Any]:
    """The source URL (found in any value when none is set), the CivitAI
    model id and version id."""
    model_id = version = None
    for value in ([source] if source else []) + list(r.md.values()):
        m = _CIVITAI.search(value) if model_id is None else None
        if m:
            model_id = _small_int(m.group(1))
            if model_id is None:
                r.note("civitai", "a model id of more than 18 digits; left out")
            if source is None:
                # The URL: the whitespace-free run around the id, from its last
                # http(s):// (split, not a regular expression: no backtracking).
                before, after = value[: m.start()], value[m.end() :]
                head = before.rsplit(None, 1)[-1] if before[-1:].strip() else ""
                rest = after.split(None, 1)[0] if after[:1].strip() else ""
                start = max(head.rfind("http://"), head.rfind("https://"))
                source = head[start:] + m.group(0) + rest if start >= 0 else None
        v = _CIVITAI_VERSION.search(value) if version is None else None
        if v:
            version = _small_int(v.group(1))
            if version is None:
                r.note("civitai", "a version id of more than 18 digits; left out")
    return source, model_id, version


def metadata_card(metadata: Optional[Dict[str, str]]) -> results.MetadataCard:
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
    ``cover_images``, ``embedded_hashes``, ``merged_from``, ``notes``
    (``"key: problem"`` for each value the card could not use: JSON of
    the wrong kind, non-finite numbers, counts out of range...). Missing
    facts are None (or empty lists). Never raises for a ``str -> str`` map.
    """
    r = _Reader(dict(metadata or {}))

    trigger_phrase = r.first("modelspec.trigger_phrase")
    keywords = _split_words(r.first("ssmd_keywords"))
    dreambooth = _dreambooth(r)
    merged: List[str] = []
    for word in _split_words(trigger_phrase) + keywords + [d["token"] for d in dreambooth]:
        if word not in merged:
            merged.append(word)

    source = r.first("ssmd_source", "modelspec.source", "modelspec.url")
    source, civitai_id, civitai_version = _civitai(r, source)

    thumb = r.first("modelspec.thumbnail")
    merged_from = r.first("modelspec.merged_from")
    merges = r.json("sd_merge_models", dict)
    if merged_from is None and merges:
        names = [v.get("name") if isinstance(v, dict) else None for v in merges.values()]
        merged_from = ", ".join(
            n if isinstance(n, str) else k for n, k in zip(names, merges, strict=True)
        )
    covers = r.json("ssmd_cover_images", list)

    card = {
        "title": r.first("ssmd_display_name", "modelspec.title", "ss_output_name"),
        "name": r.first("ss_output_name", "ssmd_display_name"),
        "description": r.first("ssmd_description", "modelspec.description"),
        "author": r.first("ssmd_author", "modelspec.author"),
        "license": r.first("modelspec.license"),
        "date": r.first("modelspec.date"),
        "format": r.first("format"),
        "trigger_words": merged,
        "trigger_phrase": trigger_phrase,
        "keywords": keywords,
        "dreambooth_tokens": dreambooth,
        "top_tags": [[t, c] for t, c in _top_tags(r)],
        "base_model": r.first("ss_base_model_version"),
        "sd_model_name": r.first("ss_sd_model_name"),
        "architecture": r.first("modelspec.architecture"),
        "resolution": r.first("modelspec.resolution", "ss_resolution"),
        "network": _network(r),
        "training": _training(r),
        "source_url": source,
        "civitai_model_id": civitai_id,
        "civitai_version_id": civitai_version,
        "thumbnail": _data_url_size(thumb) if thumb else None,
        "cover_images": len(covers or []),
        "embedded_hashes": {
            k: r.md[k]
            for k in ("sshs_model_hash", "sshs_legacy_hash", "modelspec.hash_sha256")
            if k in r.md
        },
        "merged_from": merged_from or None,
    }
    card["notes"] = r.notes
    return cast(results.MetadataCard, card)
