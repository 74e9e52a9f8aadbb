// AVX2 + F16C primitives for attention over the KV cache (compiled with -mavx2 -mfma -mf16c; call only when the
// CPU has them). Shapes as in KvOps (attention.h). x86/avx512/kv_ops.cpp builds the same code (kv_ops_impl.h) again with AVX-512 (F,
// VL, BW, DQ) as namespace avx512kv: the same functions with the same results, some loops sixteen lanes wide (call
// them only when the CPU has those).
//
// - mix_f16, mix_f32, round_f16, to_f16: the per-row primitives of KvOps.
// - swiglu: gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i], with exp8 (kv_ops_impl.h) for
//   e^x; geglu: gate = gelu_tanh(gate) * up.
// - rms_norm, add_norm: the RMS norm of rows (KvOps), the same bits as the plain loops of attention.cpp.
// - tile_f16, tile_f32: the tiled attention (attention.h) of n <= kMaxTileRows query rows on one KV head, head_dim a
//   multiple of 8: row r sees positions [first[r], last[r]] and gets out[r] = softmax_j(q_r . k_j * scale) v_j, the
//   scores soft-capped (softcap_scores) when softcap > 0, and row r's sink sinks[r] (a logit with no value) in the
//   softmax's maximum and denominator where sinks is not null. With
//   the F16 cache q is rounded to fp16 first, and the probabilities before they meet V. The cache goes through in
//   blocks, each loaded once for all the rows; every row's result comes from the same operations in the same order
//   whatever the other rows are (the two lane layouts inside compute the same numbers). They step `ahead` (when not
//   null) through their loops over keys and positions, a few lines at a time.
// - tile_score_floats, tile_scores_*, tile_softmax, tile_mix_*: the same in phases, for a decode's key blocks spread
//   over threads (the split form of attention.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace quill::cpu {
class KvPrefetch;
struct KvShare;
}

#define QUILL_KV_OPS_DECLARATIONS                                                                                    \
    void mix_f16(const float* p, const uint16_t* v, size_t stride, int head_dim, int n_kv, float* out);              \
    void mix_f32(const float* p, const float* v, size_t stride, int head_dim, int n_kv, float* out);                 \
    void round_f16(float* x, int n);                                                                                 \
    void to_f16(const float* x, uint16_t* y, int n);                                                                 \
    void swiglu(float* gate, const float* up, int64_t n);                                                            \
    void geglu(float* gate, const float* up, int64_t n);                                                             \
    void rms_norm(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps);                         \
    bool add_norm(float* x, const float* p, const float* w, float* y, int64_t n, int64_t d, float eps);               \
    void tile_f16(const float* const* q, const int* first, const int* last, int n, const uint16_t* k,                \
                  size_t k_block_stride, const uint16_t* v, size_t v_stride, int head_dim, float scale,              \
                  float softcap, const float* sinks, float* const* out, const KvShare& share, KvPrefetch* ahead);    \
    void tile_f32(const float* const* q, const int* first, const int* last, int n, const float* k,                   \
                  size_t k_block_stride, const float* v, size_t v_stride, int head_dim, float scale,                 \
                  float softcap, const float* sinks, float* const* out, const KvShare& share, KvPrefetch* ahead);    \
    size_t tile_score_floats(const int* first, const int* last, int n);                                              \
    void tile_scores_f16(const float* const* q, const int* first, const int* last, int n, const uint16_t* k,         \
                         size_t k_block_stride, int head_dim, float scale, int b, float* s);                         \
    void tile_scores_f32(const float* const* q, const int* first, const int* last, int n, const float* k,            \
                         size_t k_block_stride, int head_dim, float scale, int b, float* s);                         \
    void tile_softmax(const int* first, const int* last, int n, bool f16, const float* sinks, float* s);             \
    void tile_mix_f16(const int* first, const int* last, int n, const uint16_t* v, size_t v_stride, int head_dim,    \
                      int b, const float* s, float* const* o);                                                       \
    void tile_mix_f32(const int* first, const int* last, int n, const float* v, size_t v_stride, int head_dim,       \
                      int b, const float* s, float* const* o);

namespace quill::cpu::avx2 {
QUILL_KV_OPS_DECLARATIONS
}  // namespace quill::cpu::avx2

namespace quill::cpu::avx512kv {
QUILL_KV_OPS_DECLARATIONS
}  // namespace quill::cpu::avx512kv

#undef QUILL_KV_OPS_DECLARATIONS
