#!/usr/bin/env bash
# The main job: install what is missing, build, and report every OpenCL device
# with the precision plan mpcl resolves on it. Arguments go to mpcl-probe.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build >/dev/null
exec build/src/tools/mpcl-probe "$@"
