#!/usr/bin/env python3
"""Side-by-side speed of quill and llama.cpp on the same GGUF files, on this machine, now.

For each file and each round, runs `quill bench` and then (when --llama-bench is given) llama.cpp's llama-bench with
the same tests (-p, -n lists), threads and repetitions, alternating the two so that the machine's drift hits both
alike. Prints a markdown table: per file and test, each tool's tokens/s (mean of the rounds' means, with the range
of the rounds' means), and quill / llama.cpp with its range over the rounds (each round's ratio compares two runs
made one after the other).

  tests/bench/compare.py --quill build/quill --llama-bench ../llama.cpp/build/bin/llama-bench \\
      -t 2 -p 64,512 -n 32 -r 3 --rounds 3 a.gguf b.gguf

Make files of a model's shape with `quill bench --synthetic SHAPE --dtype TYPE --save FILE -p 0 -n 1 -r 1`.
"""
import argparse
import json
import os
import subprocess
import sys


def run_json(cmd):
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr.strip()[-2000:]}")
    return json.loads(res.stdout)


def quill_round(args, path):
    j = run_json([args.quill, "bench", "-m", path, "--device", "cpu", "-t", str(args.threads), "-p", args.p,
                  "-n", args.n, "-r", str(args.reps), "--json"])
    return {t["test"]: t["tokens_per_s_mean"] for t in j["tests"]}


def llama_round(args, path):
    j = run_json([args.llama_bench, "-m", path, "-t", str(args.threads), "-p", args.p, "-n", args.n,
                  "-r", str(args.reps), "-o", "json"])
    out = {}
    for t in j:
        name = f"pp{t['n_prompt']}" if t["n_prompt"] > 0 else f"tg{t['n_gen']}"
        out[name] = t["avg_ts"]
    return out


def fmt_range(values, digits=1):
    lo, hi = min(values), max(values)
    mean = sum(values) / len(values)
    return f"{mean:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--quill", default="build/quill")
    ap.add_argument("--llama-bench", default=None)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", default="64,512")
    ap.add_argument("-n", default="32")
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    results = {}  # (file, test) -> {"quill": [...], "llama": [...], "ratio": [...]}
    for rnd in range(args.rounds):
        for path in args.files:
            q = quill_round(args, path)
            l = llama_round(args, path) if args.llama_bench else {}
            for test, v in q.items():
                r = results.setdefault((path, test), {"quill": [], "llama": [], "ratio": []})
                r["quill"].append(v)
                if test in l:
                    r["llama"].append(l[test])
                    r["ratio"].append(v / l[test])
            print(f"round {rnd + 1}/{args.rounds}: {os.path.basename(path)} done", file=sys.stderr)
    print(f"{args.threads} threads, {args.reps} runs per test per round, {args.rounds} rounds, interleaved")
    print()
    print("| file | test | quill t/s | llama.cpp t/s | quill / llama.cpp |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for (path, test), r in results.items():
        llama = fmt_range(r["llama"]) if r["llama"] else "-"
        ratio = fmt_range(r["ratio"], 2) if r["ratio"] else "-"
        print(f"| {os.path.basename(path)} | {test} | {fmt_range(r['quill'])} | {llama} | {ratio} |")


if __name__ == "__main__":
    main()
