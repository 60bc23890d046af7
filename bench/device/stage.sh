#!/usr/bin/env bash
# Stages what a bare GPU machine needs to run mpcl's probe, C suite and
# benches (bench/device/run.sh): the programs of a build without MPI, the
# shared libraries they load from Debian (CLBlast, the ICD loader, libdeflate,
# cmocka, OpenBLAS for mpcl-bench's reference), the Fashion-MNIST files and
# the fortunes corpus (the GPT's default text).
# The libraries and programs travel as one xz tarball to stay well inside a
# 64 MiB transfer; the gzip data files are already compressed.
#   bench/device/stage.sh [BUILD_DIR] [STAGE_DIR]   (defaults build-gpu, .gpu)
# BUILD_DIR: meson setup build-gpu -Dmpi=disabled && meson compile -C build-gpu
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-gpu}
stage=${2:-.gpu}
data=/usr/share/datasets/fashion-mnist
text=/usr/share/games/fortunes

[ -x "$build/src/tools/mpcl-train" ] || { echo "stage.sh: no build in $build" >&2; exit 1; }
if ldd "$build/src/libmpcl.so.0" | grep -q libmpi; then
    echo "stage.sh: $build links MPI; configure it with -Dmpi=disabled" >&2
    exit 1
fi

# Every kernel must assemble for sm_90 before a GPU's time is spent on it
# (about 2 minutes; skipped where clang with libclc or ptxas is missing).
python3 bench/device/nvptx_check.py cl || {
    echo "stage.sh: the library program does not assemble for sm_90 (above)" >&2
    exit 1
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/lib"
cp "$build"/src/tools/mpcl-probe "$build"/src/tools/mpcl-train "$build"/bench/mpcl-bench "$tmp/bin/"
find "$build/tests" -maxdepth 1 -type f -name 'test_*' -executable -exec cp {} "$tmp/bin/" \;
cp -L "$build/src/libmpcl.so.0" "$tmp/lib/"
# Every library the programs load that is not glibc's or the GCC runtime's
# (those are on any x86-64 Linux machine, in newer versions).
for lib in $(ldd "$tmp"/bin/* "$tmp"/lib/* 2>/dev/null | awk '/=> \// { print $3 }' | sort -u); do
    case $(basename "$lib") in
    libc.so* | libm.so* | libgcc_s.so* | libstdc++.so* | libz.so* | libmpcl.so*) ;;
    *) cp -L "$lib" "$tmp/lib/" ;;
    esac
done
strip --strip-unneeded "$tmp"/bin/* "$tmp"/lib/* 2>/dev/null || true

rm -rf "$stage"
mkdir -p "$stage/data"
tar -C "$tmp" -cJf "$stage/programs.tar.xz" bin lib
cp "$data"/*-ubyte.gz "$stage/data/"
# As it is: its .u8 names are links, which the text reader skips.
tar -C "$(dirname "$text")" -cJf "$stage/fortunes.tar.xz" "$(basename "$text")"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
du -sh "$stage"
