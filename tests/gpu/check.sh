#!/usr/bin/env bash
# The GPU check: run rarely, on a machine with an NVIDIA GPU, given only the working tree. It
#   1. uses the binaries tests/gpu/pack.sh built and carried in gpu-carry/carry.tgz (with their shared libraries and the
#      stories260K test data), or else configures and builds for the GPU it finds (that needs the build
#      dependencies of .ci/install-deps, which a bare GPU machine may lack);
#   2. runs each [cuda] test case in its own process (a crash or hang in one does not hide the others), and the
#      first failing ones again under compute-sanitizer's memcheck;
#   3. compares `quill run` greedy text on stories260K (F32 and the Q8_0 mix) and `quill batch` texts (32 prompts,
#      16 in parallel), GPU against CPU;
#   4. runs `quill bench --synthetic llama3-8b` on the GPU for q4_0, q8_0 and f16: pp2048 (a 2048-token prefill in
#      one batch) and tg64 (64 decode steps), 3 runs each; q4_0 once more with QUILL_CUDA_PROFILE=1 (device time
#      by phase), with 16 and 64 sequences decoding together (also on the dp4a kernels, QUILL_CUDA_MMA=0, and the
#      staged mma kernel, QUILL_CUDA_MMA=staged; 64 with the profile), SmolLM2-135M's shape in Q4_1 with 1, 16 and 64 sequences (the batch issue's model), with
#      the fused launches off (QUILL_CUDA_FUSE=0), the int8 decode products without the streamed kernel
#      (QUILL_CUDA_STREAM=0), its ring at 4 stages, without
#      programmatic launch; q4_1 with and without it, q8_0 with it (QUILL_CUDA_STREAM=1) at 8 and 4 stages; and
#      (QUILL_GPU_GEMM_F16=1) prefill with F16 GEMMs (q4_0 and f16), (QUILL_GPU_STAGES="2 3 8") the streamed
#      kernel at those stages for each int8 type, for side-by-side figures; Qwen3-30B-A3B's mixture of experts
#      (8 layers) in Q4_0, one sequence and 16; then the device time
#      of each kernel of a few decode steps under Nsight Compute, where ncu is installed;
#   5. prints one table last: tokens/s, prefill's TFLOP/s and that as a fraction of the GEMM rate quill measures on
#      the device, the decode's GB/s and that as a fraction of the copy bandwidth quill measures there.
# Logs, bench JSON, the kernel times and the table land in $OUT (or /tmp/quill-gpu), seven files. The whole run
# keeps to $QUILL_GPU_BUDGET seconds (default 360): each step's timeout is cut to what is left. On 2026-12-04 the
# script took 239 s on an H200 with the defaults, 105-128 s with QUILL_GPU_QUICK=1 and some benchmarks skipped
# (QUILL_GPU_SKIP; QUILL_GPU_NCU=0), after 30-60 s of the machine's start.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
out="${OUT:-/tmp/quill-gpu}"
mkdir -p "$out"
budget="${QUILL_GPU_BUDGET:-360}"
start=$SECONDS
say() { echo "== $* ($((SECONDS - start)) s)"; }
# limit N: N seconds, or what is left of the budget if less (at least 5).
limit() { local left=$((budget - (SECONDS - start))); ((left < $1)) && echo $((left > 5 ? left : 5)) || echo "$1"; }

say "GPU"
nvidia-smi --query-gpu=name,memory.total,compute_cap,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader \
    | tee /tmp/quill-gpu.txt || { echo "no nvidia-smi: is there a GPU?"; exit 1; }

# pack.sh's archive, unpacked in place once (it travels packed: the files are more than a device call takes along)
if [ -f gpu-carry/carry.tgz ] && [ ! -x gpu-carry/bin/quill ]; then
    tar xzf gpu-carry/carry.tgz -C gpu-carry || { echo "gpu-carry/carry.tgz did not unpack"; exit 1; }
