#!/usr/bin/env bash
# Runs the `header` fuzz target of fastst-core for a bounded time, starting
# from the seed corpus kept in the repository (rust/fastst-core/fuzz/seeds;
# new inputs go to the git-ignored corpus/ folder). Needs `cargo fuzz`; uses
# the nightly toolchain when installed, else the stable one with
# RUSTC_BOOTSTRAP=1 (cargo fuzz needs nightly-only compiler flags).
# FUZZ_SECONDS sets the time (default 60). A crash fails the script and
# leaves the input under rust/fastst-core/fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/../rust/fastst-core/fuzz"
secs=${FUZZ_SECONDS:-60}
toolchain=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    toolchain=(+nightly)
else
    export RUSTC_BOOTSTRAP=1
fi
mkdir -p corpus/header
cargo "${toolchain[@]}" fuzz run header corpus/header seeds -- \
    -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -timeout=10
