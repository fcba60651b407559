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
from helpers.metadata_samples import metadata
from hypothesis import HealthCheck, given, settings


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
