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
# Three phases keep a 2-core machine busy without two heavy jobs fighting
# over it while the Python tests run:
#   1. the set-up (the downloads while the release wheel compiles, its fat
#      LTO on one core), then ruff and stubtest beside the install check
#      (mostly pip's downloads) and the reference package's own suite (one
#      test file at a time, on into phase 2), all beside the Rust lane: cargo
#      fmt, clippy, test and the header fuzzer, in a target folder of their
#      own (target/checks: no wait on the wheel build's lock);
#   2. pytest, two workers per core (pytest-xdist);
#   3. the reference suite's result.
# The wheel the tests install is the release one, built from the sdist (which
# proves the sdist complete): scripts/build_release.sh.
# A lane beside the main one writes to target/test-<lane>.log, printed when
# it ends; every part prints a header with the time elapsed since the start.
set -euo pipefail
cd "$(dirname "$0")/.."
section() { printf '\n== %s  [%d:%02d elapsed]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
echo "fastst test suite: from a fresh clone, about 13-15 minutes on 2 cores (the set-up"
echo "downloads about 5 GB from PyPI; cargo-fuzz's first install adds a minute or two)."
mkdir -p target

# A lane: a function run in the background, its output in target/test-NAME.log.
declare -A lanes=()
start_lane() {
    local name=$1
    section "$name: started beside the rest (target/test-$name.log)"
    ("$2") >"target/test-$name.log" 2>&1 &
    lanes[$name]=$!
}
# Waits for a lane, prints its output, and fails when the lane failed.
finish_lane() {
    local name=$1 status=0
    wait "${lanes[$name]}" || status=$?
    unset "lanes[$name]"
    cat "target/test-$name.log"
    if [ "$status" != 0 ]; then
        section "$name failed (exit $status)"
        exit "$status"
    fi
    section "$name: done"
}
# A lane still running when the script stops early is stopped with it.
trap 'for pid in "${lanes[@]}"; do pkill -P "$pid" 2>/dev/null; kill "$pid" 2>/dev/null; done; true' EXIT

# The Rust tests run unoptimised (opt-level 0, with overflow checks), without
# the release profile's fat LTO and single codegen unit: those change how the
# wheel is compiled, not what the code does, and the wheel pytest tests keeps
# them. (Against opt-level 1: 138 CPU-s to compile the tests instead of 290,
# and about 30 s more to run them.)
checks() {
    CARGO_TARGET_DIR=target/checks CARGO_PROFILE_RELEASE_LTO=off \
        CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_OPT_LEVEL=0 "$@"
}
rust_lane() {
    section "cargo fmt"; cargo fmt --all -- --check
    section "cargo clippy"; checks cargo clippy --all-targets --release --quiet -- -D warnings
    section "cargo test"; checks cargo test --release --quiet
    # The header fuzz target for a bounded time (FUZZ_SECONDS, 30 here),
    # when cargo-fuzz is installed or installs from the crate registry within
    # 5 minutes; otherwise said and skipped (FASTST_SKIP_FUZZ=1 skips it).
    if [ "${FASTST_SKIP_FUZZ:-0}" = 1 ]; then
        section "fuzz skipped (FASTST_SKIP_FUZZ=1)"
        return
    fi
    if ! command -v cargo-fuzz >/dev/null; then
        section "installing cargo-fuzz from crates.io (once; a minute or two)"
    fi
    if command -v cargo-fuzz >/dev/null || timeout 300 cargo install cargo-fuzz --locked --quiet; then
        section "fuzz (${FUZZ_SECONDS:-30} s)"; FUZZ_SECONDS=${FUZZ_SECONDS:-30} bash scripts/fuzz.sh
    else
        section "fuzz skipped: cargo-fuzz could not be installed"
    fi
}

# 1. --------------------------------------------------------------------------
start_lane rust rust_lane
section "set-up (scripts/setup.sh --all)"
bash scripts/setup.sh --all
. .venv/bin/activate
install_check() { bash scripts/install_check.sh; }
start_lane install-check install_check
section "ruff"; ruff check python tests benches scripts; ruff format --check python tests benches
reference_suite() { python scripts/reference_suite.py --jobs 1; }
start_lane reference-suite reference_suite
section "stubtest"
python -m mypy.stubtest fastst --mypy-config-file pyproject.toml --allowlist scripts/stubtest_allowlist.txt
finish_lane install-check
finish_lane rust

# 2. --------------------------------------------------------------------------
# Two workers per core (FASTST_TEST_JOBS sets how many): many tests spend
# their time waiting (on servers, child processes, kills, deadlines), and a
# second worker keeps the core busy meanwhile (on 2 cores, 4 workers: 4:38
# against 5:14 for 2, 2189 tests). The tests of one module run on one worker
# (--dist loadscope), so that a module's fixtures (a transformers model saved
# and loaded, docs/cli.md's example files, a site on the S3 store) are made
# once. (xdist_group marks would not do: pytest-xdist 3.8 adds them to node
# ids in a way pytest 9.2 no longer sees.)
section "pytest"
python -m pytest -q -p no:cacheprovider --durations=25 --junitxml=target/pytest.xml \
    -n "${FASTST_TEST_JOBS:-$(($(nproc) * 2))}" --dist loadscope tests

# 3. --------------------------------------------------------------------------
finish_lane reference-suite
section "all tests passed"
