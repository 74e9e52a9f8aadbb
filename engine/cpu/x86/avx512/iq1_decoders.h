// Sixteen-row decoder of IQ1_S for the AVX-512 kernels: each step is two eight-row steps of the AVX2 decoder
// (x86/avx2/iq1_decoders.h, values plus 128 for vpdpbusd), so the decode path (its Dec8) and the sixteen-row tiles
// give each row the same bytes and scales. (IQ1_M, with its scales per 16 elements, runs the AVX2 kernels, as IQ2_XS
// does.) Included after decoders.h by the kernel files only.
#pragma once

#include <immintrin.h>

#include <cstddef>

#include "engine/cpu/x86/avx2/iq1_decoders.h"
#include "engine/cpu/x86/avx512/decoders.h"
#include "engine/cpu/x86/avx512/iq2_decoders.h"

namespace quill::cpu::QUILL_AVX512_NS {
namespace {

struct Dec16Iq1S {
    static constexpr int kOffset = 128;
    static constexpr bool kHasMin = false;
    static constexpr int kGroupSteps = 8;
    static constexpr int64_t kGroupBytes = sizeof(BlockIq1S);
    using Dec8 = avx2::Dec8Iq1S<true>;

    template <typename F>
    static void for_group(Rows16 rows, int64_t g, F&& f) {
        const size_t off = static_cast<size_t>(g) * sizeof(BlockIq1S);
        const __m256 d0 = _mm256_cvtph_ps(avx2::gather_u16(rows, off + offsetof(BlockIq1S, d)));
        const __m256 d1 = _mm256_cvtph_ps(avx2::gather_u16(rows + 8, off + offsetof(BlockIq1S, d)));
        for (int j = 0; j < 8; ++j)
            f(g * kGroupSteps + j, join_steps(Dec8::step(rows, off, d0, j), Dec8::step(rows + 8, off, d1, j)));
    }
};

}  // namespace
}  // namespace quill::cpu::QUILL_AVX512_NS
