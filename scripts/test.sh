#!/usr/bin/env bash
# The whole test suite (the README's test command; CI runs it through
# .ci/run): installs everything the tests need (scripts/setup.sh --all), then
# Rust format, lints and tests, Python lints, the Python tests (unit,
# differential against the reference package, property), the stubs, the
# release artefacts and their install check, the reference package's own
# test suite against fastst, and the header fuzzer. Needs the network: PyPI
# (the set-up, the extras' resolution, the reference's sdist) and crates.io
# (the crates, and cargo-fuzz when it is not installed).
#
# Three phases, so that a 2-core machine is kept busy without two heavy jobs
# fighting over it while the Python tests run:
#   1. the set-up (pip downloads, then the release wheel, linked by one core)
#      beside the Rust lane: cargo fmt, clippy and test, in their own target
#      folder (target/checks: no wait on the wheel build's lock);
#   2. ruff and pytest alone, on every core (pytest-xdist);
#   3. stubtest, the sdist, the install check and the reference suite beside
#      the fuzzer (cargo-fuzz's build, then one core for FUZZ_SECONDS).
# A lane beside the main one writes to target/test-<lane>.log, printed when
# it ends; each part prints a header with the time elapsed since the start.
set -euo pipefail
cd "$(dirname "$0")/.."
section() { printf '\n== %s  [%d:%02d elapsed]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
echo "fastst test suite: from a fresh clone, about 15-20 minutes on 2 cores (the set-up"
echo "downloads about 5 GB from PyPI; cargo-fuzz's first install adds a few minutes)."
mkdir -p target
lanes=()
# A lane: a function run in the background, its output in target/test-NAME.log.
start_lane() {
    local name=$1
    shift
    section "$name: started beside the rest (target/test-$name.log)"
    ("$@") >"target/test-$name.log" 2>&1 &
    lanes+=("$!")
    eval "lane_$name=$!"
}
# Waits for a lane, prints its output, and fails when it failed.
finish_lane() {
    local name=$1 pid status=0
    pid=$(eval "echo \$lane_$name")
    wait "$pid" || status=$?
    lanes=("${lanes[@]/$pid/}")
    cat "target/test-$name.log"
    if [ "$status" != 0 ]; then
        section "$name failed (exit $status)"
        exit "$status"
    fi
    section "$name: done"
}
# Lanes still running when the script ends early are stopped.
trap 'for pid in "${lanes[@]}"; do [ -n "$pid" ] && kill "$pid" 2>/dev/null; done; true' EXIT

# The Rust tests run optimised (opt-level 1, with overflow checks) but without
# the release profile's fat LTO and single codegen unit: those change how the
# wheel is compiled, not what the code does, and the wheel pytest tests keeps
# them. The sdist's check (scripts/build_release.sh --sdist) builds with the
# same settings in the same folder, reusing every dependency compiled here.
export FASTST_CHECKS_TARGET_DIR=$PWD/target/checks
checks_env() {
    CARGO_TARGET_DIR=$FASTST_CHECKS_TARGET_DIR CARGO_PROFILE_RELEASE_LTO=off \
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_OPT_LEVEL=1 "$@"
}
export -f checks_env
rust_lane() {
    section "cargo fmt"; cargo fmt --all -- --check
    section "cargo clippy"; checks_env cargo clippy --all-targets --release --quiet -- -D warnings
    section "cargo test"; checks_env cargo test --release --quiet
}
# The header fuzz target for a bounded time (FUZZ_SECONDS, default 60), when
# cargo-fuzz is installed or installs from the crate registry within 5
# minutes; otherwise said and skipped (FASTST_SKIP_FUZZ=1 skips it).
fuzz_lane() {
    if ! command -v cargo-fuzz >/dev/null; then
        section "installing cargo-fuzz from crates.io (once; a few minutes)"
    fi
    if command -v cargo-fuzz >/dev/null || timeout 300 cargo install cargo-fuzz --locked --quiet; then
        section "fuzz (${FUZZ_SECONDS:-60} s)"; bash scripts/fuzz.sh
    else
        section "fuzz skipped: cargo-fuzz could not be installed"
    fi
}

# 1. --------------------------------------------------------------------------
start_lane rust rust_lane
section "set-up (scripts/setup.sh --all)"
bash scripts/setup.sh --all
. .venv/bin/activate
section "ruff"; ruff check python tests benches scripts; ruff format --check python tests benches
finish_lane rust

# 2. --------------------------------------------------------------------------
# Every core (FASTST_TEST_JOBS sets how many); the tests of one xdist_group
# (those sharing a server) run on one of them.
section "pytest"
python -m pytest -q -p no:cacheprovider --durations=25 \
    -n "${FASTST_TEST_JOBS:-auto}" --dist loadgroup tests

# 3. --------------------------------------------------------------------------
if [ "${FASTST_SKIP_FUZZ:-0}" != 1 ]; then
    start_lane fuzz fuzz_lane
fi
section "stubtest"
python -m mypy.stubtest fastst --mypy-config-file pyproject.toml --allowlist scripts/stubtest_allowlist.txt
section "release artefacts (scripts/build_release.sh --sdist: the set-up's wheel, checked against the sdist)"
bash scripts/build_release.sh --sdist
section "install check"; bash scripts/install_check.sh
section "reference suite"; python scripts/reference_suite.py
if [ "${FASTST_SKIP_FUZZ:-0}" != 1 ]; then
    finish_lane fuzz
fi
section "all tests passed"
