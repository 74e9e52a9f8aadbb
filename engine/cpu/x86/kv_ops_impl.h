// The attention primitives on AVX2 + F16C, the code of engine/cpu/x86/avx2/kv_ops.cpp. x86/avx512/kv_ops.cpp builds
// it a second time with AVX-512 (QUILL_KV_NS avx512kv): the keys-in-lanes scores and the mix then also go sixteen
// lanes at a time in zmm registers (__AVX512F__ below), every lane doing the operations of the eight-lane code in the
// same order, so both builds give the same bits.
#pragma once

#include "engine/cpu/x86/kv_ops.h"

#include "engine/cpu/attention.h"

#include "engine/format/quant.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#ifndef QUILL_KV_NS
#define QUILL_KV_NS avx2
#endif

namespace quill::cpu::QUILL_KV_NS {

namespace {

float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

__m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
__m256 load8(const float* p) { return _mm256_loadu_ps(p); }
float load1(const uint16_t* p) { return fp16_to_fp32(*p); }
float load1(const float* p) { return *p; }
#ifdef __AVX512F__
__m512 load16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
__m512 load16(const float* p) { return _mm512_loadu_ps(p); }
// Two key vectors of 8 positions, at p and q, as one vector of 16 (p's in the low lanes).
__m512 load2x8(const uint16_t* p, const uint16_t* q) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}
__m512 load2x8(const float* p, const float* q) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(p)), _mm256_loadu_ps(q), 1);
}
#endif

// out = sum_j p[j] v_j, 32 columns at a time so the accumulators stay in registers across all positions.
template <class T>
void mix(const float* p, const T* v, size_t stride, int head_dim, int n_kv, float* out) {
    int i0 = 0;
    for (; i0 + 8 <= head_dim; i0 += 32) {
        const int nvec = head_dim - i0 >= 32 ? 4 : (head_dim - i0) / 8;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int j = 0; j < n_kv; ++j) {
            const __m256 pj = _mm256_set1_ps(p[j]);
            const T* vj = v + j * stride + i0;
            for (int c = 0; c < nvec; ++c) acc[c] = _mm256_fmadd_ps(pj, load8(vj + 8 * c), acc[c]);
        }
        for (int c = 0; c < nvec; ++c) _mm256_storeu_ps(out + i0 + 8 * c, acc[c]);
        if (nvec < 4) {
            i0 += 8 * nvec;
            break;
        }
    }
    for (int i = i0; i < head_dim; ++i) {
        float s = 0.0f;
        for (int j = 0; j < n_kv; ++j) s += p[j] * load1(v + j * stride + i);
        out[i] = s;
    }
}

// W float lanes to a register (8: AVX2; 16: the AVX-512 build), for the code written once for both.
template <int W>
struct Lanes;
template <>
struct Lanes<8> {
    using V = __m256;
    static V zero() { return _mm256_setzero_ps(); }
    static V set1(float x) { return _mm256_set1_ps(x); }
    template <class T>
    static V load(const T* p) { return load8(p); }
    static V loadu(const float* p) { return _mm256_loadu_ps(p); }
    static void storeu(float* p, V x) { _mm256_storeu_ps(p, x); }
    static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
    static V add(V a, V b) { return _mm256_add_ps(a, b); }
    static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
    static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
    static V div(V a, V b) { return _mm256_div_ps(a, b); }
    static V min(V a, V b) { return _mm256_min_ps(a, b); }
    static V max(V a, V b) { return _mm256_max_ps(a, b); }
    static V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
    static V round(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    // 2^n for the integral n (in float) the exp below gives, through the exponent bits
    static V pow2(V n) {
        const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
        return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
    }
};
#ifdef __AVX512F__
template <>
struct Lanes<16> {
    using V = __m512;
    static V zero() { return _mm512_setzero_ps(); }
    static V set1(float x) { return _mm512_set1_ps(x); }
    template <class T>
    static V load(const T* p) { return load16(p); }
    static V loadu(const float* p) { return _mm512_loadu_ps(p); }
    static void storeu(float* p, V x) { _mm512_storeu_ps(p, x); }
    static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static V add(V a, V b) { return _mm512_add_ps(a, b); }
    static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
    static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
    static V div(V a, V b) { return _mm512_div_ps(a, b); }
    static V min(V a, V b) { return _mm512_min_ps(a, b); }
    static V max(V a, V b) { return _mm512_max_ps(a, b); }
    static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
    static V round(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static V pow2(V n) {
        const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
        return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
    }
};
#endif

// e^x for W floats, within 2 ulp of expf for x in [-87, 88] (x below gives e^-87, NaN stays NaN): x = n ln2 + r
// with |r| <= ln2 / 2, e^r by the minimax polynomial of Cephes' expf, times 2^n through the exponent bits. Each lane
// does the same operations whatever W, so exp8 and exp16 give the same bits.
template <int W>
typename Lanes<W>::V exp_lanes(typename Lanes<W>::V x) {
    using L = Lanes<W>;
    // max/min return their second operand when one is NaN: x second keeps a NaN.
    x = L::min(L::set1(88.3762626647949f), L::max(L::set1(-87.0f), x));
    const auto n = L::round(L::mul(x, L::set1(1.44269504088896341f)));
    auto r = L::fnmadd(n, L::set1(0.693359375f), x);
    r = L::fnmadd(n, L::set1(-2.12194440e-4f), r);
    auto p = L::set1(1.9875691500e-4f);
    p = L::fmadd(p, r, L::set1(1.3981999507e-3f));
    p = L::fmadd(p, r, L::set1(8.3334519073e-3f));
    p = L::fmadd(p, r, L::set1(4.1665795894e-2f));
    p = L::fmadd(p, r, L::set1(1.6666665459e-1f));
    p = L::fmadd(p, r, L::set1(5.0000001201e-1f));
    p = L::fmadd(p, L::mul(r, r), L::add(r, L::set1(1.0f)));
    return L::mul(p, L::pow2(n));
}
__m256 exp8(__m256 x) { return exp_lanes<8>(x); }
#ifdef __AVX512F__
__m512 exp16(__m512 x) { return exp_lanes<16>(x); }
#endif

constexpr int kMaxDim = kMaxHeadDim;
constexpr int KB = kKeyBlock;
constexpr int RL = kMaxTileRows;  // lanes of a position's scores with rows in lanes (RL / 8 vectors)

// Per-thread scratch of the tiled kernel (large for head_dim 512, so on the heap).
struct TileScratch {
    alignas(32) float q[kMaxTileRows][kMaxDim];  // the rows' queries, fp16-rounded with an F16 cache
    alignas(32) float qt[kMaxDim][RL];           // the same transposed: rows in lanes
    alignas(32) float kf[KB * kMaxDim];          // a block of K in float, in the cache's layout
    std::vector<float> s_mem;                    // scores, then probabilities, of every row and visible position

