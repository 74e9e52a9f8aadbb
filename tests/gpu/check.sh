#!/usr/bin/env bash
# The GPU check: run rarely, on a machine with an NVIDIA GPU, given only the working tree. It
#   1. uses the binaries tests/gpu/pack.sh built and carried in gpu-carry/ (with their shared libraries and the
#      stories260K test data), or else configures and builds for the GPU it finds (that needs the build
#      dependencies of .ci/install-deps, which a bare GPU machine may lack);
#   2. runs the [cuda] tests (the CUDA backend against the reference backend and llama.cpp's tokens);
#   3. measures a device-to-device copy (PyTorch, when the machine has it) as the bandwidth ceiling;
#   4. runs `quill bench --synthetic llama3-8b` on the GPU for q4_0, q8_0 and f16: pp2048 (a 2048-token prefill in
#      one batch) and tg64 (64 decode steps), 3 runs each;
#   5. prints one table last: tokens/s, the decode's GB/s and that as a fraction of the copy bandwidth.
# Everything lands in $OUT (or /tmp/quill-gpu): logs, bench JSON, the table. Budget: about 8 minutes.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/quill-gpu}"
mkdir -p "$out"
start=$SECONDS
say() { echo "== $* ($((SECONDS - start)) s)"; }

say "GPU"
nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version --format=csv,noheader | tee "$out/gpu.txt" || {
    echo "no nvidia-smi: is there a GPU?"
    exit 1
}

if [ -x gpu-carry/bin/quill ] && [ -x gpu-carry/bin/quill_tests ]; then
    say "using the binaries carried in gpu-carry/ (built by tests/gpu/pack.sh)"
    # Through the carried dynamic loader, so the carried C and C++ libraries are the ones used.
    loader=(gpu-carry/lib/ld-linux-x86-64.so.2 --library-path gpu-carry/lib)
    quill=("${loader[@]}" gpu-carry/bin/quill)
    tests=("${loader[@]}" gpu-carry/bin/quill_tests)
    [ -d gpu-carry/testdata ] && export QUILL_TESTDATA="$PWD/gpu-carry/testdata"
else
    cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')"
    say "building for sm_$cc"
    cmake -B build-gpu -DCMAKE_BUILD_TYPE=Release -DQUILL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cc" \
        >"$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
    cmake --build build-gpu -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -m20 -E "error" "$out/build.log"; exit 1; }
    quill=(build-gpu/quill)
    tests=(build-gpu/tests/quill_tests)
fi

say "[cuda] tests"
status=0
timeout 240 "${tests[@]}" "[cuda]" --durations yes >"$out/tests.log" 2>&1 || status=$?
grep -E "FAILED|failed|passed|skipped|with expansion|<=|==" "$out/tests.log" | head -60
tail -4 "$out/tests.log"
echo "[cuda] tests exit status: $status"

say "device-to-device copy bandwidth"
python3 - >"$out/copy.txt" 2>"$out/copy.err" <<'EOF' || echo "(no PyTorch: no copy ceiling; see $out/copy.err)"
import torch
n = 1 << 30  # 1 GiB each way, far beyond L2
a = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
b = torch.empty_like(a)
for _ in range(3):
    b.copy_(a)
torch.cuda.synchronize()
times = []
for _ in range(20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); b.copy_(a); e.record(); e.synchronize()
    times.append(s.elapsed_time(e) / 1e3)
times.sort()
print(2 * n / times[len(times) // 2] / 1e9)  # bytes read + bytes written, median
EOF
cat "$out/copy.txt" 2>/dev/null

for t in q4_0 q8_0 f16; do
    say "bench llama3-8b $t"
    timeout 150 "${quill[@]}" bench --synthetic llama3-8b --dtype "$t" --device cuda -p 2048 --batch 2048 -n 64 \
        -r 3 --json >"$out/bench-$t.json" 2>"$out/bench-$t.err" || tail -3 "$out/bench-$t.err"
done

say "summary"
python3 - "$out" <<'EOF' | tee "$out/table.txt"
import json, os, sys
out = sys.argv[1]
try:
    copy = float(open(os.path.join(out, "copy.txt")).read())
except Exception:
    copy = None
print("gpu: " + open(os.path.join(out, "gpu.txt")).read().strip())
print("copy bandwidth: " + (f"{copy:.0f} GB/s (read + write)" if copy else "not measured"))
print(f"{'llama3-8b':10} {'prefill tok/s':>14} {'decode tok/s':>13} {'GB/s':>8} {'of copy':>8}")
for t in ("q4_0", "q8_0", "f16"):
    try:
        j = json.load(open(os.path.join(out, f"bench-{t}.json")))
    except Exception as e:
        print(f"{t:10} no result ({type(e).__name__}; see bench-{t}.err)")
        continue
    tests = {x["test"]: x for x in j["tests"]}
    pp, tg = tests["pp2048"], tests["tg64"]
    gbs = tg["gb_per_s"]
    frac = f"{gbs / copy:.0%}" if copy else "-"
    print(f"{t:10} {pp['tokens_per_s']:14.0f} {tg['tokens_per_s']:13.1f} {gbs:8.0f} {frac:>8}")
EOF
say "done"
exit "$status"
