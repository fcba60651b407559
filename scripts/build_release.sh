#!/usr/bin/env bash
# Builds the release artefacts into dist/:
# - the source distribution (maturin sdist);
# - from it, unpacked in a folder of its own, one wheel for CPython 3.11 and
#   newer (abi3: pyo3's abi3-py311 feature) for this machine's architecture,
#   linked by zig (maturin --zig) against glibc 2.17 so that it carries the
#   manylinux2014 (manylinux_2_17) tag; `auditwheel show` must agree with
#   that tag. The wheel shipped (and tested: scripts/setup.sh --all installs
#   it) is built from the sdist, which proves the sdist complete with one
#   compile rather than two.
# Needs .venv from scripts/setup.sh; installs requirements-release.txt into it.
# --wheel (scripts/setup.sh --all) builds the same two, says less.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
    "" | --wheel) ;;
    *) echo "usage: bash scripts/build_release.sh [--wheel]" >&2; exit 2 ;;
esac
if [ ! -x .venv/bin/maturin ]; then
    echo "no .venv with maturin here: run 'bash scripts/setup.sh' first" >&2
    exit 1
fi
. .venv/bin/activate
# (scripts/setup.sh --all installs them first, then builds beside another install)
if [ "${FASTST_RELEASE_TOOLS_INSTALLED:-0}" != 1 ]; then
    python -m pip install --quiet -r requirements-release.txt
fi
mkdir -p dist
rm -f dist/fastst-*
maturin sdist --out dist
sdist=$(ls dist/fastst-*.tar.gz)
# Unpacked with fresh times (-m): cargo's release folder for it
# (target/release-build) keeps the dependencies' builds between runs, and
# fastst's own crates, newer than their last build, compile again.
src=$PWD/target/release-src
rm -rf "$src"
mkdir -p "$src"
tar -xzmf "$sdist" -C "$src" --strip-components=1
(cd "$src" && CARGO_TARGET_DIR="$OLDPWD/target/release-build" \
    maturin build --release --quiet --zig --compatibility manylinux2014 --out "$OLDPWD/dist")
wheel=$(ls dist/fastst-*.whl)
if ! auditwheel show "$wheel" | tr -s ' \n' '  ' | grep -q 'consistent with the following platform tag: "manylinux_2_17_'; then
    auditwheel show "$wheel"
    echo "$wheel: not manylinux_2_17 compliant" >&2
    exit 1
fi
echo "built $sdist and, from it, $wheel (auditwheel: manylinux_2_17)"
