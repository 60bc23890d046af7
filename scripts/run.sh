#!/usr/bin/env bash
# The main job: install what is missing, build, and train the 784-128-10 MLP
# on Fashion-MNIST with the precision plan of the default device (auto).
# Arguments go to mpcl-train.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build >/dev/null
exec build/src/tools/mpcl-train --precision auto "$@"