fi
if [ -x gpu-carry/bin/quill ] && [ -x gpu-carry/bin/quill_tests ]; then
    # The machine's own C library when the binaries run on it (the static CUDA runtime dlopens the driver's
    # libcuda, which must find the machine's libc); else the carried loader, with the machine's library path
    # after the carried one so that libcuda is still found.
    libs=/tmp/quill-libs
    rm -rf "$libs" && mkdir -p "$libs"
    for f in gpu-carry/lib/*; do
        case "$(basename "$f")" in ld-linux* | libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so*) ;;
        *) ln -s "$PWD/$f" "$libs/" ;; esac
    done
    if LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}" gpu-carry/bin/quill --help >/dev/null 2>&1; then
        say "carried binaries on the machine's C library"
        export LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}"
        quill=(gpu-carry/bin/quill)
        tests=(gpu-carry/bin/quill_tests)
        native=1
    else
        say "carried binaries through the carried loader"
        loader=(gpu-carry/lib/ld-linux-x86-64.so.2 --library-path "$PWD/gpu-carry/lib:${LD_LIBRARY_PATH:-}:/usr/local/nvidia/lib64:/usr/local/nvidia/lib")
        quill=("${loader[@]}" gpu-carry/bin/quill)
        tests=("${loader[@]}" gpu-carry/bin/quill_tests)
        native=0
    fi
    [ -d gpu-carry/testdata ] && export QUILL_TESTDATA="$PWD/gpu-carry/testdata"
else
    cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')"
    say "building for sm_$cc"
    cmake -B build-gpu -DCMAKE_BUILD_TYPE=Release -DQUILL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cc" \
        >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
    cmake --build build-gpu -j"$(nproc)" >>"$out/build.log" 2>&1 || { grep -m20 -E "error" "$out/build.log"; exit 1; }
    quill=(build-gpu/quill)
    tests=(build-gpu/tests/quill_tests)
    native=1
fi

status=0
if [ "${QUILL_GPU_TESTS:-1}" = 1 ]; then  # QUILL_GPU_TESTS=0: benchmarks only (code that passed them already)
say "[cuda] tests, one process each"
failed=()
log="$out/tests.log"
: >"$log"
mapfile -t names < <("${tests[@]}" --list-test-names-only "[cuda]" | grep -v '^$' | grep -v 'matching test cases')
for name in "${names[@]}"; do
    spec="${name%%,*}"  # a name with a comma: its part before the comma, as a prefix
    spec="${spec%%[*}*"
    t0=$SECONDS
    timeout "$(limit 60)" "${tests[@]}" "$spec" --durations yes >>"$log" 2>&1
    rc=$?
    if ((rc == 0)); then r=passed; else r="FAILED ($rc)"; status=1; failed+=("$spec"); fi
    printf '%-8s %3d s  %s\n' "${r%% *}" $((SECONDS - t0)) "$name" | tee -a "$out/summary.txt"
done
grep -E "^/.*(FAILED|failed)|with expansion|REQUIRE|CHECK|error" "$log" | head -40

if ((native)) && ((${#failed[@]})) && command -v compute-sanitizer >/dev/null; then
    for spec in "${failed[@]:0:2}"; do
        say "memcheck: $spec"
        timeout "$(limit 60)" compute-sanitizer --tool memcheck --print-limit 8 "${tests[@]}" "$spec" >"$out/memcheck.log" 2>&1
        grep -E "=========" "$out/memcheck.log" | head -24
    done
fi

say "quill run: stories260K (F32, Q8_0 mix) greedy, cuda against cpu"
for f in stories260K stories260K-Q8_0mix; do
    m="${QUILL_TESTDATA:-gpu-carry/testdata}/models/$f.gguf"
    for dev in cpu cuda; do
        timeout "$(limit 30)" "${quill[@]}" run -m "$m" --device "$dev" --raw --temp 0 -n 64 -p "Once upon a time" \
            >"/tmp/run-$dev.txt" 2>"/tmp/run-$dev.err"
        echo "$f $dev rc=$?: $(head -c 160 "/tmp/run-$dev.txt" | tr '\n' ' ')"
        grep -v "^$" "/tmp/run-$dev.err" | head -2
    done
    cmp -s /tmp/run-cpu.txt /tmp/run-cuda.txt && echo "run $f: cuda text == cpu text" || echo "run $f: TEXTS DIFFER"
done

say "quill batch: stories260K, 32 prompts, 16 in parallel, cuda against cpu"
for i in $(seq 1 32); do echo "Once upon a time, a little $([ $((i % 2)) = 0 ] && echo girl || echo dog) number $i"; done >/tmp/prompts.txt
for dev in cpu cuda; do
    timeout "$(limit 40)" "${quill[@]}" batch -m "${QUILL_TESTDATA:-gpu-carry/testdata}/models/stories260K.gguf" \
        --device "$dev" --raw --temp 0 -n 48 --parallel 16 -i /tmp/prompts.txt -o "/tmp/batch-$dev.jsonl" \
        2>"/tmp/batch-$dev.err"
    echo "batch $dev rc=$?: $(wc -l <"/tmp/batch-$dev.jsonl") lines; $(tail -1 "/tmp/batch-$dev.err")"
done
python3 - <<'PY'
import json
a = [json.loads(l) for l in open("/tmp/batch-cpu.jsonl")]
b = [json.loads(l) for l in open("/tmp/batch-cuda.jsonl")]
key = lambda r: r.get("id")
ta = {key(r): json.dumps(r.get("text", r.get("output", r)), sort_keys=True) for r in a}
tb = {key(r): json.dumps(r.get("text", r.get("output", r)), sort_keys=True) for r in b}
print(f"batch: {sum(ta[k] == tb.get(k) for k in ta)}/{len(ta)} texts identical, cuda against cpu")
PY
fi

# bench NAME [SYNTH=PRESET] [VAR=VALUE...] -- ARGS...: `quill bench --synthetic PRESET` (llama3-8b unless SYNTH=
# names another), JSON to /tmp/bench-NAME.json, stderr (the profile) to bench.err
bench() {
    local name=$1; shift
    case " ${QUILL_GPU_SKIP:-} " in *" $name "*) return ;; esac  # QUILL_GPU_SKIP="f16 q4_0-unfused": not these
    [ -z "${QUILL_GPU_ONLY:-}" ] || case " $QUILL_GPU_ONLY " in *" $name "*) ;; *) return ;; esac  # only these
    local envs=() synth=llama3-8b
    while [ "$1" != "--" ]; do
        case "$1" in SYNTH=*) synth="${1#SYNTH=}" ;; *) envs+=("$1") ;; esac
        shift
    done
    shift
    say "bench $name ${envs[*]}"
    echo "== $name $synth ${envs[*]} $*" >>"$out/bench.err"
    timeout "$(limit 100)" env "${envs[@]}" "${quill[@]}" bench --synthetic "$synth" --device cuda --json "$@" \
        >"/tmp/bench-$name.json" 2>>"$out/bench.err" || tail -3 "$out/bench.err"
}
profile() {  # the CUDA profile bench NAME left in bench.err
    [ -f "$out/bench.err" ] || return 0
    awk -v h="== $1 " 'index($0, h) == 1 {on = 1; next} /^== / {on = 0} on' "$out/bench.err" | grep -A40 "CUDA profile" |
        head -40
}
# Most telling first: the run may be cut at the budget. QUILL_GPU_QUICK=1: decode only (no 2048-token prefills).
pp=(-p 2048 --batch 2048)
[ "${QUILL_GPU_QUICK:-0}" = 1 ] && pp=(-p 0)
bench q4_0 -- --dtype q4_0 "${pp[@]}" -n 64 -r 3
bench q4_0-profile QUILL_CUDA_PROFILE=1 -- --dtype q4_0 "${pp[@]}" -n 16 -r 1
profile q4_0-profile
bench q8_0 -- --dtype q8_0 "${pp[@]}" -n 64 -r 3
bench f16 -- --dtype f16 "${pp[@]}" -n 64 -r 3
bench q4_0-b16 -- --dtype q4_0 -p 0 -n 32 --batch-decode 16 -r 2
bench q4_0-b64 -- --dtype q4_0 -p 0 -n 32 --batch-decode 64 -r 2
bench q4_0-unfused QUILL_CUDA_FUSE=0 -- --dtype q4_0 -p 0 -n 64 -r 3
bench q4_0-b16-dp4a QUILL_CUDA_MMA=0 -- --dtype q4_0 -p 0 -n 32 --batch-decode 16 -r 2
bench q4_0-b64-dp4a QUILL_CUDA_MMA=0 -- --dtype q4_0 -p 0 -n 32 --batch-decode 64 -r 2
bench q4_0-b16-staged QUILL_CUDA_MMA=staged -- --dtype q4_0 -p 0 -n 32 --batch-decode 16 -r 2
bench q4_0-b64-staged QUILL_CUDA_MMA=staged -- --dtype q4_0 -p 0 -n 32 --batch-decode 64 -r 2
bench q4_0-b64-profile QUILL_CUDA_PROFILE=1 -- --dtype q4_0 -p 0 -n 8 --batch-decode 64 -r 1
profile q4_0-b64-profile
# The batch issue's shape: the default model's (SmolLM2-135M, Q4_1), one sequence and 16 and 64 together.
bench smollm2-q4_1 SYNTH=smollm2-135m -- --dtype q4_1 -p 0 -n 128 -r 3
bench smollm2-q4_1-b16 SYNTH=smollm2-135m -- --dtype q4_1 -p 0 -n 128 --batch-decode 16 -r 2
bench smollm2-q4_1-b64 SYNTH=smollm2-135m -- --dtype q4_1 -p 0 -n 128 --batch-decode 64 -r 2
bench smollm2-q4_1-b64-staged SYNTH=smollm2-135m QUILL_CUDA_MMA=staged -- --dtype q4_1 -p 0 -n 128 --batch-decode 64 -r 2
# A mixture of experts (qwen3moe, cuda/moe.h): Qwen3-30B-A3B's shape with 8 layers, one sequence and 16 together.
bench qwen3moe-q4_0 SYNTH=qwen3-30b-a3b-8l -- --dtype q4_0 -p 512 --batch 512 -n 32 -r 2
bench qwen3moe-q4_0-b16 SYNTH=qwen3-30b-a3b-8l -- --dtype q4_0 -p 0 -n 16 --batch-decode 16 -r 1
bench smollm2-q4_1-pdl0 SYNTH=smollm2-135m QUILL_CUDA_PDL=0 -- --dtype q4_1 -p 0 -n 128 -r 3
bench smollm2-q4_1-pdl-products SYNTH=smollm2-135m QUILL_CUDA_PDL=products -- --dtype q4_1 -p 0 -n 128 -r 3
bench q4_0-stream0 QUILL_CUDA_STREAM=0 -- --dtype q4_0 -p 0 -n 64 -r 3
bench q4_0-s4 QUILL_CUDA_STAGES=4 -- --dtype q4_0 -p 0 -n 64 -r 3
bench q4_0-pdl0 QUILL_CUDA_PDL=0 -- --dtype q4_0 -p 0 -n 64 -r 3
bench q4_0-pdl-products QUILL_CUDA_PDL=products -- --dtype q4_0 -p 0 -n 64 -r 3
bench q8_0-pdl0 QUILL_CUDA_PDL=0 -- --dtype q8_0 -p 0 -n 64 -r 3
bench q8_0-pdl-products QUILL_CUDA_PDL=products -- --dtype q8_0 -p 0 -n 64 -r 3
bench q4_1 -- --dtype q4_1 -p 0 -n 64 -r 3
bench q4_1-stream0 QUILL_CUDA_STREAM=0 -- --dtype q4_1 -p 0 -n 64 -r 3
bench q8_0-stream1 QUILL_CUDA_STREAM=1 -- --dtype q8_0 -p 0 -n 64 -r 3
bench q8_0-stream1-s4 QUILL_CUDA_STREAM=1 QUILL_CUDA_STAGES=4 -- --dtype q8_0 -p 0 -n 64 -r 3
# QUILL_GPU_STAGES="2 3 8": the streamed kernel's ring at those stages too, for each int8 type.
for st in ${QUILL_GPU_STAGES:-}; do
    bench "q4_0-s$st" QUILL_CUDA_STAGES="$st" -- --dtype q4_0 -p 0 -n 64 -r 2
    bench "q4_1-s$st" QUILL_CUDA_STAGES="$st" -- --dtype q4_1 -p 0 -n 64 -r 2
    bench "q8_0-stream1-s$st" QUILL_CUDA_STREAM=1 QUILL_CUDA_STAGES="$st" -- --dtype q8_0 -p 0 -n 64 -r 2
done
if [ "${QUILL_GPU_GEMM_F16:-0}" = 1 ]; then
    bench f16-gemm-f16 QUILL_CUDA_GEMM=f16 -- --dtype f16 -p 2048 --batch 2048 -n 0 -r 3
    bench q4_0-gemm-f16 QUILL_CUDA_GEMM=f16 -- --dtype q4_0 -p 2048 --batch 2048 -n 0 -r 3
fi

# Per-kernel device time of a few decode steps under Nsight Compute (one metric, clocks left alone), by kernel and
# grid: which kernels the step's time goes to. QUILL_GPU_NCU_MODELS="llama3-8b:q4_0:1 smollm2-135m:q4_1:1
# llama3-8b:q4_0:64" (preset:type:sequences; the first by default) chooses the steps, QUILL_GPU_NCU_VARIANTS="default
# unfused stream0" times the separate launches and the register-only int8 kernel too; QUILL_GPU_NCU=0 skips it.
# Then kernels in detail (occupancy, warp stalls, memory): QUILL_GPU_NCU_DETAIL="preset:type:sequences:kernel
# regex:launches skipped" (default llama3-8b:q4_0:1:matmul_q8:260, one layer's four int8 products), =0 none.
ncu_bin="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
if [ "${QUILL_GPU_NCU:-1}" = 1 ] && [ -n "$ncu_bin" ]; then
    for spec in ${QUILL_GPU_NCU_MODELS:-llama3-8b:q4_0:1}; do
        IFS=: read -r preset dtype seqs <<<"$spec"
        for v in ${QUILL_GPU_NCU_VARIANTS:-default}; do
            say "ncu: $preset $dtype decode, $seqs sequences, $v launches"
            envs=(); [ "$v" = unfused ] && envs=(QUILL_CUDA_FUSE=0); [ "$v" = stream0 ] && envs=(QUILL_CUDA_STREAM=0)
            csv="/tmp/ncu-$preset-$dtype-$seqs-$v.csv"
            timeout "$(limit 60)" env "${envs[@]}" "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum \
                --csv --print-units base --log-file "$csv" "${quill[@]}" bench --synthetic "$preset" --device cuda \
                --dtype "$dtype" -p 0 -n 3 --batch-decode "$seqs" -r 1 >/dev/null 2>"$csv.err" || tail -3 "$csv.err"
            python3 - "$csv" "$spec $v" <<'PY' | tee -a "$out/ncu.txt"
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, rows = rows[0], rows[1:]
k, m, v = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
g = head.index("Grid Size") if "Grid Size" in head else None
tot, cnt = collections.Counter(), collections.Counter()
for r in rows:
    if r[m] == "gpu__time_duration.sum":
        # by kernel and grid: a product's grid tells its matrix (rows) apart
        name = r[k].split("(")[0].replace("quill::<unnamed>::", "")[:56] + (f" {r[g]}" if g is not None else "")
        tot[name] += float(r[v].replace(",", "")); cnt[name] += 1
all_ns = sum(tot.values())
print(f"ncu {sys.argv[2]}: {sum(cnt.values())} launches, {all_ns / 1e6:.2f} ms of kernels in all")
for name, ns in tot.most_common(30):
    print(f"{ns / 1e6:9.3f} ms {cnt[name]:6d} x {ns / cnt[name] / 1e3:8.2f} us  {name}")
PY
        done
    done
    for spec in ${QUILL_GPU_NCU_DETAIL-llama3-8b:q4_0:1:matmul_q8:260}; do
        [ "$spec" = 0 ] && break
        [ "$spec" = 1 ] && spec=llama3-8b:q4_0:1:matmul_q8:260
        IFS=: read -r preset dtype seqs kernel skip <<<"$spec"
        say "ncu: $kernel of $preset $dtype decode with $seqs sequences in detail (4 launches after $skip)"
        detail="/tmp/ncu-detail-$preset-$dtype-$seqs.txt"
        timeout "$(limit 90)" "$ncu_bin" --clock-control none -k "regex:$kernel" --launch-skip "$skip" \
            --launch-count 4 --section SpeedOfLight --section LaunchStats --section Occupancy \
            --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
            "${quill[@]}" bench --synthetic "$preset" --device cuda --dtype "$dtype" -p 0 -n 4 --batch-decode "$seqs" \
            -r 1 >"$detail" 2>&1 || tail -3 "$detail"
        grep -vE "^==PROF==|^\s*$" "$detail" | grep -vE "^quill|^\{" >>"$out/ncu.txt"
        grep -E "$kernel|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Theoretical Occ|Block Limit|Stall|Executed Ipc|Issue Slots" \
            "$detail" | head -80
    done
fi

say "summary"
cat /tmp/bench-*.json >"$out/bench.jsonl" 2>/dev/null
python3 - "$out" <<'PY' | tee "$out/table.txt"
import json, os, sys
out = sys.argv[1]
print("gpu: " + open("/tmp/quill-gpu.txt").read().strip())
print(f"{'llama3-8b unless':18} {'prefill tok/s':>14} {'TFLOP/s':>8} {'of GEMM':>8} {'decode tok/s':>13} {'GB/s':>8} "
      f"{'of copy':>8}")
import glob
order = ["q4_0", "q8_0", "f16", "q4_0-b16", "q4_0-b64", "q4_0-b16-dp4a", "q4_0-b64-dp4a", "q4_0-b16-staged",
         "q4_0-b64-staged", "q4_0-unfused",
         "q4_0-stream0", "q4_0-s4", "q4_0-pdl0", "q4_0-pdl-products", "q8_0-pdl0", "q8_0-pdl-products", "q4_1",
         "q4_1-stream0", "q8_0-stream1", "q8_0-stream1-s4", "f16-gemm-f16", "q4_0-gemm-f16"]
found = sorted(f[len("/tmp/bench-"):-len(".json")] for f in glob.glob("/tmp/bench-*.json"))
for t in order + [t for t in found if t not in order and not t.endswith("-profile")]:
    try:
        j = json.load(open(f"/tmp/bench-{t}.json"))
    except Exception as e:
        print(f"{t:18} no result ({type(e).__name__})")
        continue
    copy = j.get("copy_gb_per_s")
    rate = j.get("matmul_tflops")
    tests = {x["test"]: x for x in j["tests"]}
    pp = next((x for k, x in tests.items() if k.startswith("pp")), None)
    tg = next((x for k, x in tests.items() if k.startswith("tg")), None)
    gbs = tg.get("gb_per_s") if tg else None
    frac = f"{gbs / copy:.0%}" if gbs and copy else "-"
    pps = f"{pp['tokens_per_s']:14.0f}" if pp else f"{'-':>14}"
    tf = pp.get("tflops") if pp else None
    tfs = f"{tf:8.1f}" if tf else f"{'-':>8}"
    tff = f"{tf / rate:8.0%}" if tf and rate else f"{'-':>8}"
    tgs = f"{tg['tokens_per_s']:13.1f}" if tg else f"{'-':>13}"
    print(f"{t:18} {pps} {tfs} {tff} {tgs} {gbs or 0:8.0f} {frac:>8}   copy {copy or 0:.0f} GB/s, "
          f"GEMM {rate or 0:.0f} TFLOP/s")
PY
say "done"
exit "$status"