    float* scores(size_t n) {
        if (s_mem.size() < n + 8) s_mem.resize(n + 8);
        return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(s_mem.data()) + 31) & ~uintptr_t{31});
    }
};

TileScratch& tile_scratch() {
    thread_local std::unique_ptr<TileScratch> s;
    if (!s) s = std::make_unique<TileScratch>();
    return *s;
}

// The rows of one call: their visible positions [first, last], the union [lo, hi) of them, and where their scores go:
// rows in lanes (many rows) s[(j - lo) * RL + r]; keys in lanes (few rows) s[r * width + j - a0], a0 = lo rounded
// down to a multiple of 8.
struct Tile {
    int n, lo, hi;
    const int* first;
    const int* last;
    bool rows_in_lanes;
    int a0, width;

    Tile(const int* f, const int* l, int n_rows) : n(n_rows), lo(f[0]), hi(l[0] + 1), first(f), last(l) {
        for (int r = 1; r < n; ++r) {
            lo = f[r] < lo ? f[r] : lo;
            hi = l[r] + 1 > hi ? l[r] + 1 : hi;
        }
        rows_in_lanes = n > 4;
        a0 = lo / 8 * 8;
        width = (hi - a0 + 7) / 8 * 8;
    }
    size_t score_floats() const {
        return rows_in_lanes ? static_cast<size_t>(hi - lo) * RL : static_cast<size_t>(n) * width;
    }
    // Block b's positions [b_lo, b_hi) within [lo, hi), the blocks aligned to multiples of kKeyBlock.
    int b_lo(int b) const { return b * KB > lo ? b * KB : lo; }
    int b_hi(int b) const { return (b + 1) * KB < hi ? (b + 1) * KB : hi; }
};

// The arithmetic of every row, whichever layout computes it (they differ in what goes in the vector lanes, never in
// the operations on one row's numbers), the same as the plain attention's up to summation order and exp:
//   s_j = (fma chain over d = 0..hd-1 of q[d] k_j[d], from 0) * scale, for the visible j;
//   m = max s_j (and the row's sink, where it has one);  e_j = exp8(s_j - m);
//   l = ((L0 + L4) + (L2 + L6)) + ((L1 + L5) + (L3 + L7)), where Lc sums the e_j with j % 8 == c in order of j,
//   plus std::exp(sink - m) last where the row has a sink (sink_term);
//   p_j = e_j * (1 / l), fp16-rounded with an F16 cache;
//   out = sum over the blocks b in order, from 0, of o_b, where o_b[c] = fma chain over j in block b in order of
//   p_j v_j[c], from 0 (zero p_j outside a row's range add nothing).
// Scores and mix go a block of kKeyBlock positions at a time, the block loaded once for all the rows, and one call
// can take all the blocks or a decode's blocks can be spread over threads (tile_*_block below): the same numbers.

// K or V of a head: positions below n_shared (a multiple of 8) read from `shared`, the rest from `own`, at the same
// offsets from either (KvShare: the same values).
template <class T>
struct Src {
    const T* own = nullptr;
    const T* shared = nullptr;
    int n_shared = 0;
    const T* at(int j) const { return j < n_shared ? shared : own; }
    // The same from position j0 on, positions counted from there.
    Src from(int j0, size_t stride) const {
        return {own + static_cast<size_t>(j0) * stride,
                n_shared > j0 ? shared + static_cast<size_t>(j0) * stride : nullptr, n_shared - j0};
    }
};

