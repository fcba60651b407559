#!/usr/bin/env bash
# Installs the built wheel (target/wheels, made by scripts/setup.sh) into a
# fresh virtual environment -- no system site-packages, no developer setup --
# and checks that it imports, round-trips a file, and that the drop-in
# switch (FASTST_AS_SAFETENSORS=1, read by the .pth file the wheel installs)
# serves `import safetensors` where the reference package is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
wheel=$(ls target/wheels/fastst-*.whl | head -n 1)
venv=target/install-check-venv
rm -rf "$venv"
"$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel"
cd "$venv"  # away from the checkout, so that its python/ folder is not seen
./bin/python - <<'PY'
import os, tempfile
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
./bin/fastst --help > /dev/null
echo "install check passed"
