#!/bin/sh
# `meson install` into a scratch prefix, then a tiny program compiled against
# the installed mpcl.pc must build, link and run.
# usage: test_install.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
tmp=$(mktemp -d /tmp/mpcl-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --destdir "$tmp/dest" --quiet
pc=$(find "$tmp/dest" -name mpcl.pc | head -n 1)
[ -n "$pc" ] || { echo "mpcl.pc was not installed" >&2; exit 1; }
pcdir=$(dirname "$pc")
# The .pc names the configured prefix; point it at the copy under destdir.
prefix=$(PKG_CONFIG_PATH="$pcdir" pkg-config --variable=prefix mpcl)
pc() { PKG_CONFIG_PATH="$pcdir" pkg-config --define-variable=prefix="$tmp/dest$prefix" "$@" mpcl; }
cflags=$(pc --cflags)
libs=$(pc --libs)
libdir=$(pc --variable=libdir)
cat > "$tmp/hello.c" <<'C'
#include <mpcl/mpcl.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    if (strcmp(mpcl_version(), MPCL_VERSION) != 0) return 1;
    mpcl_device_info d;
    memset(&d, 0, sizeof d);
    d.fp16_storage = MPCL_FP16_STORAGE_VERIFIED;
    mpcl_plan p = mpcl_plan_resolve(&d, MPCL_POLICY_AUTO, NULL);
    printf("mpcl %s: auto -> %s (%s)\n", mpcl_version(), mpcl_policy_name(p.resolved), p.reason);
    return p.resolved == MPCL_POLICY_FLOAT32 ? 0 : 1;
}
C
cc -std=c11 -Wall -Werror $cflags "$tmp/hello.c" -o "$tmp/hello" $libs
LD_LIBRARY_PATH="$libdir" "$tmp/hello"
[ -x "$(find "$tmp/dest" -name mpcl-probe -type f | head -n 1)" ] || { echo "mpcl-probe not installed" >&2; exit 1; }
# Only the public API is exported: every other symbol is hidden.
lib=$(find "$tmp/dest" -name 'libmpcl.so.*.*' -type f | head -n 1)
leaked=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^mpcl_[a-z0-9]' || true)
[ -z "$leaked" ] || { echo "libmpcl exports non-public symbols:" >&2; echo "$leaked" >&2; exit 1; }
nm -D --defined-only "$lib" | awk '{print $3}' | grep -q '^mpcl_version$' || { echo "mpcl_version not exported" >&2; exit 1; }
echo "install test passed"