// The rows' queries (fp16-rounded with an F16 cache), and transposed for rows in lanes.
void prepare_queries(const Tile& t, TileScratch& sc, const float* const* q, int hd, bool f16) {
    for (int r = 0; r < t.n; ++r) {
        for (int i = 0; i < hd; ++i) sc.q[r][i] = q[r][i];
        if (f16) round_f16(sc.q[r], hd);
    }
    if (t.rows_in_lanes)
        for (int d = 0; d < hd; ++d)
            for (int r = 0; r < RL; ++r) sc.qt[d][r] = r < t.n ? sc.q[r][d] : 0.0f;
}

// Scores of block b. Keys in lanes: eight positions' element d are one vector of the cache, loaded once for all the
// rows. Rows in lanes: each key's element is broadcast against up to kMaxTileRows rows. With v (keys in lanes: a
// decode), the block's V rows are prefetched for the mix that follows, and K runs ahead of its use the same way.
// `ahead` (when not null) steps a line a key vector every eight elements of a pass over the keys' d.
template <class T>
void tile_scores(const Tile& t, TileScratch& sc, Src<T> k, size_t kbs, int hd, float scale, int b, float* s,
                 Src<T> v = {}, size_t v_stride = 0, KvPrefetch* ahead = nullptr) {
    const __m256 vscale = _mm256_set1_ps(scale);
    if (!t.rows_in_lanes) {
        const int j0 = b * KB > t.a0 ? b * KB : t.a0;  // a multiple of 8
        const int nvec = (t.b_hi(b) - j0 + 7) / 8;
        // Key vector i of the block (positions j0 + 8i ..): from the shared copy below k.n_shared.
        auto key = [&](int i) { return k.at(j0 + 8 * i) + static_cast<size_t>(j0 / 8 + i) * kbs; };
        const int vec_bytes = 8 * hd * static_cast<int>(sizeof(T));
        const int row_bytes = hd * static_cast<int>(sizeof(T));
        // Key vector i's lines, and the V rows of its eight positions.
        auto prefetch = [&](int i) {
            const char* kv = reinterpret_cast<const char*>(key(i));
            for (int o = 0; o < vec_bytes; o += 64) _mm_prefetch(kv + o, _MM_HINT_T0);
            if (v.own == nullptr) return;
            for (int j = j0 + 8 * i; j < j0 + 8 * i + 8; ++j) {
                const char* vr = reinterpret_cast<const char*>(v.at(j) + static_cast<size_t>(j) * v_stride);
                for (int o = 0; o < row_bytes; o += 64) _mm_prefetch(vr + o, _MM_HINT_T1);
                _mm_prefetch(vr + row_bytes - 1, _MM_HINT_T1);  // (a row that does not start a line)
            }
        };
        constexpr int kAhead = 2;  // key vectors
        for (int i = 0; i < kAhead && i < nvec; ++i) prefetch(i);
        auto rows = [&]<int R>() {
            float* sr[R];
            for (int r = 0; r < R; ++r) sr[r] = s + static_cast<size_t>(r) * t.width + (j0 - t.a0);
            int i = 0;
            auto run = [&]<int KV>() {  // KV key vectors, each lane of each row its own chain over d
                for (int x = 0; x < KV; ++x)
                    if (i + x + kAhead < nvec) prefetch(i + x + kAhead);
                __m256 acc[KV][R];
                const T* kx[KV];
                for (int x = 0; x < KV; ++x) {
                    kx[x] = key(i + x);
                    for (int r = 0; r < R; ++r) acc[x][r] = _mm256_setzero_ps();
                }
                for (int d8 = 0; d8 < hd; d8 += 8) {  // (hd a multiple of 8)
                    if (ahead != nullptr) ahead->step(KV);
                    for (int d = d8; d < d8 + 8; ++d) {
                        __m256 kd[KV];
                        for (int x = 0; x < KV; ++x) kd[x] = load8(kx[x] + 8 * d);
                        for (int r = 0; r < R; ++r) {
                            const __m256 qd = _mm256_broadcast_ss(sc.q[r] + d);
                            for (int x = 0; x < KV; ++x) acc[x][r] = _mm256_fmadd_ps(qd, kd[x], acc[x][r]);
                        }
                    }
                }
                for (int x = 0; x < KV; ++x)
                    for (int r = 0; r < R; ++r) _mm256_store_ps(sr[r] + 8 * (i + x), _mm256_mul_ps(acc[x][r], vscale));
                i += KV;
            };
#ifdef __AVX512F__
            // KV registers of two key vectors each, sixteen positions to a register (32 of them): each lane the chain
            // above. With kHalf the last register holds one key vector (loaded twice; its low half stored), so that
            // what is left after the widest passes goes in one pass whose chains hide the fma latency together (a
            // lone register's R chains, or an eight-lane pass's, wait on it: a third of a decode's scores at 104
            // positions).
            auto run16 = [&]<int KV, bool kHalf>() {
                constexpr int kVectors = 2 * KV - (kHalf ? 1 : 0);
                for (int x = 0; x < kVectors; ++x)
                    if (i + x + kAhead < nvec) prefetch(i + x + kAhead);
                __m512 acc[KV][R];
                const T* kx[2 * KV];
                for (int x = 0; x < kVectors; ++x) kx[x] = key(i + x);
                if constexpr (kHalf) kx[2 * KV - 1] = kx[2 * KV - 2];
                for (int x = 0; x < KV; ++x)
                    for (int r = 0; r < R; ++r) acc[x][r] = _mm512_setzero_ps();
                for (int d8 = 0; d8 < hd; d8 += 8) {
                    if (ahead != nullptr) ahead->step(kVectors);
                    for (int d = d8; d < d8 + 8; ++d) {
                        __m512 kd[KV];
                        for (int x = 0; x < KV; ++x) kd[x] = load2x8(kx[2 * x] + 8 * d, kx[2 * x + 1] + 8 * d);
                        for (int r = 0; r < R; ++r) {
                            const __m512 qd = _mm512_set1_ps(sc.q[r][d]);
                            for (int x = 0; x < KV; ++x) acc[x][r] = _mm512_fmadd_ps(qd, kd[x], acc[x][r]);
                        }
                    }
                }
                for (int x = 0; x < KV; ++x)
                    for (int r = 0; r < R; ++r) {
                        const __m512 scaled = _mm512_mul_ps(acc[x][r], _mm512_set1_ps(scale));
                        if (kHalf && x == KV - 1)
                            _mm256_storeu_ps(sr[r] + 8 * (i + 2 * x), _mm512_castps512_ps256(scaled));
                        else
                            _mm512_storeu_ps(sr[r] + 8 * (i + 2 * x), scaled);
                    }
                i += kVectors;
            };
            constexpr int kMaxKv16 = R <= 2 ? 6 : 4;  // accumulators and keys within the 32 registers
            while (i + 2 * kMaxKv16 <= nvec) run16.template operator()<kMaxKv16, false>();
            // the rest (fewer than 2 * kMaxKv16 key vectors) in one pass
            [&]<int... P>(std::integer_sequence<int, P...>) {
                const int left = nvec - i;
                ((left == 2 * (P + 1) ? run16.template operator()<P + 1, false>()
                  : left == 2 * (P + 1) - 1 ? run16.template operator()<P + 1, true>()
                                            : void()),
                 ...);
            }(std::make_integer_sequence<int, kMaxKv16>());
#endif
            constexpr int kMaxKv = R <= 2 ? 4 : R == 3 ? 3 : 2;  // accumulators and keys within the 16 registers
            while (i + kMaxKv <= nvec) run.template operator()<kMaxKv>();
            // (a lone key vector's R chains wait on the fma latency: the rest two at a time where it can)
            if constexpr (kMaxKv > 2)
                while (i + 2 <= nvec) run.template operator()<2>();
            while (i < nvec) run.template operator()<1>();
        };
        switch (t.n) {
            case 1: rows.template operator()<1>(); break;
            case 2: rows.template operator()<2>(); break;
            case 3: rows.template operator()<3>(); break;
            default: rows.template operator()<4>(); break;
        }
        return;
    }
    const int b0 = t.b_lo(b), b1 = t.b_hi(b);
    // The block's key vectors in float (converted from fp16 once, or read in place): element d of position j at
    // kf + (j / 8 - b0 / 8) * kstride + d * 8 + j % 8.
    const float* kf = sc.kf;
    size_t kstride = static_cast<size_t>(hd) * 8;
    if constexpr (sizeof(T) == 4) {
        if (b1 <= k.n_shared || b0 >= k.n_shared) {  // in place, unless the block's key vectors are in two places
            kf = k.at(b0) + static_cast<size_t>(b0 / 8) * kbs;
            kstride = kbs;
        }
    }
    if (kf == sc.kf) {
        for (int j8 = b0 / 8; j8 <= (b1 - 1) / 8; ++j8) {
            const T* src = k.at(8 * j8) + static_cast<size_t>(j8) * kbs;
            float* dst = sc.kf + static_cast<size_t>(j8 - b0 / 8) * hd * 8;
            for (int d = 0; d < hd; ++d) _mm256_store_ps(dst + 8 * d, load8(src + 8 * d));
        }
    }
    // KG keys at a time for the RV vectors of eight rows that hold rows
    auto rows_vectors = [&]<int RV, int KG>(int& j) {
        __m256 acc[KG][RV];
        for (int x = 0; x < KG; ++x)
            for (int h = 0; h < RV; ++h) acc[x][h] = _mm256_setzero_ps();
        const float* kx[KG];
        for (int x = 0; x < KG; ++x) kx[x] = kf + static_cast<size_t>((j + x) / 8 - b0 / 8) * kstride + (j + x) % 8;
        for (int d8 = 0; d8 < hd; d8 += 8) {
            if (ahead != nullptr) ahead->step(1);
            for (int d = d8; d < d8 + 8; ++d) {
                __m256 qv[RV];
                for (int h = 0; h < RV; ++h) qv[h] = _mm256_load_ps(&sc.qt[d][8 * h]);
                for (int x = 0; x < KG; ++x) {
                    const __m256 kd = _mm256_broadcast_ss(kx[x] + 8 * d);
                    for (int h = 0; h < RV; ++h) acc[x][h] = _mm256_fmadd_ps(qv[h], kd, acc[x][h]);
                }
            }
        }
        for (int x = 0; x < KG; ++x)
            for (int h = 0; h < RV; ++h)
                _mm256_store_ps(s + (j + x - t.lo) * RL + 8 * h, _mm256_mul_ps(acc[x][h], vscale));
        j += KG;
    };
    auto all_keys = [&]<int RV>() {
        constexpr int KG = 12 / RV;
        int j = b0;
        while (j + KG <= b1) rows_vectors.template operator()<RV, KG>(j);
        while (j < b1) rows_vectors.template operator()<RV, 1>(j);
    };
    switch ((t.n + 7) / 8) {
        case 1: all_keys.template operator()<1>(); break;
        case 2: all_keys.template operator()<2>(); break;
        case 3: all_keys.template operator()<3>(); break;
        default: all_keys.template operator()<4>(); break;
    }
}

