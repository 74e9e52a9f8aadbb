#!/usr/bin/env python3
"""The batch speed check of the README: generated tokens/s of `quill batch --parallel N` against the same prompts
run one at a time (`--parallel 1`), alternating the two, greedy, and whether the texts agree.

    tests/bench/batch_speed.py [--quill build/quill] [-m MODEL] [--prompts tests/bench/batch_prompts.txt]
                               [-n 128] [--parallel 16] [--rounds 2] [-t THREADS]

Prints each run's summary and, per round, the ratio of the two throughputs. Run it on an otherwise idle machine.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def run(args, parallel, out):
    cmd = [args.quill, "batch", "-i", args.prompts, "-o", out, "-n", str(args.n), "--temp", "0",
           "--parallel", str(parallel), "--quiet"]
    if args.model:
        cmd += ["-m", args.model]
    if args.threads:
        cmd += ["-t", str(args.threads)]
    # --quiet drops the summary; time the whole run (load included) and count the tokens from the records.
    start = time.monotonic()
    subprocess.run(cmd, check=True)
    elapsed = time.monotonic() - start
    texts, generated = {}, 0
    with open(out) as f:
        for line in f:
            r = json.loads(line)
            if "error" in r:
                sys.exit(f"request {r['id']} failed: {r['error']}")
            texts[r["id"]] = r["text"]
            generated += r["usage"]["completion_tokens"]
    return generated / elapsed, generated, elapsed, texts


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quill", default="build/quill")
    p.add_argument("-m", "--model")
    p.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "batch_prompts.txt"))
    p.add_argument("-n", type=int, default=128)
    p.add_argument("--parallel", type=int, default=16)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("-t", "--threads", type=int)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.jsonl")
        ratios = []
        for r in range(args.rounds):
            many = run(args, args.parallel, out)
            one = run(args, 1, out)
            same = sum(many[3][k] == one[3].get(k) for k in many[3])
            print(f"round {r + 1}: --parallel {args.parallel}: {many[0]:.1f} generated tok/s ({many[1]} tokens, "
                  f"{many[2]:.1f} s); --parallel 1: {one[0]:.1f} ({one[1]} tokens, {one[2]:.1f} s); "
                  f"ratio {many[0] / one[0]:.2f}; identical texts {same}/{len(many[3])}", flush=True)
            ratios.append(many[0] / one[0])
        print(f"ratio: {min(ratios):.2f}-{max(ratios):.2f}")


if __name__ == "__main__":
    main()
