#!/usr/bin/env bash
# Mutation testing of the pure-Rust crates (rust/fastst-core and rust/fastst-inspect) with
# cargo-mutants.
#
# Runs both crates' tests (their unit tests and rust/fastst-core/tests/) against every mutant of
# the chosen modules, keeps every outcome under target/mutants/, and prints, per top-level module
# of rust/fastst-core/src (and `inspect`, the whole rust/fastst-inspect crate), caught / missed /
# timeout / unviable and the score
# caught / (caught + missed - equivalent). Exits 1 when a listed module scores under 90% or still
# has untested mutants. Not part of .ci/run (a full run takes hours); see docs/testing.md.
#
# usage: scripts/mutants.sh [-j N] [--shard K/N] [--fresh] [--retest-timeouts] [--summary] [MODULE...]
#   MODULE     top-level modules of rust/fastst-core/src, or `inspect` (rust/fastst-inspect), to
#              test and report (default: all, most important first)
#   -j N       mutants built and tested at once (default 1; each job needs its own build tree)
#   --shard K/N  test only the K-th of N slices of the pending mutants (K from 0), e.g. to split a
#              module over several sessions or machines
#   --fresh    retest everything (default: resume, skipping mutants already caught, unviable or
#              timed out)
#   --retest-timeouts  also test again the mutants that timed out (a busy machine can time out a
#              mutant that only slows the tests down)
#   --summary  only print the table from the outcomes already recorded
#
# Resumable: outcomes are appended as each mutant finishes, so an interrupted run loses at most the
# mutants in flight; the next run skips what is already caught. The latest outcome of a mutant wins.
# Equivalent mutants (no test can tell them apart from the original) are listed, one per line, in
# scripts/mutants-equivalent.txt as `<mutant name as cargo mutants --list prints it> # <reason>`;
# they are still tested and reported, and only leave the score's denominator while missed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
crate=rust/fastst-core
src=$crate/src
inspect_src=rust/fastst-inspect/src
out=target/mutants
equivalent=scripts/mutants-equivalent.txt
threshold=90
priority=(header validate table dtype convert json read io write inspect identify rules error parallel progress)

jobs=1
shard=""
fresh=0
retest_timeouts=0
summary_only=0
modules=()
while [ $# -gt 0 ]; do
    case "$1" in
        -j | --jobs) jobs=$2; shift 2 ;;
        --shard) shard=$2; shift 2 ;;
        --fresh) fresh=1; shift ;;
        --retest-timeouts) retest_timeouts=1; shift ;;
        --summary) summary_only=1; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "mutants.sh: unknown option $1" >&2; exit 2 ;;
        *) modules+=("$1"); shift ;;
    esac
done

# Every top-level module of the crate, the priority ones first, then any new one.
all_modules=("${priority[@]}")
for path in "$src"/*.rs "$src"/*/; do
    name=$(basename "$path" .rs)
    [ "$name" = lib ] && continue
    case " ${all_modules[*]} " in *" $name "*) ;; *) all_modules+=("$name") ;; esac