// Row r's share of the softmax's denominator from its sink, e^(sink - m) with std::exp as the plain attention has it
// (attention.cpp), m the row's maximum (the sink included); 0 without sinks. Every lane layout adds it last.
float sink_term(const float* sinks, int r, float m) { return sinks != nullptr ? std::exp(sinks[r] - m) : 0.0f; }
// m, or row r's sink where that is larger.
float with_sink(const float* sinks, int r, float m) { return sinks != nullptr && sinks[r] > m ? sinks[r] : m; }

// The softmax of every row over all of its scores, in place: s becomes p. sinks (when not null): the rows' sinks.
void tile_softmax(const Tile& t, float* s, bool f16, const float* sinks) {
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
    if (!t.rows_in_lanes) {
#ifdef __AVX512F__
        // Sixteen positions to a register, the visible ones as a mask; the sum goes into the eight lanes of L0..L7
        // a key vector at a time, in order. The rows go together through each pass, so that their chains (the
        // maximum, the sum) overlap instead of each row waiting on its own.
        auto rows = [&]<int R>() {
            const int n_vec = t.width / 8;
            const __m512i lane16 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            float* sr[R];
            __m512i first[R], last[R];
            for (int r = 0; r < R; ++r) {
                sr[r] = s + static_cast<size_t>(r) * t.width;
                first[r] = _mm512_set1_epi32(t.first[r]);
                last[r] = _mm512_set1_epi32(t.last[r]);
            }
            // the register at vector i: two key vectors, one where i is the last
            auto lanes = [&](int i) -> __mmask16 { return i + 1 < n_vec ? 0xffff : 0xff; };
            auto visible = [&](int r, int i) -> __mmask16 {
                const __m512i j = _mm512_add_epi32(_mm512_set1_epi32(t.a0 + 8 * i), lane16);
                return _mm512_cmple_epi32_mask(first[r], j) & _mm512_cmple_epi32_mask(j, last[r]) & lanes(i);
            };
            __m512 vmax[R];
            for (int r = 0; r < R; ++r) vmax[r] = _mm512_set1_ps(-INFINITY);
            for (int i = 0; i < n_vec; i += 2)
                for (int r = 0; r < R; ++r)
                    vmax[r] = _mm512_mask_max_ps(vmax[r], visible(r, i), vmax[r],
                                                 _mm512_maskz_loadu_ps(lanes(i), sr[r] + 8 * i));
            __m512 vm[R];
            __m256 lsum[R];
            float m[R];
            for (int r = 0; r < R; ++r) {
                m[r] = with_sink(sinks, r, _mm512_reduce_max_ps(vmax[r]));
                vm[r] = _mm512_set1_ps(m[r]);
                lsum[r] = _mm256_setzero_ps();
            }
            for (int i = 0; i < n_vec; i += 2)
                for (int r = 0; r < R; ++r) {
                    const __m512 x = _mm512_maskz_loadu_ps(lanes(i), sr[r] + 8 * i);
                    const __m512 e = _mm512_maskz_mov_ps(visible(r, i), exp16(_mm512_sub_ps(x, vm[r])));
                    _mm512_mask_storeu_ps(sr[r] + 8 * i, lanes(i), e);
                    lsum[r] = _mm256_add_ps(lsum[r], _mm512_castps512_ps256(e));
                    if (i + 1 < n_vec) lsum[r] = _mm256_add_ps(lsum[r], _mm512_extractf32x8_ps(e, 1));
                }
            __m512 inv[R];
            for (int r = 0; r < R; ++r)  // ((L0 + L4) + (L2 + L6)) + ((L1 + L5) + (L3 + L7))
                inv[r] = _mm512_set1_ps(1.0f / (hsum(lsum[r]) + sink_term(sinks, r, m[r])));
            for (int i = 0; i < n_vec; i += 2)
                for (int r = 0; r < R; ++r) {
                    __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes(i), sr[r] + 8 * i), inv[r]);
                    if (f16) p = _mm512_cvtph_ps(_mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
                    _mm512_mask_storeu_ps(sr[r] + 8 * i, lanes(i), p);
                }
        };
        switch (t.n) {
            case 1: rows.template operator()<1>(); break;
            case 2: rows.template operator()<2>(); break;
            case 3: rows.template operator()<3>(); break;
            default: rows.template operator()<4>(); break;
        }
        return;
#endif
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        for (int r = 0; r < t.n; ++r) {
            float* sr = s + static_cast<size_t>(r) * t.width;
            const __m256i first = _mm256_set1_epi32(t.first[r]), last = _mm256_set1_epi32(t.last[r]);
            auto visible = [&](int i) {
                const __m256i j = _mm256_add_epi32(_mm256_set1_epi32(t.a0 + 8 * i), lane);
                return _mm256_castsi256_ps(
                    _mm256_andnot_si256(_mm256_or_si256(_mm256_cmpgt_epi32(first, j), _mm256_cmpgt_epi32(j, last)),
                                        _mm256_set1_epi32(-1)));
            };
            __m256 vmax = neg_inf;
            for (int i = 0; i < t.width / 8; ++i)
                vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(neg_inf, _mm256_load_ps(sr + 8 * i), visible(i)));
            alignas(32) float lanes[8];
            _mm256_store_ps(lanes, vmax);
            float m = lanes[0];
            for (int x = 1; x < 8; ++x) m = m > lanes[x] ? m : lanes[x];
            m = with_sink(sinks, r, m);
            const __m256 vm = _mm256_set1_ps(m);
            __m256 lsum = _mm256_setzero_ps();
            for (int i = 0; i < t.width / 8; ++i) {
                const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_load_ps(sr + 8 * i), vm)), visible(i));
                _mm256_store_ps(sr + 8 * i, e);
                lsum = _mm256_add_ps(lsum, e);
            }
            // ((L0 + L4) + (L2 + L6)) + ((L1 + L5) + (L3 + L7)), then the sink's share
            const __m256 inv = _mm256_set1_ps(1.0f / (hsum(lsum) + sink_term(sinks, r, m)));
            for (int i = 0; i < t.width / 8; ++i) {
                __m256 p = _mm256_mul_ps(_mm256_load_ps(sr + 8 * i), inv);
                if (f16) p = _mm256_cvtph_ps(_mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
                _mm256_store_ps(sr + 8 * i, p);
            }
        }
        return;
    }
    __m256i first[RL / 8], last[RL / 8];
    for (int h = 0; h < RL / 8; ++h) {
        alignas(32) int f8[8], l8[8];
        for (int x = 0; x < 8; ++x) {
            const int r = 8 * h + x;
            f8[x] = r < t.n ? t.first[r] : 1;  // padding rows see nothing
            l8[x] = r < t.n ? t.last[r] : 0;
        }
        first[h] = _mm256_load_si256(reinterpret_cast<const __m256i*>(f8));
        last[h] = _mm256_load_si256(reinterpret_cast<const __m256i*>(l8));
    }
    auto visible = [&](int j, int h) {
        const __m256i pos = _mm256_set1_epi32(j);
        return _mm256_castsi256_ps(_mm256_andnot_si256(
            _mm256_or_si256(_mm256_cmpgt_epi32(first[h], pos), _mm256_cmpgt_epi32(pos, last[h])),
            _mm256_set1_epi32(-1)));
    };
    for (int h = 0; h < (t.n + 7) / 8; ++h) {
        __m256 vmax = neg_inf;
        for (int j = t.lo; j < t.hi; ++j)
            vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(neg_inf, _mm256_load_ps(s + (j - t.lo) * RL + 8 * h),
                                                        visible(j, h)));
        alignas(32) float m8[8], e8[8];  // the rows' maxima with their sinks, and the sinks' shares (padding: 0)
        if (sinks != nullptr) {
            _mm256_store_ps(m8, vmax);
            for (int x = 0; x < 8; ++x) {
                const int r = 8 * h + x;
                if (r < t.n) m8[x] = with_sink(sinks, r, m8[x]);
                e8[x] = r < t.n ? sink_term(sinks, r, m8[x]) : 0.0f;
            }
            vmax = _mm256_load_ps(m8);
        }
        __m256 lsum[8];
        for (int c = 0; c < 8; ++c) lsum[c] = _mm256_setzero_ps();
        for (int j = t.lo; j < t.hi; ++j) {
            float* sj = s + (j - t.lo) * RL + 8 * h;
            const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_load_ps(sj), vmax)), visible(j, h));
            _mm256_store_ps(sj, e);
            lsum[j % 8] = _mm256_add_ps(lsum[j % 8], e);
        }
        __m256 l = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(lsum[0], lsum[4]), _mm256_add_ps(lsum[2], lsum[6])),
                                 _mm256_add_ps(_mm256_add_ps(lsum[1], lsum[5]), _mm256_add_ps(lsum[3], lsum[7])));
        if (sinks != nullptr) l = _mm256_add_ps(l, _mm256_load_ps(e8));
        const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), l);
        for (int j = t.lo; j < t.hi; ++j) {
            float* sj = s + (j - t.lo) * RL + 8 * h;
            __m256 p = _mm256_mul_ps(_mm256_load_ps(sj), inv);
            if (f16) p = _mm256_cvtph_ps(_mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
            _mm256_store_ps(sj, p);
        }
    }
}

