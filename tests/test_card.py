"""The metadata card is total: any ``str -> str`` metadata map yields a card
(with notes for what it could not use), never an exception, and the card,
the decoded metadata and the ``meta`` text report built from them are JSON
without NaN or infinities and print without error."""

from __future__ import annotations

import io
import json
import time
from typing import Any, Dict

import fastst.tools.inspect as fi
import pytest
from fastst.cli import render, report
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

#: Every key the card reads, and the conventions' prefixes.
KEYS = [
    "format",
    "ss_output_name",
    "ss_tag_frequency",
    "ss_dataset_dirs",
    "ss_reg_dataset_dirs",
    "ss_datasets",
    "ss_network_module",
    "ss_network_args",
    "ss_network_dim",
    "ss_network_alpha",
    "ss_training_started_at",
    "ss_training_finished_at",
    "ss_steps",
    "ss_max_train_steps",
    "ss_epoch",
    "ss_num_epochs",
    "ss_num_train_images",
    "ss_optimizer",
    "ss_learning_rate",
    "ss_unet_lr",
    "ss_base_model_version",
    "ss_sd_model_name",
    "ss_resolution",
    "sshs_model_hash",
    "sshs_legacy_hash",
    "modelspec.title",
    "modelspec.description",
    "modelspec.author",
    "modelspec.license",
    "modelspec.date",
    "modelspec.trigger_phrase",
    "modelspec.architecture",
    "modelspec.resolution",
    "modelspec.thumbnail",
    "modelspec.source",
    "modelspec.url",
    "modelspec.hash_sha256",
    "modelspec.merged_from",
    "ssmd_display_name",
    "ssmd_description",
    "ssmd_author",
    "ssmd_keywords",
    "ssmd_source",
    "ssmd_cover_images",
    "sd_merge_models",
]

HUGE = "9" * 4301  # past Python's 4300-digit int conversion limit

#: Number tokens JSON (or Python) cannot hold as finite values.
NASTY_NUMBERS = ["1e400", "-1e400", "NaN", "Infinity", "-Infinity", HUGE, "-" + HUGE, "1e-400"]

scalars = st.one_of(
    st.sampled_from(NASTY_NUMBERS + ["null", "true", "false", "0", "-1", str(2**64)]),
    st.integers().map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(max_size=8).map(json.dumps),
    # Folder names that start like "<repeats>_<token>", repeats huge too.
    st.sampled_from(["10_sks dog", HUGE + "_x", "1_", "_x"]).map(json.dumps),
)


def _object(pairs: Any) -> str:
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in pairs) + "}"


KEYWORDS = st.sampled_from(
    ["subsets", "class_tokens", "num_repeats", "is_reg", "algo", "name", "n_repeats"]
)

json_texts = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.lists(st.tuples(KEYWORDS | st.text(max_size=6), inner), max_size=4).map(_object),
    ),
    max_leaves=20,
)

#: Nesting deeper than any JSON parser's stack (and just below it).
deep = st.sampled_from([10, 90, 500, 990, 1200, 3000]).flatmap(
    lambda n: st.sampled_from(["[" * n + "]" * n, '{"a":' * n + "1" + "}" * n])
)

values = st.one_of(
    json_texts,
    deep,
    st.text(max_size=20),
    st.sampled_from(NASTY_NUMBERS + ["nan", "inf", "None", " ", "1700000000", "-1e308"]),
    st.sampled_from(
        [
            "https://civitai.com/models/" + HUGE,
            "https://civitai.com/models/1?modelVersionId=" + HUGE,
            "data:image/png;base64," + "A" * 10,
            "data:",
            "data:text/plain,\ud800",  # a lone surrogate (the API takes any str)
        ]
    ),
)

metadata = st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=10), values, max_size=8)


def _render(md: Dict[str, str], card: Dict[str, Any], decoded: Dict[str, Any]) -> str:
    stdout = io.StringIO()
    out = render.Out(stdout, io.StringIO(), width=80)
    report.print_meta(out, "m.safetensors", md, card, decoded, raw_only=False)
    return stdout.getvalue()


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(metadata)
def test_card_is_total(md: Dict[str, str]) -> None:
    card = fi.metadata_card(md)
    decoded = fi.decode_metadata(md)
    # Strict JSON: no NaN/Infinity tokens, no int past the conversion limit.
    text = json.dumps({"card": card, "metadata": decoded}, allow_nan=False)
    assert json.loads(text) == json.loads(text)
    assert isinstance(card["notes"], list)
    assert all(isinstance(n, str) for n in card["notes"])
    assert _render(md, card, decoded).startswith("m.safetensors")


def test_source_url_search_does_not_backtrack() -> None:
    # Many URL starts, none followed by the CivitAI path: a regular
    # expression that backtracks takes minutes over this (quadratic).
    value = "http://x" * 30_000 + " civitai.com/models/7 https://civitai.com/models/8/y?a=b z"
    start = time.monotonic()
    card = fi.metadata_card({"ss_training_comment": value})
    assert time.monotonic() - start < 5
    assert card["civitai_model_id"] == 7 and card["source_url"] is None
    card = fi.metadata_card({"c": "see https://civitai.com/models/8/y?modelVersionId=9 z"})
    assert card["source_url"] == "https://civitai.com/models/8/y?modelVersionId=9"
    assert (card["civitai_model_id"], card["civitai_version_id"]) == (8, 9)
