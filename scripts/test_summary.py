#!/usr/bin/env python3
"""Counts the results of the meson test runs named as BUILD_DIR:SETUP (the
build folder as a path, relative or absolute, which may itself hold a ':')
and prints one line per run and a closing 'total: N passed, N failed' line."""
import json
import os
import sys

PASS = {"OK", "EXPECTEDFAIL"}
FAIL = {"FAIL", "UNEXPECTEDPASS", "TIMEOUT", "ERROR"}


def main(runs):
    total_pass = total_fail = total_skip = 0
    for run in runs:
        build, setup = run.rsplit(":", 1)
        path = os.path.join(build, "meson-logs", f"testlog-{setup}.json")
        passed = failed = skipped = 0
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    result = json.loads(line).get("result")
                    passed += result in PASS
                    failed += result in FAIL
                    skipped += result == "SKIP"
        else:
            failed += 1  # a run that left no log did not run its tests
        print(f"{build} on {setup}: {passed} passed, {failed} failed, {skipped} skipped")
        total_pass, total_fail, total_skip = total_pass + passed, total_fail + failed, total_skip + skipped
    print(f"total: {total_pass} passed, {total_fail} failed, {total_skip} skipped")
    return 1 if total_fail or not total_pass else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
