#!/usr/bin/env python3
"""The cl/ sources keep to what every OpenCL C compiler takes alike.

A function declared plain `inline` has C99's inline semantics in OpenCL C:
the definition is for inlining only, and the program holds no definition of
its own. Whether a call is inlined is the compiler's choice: clang 15 with
libclc, compiling the library program for nvptx64, left
attention_block.cl's softmax row a call, and ptxas then failed on the
missing function (a driver's compiler would fail the whole program's build
the same way). So every helper is `static inline` (or static), which gives
the program a definition of its own wherever a call stays a call.

usage: test_cl_sources.py CL_DIR"""
import os
import re
import sys

# `inline` that is not preceded by `static` on its line: at the start of a
# line or of a macro's body line.
PLAIN_INLINE = re.compile(r"^(?!\s*//)(?:(?!\bstatic\b).)*?\binline\b", re.M)


def main(cl_dir):
    names = sorted(f for f in os.listdir(cl_dir) if f.endswith((".cl", ".h")))
    if not names:
        sys.exit(f"test_cl_sources.py: no .cl or .h files in {cl_dir}")
    failures = 0
    for name in names:
        text = open(os.path.join(cl_dir, name), encoding="utf-8").read()
        for m in PLAIN_INLINE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            snippet = text[m.start():text.find("\n", m.start())].strip()
            print(f"{name}:{line}: plain inline (make it static inline): {snippet}",
                  file=sys.stderr)
            failures += 1
    print(f"{len(names)} files, " + ("ok" if not failures else f"{failures} plain inline"))
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
