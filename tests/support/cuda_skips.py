#!/usr/bin/env python3
"""Writes the [cuda] test cases of a build without CUDA: each TEST_CASE of the given files, under its own name and
tags, as a test case that skips with the reason NO_CUDA. The files themselves need the CUDA backend and are built
only with QUILL_CUDA=ON (tests/CMakeLists.txt); this way a CPU-only build still lists, runs and reports every one of
their test cases, as skipped, instead of leaving them out. .ci/skip-report knows the reason.

Usage: cuda_skips.py <output.cpp> <test file>...
"""
import os
import re
import sys

# The skip reason; .ci/skip-report leaves skips with this reason out of its --max-skipped count.
NO_CUDA = "quill was built without CUDA (QUILL_CUDA=OFF)"
# A test case's head: TEST_CASE( at the start of a line, up to the ") {" that opens its body.
HEAD = re.compile(r"^TEST_CASE\((.*?)\)\s*\{", re.M | re.S)


def main():
    out, sources = sys.argv[1], sys.argv[2:]
    lines = [f"// Written by tests/support/cuda_skips.py from {', '.join(os.path.basename(s) for s in sources)}.",
             '#include "tests/support/test_util.h"', "", "#include <catch2/catch.hpp>", ""]
    for source in sources:
        with open(source, encoding="utf-8") as f:
            heads = HEAD.findall(f.read())
        if not heads:
            sys.exit(f"cuda_skips.py: no TEST_CASE in {source}")
        lines += [f'TEST_CASE({h}) {{ quill::test::skip_no_device("{NO_CUDA}"); }}' for h in heads]
    text = "\n".join(lines) + "\n"
    if not os.path.exists(out) or open(out, encoding="utf-8").read() != text:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
