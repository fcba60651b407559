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
# The frameworks take about 9 GB once installed (PyPI's torch brings its
# CUDA libraries), and pip's wheel cache would keep another 4 GB of
# downloads. Say how much room there is, and keep no cache when it is short
# (FASTST_MIN_CACHE_GB, default 30): a full disk fails the install part-way.
free_gb() { df -Pk "$1" 2>/dev/null | awk 'NR==2 { print int($4 / 1048576) }'; }
cache_dir=$(python -m pip cache dir 2>/dev/null || echo "${HOME:-/tmp}")
mkdir -p "$cache_dir" 2>/dev/null || true
here=$(free_gb .); cache=$(free_gb "$cache_dir")
echo "free space: ${here:-?} GB here, ${cache:-?} GB at pip's cache ($cache_dir)"
if [ -z "${PIP_NO_CACHE_DIR:-}" ] && [ "${cache:-0}" -lt "${FASTST_MIN_CACHE_GB:-30}" ]; then
    echo "less than ${FASTST_MIN_CACHE_GB:-30} GB free: installing without pip's cache"
    export PIP_NO_CACHE_DIR=1
fi
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -r requirements-test.txt
python -m pip install --quiet -r requirements-frameworks.txt
rm -rf target/wheels
maturin build --release --quiet --out target/wheels
python -m pip install --quiet --force-reinstall --no-deps target/wheels/fastst-*.whl
python -c "import fastst; print('fastst', fastst.__version__, 'installed in .venv')"
