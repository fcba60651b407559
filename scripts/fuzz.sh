#!/usr/bin/env bash
# Runs the `header` fuzz target of fastst-core for a bounded time, starting
# from the seed corpus kept in the repository (rust/fastst-core/fuzz/seeds;
# new inputs go to the git-ignored corpus/ folder). Needs `cargo fuzz`; uses
# the nightly toolchain when installed, else the stable one with
# RUSTC_BOOTSTRAP=1 (cargo fuzz needs nightly-only compiler flags).
# FUZZ_SECONDS sets the time (default 60). The build's and libFuzzer's output
# go to target/fuzz-header.log; one summary line is printed (runs, corpus,
# crashes), and the log's tail when the run fails. A crash fails the script
# and leaves the input under rust/fastst-core/fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
log=$PWD/target/fuzz-header.log
mkdir -p target
cd rust/fastst-core/fuzz
secs=${FUZZ_SECONDS:-60}
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    toolchain=(+nightly)
else
    export RUSTC_BOOTSTRAP=1
fi
mkdir -p corpus/header
status=0
cargo "${toolchain[@]}" fuzz run header corpus/header seeds -- \
    -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -timeout=10 >"$log" 2>&1 || status=$?
# libFuzzer ends with "Done N runs in S second(s)"; its status lines carry
# "corp: INPUTS/BYTES"; each failing input is "Test unit written to PATH".
runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 runs in \2 s/p' "$log")
corpus=$(grep -o 'corp: [0-9]*/[0-9a-zA-Z]*' "$log" | tail -n 1 | cut -d' ' -f2 || true)
failing=$(grep -c 'Test unit written to' "$log" || true)
echo "fuzz header: ${runs:-no completed run}, corpus ${corpus:-?} (inputs/bytes)," \
    "${failing} failing inputs, exit ${status} (log: target/fuzz-header.log)"
if [ "$status" != 0 ]; then
    tail -n 40 "$log"
    exit "$status"
fi
