// The AVX2 float-weight kernels (F32, F16, BF16): 4 rows x T tokens, the row converted in registers.
#include "engine/cpu/x86/avx2/common.h"

#ifdef QUILL_AVX2_BUILT

namespace quill::cpu::avx2 {

namespace {

// ---- float weights: 4 rows x T tokens, 8 elements per step, the row converted in registers ----

struct LoadF32 {
    static constexpr int64_t kBytes = 4;
    static __m256 load(const uint8_t* row, int64_t i) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
    }
    static float at(const uint8_t* row, int64_t i) { return load_unaligned<float>(row + 4 * i); }
};

struct LoadF16 {
    static constexpr int64_t kBytes = 2;
    static __m256 load(const uint8_t* row, int64_t i) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    }
    static float at(const uint8_t* row, int64_t i) { return _cvtsh_ss(load_unaligned<uint16_t>(row + 2 * i)); }
};

struct LoadBF16 {
    static constexpr int64_t kBytes = 2;
    static __m256 load(const uint8_t* row, int64_t i) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    static float at(const uint8_t* row, int64_t i) {
        const uint32_t bits = uint32_t{load_unaligned<uint16_t>(row + 2 * i)} << 16;
        float f;
        std::memcpy(&f, &bits, sizeof(f));
        return f;
    }
};

template <typename Load, int T>
void float_tile(const uint8_t* const* rows, int64_t prefetch, const float* x, int64_t n_in, int64_t t0,
                float (*out)[kMaxTokens]) {
    const float* xt[T];  // [T][n_in]
    for (int t = 0; t < T; ++t) xt[t] = x + (t0 + t) * n_in;
    __m256 acc[4][T];
    for (auto& row : acc) {
        for (auto& v : row) v = _mm256_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 8 <= n_in; i += 8) {
        __m256 xv[T];
        for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(xt[t] + i);
        for (int r = 0; r < 4; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(rows[r] + prefetch + i * Load::kBytes), _MM_HINT_T1);
            const __m256 wv = Load::load(rows[r], i);
            for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < 4; ++r) {
        for (int t = 0; t < T; ++t) {
            float sum = hsum(acc[r][t]);
            for (int64_t e = i; e < n_in; ++e) sum += Load::at(rows[r], e) * xt[t][e];
            out[r][t] = sum;
        }
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
                if (nt == 1) {
                    float_tile<Load, 1>(rows, prefetch, args.x, w.n_in, t, out);
                } else {
                    float_tile<Load, 2>(rows, prefetch, args.x, w.n_in, t, out);
                }
                for (int i = 0; i < nr; ++i) {
                    for (int j = 0; j < nt; ++j) block.at(r + i, t + j) = out[i][j];
                }
            }
        }
        flush_block(block, args.y, w.n_out);
    }
}

}  // namespace

void add_float_rows_kernels(KernelTable& table) {
    entry(table.rows, GgmlType::F32) = {float_rows<LoadF32>, false};
    entry(table.rows, GgmlType::F16) = {float_rows<LoadF16>, false};
    entry(table.rows, GgmlType::BF16) = {float_rows<LoadBF16>, false};
}

}  // namespace quill::cpu::avx2

#endif
