"""Zero-copy semantics: arrays are private mappings of the file's pages,
writable and independent, never writing to the file, valid after close and
deletion; reading all views of a large file barely grows anonymous memory."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import fastst
import numpy as np
from helpers.raw_files import raw_file

MIB = 1 << 20


def big_file(write, mib: int = 16):
    data = np.arange(mib * MIB // 4, dtype=np.float32)
    small = np.arange(10, dtype=np.int64)
    path = write(
        raw_file(
            {
                "big": ("F32", data.shape, data.tobytes()),
                "small": ("I64", small.shape, small.tobytes()),
            }
        )
    )
    return path, data, small


def test_large_tensor_is_a_private_mapping_not_a_copy(write) -> None:
    path, data, _ = big_file(write)
    with fastst.safe_open(path, "np") as f:
        buf, dtype, shape = f._raw.tensor("big")
        assert buf.mapped and dtype == "F32" and shape == data.shape
        small_buf, _, _ = f._raw.tensor("small")
        assert not small_buf.mapped  # tiny tensors are plain copies
        a = f.get_tensor("big")
        # the array's memory is the mapping itself
        base = a
        while isinstance(base, np.ndarray):
            base = base.base
        assert isinstance(base, memoryview)
        assert type(base.obj).__name__ == "TensorBuffer"


def test_arrays_are_writable_independent_and_never_reach_the_file(write) -> None:
    path, data, small = big_file(write)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with fastst.safe_open(path, "np") as f:
        a, b = f.get_tensor("big"), f.get_tensor("big")
        s1, s2 = f.get_tensor("small"), f.get_tensor("small")
        assert a.flags.writeable and s1.flags.writeable
        assert not np.shares_memory(a, b) and not np.shares_memory(s1, s2)
        a[:] = -1.0
        s1[:] = -1
        np.testing.assert_array_equal(b, data)
        np.testing.assert_array_equal(s2, small)
        np.testing.assert_array_equal(f.get_tensor("big"), data)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_arrays_outlive_close_and_deletion(write) -> None:
    path, data, small = big_file(write)
    f = fastst.safe_open(path, "np")
    a, s = f.get_tensor("big"), f.get_tensor("small")
    f.close()
    os.remove(path)
    np.testing.assert_array_equal(a, data)
    np.testing.assert_array_equal(s, small)
    a[-1] = 5.0
    assert a[-1] == 5.0


def test_views_of_every_tensor_barely_grow_anonymous_memory(tmp_path) -> None:
    # Measured in a fresh interpreter so other tests' allocations don't count.
    size_mib = 256
    script = textwrap.dedent(
        f"""
        import numpy as np, json, struct, sys
        import fastst

        def rss_anon():
            for line in open("/proc/self/status"):
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
        path = sys.argv[1]
        n = 16
        per = {size_mib} * 2**20 // n
        header, off = {{}}, 0
        for i in range(n):
            header[f"layer.{{i}}.weight"] = {{
                "dtype": "BF16", "shape": [per // 2], "data_offsets": [off, off + per]
            }}
            off += per
        hb = json.dumps(header).encode()
        hb += b" " * (-len(hb) % 8)
        with open(path, "wb") as fh:
            fh.write(struct.pack("<Q", len(hb)) + hb)
            chunk = np.random.default_rng(0).integers(0, 255, per, dtype=np.uint8).tobytes()
            for i in range(n):
                fh.write(chunk)
        base = rss_anon()
        with fastst.safe_open(path, "np") as f:
            arrays = [f.get_tensor(k) for k in f.keys()]
        views = rss_anon() - base
        total = 0
        for a in arrays:
            total += int(a.view(np.uint8)[::4096].sum())
        touched = rss_anon() - base
        print(json.dumps({{"views": views, "touched": touched, "size": off}}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "m.safetensors")],
        capture_output=True,
        text=True,
        check=True,
    )
    import json

    r = json.loads(out.stdout)
    assert r["views"] < 0.05 * r["size"], r
    assert r["touched"] < 0.05 * r["size"], r