// Lines of the next unit `ahead` steps through a position of the mix: one in the AVX2 build, where two slowed a
// batched decode's attention; two in the AVX-512 build, whose kernels leave less time between a unit's loads (there
// two were faster than one, and four slower than two).
#ifdef __AVX512F__
constexpr int kMixLines = 2;
#else
constexpr int kMixLines = 1;
#endif

// o[g][c..c+W*V) = sum_j p(g, j) v_j over positions [0, n_kv) (one chain per element from 0), V vectors of W lanes
// per row, with p(g, j) at p[g * row_stride + j * key_stride]; the G rows share each converted V vector. Stored
// into o, or added to what o holds when `add`. Each lane's operations are the same whatever W. `ahead` (when not
// null) steps kMixLines lines a position.
template <int W, int G, int V, int key_stride, bool add, class T>
void mix_columns(const float* p, int row_stride, Src<T> v, size_t stride, int c, int n_kv, float* const* o,
                 KvPrefetch* ahead) {
    using L = Lanes<W>;
    const float* pg[G];
    for (int g = 0; g < G; ++g) pg[g] = p + g * row_stride;
    typename L::V acc[G][V];
    for (int g = 0; g < G; ++g)
        for (int x = 0; x < V; ++x) acc[g][x] = L::zero();
    auto position = [&](const T* rows, int j) {
        const T* vj = rows + static_cast<size_t>(j) * stride + c;
        typename L::V vv[V];
        if (ahead != nullptr) ahead->step(kMixLines);
        for (int x = 0; x < V; ++x) vv[x] = L::load(vj + W * x);
        for (int g = 0; g < G; ++g) {
            const typename L::V pj = L::set1(pg[g][j * key_stride]);
            for (int x = 0; x < V; ++x) acc[g][x] = L::fmadd(pj, vv[x], acc[g][x]);
        }
    };
    const int n_shared = std::min(v.n_shared, n_kv);  // the shared positions, then the head's own: one chain
    for (int j = 0; j < n_shared; ++j) position(v.shared, j);
    for (int j = std::max(n_shared, 0); j < n_kv; ++j) position(v.own, j);
    for (int g = 0; g < G; ++g)
        for (int x = 0; x < V; ++x) {
            float* dst = o[g] + c + W * x;
            L::storeu(dst, add ? L::add(L::loadu(dst), acc[g][x]) : acc[g][x]);
        }
}

