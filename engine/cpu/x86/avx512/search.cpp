// Greedy sampling's search of the logits on AVX-512.
#include "engine/cpu/x86/avx512/common.h"

// (not in the tests' SIMDe build: the backend calls the native one alone)
#if defined(QUILL_AVX512_BUILT) && !defined(QUILL_AVX512_EMULATED)

namespace quill::cpu::QUILL_AVX512_NS {

// Sixteen lanes, each the largest value it has seen and the first index where it saw it (a larger value replaces
// it; an equal one, or NaN, does not), and the lanes' finiteness; then the largest of the lanes and the smallest
// index among the lanes that hold it: the first index of the row's largest value. One pass instead of three (the
// check, the maximum, the search for its first index): 16 rows of 49152 logits each step of a 16-sequence batch.
bool greedy_search(const float* x, int64_t n_search, int64_t n, int64_t* first, bool* finite) {
    constexpr int kNonFinite = 0x01 | 0x80 | 0x08 | 0x10;  // fpclass: QNaN, SNaN, +inf, -inf
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    __m512i vidx = _mm512_set1_epi32(-1), at = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __mmask16 bad = 0;
    int64_t i = 0;
    for (; i + 16 <= n_search; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        bad |= _mm512_fpclass_ps_mask(v, kNonFinite);
        const __mmask16 gt = _mm512_cmp_ps_mask(v, vmax, _CMP_GT_OQ);
        vmax = _mm512_mask_mov_ps(vmax, gt, v);
        vidx = _mm512_mask_mov_epi32(vidx, gt, at);
        at = _mm512_add_epi32(at, _mm512_set1_epi32(16));
    }
    if (i < n_search) {
        const auto m = static_cast<__mmask16>((1u << (n_search - i)) - 1);
        const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i);
        bad |= _mm512_mask_fpclass_ps_mask(m, v, kNonFinite);
        const __mmask16 gt = _mm512_mask_cmp_ps_mask(m, v, vmax, _CMP_GT_OQ);
        vmax = _mm512_mask_mov_ps(vmax, gt, v);
        vidx = _mm512_mask_mov_epi32(vidx, gt, at);
        i = n_search;
    }
    for (; i < n; i += 16) {  // past the search: the check alone
        const auto m = static_cast<__mmask16>(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
        bad |= _mm512_mask_fpclass_ps_mask(m, _mm512_maskz_loadu_ps(m, x + i), kNonFinite);
    }
    *finite = bad == 0;
    const float best = _mm512_reduce_max_ps(vmax);
    if (best == -INFINITY) {  // no lane took a value: every value -inf or NaN (as first_max: the first -inf, or 0)
        *first = 0;
        for (int64_t j = 0; j < n_search; ++j)
            if (x[j] == best) {
                *first = j;
                break;
            }
        return true;
    }
    *first = _mm512_mask_reduce_min_epu32(_mm512_cmp_ps_mask(vmax, _mm512_set1_ps(best), _CMP_EQ_OQ), vidx);
    return true;
}

}  // namespace quill::cpu::QUILL_AVX512_NS

#endif
