#!/usr/bin/env bash
# Packs what tests/gpu/check.sh needs on a bare GPU machine into gpu-carry/ (git-ignored; pass it as the device
# tool's `carry`): the release quill and quill_tests from build/ (CUDA code for sm_80 and sm_90, compute_90 PTX),
# every shared library they load with the dynamic loader itself (the GPU machine's image lacks fmt, sentencepiece,
# pcre2 and libedit, and may have an older C library), and the stories260K test data from ../shared/testdata; all
# of it as one gzip archive, gpu-carry/carry.tgz, that check.sh unpacks in place: the files themselves (about 67 MB)
# and the tracked tree (6 MB) were more than the 64 MiB that may travel with a device call, the archive is a third.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
testdata="${QUILL_TESTDATA:-$PWD/../shared/testdata}"
cmake -B build -DCMAKE_BUILD_TYPE=Release -DQUILL_CUDA=ON >/dev/null
cmake --build build -j"$(nproc)" --target quill quill_tests
rm -rf gpu-carry
mkdir -p gpu-carry/bin gpu-carry/lib gpu-carry/testdata
cp build/quill build/tests/quill_tests gpu-carry/bin/
for bin in gpu-carry/bin/*; do
    ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}'
done | sort -u | while read -r lib; do cp -L "$lib" gpu-carry/lib/; done
[ -e gpu-carry/lib/ld-linux-x86-64.so.2 ] || { echo "pack: the dynamic loader was not found by ldd"; exit 1; }
[ -d "$testdata/models" ] && cp -r "$testdata/models" gpu-carry/testdata/
tar czf gpu-carry.tgz -C gpu-carry bin lib testdata
rm -rf gpu-carry && mkdir gpu-carry && mv gpu-carry.tgz gpu-carry/carry.tgz
# What a device call takes along: the tracked tree and the archive, under 64 MiB
tree=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s}') || true
carry=$(stat -c %s gpu-carry/carry.tgz)
echo "pack: gpu-carry/carry.tgz $((carry >> 20)) MiB, with the tracked tree $(((tree + carry) >> 20)) MiB (64 MiB travel)"
((tree + carry < 64 << 20)) || { echo "pack: over the 64 MiB a device call takes along"; exit 1; }
