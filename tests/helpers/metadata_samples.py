"""Metadata maps as tools and the command meet them: every key the card reads, hostile maps
that used to end ``fastst meta`` with a traceback, and a hypothesis strategy of any
``str -> str`` map (shared by the card's, ``meta``'s and the SBOM's tests)."""

from __future__ import annotations

import json
from typing import Any

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


HUGER = "9" * 5000  # past Python's 4300-digit int conversion limit

#: The three shapes that used to end `fastst meta` with a traceback.
HOSTILE = {
    "non_finite": {
        "ss_tag_frequency": '{"10_sks": {"sks": 1e400, "dog": NaN, "grass": -Infinity, "sun": 3}}'
    },
    "huge_ints": {
        "ss_tag_frequency": json.dumps({HUGER + "_x": {"a": 1}}).replace('"a": 1', f'"a": {HUGER}'),
        "ssmd_source": "https://civitai.com/models/" + HUGER,
    },
    "wrong_kinds": {
        "ss_datasets": '[{"subsets": {"class_tokens": "x"}}, {"subsets": 5}, 7]',
        "ss_network_module": "lycoris.kohya",
        "ss_network_args": '{"algo": {"nested": [1]}}',
        "sd_merge_models": '{"m": {"name": ["not", "a", "string"]}}',
    },
}
