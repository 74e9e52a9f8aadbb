// Sixteen-row decoders of the 2-bit i-quants for the AVX-512 kernels: each step is two eight-row steps of the AVX2
// decoders (x86/avx2/iq2_decoders.h, values plus 128 for vpdpbusd), so the decode path (their Dec8) and the
// sixteen-row tiles give each row the same bytes and scales. Included after decoders.h by the kernel files only.
#pragma once

#include <immintrin.h>

#include <cstddef>

#include "engine/cpu/x86/avx2/iq2_decoders.h"
#include "engine/cpu/x86/avx512/decoders.h"

namespace quill::cpu::QUILL_AVX512_NS {
namespace {

// Rows 0..7 from a, 8..15 from b.
inline Step16 join_steps(const avx2::Step8& a, const avx2::Step8& b) {
    Step16 s;
    for (int k = 0; k < 8; ++k) s.w[k] = _mm512_inserti64x4(_mm512_castsi256_si512(a.w[k]), b.w[k], 1);
    s.ws = _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(a.ws)), _mm256_castps_pd(b.ws), 1));
    return s;
}

struct Dec16Iq2Xxs {
    static constexpr int kOffset = 128;
    static constexpr bool kHasMin = false;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(BlockIq2Xxs);
    using Dec8 = avx2::Dec8Iq2Xxs<true>;

    template <typename F>
    static void for_group(Rows16 rows, int64_t g, F&& f) {
        const size_t off = static_cast<size_t>(g) * sizeof(BlockIq2Xxs);
        const __m256 d0 = _mm256_cvtph_ps(avx2::gather_u16(rows, off + offsetof(BlockIq2Xxs, d)));
        const __m256 d1 = _mm256_cvtph_ps(avx2::gather_u16(rows + 8, off + offsetof(BlockIq2Xxs, d)));
        for (int j = 0; j < 8; ++j)
            f(g * kGroupSteps + j, join_steps(Dec8::step(rows, off, d0, j), Dec8::step(rows + 8, off, d1, j)));
    }
};

}  // namespace
}  // namespace quill::cpu::QUILL_AVX512_NS
