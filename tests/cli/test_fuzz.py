"""A property test of the `fastst` command against hostile text: random
tensor names, metadata and file names (controls, C1, bidi, invisible
characters, wide and combining characters, undecodable path bytes, very
long) go through save -> every subcommand. No crash, no raw control byte in
any text output, one error line per problem, and `--json` gives back exactly
what was saved."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tempfile
from typing import Dict, List, Tuple

import fastst.numpy
import numpy as np
import pytest
from fastst.cli import main
from helpers.cli_files import validate_envelope
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow

RAW = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f\x80-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]"
)

_SPECIAL = list(
    "\x00\x07\x08\t\n\r\x1b\x7f\x85\x9b\u061c\u200b\u200d\u200e\u202a\u202e\u2028\u2066\u2069"
    "\ufeff\u0301名Ａ\U0001f600\\\"'/.%"
) + ["\x1b[2J", "\x1b]8;;http://x\x07", "\x1b]0;t\x07"]

_chars = st.characters(exclude_categories=("Cs",))
text = st.lists(st.one_of(st.sampled_from(_SPECIAL), _chars), max_size=40).map("".join)
long_text = st.one_of(text, text.map(lambda t: (t or "x") * 200))
names = st.lists(
    long_text.filter(lambda t: t != "__metadata__"), min_size=1, max_size=5, unique=True
)
metadata = st.dictionaries(long_text, long_text, max_size=4)
# File names: bytes (POSIX names are bytes), neither "/" nor NUL, at most 200.
file_names = st.binary(min_size=1, max_size=60).map(
    lambda b: b.replace(b"/", b"_").replace(b"\0", b"_").lstrip(b".") or b"f"
)


def _run(argv: List[str]) -> Tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(names=names, meta=metadata, file_name=file_names)
def test_hostile_text_through_every_subcommand(
    names: List[str], meta: Dict[str, str], file_name: bytes
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.fsdecode(os.path.join(os.fsencode(tmp), file_name + b".safetensors"))
        tensors = {n: np.full(i + 1, i, np.float32) for i, n in enumerate(names)}
        plain = os.path.join(tmp, "plain.safetensors")
        fastst.numpy.save_file(tensors, plain, metadata=meta or None)
        os.rename(plain, path)  # the command must cope with any name
        missing = os.fsdecode(os.path.join(os.fsencode(tmp), file_name + b"-gone"))
        for command in (
            ["inspect", "--tensors"],
            ["inspect", "--tensors", "--width", "60"],
            ["verify", "--values"],
            ["hash", "--tensors", "--check"],
            ["meta"],
            ["meta", "--width", "50"],
            ["diff"],
        ):
            code, out, err = _run([*command, path, missing])
            assert code == 2, (command, err)  # the missing file
            assert not RAW.search(out), (command, RAW.findall(out))
            assert not RAW.search(err), (command, RAW.findall(err))
            assert err.count("\n") == 1, err
            if "--width" in command:
                width = int(command[command.index("--width") + 1])
                from fastst.cli.text import display_width

                table = out.split("  name ")[-1] if command[0] == "inspect" else ""
                for line in table.splitlines()[1:]:
                    assert display_width(line) <= width, line
        code, out, _ = _run(["inspect", "--json", "--tensors", path])
        doc = json.loads(out)
        validate_envelope(doc)
        assert code == 0 and not RAW.search(out)
        (info,) = doc["results"]
        assert info["path"] == path
        assert {r["name"] for r in info["table"]} == set(names)
        assert (info["metadata"] or {}) == meta
        code, out, err = _run(["diff", path, path])
        assert not RAW.search(out) and not RAW.search(err)
        # Names that are not valid UTF-8 work too (surrogate-escaped str).
        assert code == 0, err
        code, out, _ = _run(["diff", "--json", path, path])
        assert code == 0 and json.loads(out)["results"][0]["tensors"] == len(names)
        for command in ("verify", "hash", "meta"):
            code, out, _ = _run([command, "--json", path])
            doc = json.loads(out)
            validate_envelope(doc)
            assert not RAW.search(out)
            (result,) = doc["results"]
            assert result["path"] == path
            if command == "meta":
                assert set(result["metadata"]) == set(meta)
            if command == "hash":
                assert result["header_sha256"] is not None
        code, out, _ = _run(["verify", "--format", "sarif", path, missing])
        sarif = json.loads(out)
        assert code == 2 and not RAW.search(out)
        assert len(sarif["runs"][0]["artifacts"]) == 1