// Calls f.template operator()<G>(r0) for chunks [r0, r0 + G) of at most 6 rows covering [0, n).
template <class F>
void by_chunks(int n, F&& f) {
    for (int r0 = 0; r0 < n; r0 += 6) {
        switch (n - r0) {
            case 1: f.template operator()<1>(r0); break;
            case 2: f.template operator()<2>(r0); break;
            case 3: f.template operator()<3>(r0); break;
            case 4: f.template operator()<4>(r0); break;
            case 5: f.template operator()<5>(r0); break;
            default: f.template operator()<6>(r0); break;
        }
    }
}

// o_b of block b for every row: stored into o, or added to it when `add`.
template <bool add, class T>
void tile_mix(const Tile& t, const float* s, Src<T> v, size_t stride, int hd, int b, float* const* o,
              KvPrefetch* ahead = nullptr) {
    const int b0 = t.b_lo(b), b1 = t.b_hi(b);
    const Src<T> vb = v.from(b0, stride);
    by_chunks(t.n, [&]<int G>(int r0) {
        // V vectors of columns a pass: G * V accumulators, each a chain of fmas (three rows, a decode's of SmolLM2,
        // take three vectors, nine chains: with two, six chains waited on the fma latency)
        constexpr int V = G <= 2 ? 4 : G == 3 ? 3 : G <= 6 ? 2 : 1;
        auto columns = [&]<int KS>(const float* pr, int row_stride) {
            int c = 0;
#ifdef __AVX512F__
            for (; c + 64 <= hd; c += 64)
                mix_columns<16, G, 4, KS, add>(pr, row_stride, vb, stride, c, b1 - b0, o + r0, ahead);
            for (; c + 16 <= hd; c += 16)
                mix_columns<16, G, 1, KS, add>(pr, row_stride, vb, stride, c, b1 - b0, o + r0, ahead);
#endif
            for (; c + 8 * V <= hd; c += 8 * V)
                mix_columns<8, G, V, KS, add>(pr, row_stride, vb, stride, c, b1 - b0, o + r0, ahead);
            if constexpr (V > 2)
                for (; c + 16 <= hd; c += 16)
                    mix_columns<8, G, 2, KS, add>(pr, row_stride, vb, stride, c, b1 - b0, o + r0, ahead);
            for (; c < hd; c += 8) mix_columns<8, G, 1, KS, add>(pr, row_stride, vb, stride, c, b1 - b0, o + r0, ahead);
        };
        if (t.rows_in_lanes)
            columns.template operator()<RL>(s + (b0 - t.lo) * RL + r0, 1);
        else
            columns.template operator()<1>(s + static_cast<size_t>(r0) * t.width + (b0 - t.a0), t.width);
    });
}

