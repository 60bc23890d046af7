#!/usr/bin/env bash
# On a GPU machine, from the repository root, with the stage of
# bench/device/stage.sh (in .gpu): NVIDIA's OpenCL driver through the staged
# ICD loader, then the probe, the C suite on the GPU, mpcl-train in every
# policy (the MLP and the GPT) and the benches. $OUT (default: a temporary folder, named at the
# end) gets summary.txt, all.log (every step's output, appended as it ends),
# logs.tar.gz (a log per step) and cache.tar.gz (the program cache: from
# NVIDIA's driver, the PTX its compiler wrote, which
# bench/device/ptx_report.py assembles here for registers and spills): few
# files, since a device call brings back at most eight. Every step has its
# own time limit, so one that hangs costs only itself. MPCL_ICD names another
# vendor library and MPCL_DEVICE another device, to try the script elsewhere.
#   bench/device/run.sh [quick|bench|mma]   quick: probe and suite only;
#                                            bench: probe, mpcl-train and benches;
#                                            mma: issue 20's figures first
#   (the probe, the tests that run mpcl-mma, gemm-square, the wide and the
#   default model in every policy: about the first call's worth)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
stage=$PWD/.gpu
work=$(mktemp -d)
out=${OUT:-$work/out}
logs=$work/logs
mkdir -p "$out" "$logs"
tar -C "$work" -xJf "$stage/programs.tar.xz" || exit 1
bin=$work/bin

# The vendor's OpenCL library, wherever the driver's image put it.
icd=${MPCL_ICD:-}
[ -n "$icd" ] || icd=$(ldconfig -p | awk '/libnvidia-opencl.so/ { print $NF; exit }')
[ -n "$icd" ] || icd=$(find /usr/local/nvidia /usr/lib /usr/lib64 -name 'libnvidia-opencl.so*' 2>/dev/null | head -1)
[ -n "$icd" ] || { echo "run.sh: no libnvidia-opencl.so on this machine" >&2; exit 1; }
mkdir -p "$work/vendors"
echo "$icd" >"$work/vendors/nvidia.icd"
export OCL_ICD_VENDORS=$work/vendors
icd_dir=$(dirname "$icd")
export LD_LIBRARY_PATH=$work/lib:$icd_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MPCL_CACHE_DIR=$work/cache MPCL_CL_DIR='' MPCL_SOURCE_ROOT=$PWD MPCL_DEVICE=${MPCL_DEVICE:-gpu}
# The tests and benches read Fashion-MNIST, and the GPT its fortunes, where
# Debian's packages put them.
default_data=/usr/share/datasets/fashion-mnist
if [ ! -e "$default_data" ]; then
    mkdir -p "$(dirname "$default_data")" && ln -s "$stage/data" "$default_data"
fi
default_text=/usr/share/games/fortunes
if [ ! -e "$default_text" ]; then
    tar -C "$work" -xJf "$stage/fortunes.tar.xz" &&
        mkdir -p "$(dirname "$default_text")" && ln -s "$work/fortunes" "$default_text"
fi
echo "ICD: $icd" | tee "$out/summary.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >>"$out/summary.txt" 2>&1

step() { # NAME SECONDS COMMAND... : runs it, logs to $logs/NAME.log, notes the result
    local name=$1 limit=$2 t0 rc
    shift 2
    t0=$EPOCHREALTIME
    timeout -k 5 "$limit" "$@" >"$logs/$name.log" 2>&1
    rc=$?
    awk -v n="$name" -v rc="$rc" -v t0="$t0" -v t1="$EPOCHREALTIME" \
        'BEGIN { printf "%-28s rc=%-3s %6.1f s\n", n, rc, t1 - t0 }' | tee -a "$out/summary.txt"
    { echo "===== $name (rc=$rc)"; cat "$logs/$name.log"; } >>"$out/all.log"
}
pack() {
    tar -C "$logs" -czf "$out/logs.tar.gz" .
    tar -C "$work" -czf "$out/cache.tar.gz" cache
}

