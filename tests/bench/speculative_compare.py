#!/usr/bin/env python3
"""quill's draft-model speculation against llama.cpp's llama-speculative on the same target/draft pair.

For each prompt of tests/bench/speculative/ (rendered with the target's chat template by `quill template`, then given
as is to both tools with -p), greedy, rounds interleaved: quill alone, quill with the draft (--draft N, and adaptive), and
llama.cpp's llama-completion alone and llama-speculative with the draft (--spec-draft-n-max N). Prints decode tokens/s,
the acceptance rate, and whether quill's text with the draft equals its text without.

usage: speculative_compare.py TARGET.gguf DRAFT.gguf [--llama-bin DIR] [--rounds 3] [-n 128] [--draft 8] [-t 2]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def read(path):
    with open(path) as f:
        return f.read()


def run(cmd):
    # llama.cpp's OpenMP threads spin while they wait: on cores shared with other work each token can then cost
    # seconds; passive waiting keeps its figures those of its arithmetic.
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "passive"))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p


def quill_run(a, prompt_file, draft):
    cmd = [a.quill, "run", "-m", a.target, "--raw", "-p", read(prompt_file), "-n", str(a.n), "--temp", "0", "-t", str(a.t),
           "--json"]
    if draft is not None:
        cmd += ["--draft-model", a.draft_model] + (["--draft", str(draft)] if draft > 0 else [])
    rec = json.loads(run(cmd).stdout)
    spec = rec.get("draft") or {}
    return {"tps": rec["timings"]["decode_tokens_per_s"], "acc": spec.get("acceptance_rate"), "text": rec["text"],
            "n": rec["completion_tokens"]}


def llama_plain(a, prompt_file):
    p = run([os.path.join(a.llama_bin, "llama-completion"), "-m", a.target, "-p", read(prompt_file), "-n", str(a.n),
             "--temp", "0", "-t", str(a.t), "-no-cnv", "--no-warmup", "-c", "2048"])
    m = re.search(r"eval time =.*?runs.*?([\d.]+) tokens per second", p.stderr.split("prompt eval time")[1])
    return {"tps": float(m.group(1)), "acc": None, "text": None, "n": None}


def llama_spec(a, prompt_file):
    p = run([os.path.join(a.llama_bin, "llama-speculative"), "-m", a.target, "-md", a.draft_model, "-p", read(prompt_file),
             "-n", str(a.n), "--temp", "0", "-t", str(a.t), "-td", str(a.t), "--spec-draft-n-max", str(a.draft),
             "-c", "2048"])
    err = p.stderr
    tps = float(re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", err).group(1))
    acc = float(re.search(r"accept\s+=\s+([\d.]+)%", err).group(1)) / 100
    return {"tps": tps, "acc": acc, "text": None, "n": None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("draft_model")
    ap.add_argument("--quill", default=os.path.join(HERE, "..", "..", "build", "quill"))
    ap.add_argument("--llama-bin", default="/work/oracle/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--draft", type=int, default=8)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--prompts", nargs="*", default=["extraction", "code_edit"])
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    for name in a.prompts:
        with open(os.path.join(HERE, "speculative", name + ".txt")) as f:
            msgs = [{"role": "user", "content": f.read().strip()}]
        mfile = os.path.join(tmp, name + ".json")
        with open(mfile, "w") as f:
            json.dump(msgs, f)
        text = run([a.quill, "template", "-m", a.target, "--messages", mfile]).stdout
        pfile = os.path.join(tmp, name + ".prompt")
        with open(pfile, "w") as f:
            f.write(text)
        for rnd in range(a.rounds):
            r = {
                "quill alone": quill_run(a, pfile, None),
                f"quill --draft {a.draft}": quill_run(a, pfile, a.draft),
                "quill adaptive": quill_run(a, pfile, 0),
                "llama alone": llama_plain(a, pfile),
                f"llama-speculative {a.draft}": llama_spec(a, pfile),
            }
            base = r["quill alone"]["text"]
            same = all(v["text"] == base for k, v in r.items() if k.startswith("quill") and v["text"] is not None)
            cells = "  ".join(f"{k}: {v['tps']:.1f}" + (f" ({v['acc']:.0%})" if v["acc"] is not None else "")
                              for k, v in r.items())
            print(f"{name} round {rnd + 1}: {cells}  quill texts identical: {same}  tokens: {r['quill alone']['n']}",
                  flush=True)


if __name__ == "__main__":
    main()