template <class T>
void attend_tile(const float* const* q, const int* first, const int* last, int n, const T* k, size_t kbs, const T* v,
                 size_t stride, int hd, float scale, float softcap, const float* sinks, float* const* out,
                 const KvShare& share, KvPrefetch* ahead) {
    TileScratch& sc = tile_scratch();
    const Tile t(first, last, n);
    prepare_queries(t, sc, q, hd, sizeof(T) == 2);
    float* s = sc.scores(t.score_floats());
    const int b_begin = t.lo / KB, b_end = (t.hi - 1) / KB + 1;
    const int n_shared = share.k != nullptr ? share.positions : 0;
    const Src<T> ks{k, static_cast<const T*>(share.k), n_shared}, vs{v, static_cast<const T*>(share.v), n_shared};
    for (int b = b_begin; b < b_end; ++b) tile_scores(t, sc, ks, kbs, hd, scale, b, s, vs, stride, ahead);
    if (softcap > 0.0f) softcap_scores(s, t.score_floats(), softcap);  // (invisible slots too: the softmax masks them)
    tile_softmax(t, s, sizeof(T) == 2, sinks);
    for (int r = 0; r < n; ++r) std::fill(out[r], out[r] + hd, 0.0f);
    for (int b = b_begin; b < b_end; ++b) tile_mix<true>(t, s, vs, stride, hd, b, out, ahead);
}

}  // namespace

