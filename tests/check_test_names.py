#!/usr/bin/env python3
"""Checks that CTest runs every Catch2 test case of quill_tests exactly once, and nothing else.

catch_discover_tests makes one CTest test per name that `quill_tests --list-test-names-only` prints, but a ';' in
a name splits it into CTest names that select no Catch test, which then "pass" without running. This check:
  - lists the Catch test cases (hidden "[.]" ones are not listed, and CTest does not run them);
  - reads the CTest tests whose command runs quill_tests (ctest --show-only=json-v1);
  - runs each such command with --list-test-names-only: it must select exactly one test case, the one the CTest
    test is named after, and every Catch test case must be selected by exactly one CTest test;
  - runs one command with its test name replaced by a name that matches nothing: it must fail (-w NoTests).
Usage: check_test_names.py <ctest> <build dir> <path of quill_tests>
"""
import json
import os
import subprocess
import sys
from collections import Counter


def lines(cmd, cwd):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line]


def main():
    ctest, build_dir, exe = sys.argv[1], sys.argv[2], os.path.realpath(sys.argv[3])
    catch_names = lines([exe, "--list-test-names-only"], build_dir)
    shown = subprocess.run([ctest, "--test-dir", build_dir, "--show-only=json-v1"], capture_output=True,
                           text=True, check=True).stdout
    tests = [t for t in json.loads(shown)["tests"]
             if t.get("command") and os.path.realpath(t["command"][0]) == exe]
    problems = []
    if len(tests) != len(catch_names):
        problems.append(f"CTest runs {len(tests)} tests from quill_tests, Catch2 has {len(catch_names)} test cases")
    selected = Counter()
    for t in tests:
        cwd = next((p["value"] for p in t.get("properties", []) if p["name"] == "WORKING_DIRECTORY"), build_dir)
        picked = lines(t["command"] + ["--list-test-names-only"], cwd)
        selected.update(picked)
        if picked != [t["name"]]:
            problems.append(f"CTest test '{t['name']}' selects {len(picked)} Catch test case(s): {picked}")
    for name in catch_names:
        if selected[name] != 1:
            problems.append(f"Catch test case '{name}' is selected by {selected[name]} CTest tests, not 1")
    if tests:
        probe = [tests[0]["command"][0], "no such test case, quill check"] + tests[0]["command"][2:]
        if subprocess.run(probe, cwd=build_dir, capture_output=True).returncode == 0:
            problems.append("a CTest command whose name matches no Catch test exits 0 (add -w NoTests)")
    for p in problems:
        print("error:", p)
    print(f"{len(catch_names)} Catch test cases, {len(tests)} CTest tests from quill_tests,"
          f" {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
