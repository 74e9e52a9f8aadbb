// Causal attention over a slot's KV cache, in float, with the cache in F16 or F32.
//
// The unit of work is a tile: up to kMaxTileRows query rows (heads of tokens of one slot) that share one KV head.
// Where the ISA has a tiled kernel, the tile goes through the cache in blocks of kKeyBlock positions, each K and V
// block loaded once for all its rows (a prefill's consecutive tokens share almost all of their cache), with the
// softmax between the two passes over one row of scores per query row. A row's arithmetic depends only on its own
// query and visible positions, never on the other rows of its tile: batch invariance.
#pragma once

#include "engine/runtime/backend.h"
#include "engine/cpu/matmul.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace quill::cpu {

constexpr int kMaxHeadDim = 512;
// Key positions per block of the tiled attention.
constexpr int kKeyBlock = 64;
// Query rows that attend together (the tokens of a tile times the heads they take on one KV head).
constexpr int kMaxTileRows = 32;

// Cache lines to bring into L2 a few at a time while an attention kernel runs: the K and V that the thread's next
// unit of work will read (two ranges, each whole lines). A decode's unit is a short walk over ~100 positions, too short
// for the hardware prefetchers; issued at once before the unit ran, the prefetches waited on memory with the kernel
// (a decode step's attention took the time of reading its K and V plus that of its arithmetic), while paced through the
// kernel's loops (step) the reads overlap its arithmetic.
class KvPrefetch {
public:
    // The lines covering [a, a + a_bytes) and [b, b + b_bytes), in that order; what was left of before is dropped.
    void set(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
        range_[0] = lines(a, a_bytes);
        range_[1] = lines(b, b_bytes);
        at_ = 0;
    }
    // Prefetches the next n lines, as long as any are left.
    void step(int n) {
        for (; n > 0 && at_ < 2; --n) {
            Range& r = range_[at_];
            if (r.left == 0) {
                ++at_;
                ++n;
                continue;
            }
            __builtin_prefetch(r.line, 0, 2);
            r.line += 64;
            --r.left;
        }
    }
    // Lines not yet prefetched.
    size_t left() const {
        size_t n = 0;
        for (int i = at_; i < 2; ++i) n += range_[i].left;
        return n;
    }
    // Prefetches every line left.
    void finish() {
        for (; at_ < 2; ++at_)
            for (Range& r = range_[at_]; r.left > 0; --r.left, r.line += 64) __builtin_prefetch(r.line, 0, 2);
    }

private:
    struct Range {
        const char* line = nullptr;
        size_t left = 0;
    };
    static Range lines(const void* p, size_t bytes) {
        if (bytes == 0) return {};
        const auto begin = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
        const auto end = (reinterpret_cast<uintptr_t>(p) + bytes + 63) & ~uintptr_t{63};
        return {reinterpret_cast<const char*>(begin), (end - begin) / 64};
    }
    Range range_[2];
    int at_ = 2;  // the range being prefetched; 2: none left
};

// Where the first positions of a head's cache are also held, with the same values bit for bit: positions
// [0, positions) at k and v, laid out as the head's own (the same strides), `positions` a multiple of 8. Sequences
// that share a prompt prefix hold copies of its K and V (Backend::copy_kv); the tiled kernels read those positions
// from one copy, which then stays in cache for all of them, instead of each sequence its own from memory (the split
// form: the key blocks wholly below `positions`). Read there or from the head's own cache, the same bits.
struct KvShare {
    const void* k = nullptr;
    const void* v = nullptr;
    int positions = 0;
};

// Primitives over one head's cache, per ISA, in the cache's layouts (KvHead): K in blocks of 8 positions with the
// positions innermost, V a row per position `stride` elements apart.
struct KvOps {
    // scores[j - j0] = k_j . q for j in [j0, j0 + n_kv)
    void (*scores_f16)(const uint16_t* k, size_t block_stride, const float* q, int head_dim, int j0, int n_kv,
                       float* scores);
    void (*scores_f32)(const float* k, size_t block_stride, const float* q, int head_dim, int j0, int n_kv,
                       float* scores);
    // out = sum_j p[j] v_j for j < n_kv
    void (*mix_f16)(const float* p, const uint16_t* v, size_t stride, int head_dim, int n_kv, float* out);
    void (*mix_f32)(const float* p, const float* v, size_t stride, int head_dim, int n_kv, float* out);
    void (*round_f16)(float* x, int n);                // x = fp16(x), in float
    void (*to_f16)(const float* x, uint16_t* y, int n);  // y = fp16 bits of x
    // The tiled kernel (see x86/kv_ops.h), for head_dim % 8 == 0; nullptr where the ISA has none (rows then attend
    // one by one through the primitives above). sinks: the rows' sinks, or nullptr for none. It reads the positions
    // `share` covers there, and steps `ahead` (when not null) through its loops.
    void (*tile_f16)(const float* const* q, const int* first, const int* last, int n, const uint16_t* k,
                     size_t k_block_stride, const uint16_t* v, size_t v_stride, int head_dim, float scale,
                     float softcap, const float* sinks, float* const* out, const KvShare& share, KvPrefetch* ahead);
    void (*tile_f32)(const float* const* q, const int* first, const int* last, int n, const float* k,
                     size_t k_block_stride, const float* v, size_t v_stride, int head_dim, float scale,
                     float softcap, const float* sinks, float* const* out, const KvShare& share, KvPrefetch* ahead);
    // The tiled kernel in phases (the split form below): the floats of the rows' scores; the scores of key block b
    // (positions [b, b + 1) * kKeyBlock); the softmax over all of them; block b's share o_b of the output, stored.
    size_t (*tile_score_floats)(const int* first, const int* last, int n);
    void (*tile_scores_f16)(const float* const* q, const int* first, const int* last, int n, const uint16_t* k,
                            size_t k_block_stride, int head_dim, float scale, int b, float* s);
    void (*tile_scores_f32)(const float* const* q, const int* first, const int* last, int n, const float* k,
                            size_t k_block_stride, int head_dim, float scale, int b, float* s);
    void (*tile_softmax)(const int* first, const int* last, int n, bool f16, const float* sinks, float* s);
    void (*tile_mix_f16)(const int* first, const int* last, int n, const uint16_t* v, size_t v_stride, int head_dim,
                         int b, const float* s, float* const* o);
    void (*tile_mix_f32)(const int* first, const int* last, int n, const float* v, size_t v_stride, int head_dim,
                         int b, const float* s, float* const* o);
    // gate = silu(gate) * up elementwise (the FFN's activation; here because it shares the vector exp)
    void (*swiglu)(float* gate, const float* up, int64_t n);
    // gate = gelu(gate) * up, GELU in its tanh form (gemma3's FFN)
    void (*geglu)(float* gate, const float* up, int64_t n);
    // y = x / sqrt(mean(x^2) + eps) * w for n rows of d, the mean's sum in double (attention.cpp's sum_squares); y
    // may be x
    void (*rms_norm)(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps);
    // x += p, then y = rms_norm(x) * w unless w is null, in one pass over each row; false when some sum is inf or NaN
    bool (*add_norm)(float* x, const float* p, const float* w, float* y, int64_t n, int64_t d, float eps);
};
// The primitives for an ISA; `reference` gives plain scalar loops with the scalar fp16 conversions (the oracle).
const KvOps& kv_ops(Isa isa, bool reference);