void mix_f16(const float* p, const uint16_t* v, size_t stride, int head_dim, int n_kv, float* out) {
    mix(p, v, stride, head_dim, n_kv, out);
}
void mix_f32(const float* p, const float* v, size_t stride, int head_dim, int n_kv, float* out) {
    mix(p, v, stride, head_dim, n_kv, out);
}

void round_f16(float* x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; ++i) x[i] = fp16_to_fp32(fp32_to_fp16(x[i]));
}

void tile_f16(const float* const* q, const int* first, const int* last, int n, const uint16_t* k,
              size_t k_block_stride, const uint16_t* v, size_t v_stride, int head_dim, float scale, float softcap,
              const float* sinks, float* const* out, const KvShare& share, KvPrefetch* ahead) {
    attend_tile(q, first, last, n, k, k_block_stride, v, v_stride, head_dim, scale, softcap, sinks, out, share, ahead);
}

void tile_f32(const float* const* q, const int* first, const int* last, int n, const float* k, size_t k_block_stride,
              const float* v, size_t v_stride, int head_dim, float scale, float softcap, const float* sinks,
              float* const* out, const KvShare& share, KvPrefetch* ahead) {
    attend_tile(q, first, last, n, k, k_block_stride, v, v_stride, head_dim, scale, softcap, sinks, out, share, ahead);
}

size_t tile_score_floats(const int* first, const int* last, int n) { return Tile(first, last, n).score_floats(); }

namespace {

template <class T>
void scores_of_block(const float* const* q, const int* first, const int* last, int n, const T* k, size_t kbs, int hd,
                     float scale, int b, float* s) {
    TileScratch& sc = tile_scratch();
    const Tile t(first, last, n);
    prepare_queries(t, sc, q, hd, sizeof(T) == 2);
    tile_scores(t, sc, Src<T>{k}, kbs, hd, scale, b, s);
}

}  // namespace

void tile_scores_f16(const float* const* q, const int* first, const int* last, int n, const uint16_t* k,
                     size_t k_block_stride, int head_dim, float scale, int b, float* s) {
    scores_of_block(q, first, last, n, k, k_block_stride, head_dim, scale, b, s);
}

void tile_scores_f32(const float* const* q, const int* first, const int* last, int n, const float* k,
                     size_t k_block_stride, int head_dim, float scale, int b, float* s) {
    scores_of_block(q, first, last, n, k, k_block_stride, head_dim, scale, b, s);
}

void tile_softmax(const int* first, const int* last, int n, bool f16, const float* sinks, float* s) {
    tile_softmax(Tile(first, last, n), s, f16, sinks);
}

void tile_mix_f16(const int* first, const int* last, int n, const uint16_t* v, size_t v_stride, int head_dim, int b,
                  const float* s, float* const* o) {
    tile_mix<false>(Tile(first, last, n), s, Src<uint16_t>{v}, v_stride, head_dim, b, o);
}

void tile_mix_f32(const int* first, const int* last, int n, const float* v, size_t v_stride, int head_dim, int b,
                  const float* s, float* const* o) {
    tile_mix<false>(Tile(first, last, n), s, Src<float>{v}, v_stride, head_dim, b, o);
}

}  // namespace quill::cpu::QUILL_KV_NS