mode=${1:-}
data=$stage/data
# The default model, and issue 20's wide one (784-4096-4096-10, batch 4096,
# 2 epochs: its 16-bit policies' target is 3x float32's samples/s); NAME
# gets the policy appended.
train_default() {
    step "train-$1" 90 "$bin/mpcl-train" --data "$data" --epochs 5 --precision "$1" --json --quiet
}
train_wide() {
    step "$1-$2" 90 "$bin/mpcl-train" --data "$data" --epochs 2 --precision "$2" \
        --hidden 4096,4096 --batch 4096 --json --quiet
}
# mpcl-mma's steps with it refused, for its effect on training.
train_wide_staged() { MPCL_GEMM=clblast-staged train_wide train-wide-staged "$1"; }
# The tests run with the environment tests/meson.build gives them, on the
# GPU (MPCL_AUTO=capability: no test depends on a timing).
run_test() { MPCL_AUTO=capability step "$(basename "$1")" 120 "$1"; }

step probe 60 "$bin/mpcl-probe"
step probe-json 60 "$bin/mpcl-probe" --json
if [ "$mode" = mma ]; then
    # The engine's verification, single GEMMs, the MLP and the GPT on it,
    # and the attention in each layout (the GPU takes `tile` by default).
    for t in test_matrix_engine test_gemm test_train test_gpt_model test_attention; do
        run_test "$bin/$t"
    done
    step bench-gemm-square 180 "$bin/mpcl-bench" gemm-square
    for p in float32 mixed_float16 mixed_bfloat16; do train_wide train-wide "$p"; done
    for p in mixed_float16 mixed_bfloat16; do train_wide_staged "$p"; done
    for p in float32 mixed_float16 mixed_bfloat16; do train_default "$p"; done
    pack
    echo "logs: $out"
    exit 0
fi
if [ "$mode" != bench ]; then
    for t in "$bin"/test_*; do run_test "$t"; done
fi
[ "$mode" = quick ] && { pack; echo "logs: $out"; exit 0; }

for p in auto float32 mixed_float16 mixed_bfloat16; do
    train_default "$p"
    train_wide train-wide "$p"
done
# The GPT (issue 22): the default model in every policy, then GPT-2 124M's
# shape (12 layers, 12 heads, 768 channels, context 1024, its vocabulary) in
# mixed_bfloat16 with the device time by kernel: tokens/s are its
# train_samples_per_s times 1024.
for p in float32 mixed_float16 mixed_bfloat16; do
    step "gpt-$p" 120 "$bin/mpcl-train" --model gpt --steps 300 --eval-every 300 \
        --precision "$p" --json --quiet
done
MPCL_PROFILE=1 step gpt2-124m-mixed_bfloat16 300 "$bin/mpcl-train" --model gpt --layers 12 \
    --heads 12 --embd 768 --context 1024 --vocab 50257 --batch 8 --steps 30 --eval-every 30 \
    --precision mixed_bfloat16 --json --quiet
# The same with the attention a work-item per row, against the tile layout
# (the default on GPUs, src/nn/causal_self_attention.c): fewer steps, as
# the row kernels are expected to be the slower.
MPCL_ATTENTION=row MPCL_PROFILE=1 step gpt2-124m-attention-row 300 "$bin/mpcl-train" \
    --model gpt --layers 12 --heads 12 --embd 768 --context 1024 --vocab 50257 --batch 8 \
    --steps 10 --eval-every 10 --precision mixed_bfloat16 --json --quiet
step probe-bench 120 "$bin/mpcl-probe" --device "$MPCL_DEVICE" --bench
step bench-gemm 120 "$bin/mpcl-bench" gemm
# mpcl-mma (where the probe verified the matrix engine) against CLBlast
# SGEMM, square to 8192 (issue 20's 4096^3 target); and the 16-bit steps on
# the default path and with mpcl-mma refused.
step bench-gemm-square 180 "$bin/mpcl-bench" gemm-square
for p in mixed_float16 mixed_bfloat16; do train_wide_staged "$p"; done
step bench-train 120 "$bin/mpcl-bench" train
step bench-elementwise 60 "$bin/mpcl-bench" elementwise
step bench-train-rounds 120 "$bin/mpcl-bench" train-rounds
pack
echo "logs: $out"
