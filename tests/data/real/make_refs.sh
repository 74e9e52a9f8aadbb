#!/usr/bin/env bash
# Makes this folder's references for tests/model/test_real_models.cpp from the models of models/fetch_real.sh:
# each conversation's Jinja2 rendering (render.py), then llama.cpp's 32 largest logits of every prompt position and
# its 32 greedy tokens (/work/oracle/dump_logits: llama-cpp-python 0.3.36's llama.cpp, CPU, KV cache f32) for a raw
# code prompt and for each rendered conversation (special tokens parsed; Qwen2.5 adds no BOS).
# usage: make_refs.sh [DUMP_LOGITS]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dump="${1:-/work/oracle/dump_logits}"
model="${here}/../../../models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
stem="${here}/qwen2.5-coder"
text() { local t; t="$(cat "$1"; printf x)"; printf '%s' "${t%x}"; }  # a file's text, its last newline kept

"$dump" "$model" --prompt "$(text "${stem}.code.txt")" -n 32 -t 2 --top 32 \
  --logits "${stem}.code.top32.txt" --greedy "${stem}.code.greedy.txt"
for c in chat tools; do
  python3 "${here}/render.py" "$model" "${stem}.${c}.json" >"${stem}.${c}.txt"
  "$dump" "$model" --prompt "$(text "${stem}.${c}.txt")" --special -n 32 -t 2 --top 32 \
    --logits "${stem}.${c}.top32.txt" --greedy "${stem}.${c}.greedy.txt"
done
