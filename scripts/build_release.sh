#!/usr/bin/env bash
# Builds the release artefacts into dist/:
# - one wheel for CPython 3.11 and newer (abi3: pyo3's abi3-py311 feature)
#   for this machine's architecture, linked by zig (maturin --zig) against
#   glibc 2.17 so that it carries the manylinux2014 (manylinux_2_17) tag;
#   `auditwheel show` must agree with that tag;
# - the source distribution, from which pip then builds a wheel in a clean
#   folder (no cache, an isolated build environment) to prove it complete:
#   that wheel must hold the same files as the first.
# Needs .venv from scripts/setup.sh; installs requirements-release.txt into it.
# With --wheel, builds and checks the wheel only (scripts/setup.sh --all).
# With --sdist, builds and checks the sdist against the wheel already in dist/
# (the one scripts/setup.sh --all built and installed, as scripts/test.sh
# runs it): the release wheel is built once per test run, not twice.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
    "" | --wheel | --sdist) ;;
    *) echo "usage: bash scripts/build_release.sh [--wheel | --sdist]" >&2; exit 2 ;;
esac
if [ ! -x .venv/bin/maturin ]; then
    echo "no .venv with maturin here: run 'bash scripts/setup.sh' first" >&2
    exit 1
fi
. .venv/bin/activate
# (scripts/setup.sh --all installs them first, then builds beside another pip)
if [ "${FASTST_RELEASE_TOOLS_INSTALLED:-0}" != 1 ]; then
    python -m pip install --quiet -r requirements-release.txt
fi
mkdir -p dist
if [ "${1:-}" = --sdist ]; then
    rm -f dist/fastst-*.tar.gz
    shopt -s nullglob
    wheels=(dist/fastst-*.whl)
    if [ ${#wheels[@]} != 1 ]; then
        echo "expected one wheel in dist/, found ${#wheels[@]}: run scripts/build_release.sh --wheel" >&2
        exit 1
    fi
    wheel=${wheels[0]}
    echo "checking the sdist against $wheel (built before, not again)"
else
    rm -f dist/fastst-*
    maturin build --release --quiet --zig --compatibility manylinux2014 --out dist
    wheel=$(ls dist/fastst-*.whl)
    if ! auditwheel show "$wheel" | tr -s ' \n' '  ' | grep -q 'consistent with the following platform tag: "manylinux_2_17_'; then
        auditwheel show "$wheel"
        echo "$wheel: not manylinux_2_17 compliant" >&2
        exit 1
    fi
    echo "built $wheel (auditwheel: manylinux_2_17)"
    [ "${1:-}" = --wheel ] && exit 0
fi

maturin sdist --out dist
sdist=$(ls dist/fastst-*.tar.gz)
check=$(mktemp -d)
trap 'rm -rf "$check"' EXIT
# A target folder of its own: cargo would take target/'s builds of fastst's
# crates for up to date (the sdist's files are older), proving nothing. What
# this proves is which files the sdist holds, not the machine code (the wheel
# shipped is the one above): its crates compile without the release profile's
# optimisation and fat LTO, several times faster. FASTST_SDIST_SEED names a
# target folder whose release builds of the dependencies to start from (the
# Rust tests' folder, when scripts/test.sh runs this, with the caller's
# CARGO_PROFILE_RELEASE_* settings they were built with): copied without
# fastst's own crates, which then compile from the sdist's files all the same.
if [ -n "${FASTST_SDIST_SEED:-}" ] && [ -d "$FASTST_SDIST_SEED/release" ]; then
    mkdir -p "$check/target"
    cp -a "$FASTST_SDIST_SEED/release" "$check/target/release"
    ( cd "$check/target/release" && rm -rf .fingerprint/fastst-* build/fastst-* deps/*fastst* )
    build_env=(CARGO_TARGET_DIR="$check/target")
    echo "building a wheel from $sdist (dependencies from $FASTST_SDIST_SEED, fastst's crates anew)"
else
    build_env=(CARGO_TARGET_DIR="$check/target" CARGO_PROFILE_RELEASE_OPT_LEVEL=0
        CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256)
fi
env "${build_env[@]}" python -m pip wheel --quiet --no-cache-dir --no-deps --wheel-dir "$check" "$sdist"
names() { python -c 'import sys, zipfile; print("\n".join(sorted(zipfile.ZipFile(sys.argv[1]).namelist())))' "$1"; }
if ! diff <(names "$wheel") <(names "$check"/fastst-*.whl); then
    echo "the wheel built from $sdist differs from $wheel in the files above" >&2
    exit 1
fi
echo "built $sdist (a wheel built from it holds the same files)"
