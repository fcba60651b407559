"""CycloneDX 1.6 ML-BOMs of ``.safetensors`` models.

:func:`sbom` describes a file, a model folder or a sharded checkpoint (its
``*.safetensors.index.json``) as a CycloneDX 1.6 JSON document built with
``cyclonedx-python-lib``: one ``machine-learning-model`` component per
checkpoint (a single file, or an index with its shards as nested ``file``
components), each with the SHA-256 of every file, the model card facts
fastst reads from the metadata (:func:`fastst.tools.inspect.metadata_card`:
name, description, author, trigger words, base model, architecture,
source and CivitAI ids, licence), tensor and parameter counts, dtypes and
the AutoV2/AutoV3 hashes. Other files of a folder (configs, tokenizers)
are ``file`` components with their SHA-256; one whose content holds
pickles (:func:`fastst.tools.inspect.holds_pickles`: ``pytorch_model.bin``,
``.pt``, ``.ckpt``...) carries a ``fastst:pickle`` property saying so.

The library has no model-card class yet, so the ``modelCard`` object
(CycloneDX 1.6 ``modelParameters`` and ``properties``) is added to the JSON
the library writes; the whole document is then checked against the
CycloneDX 1.6 JSON schema the library ships.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ..._layout import INDEX_SUFFIX
from ..._read.pool import run_all
from ..._settings import DEFAULT_INDEX_CAP
from ..._write.atomic import replace_bytes
from .findings import ProvenanceError, require
from .hashing import GIT_PATHS, ModelFile, Piece, hash_pieces, list_model, read_regular

PathLike = Union[str, "os.PathLike[str]"]

_PREFIX = "fastst:"


@dataclasses.dataclass(frozen=True)
class SbomResult:
    """An ML-BOM: ``document`` is the CycloneDX JSON as a dict, ``text`` the
    same serialized, ``output`` the file written (or None)."""

    model: str
    document: Dict[str, Any]
    text: str
    output: Optional[str]
    checkpoints: int
    files: int


@dataclasses.dataclass
class _Checkpoint:
    name: str  # manifest-style name of the index or the file
    index: Optional[ModelFile]
    shards: List[ModelFile]


def _fspath(path: PathLike) -> str:
    p = os.fspath(path)
    return os.fsdecode(p) if isinstance(p, bytes) else p


def _index_shards(path: str) -> List[str]:
    try:
        data = json.loads(read_regular(path, DEFAULT_INDEX_CAP, follow=False))
    except (OSError, ValueError, RecursionError) as exc:
        raise ProvenanceError(f"{path}: not a readable index ({exc})", filename=path) from None
    wm = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(wm, dict):
        raise ProvenanceError(f"{path}: the index has no weight_map", filename=path)
    return sorted({v for v in wm.values() if isinstance(v, str)})


def _checkpoints(files: Sequence[ModelFile]) -> Tuple[List[_Checkpoint], List[ModelFile]]:
    by_name = {f.name: f for f in files}
    used: set = set()
    cps: List[_Checkpoint] = []
    for f in files:
        if f.name.lower().endswith(INDEX_SUFFIX):
            folder = os.path.dirname(f.name)
            shards = []
            for s in _index_shards(f.path):
                full = os.path.normpath(os.path.join(folder, s)).replace(os.sep, "/")
                if full not in by_name:
                    raise ProvenanceError(
                        f"{f.path}: names shard {s!r}, which is not in the model",
                        rule="signature-missing-shard",
                        filename=f.path,
                    )
                shards.append(by_name[full])
                used.add(full)
            used.add(f.name)
            cps.append(_Checkpoint(f.name, f, shards))
    for f in files:
        if f.name not in used and (
            f.name.lower().endswith(".safetensors")
            or (f.name == "." and f.path.lower().endswith(".safetensors"))
        ):
            cps.append(_Checkpoint(f.name, None, [f]))
            used.add(f.name)
    others = [f for f in files if f.name not in used]
    return cps, others


def _file_facts(path: str, threads: int) -> Dict[str, Any]:
    from .. import inspect as fi

    hashes = fi.hash_file(path, threads=threads)
    summary = fi.inspect_file(path, tensors=True)
    return {"hashes": hashes, "summary": summary, "metadata": summary.get("metadata")}


def _config(main: ModelFile, shard_facts: List[Dict[str, Any]]) -> Dict[str, Any]:
    """What the ``config.json`` beside a checkpoint declares, as modelCard
    facts: ``architecture``, ``model_type`` and ``properties``
    (``config.*``, with the weights' disagreements as ``config.mismatches``)."""
    from ..config import compare_config, read_config
    from ..layers import layer_view

    config = read_config(os.path.dirname(os.path.abspath(main.path)))
    if config is None:
        return {}
    if config["problem"] is not None:
        return {"properties": {"config.problem": config["problem"]}}
    rows = [r for x in shard_facts for r in x["summary"]["table"]]
    held: Dict[str, int] = {}
    for x in shard_facts:
        for d in x["summary"]["by_dtype"]:
            held[d["dtype"]] = held.get(d["dtype"], 0) + d["bytes"]
    view = layer_view((r[0], r[1], r[2], r[4] - r[3]) for r in rows)
    by_dtype = [{"dtype": k, "bytes": v} for k, v in held.items()]
    compare_config(config, view, by_dtype, {r[0]: r[2] for r in rows})
    facts = {
        "config.architectures": ", ".join(config["architectures"]) or None,
        "config.class_name": config["class_name"],
        "config.model_type": config["model_type"],
        "config.hidden_size": config["hidden_size"],
        "config.num_hidden_layers": config["num_hidden_layers"],
        "config.dtype": config["dtype"],
        "config.mismatches": json.dumps(config["mismatches"]) if config["mismatches"] else None,
    }
    architecture = config["architectures"][0] if config["architectures"] else config["class_name"]
    return {"architecture": architecture, "model_type": config["model_type"], "properties": facts}


def _props(pairs: Sequence[Tuple[str, Any]]) -> List[Any]:
    model = require("cyclonedx.model")
    out = []
    for name, value in pairs:
        if value is None or value == "" or value == []:
            continue
        if isinstance(value, (list, dict)):
            value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        out.append(model.Property(name=_PREFIX + name, value=str(value)))
    return out


def sbom(
    model: PathLike,
    *,
    output: Optional[PathLike] = None,
    ignore_git_paths: bool = True,
    threads: int = 0,
) -> SbomResult:
    """A CycloneDX 1.6 ML-BOM of the model at ``model`` (a ``.safetensors``
    file, a folder, or a ``*.safetensors.index.json``); written to
    ``output`` when given. Every ``.safetensors`` file must be accepted by
    the strict reader (else a :class:`fastst.SafetensorError` subclass is
    raised); symbolic links and special files in a folder are refused
    (:class:`ProvenanceError`)."""
    cdx_model = require("cyclonedx.model")
    cdx_component = require("cyclonedx.model.component")
    cdx_bom = require("cyclonedx.model.bom")
    cdx_contact = require("cyclonedx.model.contact")
    cdx_license = require("cyclonedx.model.license")
    cdx_output = require("cyclonedx.output.json")
    from ..._fastst import __version__
    from .. import inspect as fi

    model_s = _fspath(model)
    root = model_s
    only_index = None
    if os.path.isfile(model_s) and model_s.endswith(INDEX_SUFFIX):
        root = os.path.dirname(os.path.abspath(model_s))
        only_index = os.path.basename(model_s)
    ignore = list(GIT_PATHS) if ignore_git_paths else []
    files, problems = list_model(root, ignore=ignore)
    if problems:
        raise ProvenanceError(
            "; ".join(p.message for p in problems), rule=problems[0].rule, filename=root
        )
    cps, others = _checkpoints(files)
    if only_index is not None:
        cps = [c for c in cps if c.name == only_index]
        others = []
    if not cps:
        raise ProvenanceError(f"{model_s}: no .safetensors checkpoint found", filename=model_s)

    st_files = [f for c in cps for f in c.shards]
    workers = max(1, min(len(st_files), threads or os.cpu_count() or 1))
    per_thread = 1 if workers > 1 else threads
    got = run_all(lambda f: _file_facts(f.path, per_thread), st_files, workers, "fastst-sbom")
    facts = dict(zip([f.name for f in st_files], got, strict=True))
    plain = [c.index for c in cps if c.index is not None] + others
    plain_digests, errors = hash_pieces(
        [Piece(f.name, f.path, 0, None) for f in plain], "sha256", threads=threads
    )
    if errors:
        name, message = sorted(errors.items())[0]
        raise ProvenanceError(f"{name}: {message}", filename=name)

    def sha(digest: str) -> Any:
        return cdx_model.HashType(alg=cdx_model.HashAlgorithm.SHA_256, content=digest)

    def label(f: ModelFile) -> str:
        return os.path.basename(f.path) if f.name == "." else f.name

    components = []
    cards: Dict[str, Dict[str, Any]] = {}
    for k, cp in enumerate(cps):
        shard_facts = [facts[s.name] for s in cp.shards]
        metadata = next((x["metadata"] for x in shard_facts if x["metadata"]), None)
        card = fi.metadata_card(metadata)
        tensors = sum(x["summary"]["tensors"] for x in shard_facts)
        params = sum(x["summary"]["parameters"] for x in shard_facts)
        dtypes: Dict[str, Dict[str, int]] = {}
        for x in shard_facts:
            for row in x["summary"]["by_dtype"]:
                d = dtypes.setdefault(row["dtype"], {"tensors": 0, "parameters": 0})
                d["tensors"] += row.get("tensors", 0)
                d["parameters"] += row.get("parameters", 0)
        main = cp.index if cp.index is not None else cp.shards[0]
        name = card["title"] or card["name"] or label(main)
        ref = f"model-{k}"
        nested = []
        if cp.index is not None:
            for j, s in enumerate(cp.shards):
                h = facts[s.name]["hashes"]
                nested.append(
                    cdx_component.Component(
                        name=label(s),
                        type=cdx_component.ComponentType.FILE,
                        bom_ref=f"{ref}-shard-{j}",
                        hashes=[sha(h["sha256"])],
                        properties=_props(
                            [
                                ("autov2", h["autov2"]),
                                ("autov3", h["autov3"]),
                                ("size", h["file_len"]),
                            ]
                        ),
                    )
                )
            hashes = [sha(plain_digests[cp.index.name])]
            single: Dict[str, Any] = {}
        else:
            h = shard_facts[0]["hashes"]
            hashes = [sha(h["sha256"])]
            single = {"autov2": h["autov2"], "autov3": h["autov3"], "size": h["file_len"]}
        refs = []
        if card["source_url"]:
            try:
                refs.append(
                    cdx_model.ExternalReference(
                        type=cdx_model.ExternalReferenceType.DISTRIBUTION,
                        url=cdx_model.XsUri(card["source_url"]),
                    )
                )
            except Exception:
                pass
        licenses = []
        if card["license"]:
            licenses.append(cdx_license.DisjunctiveLicense(name=card["license"]))
        authors = []
        if card["author"]:
            authors.append(cdx_contact.OrganizationalContact(name=card["author"]))
        props = _props(
            [
                ("file", label(main)),
                ("format", "safetensors"),
                ("tensors", tensors),
                ("parameters", params),
                ("dtypes", ",".join(sorted(dtypes))),
                ("autov2", single.get("autov2")),
                ("autov3", single.get("autov3")),
                ("size", single.get("size")),
                ("shards", len(cp.shards) if cp.index is not None else None),
                ("trigger_words", ", ".join(card["trigger_words"]) or None),
                ("base_model", card["base_model"]),
                ("sd_model_name", card["sd_model_name"]),
                ("architecture", card["architecture"]),
                ("resolution", card["resolution"]),
                ("source_url", card["source_url"]),
                ("civitai_model_id", card["civitai_model_id"]),
                ("civitai_version_id", card["civitai_version_id"]),
                ("network", card["network"]),
                ("date", card["date"]),
            ]
        )
        components.append(
            cdx_component.Component(
                name=name,
                type=cdx_component.ComponentType.MACHINE_LEARNING_MODEL,
                bom_ref=ref,
                description=card["description"],
                authors=authors,
                licenses=licenses,
                hashes=hashes,
                external_references=refs,
                properties=props,
                components=nested,
            )
        )
        config = _config(main, shard_facts)
        params_card: Dict[str, Any] = {}
        architecture = card["architecture"] or config.get("architecture")
        if architecture:
            params_card["modelArchitecture"] = architecture
        family = card["base_model"] or card["sd_model_name"] or config.get("model_type")
        if family:
            params_card["architectureFamily"] = family
        card_props = [
            {"name": _PREFIX + n, "value": str(v)}
            for n, v in (
                ("trigger_words", ", ".join(card["trigger_words"]) or None),
                ("tensors", tensors),
                ("parameters", params),
                ("dtypes", json.dumps(dtypes, separators=(",", ":"), sort_keys=True)),
                *sorted(config.get("properties", {}).items()),
            )
            if v is not None
        ]
        model_card: Dict[str, Any] = {"bom-ref": f"{ref}-card", "properties": card_props}
        if params_card:
            model_card["modelParameters"] = params_card
        cards[ref] = model_card

    for j, f in enumerate(others):
        found = fi.holds_pickles(f.path)
        risk = None
        if found is not None:
            risk = f"{found['description']}: {fi.PICKLE_RISK}; convert it with fastst convert"
        components.append(
            cdx_component.Component(
                name=label(f),
                type=cdx_component.ComponentType.FILE,
                bom_ref=f"file-{j}",
                hashes=[sha(plain_digests[f.name])],
                properties=_props([("size", f.size), ("pickle", risk)]),
            )
        )

    bom = cdx_bom.Bom(components=components)
    tool = cdx_component.Component(
        name="fastst", version=__version__, type=cdx_component.ComponentType.APPLICATION
    )
    bom.metadata.tools.components.add(tool)
    outputter = cdx_output.JsonV1Dot6(bom)
    document = json.loads(outputter.output_as_string())
    for c in document.get("components", []):
        if c.get("bom-ref") in cards:
            c["modelCard"] = cards[c["bom-ref"]]
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    out_path = None
    if output is not None:
        out_path = _fspath(output)
        replace_bytes(out_path, text.encode("utf-8"))
    return SbomResult(
        model=model_s,
        document=document,
        text=text,
        output=out_path,
        checkpoints=len(cps),
        files=len(st_files) + len(plain),
    )


def validate(document: Union[str, Dict[str, Any]]) -> List[str]:
    """Errors found by checking ``document`` against the CycloneDX 1.6 JSON
    schema shipped with cyclonedx-python-lib (empty when valid)."""
    validation = require("cyclonedx.validation.json")
    schema = require("cyclonedx.schema")
    text = document if isinstance(document, str) else json.dumps(document)
    validator = validation.JsonStrictValidator(schema.SchemaVersion.V1_6)
    errors = validator.validate_str(text, all_errors=True)
    return [str(e) for e in (errors or [])]
