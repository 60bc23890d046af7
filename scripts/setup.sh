#!/usr/bin/env bash
# Installs everything mpcl needs on Debian 12: idempotent, non-interactive,
# works as root (no sudo needed) or as a user with sudo.
#
# Also installs Intel's CPU OpenCL runtime from PyPI into .venv-intel/ (the one
# OpenCL implementation on a CPU-only machine that runs `half` arithmetic, so
# that the CLBlast HGEMM path gets tested). MPCL_SKIP_INTEL=1 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
    gcc libc6-dev git python3 python3-venv
    meson ninja-build pkg-config clang-format clang
    ocl-icd-opencl-dev opencl-headers clinfo
    pocl-opencl-icd mesa-opencl-icd oclgrind
    libclblast-dev libcmocka-dev zlib1g-dev libdeflate-dev libopenblas-dev
    dataset-fashion-mnist fortunes
    python3-numpy python3-pytest python3-pil python3-pip python3-setuptools librsvg2-bin
    libopenmpi-dev openmpi-bin
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "setup: installing ${missing[*]}"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ "${MPCL_SKIP_INTEL:-0}" != 1 ] && [ ! -f .venv-intel/vendors/intel.icd ]; then
    echo "setup: installing Intel's CPU OpenCL runtime into .venv-intel (pip)"
    # intel-cmplr-lib-rt carries libimf/libsvml/libirng/libintlc, which the
    # runtime needs but does not declare. The wheel's own .icd files name a
    # placeholder path, so we write ours.
    if python3 -m venv .venv-intel &&
        .venv-intel/bin/pip install -q --disable-pip-version-check intel-opencl-rt intel-cmplr-lib-rt; then
        lib=$(find "$PWD/.venv-intel/lib" -maxdepth 1 -name 'libintelocl.so' | head -n 1)
        if [ -n "$lib" ]; then
            mkdir -p .venv-intel/vendors
            echo "$lib" > .venv-intel/vendors/intel.icd
        fi
    fi
    [ -f .venv-intel/vendors/intel.icd ] || echo "setup: Intel OpenCL runtime unavailable; its tests will be skipped" >&2
fi
