#!/usr/bin/env bash
# The whole test suite: Rust format, lints and tests, Python lints, then the
# Python tests (unit, differential against the reference package, property).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
echo "== cargo fmt"; cargo fmt --all -- --check
echo "== cargo clippy"; cargo clippy --all-targets --release -- -D warnings
echo "== cargo test"; cargo test --release --quiet
echo "== ruff"; ruff check python tests benches; ruff format --check python tests benches
echo "== pytest"; python -m pytest -q -p no:cacheprovider tests
echo "== stubtest"; python -m mypy.stubtest fastst --mypy-config-file pyproject.toml --allowlist scripts/stubtest_allowlist.txt
echo "== install check"; bash scripts/install_check.sh
echo "== reference suite"; python scripts/reference_suite.py
# The header fuzz target for a bounded time (FUZZ_SECONDS, default 60), when
# cargo-fuzz is installed or installs from the crate registry within 5
# minutes; otherwise said and skipped (FASTST_SKIP_FUZZ=1 skips it).
if [ "${FASTST_SKIP_FUZZ:-0}" != 1 ]; then
    if command -v cargo-fuzz >/dev/null || timeout 300 cargo install cargo-fuzz --locked --quiet; then
        echo "== fuzz (${FUZZ_SECONDS:-60} s)"; bash scripts/fuzz.sh
    else
        echo "== fuzz skipped: cargo-fuzz could not be installed"
    fi
fi
