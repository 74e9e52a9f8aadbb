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
inline __m512 join_halves(__m256 a, __m256 b) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(a)), _mm256_castps_pd(b), 1));
}

inline Step16 join_steps(const avx2::Step8& a, const avx2::Step8& b) {
    Step16 s;
    for (int k = 0; k < 8; ++k) s.w[k] = _mm512_inserti64x4(_mm512_castsi256_si512(a.w[k]), b.w[k], 1);
    s.ws = join_halves(a.ws, b.ws);
    return s;
}


// A sixteen-row decoder from two halves of the AVX2 decoder Dec8 (values plus 128; Dec8::group_d and Dec8::step).
// The types with a scale per 16 elements (IQ2_XS, IQ2_S, IQ1_M: Dec16Half) keep Step8::wm's integer half scales in
// Step16::wm, which the kernels of lanes.h take in the integer dot (kHalfScales).
template <typename Dec8_>
struct Dec16Joined {
    static constexpr int kOffset = 128;
    static constexpr bool kHasMin = false;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = Dec8_::kGroupBytes;
    using Dec8 = Dec8_;
    static_assert(Dec8::kOffset == kOffset && Dec8::kGroupSteps == kGroupSteps);

    template <typename F>
    static void for_group(Rows16 rows, int64_t g, F&& f) {
        const size_t off = static_cast<size_t>(g) * static_cast<size_t>(kGroupBytes);
        const __m256 d0 = Dec8::group_d(rows, off), d1 = Dec8::group_d(rows + 8, off);
        for (int j = 0; j < 8; ++j) {
            const avx2::Step8 a = Dec8::step(rows, off, d0, j), b = Dec8::step(rows + 8, off, d1, j);
            Step16 s = join_steps(a, b);
            if constexpr (requires { Dec8::kHalfScales; }) s.wm = join_halves(a.wm, b.wm);
            f(g * kGroupSteps + j, s);
        }
    }
};

template <typename Dec8_>
struct Dec16Half : Dec16Joined<Dec8_> {
    static constexpr bool kHalfScales = true;
};

using Dec16Iq2Xxs = Dec16Joined<avx2::Dec8Iq2Xxs<true>>;
using Dec16Iq2Xs = Dec16Half<avx2::Dec8Iq2Xs<true>>;
using Dec16Iq2S = Dec16Half<avx2::Dec8Iq2S<true>>;

}  // namespace
}  // namespace quill::cpu::QUILL_AVX512_NS
