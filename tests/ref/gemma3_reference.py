#!/usr/bin/env python3
"""Reference outputs of Gemma 3 270M (models/gemma-3-270m-q4_k_m.gguf) from Hugging Face transformers, for
tests/model/test_gemma3.cpp: an implementation of gemma3 independent of quill's, on the same GGUF (transformers
dequantizes its weights to float32 with the gguf package and runs its own Gemma3ForCausalLM, tokenizer converted from
the GGUF).

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install torch transformers gguf sentencepiece protobuf
    /tmp/ref/bin/python tests/ref/gemma3_reference.py models/gemma-3-270m-q4_k_m.gguf > tests/data/gemma3-270m.ref.txt

Output, one record per line (ids space-separated; text as a JSON string):
    tokens <json text> : <ids with BOS>
    prompt <name> : <ids>
    greedy <name> : <the next 32 greedy ids>
    top <name> <position> : <id>=<logit> ... (the 10 largest logits at that position)
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

TEXTS = [
    "The capital of France is Paris.",
    "Émigré façade naïve coöperate — déjà vu, œuvre.",
    "Größenwahn und Straßenbahn: Übermäßig schöne Äpfel.",
    "敏捷的棕色狐狸跳过了懒狗。",
    "日本語のテキストを正しく分割できますか？",
    "한국어 문장도 토큰으로 나눕니다.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "مرحبا بالعالم، كيف حالك؟",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "Emoji 🙂🚀 and symbols ∑∫√ ≠ ≤ ≥ ← →",
    "def f(x):\n    return x  *  2\n\n\n\tindent\ttabs",
    "  leading spaces, trailing spaces   ",
    "numbers 1234567890 3.14159 1e-10 0x1F",
]


def main():
    path = sys.argv[1]
    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)), gguf_file=os.path.basename(path))
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(path)),
                                                 gguf_file=os.path.basename(path), dtype=torch.float32)
    model.eval()
    for text in TEXTS:
        ids = tok(text, add_special_tokens=True).input_ids
        print("tokens", json.dumps(text, ensure_ascii=False), ":", " ".join(map(str, ids)))

    # A short prompt, and a long one: 640 tokens, past the 512-token sliding window of the local layers.
    story = ("Once upon a time, in a small village by the sea, there lived an old fisherman named Tomas. Every "
             "morning he rowed out past the lighthouse, cast his nets, and waited for the tide to turn. ")
    prompts = {"capital": "The capital of France is"}
    long_ids = tok(story * 40, add_special_tokens=True).input_ids[:640]
    for name, ids in [("capital", tok(prompts["capital"], add_special_tokens=True).input_ids), ("long", long_ids)]:
        x = torch.tensor([ids])
        print("prompt", name, ":", " ".join(map(str, ids)))
        with torch.no_grad():
            out = model.generate(x, max_new_tokens=32, do_sample=False)
            logits = model(x).logits[0]
        print("greedy", name, ":", " ".join(map(str, out[0, len(ids):].tolist())))
        positions = range(len(ids)) if name == "capital" else [511, 512, 600, len(ids) - 1]
        for p in positions:
            v, i = torch.topk(logits[p], 10)
            print("top", name, p, ":", " ".join(f"{a}={b:.5f}" for a, b in zip(i.tolist(), v.tolist())))


if __name__ == "__main__":
    main()
