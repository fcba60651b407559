#!/usr/bin/env bash
# The whole test suite (the README's test command; CI runs it through
# .ci/run): installs everything the tests need (scripts/setup.sh --all), then
# Rust format, lints and tests, Python lints, the Python tests (unit,
# differential against the reference package, property), the stubs, the
# release artefacts and their install check, the reference package's own
# test suite against fastst, and the header fuzzer. Needs the network: PyPI
# (the set-up, the extras' resolution, the reference's sdist) and crates.io
# (the crates, and cargo-fuzz when it is not installed).
set -euo pipefail
cd "$(dirname "$0")/.."
section() { printf '\n== %s  [%d:%02d elapsed]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
echo "fastst test suite: from a fresh clone, about 15-25 minutes on 2 cores (the set-up"
echo "downloads about 5 GB from PyPI; cargo-fuzz's first install adds a few minutes)."
section "set-up (scripts/setup.sh --all)"
bash scripts/setup.sh --all
. .venv/bin/activate
section "cargo fmt"; cargo fmt --all -- --check
section "cargo clippy"; cargo clippy --all-targets --release --quiet -- -D warnings
# The Rust tests run optimised (with overflow checks) but without the release
# profile's fat LTO and single codegen unit: those change how the wheel is
# compiled, not what the code does, and the wheel pytest tests keeps them.
section "cargo test"
CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 cargo test --release --quiet
section "ruff"; ruff check python tests benches; ruff format --check python tests benches
section "pytest"; python -m pytest -q -p no:cacheprovider --durations=25 tests
section "stubtest"
python -m mypy.stubtest fastst --mypy-config-file pyproject.toml --allowlist scripts/stubtest_allowlist.txt
section "release artefacts (scripts/build_release.sh)"; bash scripts/build_release.sh
section "install check"; bash scripts/install_check.sh
section "reference suite"; python scripts/reference_suite.py
# The header fuzz target for a bounded time (FUZZ_SECONDS, default 60), when
# cargo-fuzz is installed or installs from the crate registry within 5
# minutes; otherwise said and skipped (FASTST_SKIP_FUZZ=1 skips it).
if [ "${FASTST_SKIP_FUZZ:-0}" != 1 ]; then
    if ! command -v cargo-fuzz >/dev/null; then
        section "installing cargo-fuzz from crates.io (once; a few minutes)"
    fi
    if command -v cargo-fuzz >/dev/null || timeout 300 cargo install cargo-fuzz --locked --quiet; then
        section "fuzz (${FUZZ_SECONDS:-60} s)"; bash scripts/fuzz.sh
    else
        section "fuzz skipped: cargo-fuzz could not be installed"
    fi
fi
section "all tests passed"
