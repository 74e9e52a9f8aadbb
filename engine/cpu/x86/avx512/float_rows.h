// The AVX-512 float-weight kernels (F32, F16, BF16): 4 rows x T tokens, the row converted in registers.
#pragma once

#include "engine/cpu/x86/avx512/common.h"

#ifdef QUILL_AVX512_BUILT

namespace quill::cpu::QUILL_AVX512_NS {
namespace {

// ---- float weights: 4 rows x T tokens, 16 elements per step, the row converted in registers ----

struct LoadF32 {
    static constexpr int64_t kBytes = 4;
    static __m512 load(const uint8_t* row, int64_t i) {
        return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
    }
    static __m512 load(const uint8_t* row, int64_t i, __mmask16 m) {
        return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + i);
    }
};

struct LoadF16 {
    static constexpr int64_t kBytes = 2;
    static __m512 load(const uint8_t* row, int64_t i) { return _mm512_cvtph_ps(load256(row + 2 * i)); }
    static __m512 load(const uint8_t* row, int64_t i, __mmask16 m) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * i));
    }
};

struct LoadBF16 {
    static constexpr int64_t kBytes = 2;
    static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
    static __m512 load(const uint8_t* row, int64_t i) { return widen(load256(row + 2 * i)); }
    static __m512 load(const uint8_t* row, int64_t i, __mmask16 m) {
        return widen(_mm256_maskz_loadu_epi16(m, row + 2 * i));
    }
};

template <typename Load, int T>
void float_tile(const uint8_t* const* rows, int64_t prefetch, const float* x, int64_t n_in, int64_t t0,
                float (*out)[kMaxTokens]) {
    const float* xt[T];  // [T][n_in]
    for (int t = 0; t < T; ++t) xt[t] = x + (t0 + t) * n_in;
    __m512 acc[4][T];
    for (auto& row : acc) {
        for (auto& v : row) v = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 16 <= n_in; i += 16) {
        __m512 xv[T];
        for (int t = 0; t < T; ++t) xv[t] = _mm512_loadu_ps(xt[t] + i);
        for (int r = 0; r < 4; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(rows[r] + prefetch + i * Load::kBytes), _MM_HINT_T1);
            const __m512 wv = Load::load(rows[r], i);
            for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    if (i < n_in) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n_in - i)) - 1);
        __m512 xv[T];
        for (int t = 0; t < T; ++t) xv[t] = _mm512_maskz_loadu_ps(m, xt[t] + i);
        for (int r = 0; r < 4; ++r) {
            const __m512 wv = Load::load(rows[r], i, m);
            for (int t = 0; t < T; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < 4; ++r) {
        for (int t = 0; t < T; ++t) out[r][t] = _mm512_reduce_add_ps(acc[r][t]);
    }
}

template <typename Load>
void float_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    const WeightMatrix& w = *args.w;
    const auto* base = static_cast<const uint8_t*>(w.data);
    const int64_t prefetch = prefetch_distance(w.row_bytes);
    const int64_t block_rows = OutputBlock::rows_for(args.n_tokens);
    for (int64_t rb = r0; rb < r1; rb += block_rows) {
        OutputBlock block{scratch, args.n_tokens, rb, min64(block_rows, r1 - rb)};
        for (int64_t r = rb; r < rb + block.n_rows; r += 4) {
            const int nr = static_cast<int>(min64(4, r1 - r));
            const uint8_t* rows[4];  // a ragged tile repeats its last row
            for (int i = 0; i < 4; ++i) rows[i] = base + (r + min64(i, nr - 1)) * static_cast<int64_t>(w.row_bytes);
            for (int64_t t = 0; t < args.n_tokens; t += kMaxTokens) {
                const int nt = static_cast<int>(min64(kMaxTokens, args.n_tokens - t));
                float out[4][kMaxTokens];
                switch (nt) {
                    case 1:
                        float_tile<Load, 1>(rows, prefetch, args.x, w.n_in, t, out);
                        break;
                    case 2:
                        float_tile<Load, 2>(rows, prefetch, args.x, w.n_in, t, out);
                        break;
                    case 3:
                        float_tile<Load, 3>(rows, prefetch, args.x, w.n_in, t, out);
                        break;
                    default:
                        float_tile<Load, 4>(rows, prefetch, args.x, w.n_in, t, out);
                        break;
                }
                for (int i = 0; i < nr; ++i) {
                    for (int j = 0; j < nt; ++j) block.at(r + i, t + j) = out[i][j];
                }
            }
        }
        block.flush(args.y, w.n_out);
    }
}

}  // namespace
}  // namespace quill::cpu::QUILL_AVX512_NS

#endif  // QUILL_AVX512_BUILT