// One KV head of one slot's cache. K goes in blocks of 8 positions, each [head_dim][8]: element d of position j at
// k + (j / 8) * k_block_stride + d * 8 + j % 8, so that eight consecutive positions' element d load as one vector
// (the attention kernels put keys in the vector lanes without transposing). V is a row per position: element d of
// position j at v + j * v_stride + d.
struct KvHead {
    const void* k;
    const void* v;
    KvType type;
    size_t k_block_stride;
    size_t v_stride;
    int head_dim;
    float scale;    // ModelConfig::attn_scale
    KvShare share;  // read by the tiled kernels of attend_rows
    float softcap = 0.0f;  // ModelConfig::attn_logit_softcap: the scores through softcap_scores when > 0
    bool sinks = false;    // the rows have attention sinks (AttnRow::sink)
};
// s[i] = cap * tanh(s[i] / cap) for i < n: soft-capped attention scores (gemma2), the same operations on every path.
void softcap_scores(float* s, size_t n, float cap);
// Element offset of (position j, element e of the row of all KV heads, row_elems of them) in a slot's K: the K
// layout of KvHead, with every head of a block of 8 positions together.
inline size_t k_cache_offset(int64_t j, int64_t e, int64_t row_elems) {
    return static_cast<size_t>((j / 8) * row_elems * 8 + e * 8 + j % 8);
}

// A query row: one head of one token, RoPE applied. It sees the cache positions [first, last].
struct AttnRow {
    const float* q;  // [head_dim]
    float* out;      // [head_dim]
    int first, last;
    // gpt-oss: the head's sink, a logit that joins the softmax's denominator with no value (-inf: none; read only
    // where the KvHead says it has sinks)
    float sink = -INFINITY;
};

// The first and the last position any of the n >= 1 rows sees.
std::pair<int, int> visible_span(const AttnRow* rows, int n);

// Floats of scratch attend_rows needs for a cache of n_ctx positions.
size_t attend_scratch_floats(int n_ctx);

// out = softmax_j(q . k_j * scale) v_j (the scores soft-capped when kv.softcap > 0; with kv.sinks, each row's sink
// in the softmax's denominator) over each row's visible positions, for n <= kMaxTileRows rows sharing the
// KV head. With an F16 cache both products take F16 inputs with F32 accumulation, as GPU attention kernels (and the
// reference implementation) do: q and the probabilities are rounded to F16 before they meet K and V. The tiled
// kernels step `ahead` (when not null) as they go; the rest is left in it.
void attend_rows(const AttnRow* rows, int n, const KvHead& kv, const KvOps& ops, float* scratch,
                 KvPrefetch* ahead = nullptr);

// The split form of attend_rows, for a decode over a long cache with fewer tiles than threads: the tile's key blocks
// spread over threads. Where attend_tiled, the rows span key blocks [b_first, b_first + n_blocks); then, phase by
// phase (the calls of one phase may run on any threads at once): attend_split_scores for every block, into s
// (attend_score_floats of them); attend_split_softmax; attend_split_mix for every block, block i's share into
// parts + i * n * head_dim; attend_split_sum. The rows' outputs get the same bits as attend_rows gives them.
bool attend_tiled(const KvOps& ops, const KvHead& kv);
int attend_block_span(const AttnRow* rows, int n, int* b_first);
size_t attend_score_floats(const AttnRow* rows, int n, const KvOps& ops);
void attend_split_scores(const AttnRow* rows, int n, const KvHead& kv, const KvOps& ops, int b, float* s);
void attend_split_softmax(const AttnRow* rows, int n, const KvHead& kv, const KvOps& ops, float* s);
void attend_split_mix(const AttnRow* rows, int n, const KvHead& kv, const KvOps& ops, int b, const float* s,
                      float* part);
void attend_split_sum(const AttnRow* rows, int n, int head_dim, const float* parts, int n_blocks);

}  // namespace quill::cpu
