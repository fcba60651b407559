#!/usr/bin/env bash
# Creates .venv (if missing) and installs fastst into it.
#   bash scripts/setup.sh        the light set: maturin, numpy and ml_dtypes
#                                (requirements-dev.txt); builds the wheel for
#                                this machine (target/wheels) and installs it
#   bash scripts/setup.sh --all  everything the tests need as well: the test
#                                tools, the frameworks, the release tools
#                                (requirements-test/-frameworks/-release.txt),
#                                and installs the release wheel that
#                                scripts/build_release.sh --wheel builds (dist/)
#                                while pip downloads
# PYTHON names the interpreter (default python3; CPython 3.11 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
    "") all=0 ;;
    --all) all=1 ;;
    *) echo "usage: bash scripts/setup.sh [--all]" >&2; exit 2 ;;
esac
say() { printf 'setup [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        echo "fastst needs CPython 3.11 or newer: set PYTHON to one" >&2
        exit 1
    fi
    "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
say "installing maturin, numpy, ml_dtypes into .venv"
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -r requirements-dev.txt
# The larger sets go in through uv (requirements-setup.txt): the same
# resolution as pip's, its downloads and unpacking side by side (the
# frameworks' 5 GB in about a minute where pip takes six), and their modules
# compiled to bytecode as pip does (uv does not by default, and where
# PYTHONDONTWRITEBYTECODE is set nothing ever writes it: every interpreter the
# tests start then compiled torch's modules again, 3.7 s instead of 1.9 s to
# import it, and the tests took 749 CPU-s instead of 526). pip installs them
# when uv cannot be installed or fails.
if [ "$all" = 1 ]; then
    python -m pip install --quiet -r requirements-setup.txt || true
fi
install_set() {
    if [ -x .venv/bin/uv ]; then
        if .venv/bin/uv pip install --python .venv/bin/python --quiet --compile-bytecode "$@"; then
            return 0
        fi
        say "uv could not install $*: pip installs it"
    fi
    python -m pip install --quiet "$@"
}
if [ "$all" = 1 ]; then
    # The frameworks take about 9 GB once installed (PyPI's torch brings its
    # CUDA libraries), and pip's wheel cache would keep another 4 GB of
    # downloads. Say how much room there is, and keep no cache when it is
    # short (FASTST_MIN_CACHE_GB, default 30): a full disk fails the install
    # part-way.
    free_gb() { df -Pk "$1" 2>/dev/null | awk 'NR==2 { print int($4 / 1048576) }'; }
    cache_dir=$(python -m pip cache dir 2>/dev/null || echo "${HOME:-/tmp}")
    mkdir -p "$cache_dir" 2>/dev/null || true
    here=$(free_gb .); cache=$(free_gb "$cache_dir")
    say "free space: ${here:-?} GB here, ${cache:-?} GB at pip's cache ($cache_dir)"
    if [ -z "${PIP_NO_CACHE_DIR:-}" ] && [ "${cache:-0}" -lt "${FASTST_MIN_CACHE_GB:-30}" ]; then
        say "less than ${FASTST_MIN_CACHE_GB:-30} GB free: installing without pip's or uv's cache"
        export PIP_NO_CACHE_DIR=1 UV_NO_CACHE=1
    fi
    # The release wheel compiles (CPU) while pip downloads (network): the
    # release tools go in first, so that the build never meets a package pip
    # is replacing; its output is shown when both are done.
    say "installing the release tools"
    install_set -r requirements-release.txt
    say "building the release wheel (dist/) meanwhile (log: target/setup-wheel.log)"
    mkdir -p target
    FASTST_RELEASE_TOOLS_INSTALLED=1 bash scripts/build_release.sh --wheel >target/setup-wheel.log 2>&1 &
    wheel_build=$!
    trap 'kill "$wheel_build" 2>/dev/null || true' EXIT
    say "installing the test tools and the frameworks (about 5 GB to download)"
    install_set -r requirements-test.txt -r requirements-frameworks.txt
    say "waiting for the release wheel"
    status=0
    wait "$wheel_build" || status=$?
    trap - EXIT
    cat target/setup-wheel.log
    [ "$status" = 0 ] || exit "$status"
    wheel=(dist/fastst-*.whl)
else
    say "building the wheel (target/wheels)"
    rm -rf target/wheels
    maturin build --release --quiet --out target/wheels
    wheel=(target/wheels/fastst-*.whl)
fi
python -m pip install --quiet --force-reinstall --no-deps "${wheel[@]}"
say "$(python -c "import fastst; print('fastst', fastst.__version__, 'installed in .venv')")"
