"""Every malformed file of the corpus fails with its own error; every valid
edge case is accepted (and read the same as the reference where it reads it)."""

from __future__ import annotations

import fastst
import numpy as np
import pytest
import safetensors
from helpers.corpus import GOOD, MALFORMED, Bad, Good
from safetensors import safe_open as ref_open


@pytest.mark.parametrize("case", MALFORMED, ids=[c.name for c in MALFORMED])
def test_malformed_file_is_refused_with_its_rule(case: Bad, write) -> None:
    path = write(case.content, name=f"{case.name}.safetensors")
    cls = getattr(fastst, case.error)
    with pytest.raises(cls) as info:
        fastst.safe_open(path, "numpy")
    err = info.value
    assert isinstance(err, fastst.SafetensorError)
    assert err.rule == case.rule, str(err)
    assert err.filename == str(path)
    assert str(path) in str(err)
    if case.tensor is not None:
        assert err.tensor == case.tensor
        assert repr(case.tensor).replace("'", '"') in str(err)


@pytest.mark.parametrize("case", MALFORMED, ids=[c.name for c in MALFORMED])
def test_reference_refuses_the_malformed_corpus_too(case: Bad, write) -> None:
    # Sanity check of the corpus itself: where the reference is strict, it
    # agrees these files are bad. Cases the reference wrongly accepts are
    # listed explicitly so the list stays honest.
    reference_accepts = {"duplicate-metadata-key"}
    path = write(case.content, name=f"{case.name}.safetensors")
    try:
        with ref_open(path, "numpy") as f:
            f.keys()
        accepted = True
    except (safetensors.SafetensorError, Exception):
        accepted = False
    if case.name in reference_accepts:
        assert accepted, f"reference now refuses {case.name}: drop it from the list"
    else:
        assert not accepted


@pytest.mark.parametrize("case", GOOD, ids=[c.name for c in GOOD])
def test_valid_edge_case_is_accepted(case: Good, write) -> None:
    path = write(case.content, name=f"{case.name}.safetensors")
    with fastst.safe_open(path, "numpy") as f:
        keys = f.keys()
        tensors = {k: f.get_tensor(k) for k in keys}
        meta = f.metadata()
    assert keys == sorted(keys)
    if not case.reference_accepts:
        return
    with ref_open(path, "numpy") as r:
        assert r.keys() == keys
        assert r.metadata() == meta
        for k in keys:
            expected = r.get_tensor(k)
            got = tensors[k]
            assert got.shape == expected.shape
            assert got.tobytes() == expected.tobytes()


def test_huge_header_claim_allocates_nothing(write) -> None:
    # 99 MB claimed but the file is tiny: refused before any allocation.
    import struct

    path = write(struct.pack("<Q", 99_000_000) + b"{}")
    with pytest.raises(fastst.HeaderFramingError, match="only 2 bytes follow"):
        fastst.safe_open(path, "numpy")


def test_header_cap_is_configurable(write) -> None:
    from helpers.raw_files import raw_file

    path = write(raw_file({"t": ("F32", [1], bytes(4))}))
    with pytest.raises(fastst.HeaderFramingError) as info:
        fastst.safe_open(path, "numpy", header_cap=16)
    assert info.value.rule == "header-too-large"
    with fastst.safe_open(path, "numpy", header_cap=1 << 20) as f:
        assert np.array_equal(f.get_tensor("t"), np.zeros(1, np.float32))
