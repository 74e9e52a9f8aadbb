// Micro-benchmark of the CPU attention kernels (not a test; build with `--target bench_attention`).
//
// Times one thread attending a prefill's worth of query rows over a causal cache with random contents, unit by unit
// as CpuBackend::attend_all hands them out, and reports GFLOP/s (2 * 2 * head_dim flops per visible (row, key) pair:
// the q.k and the p.v products).
//
//   bench_attention [--heads 9/3] [--head-dim 64] [--tokens 2048] [--kv f16|f32] [--reps N]
//                   [--decode CACHES] [--prefetch N]
//
// With --decode, one token per cache attends over its --tokens positions, a unit per KV head as a decode step's
// attention runs them, over CACHES separate caches in turn (16 slots x 30 layers at 103 positions: 480, 38 MB, which a
// large last-level cache keeps between passes; 2400: 190 MB, from memory as in a 16-sequence decode step whose weights
// pass through the cache too; 1: the same cache again and again, in L1/L2); reports us per cache. With
// --prefetch N the kernels step through the lines of the cache N after the current one (KvPrefetch), the rest
// prefetched at the end of each, as CpuBackend::attend_all does with N = 1.
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/attention.h"
#include "engine/format/quant.h"

using namespace quill;
using namespace quill::cpu;

namespace {

// A decode step's attention over `caches` caches of n_tok positions each (F16 or F32, random), every cache a unit
// per KV head of its `group` heads; the best of `reps` passes over all of them, in us per cache.
int bench_decode(const KvOps& ops, int n_head, int n_head_kv, int hd, int n_tok, KvType type, int caches, int reps,
                 int prefetch) {
    const int group = n_head / n_head_kv;
    const size_t stride = static_cast<size_t>(n_head_kv) * hd;
    const size_t es = type == KvType::f16 ? 2 : 4;
    const size_t k_bytes = static_cast<size_t>((n_tok + 7) / 8 * 8) * stride * es, v_bytes = n_tok * stride * es;
    std::vector<uint8_t> mem(static_cast<size_t>(caches) * (k_bytes + v_bytes));
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (size_t i = 0; i < mem.size(); i += es) {
        const float x = normal(rng);
        if (es == 2) {
            const uint16_t h = fp32_to_fp16(x);
            std::memcpy(&mem[i], &h, 2);
        } else {
            std::memcpy(&mem[i], &x, 4);
        }
    }
    std::vector<float> q(static_cast<size_t>(caches) * n_head * hd), out(q.size());
    for (float& x : q) x = normal(rng);
    std::vector<float> scratch(attend_scratch_floats(n_tok));
    double best = 1e30;
    for (int rep = 0; rep < reps; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        KvPrefetch ahead;
        for (int c = 0; c < caches; ++c) {
            const uint8_t* k = mem.data() + static_cast<size_t>(c) * (k_bytes + v_bytes);
            const uint8_t* v = k + k_bytes;
            if (prefetch > 0 && caches > 1) {  // the next cache's K and V, stepped through by the kernels
                const uint8_t* nk = mem.data() + static_cast<size_t>((c + prefetch) % caches) * (k_bytes + v_bytes);
                ahead.set(nk, k_bytes, nk + k_bytes, v_bytes);
            }
            for (int g = 0; g < n_head_kv; ++g) {
                const size_t koff = k_cache_offset(0, static_cast<int64_t>(g) * hd, static_cast<int64_t>(stride));
                const KvHead kv{k + koff * es, v + static_cast<size_t>(g) * hd * es, type, stride * 8, stride, hd,
                                0.125f, {}};
                AttnRow rows[kMaxTileRows];
                for (int h = 0; h < group; ++h) {
                    const size_t at = (static_cast<size_t>(c) * n_head + g * group + h) * hd;
                    rows[h] = AttnRow{q.data() + at, out.data() + at, 0, n_tok - 1};
                }
                attend_rows(rows, group, kv, ops, scratch.data(), prefetch > 0 ? &ahead : nullptr);
            }
            if (prefetch > 0) ahead.finish();
        }
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    fmt::print("decode: {} heads on {} KV heads of {}, {} positions, KV {}, {} caches: {:.2f} us a cache\n", n_head,
               n_head_kv, hd, n_tok, kv_type_name(type), caches, best * 1e6 / caches);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    int n_head = 9, n_head_kv = 3, hd = 64, n_tok = 2048, reps = 3, decode = 0, prefetch = 0;
    KvType type = KvType::f16;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--heads") std::sscanf(v.c_str(), "%d/%d", &n_head, &n_head_kv);
        else if (a == "--head-dim") hd = std::stoi(v);
        else if (a == "--tokens") n_tok = std::stoi(v);
        else if (a == "--kv") type = v == "f32" ? KvType::f32 : KvType::f16;
        else if (a == "--reps") reps = std::stoi(v);
        else if (a == "--decode") decode = std::stoi(v);
        else if (a == "--prefetch") prefetch = std::stoi(v);
    }
    const int group = n_head / n_head_kv;
    const size_t stride = static_cast<size_t>(n_head_kv) * hd;
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> q(static_cast<size_t>(n_tok) * n_head * hd), out(q.size());
    std::vector<float> k(static_cast<size_t>((n_tok + 7) / 8 * 8) * stride), v(static_cast<size_t>(n_tok) * stride);
    for (float& x : q) x = normal(rng);
    for (float& x : k) x = normal(rng);  // K in the cache's blocks of 8 positions: any random values will do
    for (float& x : v) x = normal(rng);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    for (size_t i = 0; i < k.size(); ++i) k16[i] = fp32_to_fp16(k[i]);
    for (size_t i = 0; i < v.size(); ++i) v16[i] = fp32_to_fp16(v[i]);
    const KvOps& ops = kv_ops(best_isa(), false);
    if (decode > 0) return bench_decode(ops, n_head, n_head_kv, hd, n_tok, type, decode, reps, prefetch);
    std::vector<float> scratch(attend_scratch_floats(n_tok));
    const int tile = std::max(1, kMaxTileRows / group);
    double best = 1e30;
    for (int rep = 0; rep < reps; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int g = 0; g < n_head_kv; ++g) {
            for (int t0k = 0; t0k < n_tok; t0k += tile) {
                const size_t koff = k_cache_offset(0, static_cast<int64_t>(g) * hd, static_cast<int64_t>(stride));
                const size_t voff = static_cast<size_t>(g) * hd;
                KvHead kv{type == KvType::f16 ? static_cast<const void*>(k16.data() + koff) : k.data() + koff,
                          type == KvType::f16 ? static_cast<const void*>(v16.data() + voff) : v.data() + voff,
                          type, stride * 8, stride, hd, 0.125f, {}};
                AttnRow rows[kMaxTileRows];
                int m = 0;
                for (int t = t0k; t < std::min(n_tok, t0k + tile); ++t)
                    for (int h = g * group; h < (g + 1) * group && m < kMaxTileRows; ++h)
                        rows[m++] = AttnRow{q.data() + (static_cast<size_t>(t) * n_head + h) * hd,
                                            out.data() + (static_cast<size_t>(t) * n_head + h) * hd, 0, t};
                attend_rows(rows, m, kv, ops, scratch.data());
            }
        }
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double pairs = static_cast<double>(n_tok) * (n_tok + 1) / 2 * n_head;
    fmt::print("{} heads on {} KV heads of {}, {} tokens, KV {}: {:.1f} ms, {:.1f} GFLOP/s\n", n_head, n_head_kv, hd,
               n_tok, kv_type_name(type), best * 1e3, pairs * 4.0 * hd / best * 1e-9);
}
