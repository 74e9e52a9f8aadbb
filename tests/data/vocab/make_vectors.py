#!/usr/bin/env python3
"""Writes tokenizer test vectors for a vocabulary with llama.cpp's llama-tokenize (no BOS, special tokens not parsed).

usage: make_vectors.py LLAMA_TOKENIZE VOCAB.gguf BASE.inp OUT_PREFIX

The inputs are BASE.inp's (llama.cpp's test strings, each followed by "\\n__ggml_vocab_test__\\n") and the hard
cases below; OUT_PREFIX.inp gets them in that format and OUT_PREFIX.out one line of space-separated ids each.
deepseek-r1-qwen.inp/.out (base: llama-bpe's) and gemma-4.inp/.out (base: ggml-vocab-gemma-4.gguf.inp) were made
with the llama-tokenize of llama-cpp-python 0.3.36's llama.cpp on the vocabularies models/fetch_vocab.sh writes.
"""
import subprocess
import sys
import tempfile

SEP = "\n__ggml_vocab_test__\n"

HARD_CASES = [
    "déjà-vu",
    "\n\tcode",
    "def f(x):\n\treturn x\n\n\n\t\tpass",
    "naïve café, Ωμέγα, Ünïcödé façade",
    "e\u0301 a\u0300 n\u0303",
    "中文分词测试，你好世界。",
    "日本語のテキストとカタカナ",
    "한국어 텍스트입니다",
    "👋🏽 Hello 🌍! 👨‍👩‍👧‍👦",
    "1234567890 3.14159 1,000,000 007",
    "a  b   c    d     e",
    "   leading and trailing   ",
    "\t\t\tx\n\n\n   \n",
    "x\r\ny\r\n\r\n",
    "It's I'M we'LL you'Re they've",
    "<think>\nOkay, 2+2=4.\n</think>\n\nThe answer is 4.",
    "<｜User｜>not parsed<｜Assistant｜>",
    "ÀÉÎÕÜ ÿ ß",
]


def tokenize(tool, vocab, text):
    with tempfile.NamedTemporaryFile(suffix=".txt") as f:
        f.write(text.encode("utf-8"))
        f.flush()
        command = [tool, "-m", vocab, "-bf", f.name, "--ids", "--no-bos", "--no-parse-special", "--log-disable"]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()
    assert out.startswith("[") and out.endswith("]"), out
    return [int(x) for x in out[1:-1].split(",") if x.strip()]


def main():
    tool, vocab, base, prefix = sys.argv[1:5]
    with open(base, encoding="utf-8") as f:
        cases = f.read().split(SEP)
    if cases[-1] == "":  # the last input's separator (llama.cpp's gemma-4 file has none after its last)
        cases.pop()
    cases += HARD_CASES
    with open(prefix + ".inp", "w", encoding="utf-8", newline="") as inp, open(prefix + ".out", "w") as out:
        for text in cases:
            inp.write(text + SEP)
            out.write(" ".join(str(i) for i in tokenize(tool, vocab, text)) + "\n")


if __name__ == "__main__":
    main()
