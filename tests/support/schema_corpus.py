#!/usr/bin/env python3
"""Runs every schema of tests/data/schemas through `quill batch` (one request per schema and seed, each with its own
response_format) and validates each finished output with the jsonschema package (formats checked too).

usage: schema_corpus.py QUILL MODEL [--raw] [--seeds N] [-n TOKENS]
Exit 0: every output that finished validates, and at most a fifth stopped at the token limit; 1 otherwise; 77 (a
skip) when the jsonschema package is missing outside CI."""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("quill")
    ap.add_argument("model")
    ap.add_argument("--raw", action="store_true", help="no chat template (a base model)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("-n", type=int, default=256)
    args = ap.parse_args()
    try:
        import jsonschema
    except ImportError:
        ci = os.environ.get("CI", "") not in ("", "0", "false")
        print("QUILL-SKIP: the jsonschema package is not installed (pip install jsonschema)")
        return 1 if ci else 77

    schema_dir = pathlib.Path(__file__).resolve().parent.parent / "data" / "schemas"
    schemas = {p.stem: json.loads(p.read_text()) for p in sorted(schema_dir.glob("*.json"))}
    if len(schemas) < 50:
        print(f"only {len(schemas)} schemas in {schema_dir}: the corpus has more than 50")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = pathlib.Path(tmp) / "in.jsonl", pathlib.Path(tmp) / "out.jsonl"
        with inp.open("w") as f:
            for name, schema in schemas.items():
                jsonschema.validators.validator_for(schema).check_schema(schema)
                for seed in range(1, args.seeds + 1):
                    req = {"id": f"{name}#{seed}", "prompt": "Answer with JSON only.", "seed": seed,
                           "temperature": 1.0,
                           "response_format": {"type": "json_schema",
                                               "json_schema": {"name": name, "schema": schema, "strict": True}}}
                    f.write(json.dumps(req, ensure_ascii=False) + "\n")
        cmd = [args.quill, "batch", "-m", args.model, "-i", str(inp), "-o", str(out), "-n", str(args.n), "-q",
               "--parallel", "16", "--top-k", "0", "--top-p", "1", "--min-p", "0"] + (["--raw"] if args.raw else [])
        t0 = time.time()
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        elapsed = time.time() - t0
        if run.returncode != 0:
            print(f"quill batch failed ({run.returncode}): {run.stderr}")
            return 1
        records = [json.loads(line) for line in out.read_text().splitlines()]
    failures, finished, truncated = [], 0, 0
    for r in records:
        name = r["id"].split("#")[0]
        if "error" in r:
            failures.append(f"{r['id']}: error record: {r['error']['message']}")
            continue
        if r["finish_reason"] == "length":
            truncated += 1
            continue
        finished += 1
        try:
            value = json.loads(r["text"])
            cls = jsonschema.validators.validator_for(schemas[name])
            cls(schemas[name], format_checker=cls.FORMAT_CHECKER).validate(value)
        except (ValueError, jsonschema.ValidationError) as e:
            failures.append(f"{r['id']}: {r['text']!r}: {str(e).splitlines()[0]}")
    total = len(records)
    print(f"{len(schemas)} schemas, {total} requests in {elapsed:.1f} s: {finished} finished and valid unless listed, "
          f"{truncated} stopped at {args.n} tokens, {len(failures)} failures")
    for f in failures:
        print("FAIL", f)
    if total != len(schemas) * args.seeds:
        print(f"expected {len(schemas) * args.seeds} records, got {total}")
        return 1
    return 0 if not failures and truncated * 5 <= total else 1


if __name__ == "__main__":
    sys.exit(main())
