#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz) with clang, ASan and UBSan in
# FUZZ_BUILD_DIR (default build-fuzz/ in the checkout; scripts/test.sh names
# one outside it), and runs each for SECONDS (default 60), one after another.
# Fails on any crash, leak, timeout or OOM: a harness that stops before its
# time with a non-zero status fails the run, and its crashing input is left
# in <build>/artifacts/. New inputs go to <build>/corpus/<harness>; the
# committed seeds in tests/fuzz/corpus/<harness> are only read.
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]    (default: all of them)
#
# FUZZ_ARGS adds libFuzzer flags (e.g. FUZZ_ARGS=-runs=10000000 for a fixed
# number of executions; -max_total_time still ends the run).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(fuzz_idx fuzz_npy fuzz_json fuzz_safetensors fuzz_st_header fuzz_train_args fuzz_checkpoint fuzz_tokens_bin fuzz_gpt2_config fuzz_bpe)

if ! command -v clang >/dev/null; then
    echo "fuzz: clang is not installed (scripts/setup.sh installs it)" >&2
    exit 1
fi

# Absolute, so that the paths below hold whichever folder it is.
mkdir -p "${FUZZ_BUILD_DIR:-build-fuzz}"
dir=$(cd "${FUZZ_BUILD_DIR:-build-fuzz}" && pwd)
if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" >/dev/null
else
    CC=clang meson setup "$dir" -Dfuzz=true -Dtests=false -Dbuildtype=debugoptimized \
        -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
meson compile -C "$dir" "${harnesses[@]}"

mkdir -p "$dir/artifacts" "$dir/cache"
# The checkpoint harness builds a trainer on PoCL once; its driver's own
# leaks at exit are what tests/lsan.supp names.
export MPCL_DEVICE=${MPCL_DEVICE:-pocl} MPCL_CACHE_DIR=$dir/cache
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:fast_unwind_on_malloc=0}
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

# One JSON line per harness in meson's test-log format, so that
# scripts/test_summary.py counts this run as "<build>:fuzz".
mkdir -p "$dir/meson-logs"
results=$dir/meson-logs/testlog-fuzz.json
: >"$results"
status=0
for h in "${harnesses[@]}"; do
    mkdir -p "$dir/corpus/$h"
    dict=()
    case $h in
    fuzz_json | fuzz_safetensors | fuzz_st_header | fuzz_checkpoint | fuzz_gpt2_config | fuzz_bpe) dict=(-dict=tests/fuzz/json.dict) ;;
    fuzz_train_args) dict=(-dict=tests/fuzz/args.dict) ;;
    fuzz_npy) dict=(-dict=tests/fuzz/npy.dict) ;;
    esac
    log=$dir/fuzz-$h.log
    echo "== fuzz $h for ${seconds}s"
    # -timeout: one input may take 10 s; -rss_limit_mb also caps single
    # allocations (malloc_limit_mb defaults to it).
    # shellcheck disable=SC2086
    if "$dir/tests/fuzz/$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -error_exitcode=77 -timeout_exitcode=78 -print_final_stats=1 "${dict[@]}" \
        -artifact_prefix="$dir/artifacts/$h-" ${FUZZ_ARGS:-} \
        "$dir/corpus/$h" "tests/fuzz/corpus/$h" >"$log" 2>&1; then
        grep -E '^#[0-9]+.*DONE|stat::number_of_executed_units|stat::average_exec_per_sec' "$log" |
            tr '\n' ' ' || true
        echo
        echo "{\"name\": \"$h\", \"result\": \"OK\"}" >>"$results"
    else
        echo "fuzz: $h FAILED (exit $?); the input is in $dir/artifacts/, the log in $log:" >&2
        grep -E 'ERROR|SUMMARY|Test unit written|==[0-9]+==' "$log" | head -20 >&2 || true
        echo "{\"name\": \"$h\", \"result\": \"FAIL\"}" >>"$results"
        status=1
    fi
done
exit $status
