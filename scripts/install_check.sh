#!/usr/bin/env bash
# Installs the release wheel (dist/, made by scripts/build_release.sh) into a
# fresh virtual environment -- nothing but pip in it, no system
# site-packages, no developer setup -- and checks that it brings only numpy
# and ml_dtypes along, imports, round-trips a file, and inspects the bundled
# sample with the `fastst` command; that the drop-in switch
# (FASTST_AS_SAFETENSORS=1, read by the .pth file the wheel installs) serves
# `import safetensors` where the reference package is not installed; and
# that pip resolves every extra the README names against PyPI (pip's
# fast-deps reads the wheels' metadata through range requests rather than
# downloading the frameworks).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
shopt -s nullglob
wheels=(dist/fastst-*.whl)
if [ ${#wheels[@]} != 1 ]; then
    echo "expected one wheel in dist/, found ${#wheels[@]}: run scripts/build_release.sh" >&2
    exit 1
fi
wheel=$PWD/${wheels[0]}
sample=$PWD/examples/sample.safetensors
venv=target/install-check-venv
rm -rf "$venv"
"$PYTHON" -m venv "$venv"
cd "$venv"  # away from the checkout, so that its python/ folder is not seen
./bin/python -m pip install --quiet --upgrade pip
./bin/python -m pip install --quiet "$wheel"
./bin/python - <<'PY'
import os, tempfile
from importlib.metadata import distributions
# The light start: the wheel brings numpy and ml_dtypes, nothing else.
names = {d.metadata["Name"].lower().replace("_", "-") for d in distributions()}
assert names - {"pip", "setuptools"} == {"fastst", "ml-dtypes", "numpy"}, sorted(names)
import numpy as np
import fastst, fastst.numpy
assert "install-check-venv" in fastst.__file__, fastst.__file__
path = os.path.join(tempfile.mkdtemp(), "x.safetensors")
arrays = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(2, np.uint8)}
fastst.numpy.save_file(arrays, path, metadata={"k": "v"})
with fastst.safe_open(path, "np") as f:
    assert f.metadata() == {"k": "v"}
    for name, value in arrays.items():
        np.testing.assert_array_equal(f.get_tensor(name), value)
print("fastst", fastst.__version__, "installed and round-trips a file")
PY
FASTST_AS_SAFETENSORS=1 ./bin/python -W ignore::UserWarning - <<'PY'
import numpy as np
import safetensors, safetensors.numpy
import fastst
assert fastst.installed() and safetensors.__fastst_version__ == fastst.__version__
data = safetensors.numpy.save({"a": np.arange(3)})
assert safetensors.numpy.load(data)["a"].tolist() == [0, 1, 2]
print("FASTST_AS_SAFETENSORS=1 serves 'import safetensors' (reference not installed)")
PY
./bin/python -c "import fastst; assert not fastst.installed()"
./bin/fastst inspect "$sample" > inspect.txt
grep -q '^  tensors  *10$' inspect.txt || { cat inspect.txt; exit 1; }
echo "fastst inspect examples/sample.safetensors works"
extras=torch,jax,tensorflow,paddle,mlx,signing
./bin/python -m pip install --dry-run --quiet --use-feature=fast-deps "$wheel[$extras]" \
    2> resolve.txt || { cat resolve.txt; exit 1; }
if grep -q 'does not provide the extra' resolve.txt; then
    cat resolve.txt
    exit 1
fi
echo "pip resolves fastst[$extras] from the wheel"
echo "install check passed"
