// Included first (-include, tests/CMakeLists.txt) in each AVX-512 kernel file (engine/cpu/x86/avx512/) built a
// second time on SIMDe's portable AVX-512 intrinsics (Debian's libsimde-dev), so that every test that runs each
// instruction set's kernels (the matmul tests: results against the scalar oracle, determinism, batch invariance; the
// backend tests) runs the AVX-512 kernels' code on a machine without AVX-512 (tests/support/avx512_emulated.cpp installs
// them).
//
// SIMDe implements each intrinsic with its exact integer semantics and, with FMA enabled (this file is compiled
// like the AVX2 kernels), the same fused multiply-adds; the few intrinsics it lacks are written out below, each as
// the instruction defines it (and _mm512_reduce_add_ps in the order GCC's header sums).
#pragma once

#define SIMDE_ENABLE_NATIVE_ALIASES
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <simde/x86/avx512.h>
#pragma GCC diagnostic pop

#include <cstdint>
#include <cstring>

namespace quill_simde_extra {

template <typename To, typename From>
inline To bits(const From& from) {
    static_assert(sizeof(To) == sizeof(From));
    To to;
    std::memcpy(&to, &from, sizeof(To));
    return to;
}

template <typename T, int N>
struct Lanes {
    T v[N];
};

inline __m512 cvtepi32_ps(__m512i a) {
    const auto in = bits<Lanes<int32_t, 16>>(a);
    Lanes<float, 16> out;
    for (int i = 0; i < 16; ++i) out.v[i] = static_cast<float>(in.v[i]);  // round to nearest, as vcvtdq2ps
    return bits<__m512>(out);
}

inline __m512i cvttps_epi32(__m512 a) {  // truncation; NaN and values out of range give INT32_MIN, as vcvttps2dq
    const auto in = bits<Lanes<float, 16>>(a);
    Lanes<int32_t, 16> out;
    for (int i = 0; i < 16; ++i) {
        const float x = in.v[i];
        out.v[i] = x > -2147483904.0f && x < 2147483648.0f ? static_cast<int32_t>(x) : INT32_MIN;
    }
    return bits<__m512i>(out);
}

inline __m512i cvtepi8_epi32(__m128i a) {
    const auto in = bits<Lanes<int8_t, 16>>(a);
    Lanes<int32_t, 16> out;
    for (int i = 0; i < 16; ++i) out.v[i] = in.v[i];
    return bits<__m512i>(out);
}

inline __m512i cvtepu16_epi32(__m256i a) {
    const auto in = bits<Lanes<uint16_t, 16>>(a);
    Lanes<int32_t, 16> out;
    for (int i = 0; i < 16; ++i) out.v[i] = in.v[i];
    return bits<__m512i>(out);
}

inline __m512 cvtph_ps(__m256i a) {  // F16C, exact, 8 halves at a time
    const __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(a)), hi = _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1));
    __m512 out;
    std::memcpy(reinterpret_cast<char*>(&out), &lo, 32);
    std::memcpy(reinterpret_cast<char*>(&out) + 32, &hi, 32);
    return out;
}

inline __m256i cvtps_ph(__m512 a, int) {  // F16C, 8 floats at a time; the kernels ask only for round to nearest even
    __m256 lo, hi;
    std::memcpy(&lo, reinterpret_cast<const char*>(&a), 32);
    std::memcpy(&hi, reinterpret_cast<const char*>(&a) + 32, 32);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT)),
                                   _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT), 1);
}

template <typename V>
inline void mask_storeu_32(void* p, uint16_t k, V a) {  // writes only the lanes in k
    for (int i = 0; i < 16; ++i) {
        if (k >> i & 1) std::memcpy(static_cast<char*>(p) + 4 * i, reinterpret_cast<const char*>(&a) + 4 * i, 4);
    }
}

inline __m256 extractf32x8_ps(__m512 a, int imm) {
    __m256 out;
    std::memcpy(&out, reinterpret_cast<const char*>(&a) + 32 * (imm & 1), 32);
    return out;
}

inline __m512 maskz_loadu_ps(uint16_t k, const void* p) {  // reads only the lanes in k
    Lanes<float, 16> out{};
    for (int i = 0; i < 16; ++i) {
        if (k >> i & 1) std::memcpy(&out.v[i], static_cast<const char*>(p) + 4 * i, 4);
    }
    return bits<__m512>(out);
}

inline __m256i maskz_loadu_epi16(uint16_t k, const void* p) {
    Lanes<uint16_t, 16> out{};
    for (int i = 0; i < 16; ++i) {
        if (k >> i & 1) std::memcpy(&out.v[i], static_cast<const char*>(p) + 2 * i, 2);
    }
    return bits<__m256i>(out);
}

inline float reduce_add_ps(__m512 a) {  // GCC's order: halves, quarters, then pairs
    const auto v = bits<Lanes<float, 16>>(a);
    float t3[8], t6[4];
    for (int i = 0; i < 8; ++i) t3[i] = v.v[8 + i] + v.v[i];
    for (int i = 0; i < 4; ++i) t6[i] = t3[4 + i] + t3[i];
    const float t8_0 = t6[0] + t6[2], t8_1 = t6[1] + t6[3];
    return t8_0 + t8_1;
}

// vpgatherdd: lane i from base + scale * idx_i
inline __m512i i32gather_epi32(__m512i idx, const void* base, int scale) {
    const auto in = bits<Lanes<int32_t, 16>>(idx);
    Lanes<int32_t, 16> out;
    for (int i = 0; i < 16; ++i)
        std::memcpy(&out.v[i], static_cast<const char*>(base) + static_cast<int64_t>(in.v[i]) * scale, 4);
    return bits<__m512i>(out);
}

}  // namespace quill_simde_extra

#define _mm512_cvtepi32_ps quill_simde_extra::cvtepi32_ps
#define _mm512_cvttps_epi32 quill_simde_extra::cvttps_epi32
#define _mm512_cvtepi8_epi32 quill_simde_extra::cvtepi8_epi32
#define _mm512_cvtepu16_epi32 quill_simde_extra::cvtepu16_epi32
#define _mm512_cvtph_ps quill_simde_extra::cvtph_ps
#define _mm512_cvtps_ph quill_simde_extra::cvtps_ph
#define _mm512_mask_storeu_ps quill_simde_extra::mask_storeu_32<__m512>
#define _mm512_mask_storeu_epi32 quill_simde_extra::mask_storeu_32<__m512i>
#define _mm512_extractf32x8_ps quill_simde_extra::extractf32x8_ps
#define _mm512_maskz_loadu_ps quill_simde_extra::maskz_loadu_ps
#define _mm256_maskz_loadu_epi16 quill_simde_extra::maskz_loadu_epi16
#define _mm512_reduce_add_ps quill_simde_extra::reduce_add_ps
#define _mm512_i32gather_epi32 quill_simde_extra::i32gather_epi32
#define _mm512_shuffle_i64x2(a, b, imm) simde_mm512_shuffle_i64x2(a, b, imm)  // SIMDe has it, without an alias
#define _cvtu64_mask64(x) static_cast<simde__mmask64>(x)

#define QUILL_AVX512_EMULATED 1
#define QUILL_AVX512_NS avx512_simde
