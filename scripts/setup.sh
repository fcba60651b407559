#!/usr/bin/env bash
# Creates .venv (if missing), installs the build and test dependencies from
# this repository's own files, builds the fastst wheel in release mode and
# installs it into .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -r requirements-test.txt
python -m pip install --quiet -r requirements-frameworks.txt
rm -rf target/wheels
maturin build --release --quiet --out target/wheels
python -m pip install --quiet --force-reinstall --no-deps target/wheels/fastst-*.whl
python -c "import fastst; print('fastst', fastst.__version__, 'installed in .venv')"