done
if [ ${#modules[@]} -eq 0 ]; then
    modules=("${all_modules[@]}")
fi
for m in "${modules[@]}"; do
    if [ "$m" = inspect ]; then
        continue
    fi
    if [ ! -e "$src/$m.rs" ] && [ ! -d "$src/$m" ]; then
        echo "mutants.sh: no module $m in $src" >&2
        exit 2
    fi
done

if ! cargo mutants --version >/dev/null 2>&1; then
    echo "mutants.sh: installing cargo-mutants" >&2
    cargo install cargo-mutants --locked
fi
test_tool=()
if ! cargo nextest --version >/dev/null 2>&1; then
    test_tool=(--test-tool cargo) # .cargo/mutants.toml asks for nextest
fi

mkdir -p "$out/runs"

# status.tsv: the latest outcome of every mutant ever tested, from the runs' list files
# (runs sort by their UTC time stamp; within a run a mutant has one outcome).
collect() {
    local f
    for run in $(ls -d "$out"/runs/*/mutants.out 2>/dev/null | sort); do
        for f in caught missed timeout unviable; do
            [ -f "$run/$f.txt" ] && sed "s/^/$f\t/" "$run/$f.txt"
        done
    done | awk -F'\t' '{ s[$2] = $1 } END { for (m in s) print s[m] "\t" m }' >"$out/status.tsv"
}

if [ $summary_only -eq 0 ]; then
    collect
    label=$(IFS=-; echo "${modules[*]}")
    [ ${#label} -gt 60 ] && label=several
    [ -n "$shard" ] && label="${label}_shard-${shard/\//-of-}"
    run="$out/runs/$(date -u +%Y%m%dT%H%M%SZ)_$label"
    mkdir -p "$run/mutants.out"
    # Both crates' tests run for every mutant: verify's tests exercise the core's rules too.
    args=(-p fastst-core -p fastst-inspect --test-package fastst-core --test-package fastst-inspect
        -j "$jobs" -o "$run")
    for m in "${modules[@]}"; do
        if [ "$m" = inspect ]; then
            args+=(-f "$inspect_src/**")
        else
            args+=(-f "$src/$m.rs" -f "$src/$m/**")
        fi
    done
    [ -n "$shard" ] && args+=(--shard "$shard")
    if [ $fresh -eq 0 ]; then
        # Resume: cargo-mutants skips the names listed here (caught, unviable or timed out
        # before; --retest-timeouts tests timed-out ones again).
        awk -F'\t' -v again=$retest_timeouts '$1 == "caught" || $1 == "unviable" ||
            ($1 == "timeout" && !again) { print $2 }' "$out/status.tsv" \
            >"$run/mutants.out/previously_caught.txt"
        args+=(--iterate)
    fi
    echo "mutants.sh: cargo mutants ${args[*]} ${test_tool[*]}" >&2
    rc=0
    nice -n 19 cargo mutants "${args[@]}" "${test_tool[@]}" || rc=$?
    # 0 all caught, 2 some missed, 3 some timed out: anything else is a failed run.
    case $rc in 0 | 2 | 3) ;; *) echo "mutants.sh: cargo mutants failed ($rc)" >&2; exit "$rc" ;; esac
fi

collect
cargo mutants --list -p fastst-core -p fastst-inspect >"$out/current.txt"
[ -f "$equivalent" ] || : >"$equivalent"

awk -F'\t' -v modules="${modules[*]}" -v threshold=$threshold -v src="$src/" -v isrc="$inspect_src/" '
    FILENAME == ARGV[1] { status[$2] = $1; next }
    FILENAME == ARGV[2] {
        if ($0 ~ /^[ \t]*(#|$)/) next
        i = index($0, " # ")
        if (i == 0) { printf "mutants-equivalent.txt: no \" # reason\": %s\n", $0 > "/dev/stderr"; bad = 1; next }
        equiv[substr($0, 1, i - 1)] = 1
        next
    }
    {
        name = $0
        path = substr(name, 1, index(name, ":") - 1)
        if (index(path, isrc) == 1) rest = "inspect"
        else if (index(path, src) == 1) {
            rest = substr(path, length(src) + 1)
            sub(/\/.*/, "", rest); sub(/\.rs$/, "", rest)
        } else next
        s = (name in status) ? status[name] : "untested"
        if (s == "missed" && (name in equiv)) s = "equivalent"
        if (name in equiv) seen[name] = 1
        n[rest]++; count[rest, s]++
    }
    END {
        for (e in equiv) if (!(e in seen)) printf "mutants-equivalent.txt: not a current mutant: %s\n", e > "/dev/stderr"
        for (e in equiv) if ((e in seen) && status[e] != "missed") printf "mutants-equivalent.txt: listed but %s: %s\n", (e in status) ? status[e] : "untested", e > "/dev/stderr"
        printf "%-10s %7s %6s %6s %5s %7s %8s %8s %7s\n", "module", "mutants", "caught", "missed", "equiv", "timeout", "unviable", "untested", "score"
        split(modules, list, " ")
        for (k = 1; k in list; k++) {
            m = list[k]
            c = count[m, "caught"] + 0; x = count[m, "missed"] + 0; e = count[m, "equivalent"] + 0
            t = count[m, "timeout"] + 0; u = count[m, "unviable"] + 0; un = count[m, "untested"] + 0
            score = (c + x > 0) ? 100 * c / (c + x) : 100
            verdict = ""
            if (un > 0) { verdict = "  INCOMPLETE"; fail = 1 }
            if (score < threshold) { verdict = verdict "  UNDER " threshold "%"; fail = 1 }
            shown = (c + x > 0) ? sprintf("%6.1f%%", score) : "      -"
            printf "%-10s %7d %6d %6d %5d %7d %8d %8d %s%s\n", m, n[m], c, x, e, t, u, un, shown, verdict
            tc += c; tx += x; te += e; tt += t; tu += u; tun += un; tn += n[m]
        }
        printf "%-10s %7d %6d %6d %5d %7d %8d %8d %6.1f%%\n", "total", tn, tc, tx, te, tt, tu, tun, (tc + tx > 0) ? 100 * tc / (tc + tx) : 100
        exit (fail || bad) ? 1 : 0
    }
' "$out/status.tsv" "$equivalent" "$out/current.txt" || {
    echo "mutants.sh: a module scores under ${threshold}% or is not fully tested; missed mutants:" \
        "grep ^missed $out/status.tsv" >&2
    exit 1
}
