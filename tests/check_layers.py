#!/usr/bin/env python3
"""Checks that every #include "..." of quill's sources stays within its layer or the layers below it.

The layers are the static libraries of CMakeLists.txt (quill_layer), each linking only the layers below it; CMake
writes them to <build dir>/layers.txt, a line per layer: "name|the layers below it|its files", the lists separated
by ';'. A file may include a file of its own layer or of a layer below; an include of a file of any other layer (one
beside it or above it) is an error, and so is a source file under engine/, tokenizer/ or cuda/ that no layer holds.
Usage: check_layers.py <build dir>/layers.txt <source dir>
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_DIRS = ("engine", "tokenizer", "cuda")
EXTENSIONS = (".h", ".cpp", ".cu", ".cuh")


def main():
    table, source_dir = sys.argv[1], os.path.realpath(sys.argv[2])
    layer_of, below = {}, {}
    with open(table) as f:
        for line in f:
            if not line.strip():
                continue
            name, deps, files = line.rstrip("\n").split("|")
            below[name] = set(d for d in deps.split(";") if d)
            for path in (p for p in files.split(";") if p):
                layer_of[os.path.relpath(os.path.realpath(path), source_dir)] = name
    problems = []
    for top in SOURCE_DIRS:
        for root, _, names in os.walk(os.path.join(source_dir, top)):
            for n in names:
                rel = os.path.relpath(os.path.join(root, n), source_dir)
                if n.endswith(EXTENSIONS) and rel not in layer_of:
                    problems.append(f"{rel} is in no layer (quill_layer in CMakeLists.txt)")
    for rel, layer in sorted(layer_of.items()):
        with open(os.path.join(source_dir, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for included in INCLUDE.findall(text):
            other = layer_of.get(included)
            if other is None or other == layer or other in below[layer]:
                continue
            problems.append(f"{rel} ({layer}) includes {included} ({other}), which is not below {layer}: "
                            f"move what it needs down to a layer that {layer} links")
    for p in problems:
        print("error:", p)
    print(f"{len(layer_of)} files in {len(below)} layers, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
