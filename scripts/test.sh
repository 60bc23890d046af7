#!/usr/bin/env bash
# The whole test suite, as CI runs it: install what is missing, build with
# warnings as errors, run the suite on every OpenCL implementation here
# (PoCL, Rusticl, Intel's CPU runtime; the kernel tests under Oclgrind), then
# again under AddressSanitizer + UndefinedBehaviorSanitizer on PoCL, then
# every fuzz harness for FUZZ_SECONDS (30) each.
#
# Two lanes run side by side, one a core: most of the suite's time is a
# driver's compiler or Oclgrind's interpreter, one thread each, and CI has two
# cores (a run used 1.05 cores on average when the stages ran one after
# another). Lane 1: PoCL, then ASan, then the fuzzers (ASan's run finds
# PoCL's kernel cache warm from the first). Lane 2: Rusticl, Intel, Oclgrind,
# its output kept in a log that is printed when it ends.
#
# It builds outside the checkout, so that every run proves the suite passes
# from an out-of-tree build: in MPCL_BUILD_ROOT, by default
# ${TMPDIR:-/tmp}/mpcl-build-<hash of the checkout's path>, one folder per
# checkout (reruns are incremental; two checkouts never share one), holding
# build/, build-asan/ and build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

checkout=$(pwd -P)
root=${MPCL_BUILD_ROOT:-${TMPDIR:-/tmp}/mpcl-build-$(printf %s "$checkout" | sha256sum | cut -c1-12)}
build=$root/build
asan=$root/build-asan
echo "== build folders in $root"

configure() { # DIR OPTIONS...
    local dir=$1
    shift
    if [ -f "$dir/build.ninja" ]; then
        meson setup --reconfigure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@" >/dev/null
    fi
}

echo "== formatting (.clang-format)"
git ls-files '*.c' '*.h' | xargs clang-format --dry-run --Werror
echo "== area order (scripts/check_areas.py)"
python3 scripts/check_areas.py

configure "$build" -Dwerror=true
meson compile -C "$build"

setups=()
run() { # SETUP [meson test args...]
    local setup=$1
    shift
    echo "== suite on $setup"
    # --no-rebuild: the build is done, and two lanes must not run ninja at once.
    meson test -C "$build" --setup "$setup" --no-rebuild --print-errorlogs "$@"
}
status=0

# Lane 2, in the background. Not the GEMM-heavy tests on Rusticl: llvmpipe
# JIT-compiles the GEMM kernel for ~25 s per launch geometry, and they run
# many (tests/meson.build). The Python package's suite runs on PoCL only (it
# trains through the same library on every device; one run checks the
# package), and so does test_nvidia_sources (suite nvptx: clang and ptxas, no
# OpenCL device).
intel_icd=.venv-intel/vendors/intel.icd
lane2() {
    local failed=0
    run rusticl --no-suite install --no-suite model --no-suite jit-heavy --no-suite python \
        --no-suite nvptx || failed=1
    if [ -f "$intel_icd" ]; then
        run intel --suite kernels --suite model --suite tools || failed=1
    else
        echo "== Intel OpenCL runtime not installed: its run is skipped"
    fi
    run oclgrind --suite kernels || failed=1
    return $failed
}
lane2_log=$root/lane2.log
lane2 >"$lane2_log" 2>&1 &
lane2_pid=$!
trap 'kill "$lane2_pid" 2>/dev/null || true' EXIT # when lane 1 stops early
setups+=("$build:rusticl" "$build:oclgrind")
[ -f "$intel_icd" ] && setups+=("$build:intel")

# Lane 1.
setups+=("$build:pocl")
run pocl || status=1

echo "== suite under ASan+UBSan on pocl"
configure "$asan" -Dwerror=true -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false
meson compile -C "$asan"
setups+=("$asan:pocl")
# Not the Python suite: a plain python3 cannot load an ASan-built libmpcl.
# Not cold-build (test_quiet*): it times the driver's compiler under ASan.
# Not nvptx (test_nvidia_sources): no library code runs in it.
# PoCL's ICD alone (OCL_ICD_VENDORS): the loader otherwise also opens Mesa's
# Clover, whose start-up leaks from a module it unloads again; the fast
# unwinder (ASan's default) shows that leak as "<unknown module>", which no
# suppression can name, and the slow one, which reached the ICD loader, made
# every allocation of the drivers' compilers unwind the whole stack: the
# suite took 3x as long.
icd=$root/icd-pocl
mkdir -p "$icd"
cp /etc/OpenCL/vendors/pocl.icd "$icd/"
OCL_ICD_VENDORS=$icd ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
    LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C "$asan" --setup pocl --print-errorlogs --no-suite install \
    --no-suite python --no-suite cold-build --no-suite nvptx || status=1

echo "== fuzz: every libFuzzer harness for ${FUZZ_SECONDS:-30}s (scripts/fuzz.sh)"
setups+=("$root/build-fuzz:fuzz")
FUZZ_BUILD_DIR=$root/build-fuzz scripts/fuzz.sh "${FUZZ_SECONDS:-30}" || status=1

echo "== lane 2 (Rusticl, Intel, Oclgrind): waiting for it"
wait "$lane2_pid" || status=1
cat "$lane2_log"

python3 scripts/test_summary.py "${setups[@]}" || status=1
exit $status
