"""Local ``get_slice`` timings (a 4096 x 4096 F32 matrix, warm page cache): a column, a row and
a strided slice under the mmap and pread back ends and through a file object. Prints
``back-end case microseconds`` (best of 7 repeats of 20 calls). Run it once per build to compare,
alternating the builds (benches/README.md, "Slices")."""

import os
import sys
import tempfile
import timeit
from typing import Any

import fastst
import fastst.numpy
import numpy as np

CASES = {
    "column [:, 10:20]": np.s_[:, 10:20],
    "row [1000:1100]": np.s_[1000:1100],
    "strided [::4, ::4]": np.s_[::4, ::4],
}


def best(part: Any, index: Any) -> float:
    part[index]  # warm
    return min(timeit.repeat(lambda: part[index], number=20, repeat=7)) / 20


def main(path: str) -> None:
    if not os.path.exists(path):
        matrix = np.random.default_rng(0).standard_normal((4096, 4096), dtype=np.float32)
        fastst.numpy.save_file({"w": matrix}, path)
    for backend in ("mmap", "pread", "fileobj"):
        with open(path, "rb") as fh:
            source: Any = fh if backend == "fileobj" else path
            with fastst.safe_open(source, "np", backend=backend.replace("fileobj", "pread")) as f:
                part = f.get_slice("w")
                for name, index in CASES.items():
                    print(f"{backend:8} {name:20} {best(part, index) * 1e6:10.0f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.gettempdir(), "slices.st"))
