// Scalar reference codecs of the super-block types Q2_K..Q6_K and Q8_K (256 elements per block).
// The quantizers follow ggml's quantize_row_*_ref (no importance matrix) operation for operation, so that the bytes
// match: the scale searches below evaluate their float expressions in the same order as ggml does.
#include "engine/format/quant.h"
#include "engine/format/quant_k.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace quill::detail {

namespace {

constexpr float kGroupMaxEps = 1e-15f;  // below this a group counts as all zero (ggml's GROUP_MAX_EPS)

// Round to nearest, ties to even, for |x| < 2^22: adding 1.5 * 2^23 leaves the integer in the low mantissa bits.
int nearest_int(float x) {
    const float v = x + 12582912.0f;
    int32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    return (bits & 0x007FFFFF) - 0x00400000;
}

int clamp_int(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// Largest |x| and the signed value that has it (the first one on ties).
float signed_absmax(const float* x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; ++i) {
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
        }
    }
    return max;
}

// Symmetric quants L[i] = l + nmax, l in [-nmax, nmax), with the scale that minimizes sum x^2 (x - scale l)^2 over
// 19 trial inverse scales around -nmax / max (ggml's make_qx_quants with rmse_type 1 and no weights).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
    const float max = signed_absmax(x, n);
    if (std::fabs(max) < kGroupMaxEps) {
        std::fill(L, L + n, int8_t{0});
        return 0.0f;
    }
    // Sums of w x l and w l^2 with w = x^2, the quants written to L when `store`.
    auto fit = [&](float iscale, bool store, float& sumlx, float& suml2) {
        sumlx = 0.0f;
        suml2 = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            if (store) L[i] = static_cast<int8_t>(l + nmax);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * static_cast<float>(l);
            suml2 += w * static_cast<float>(l) * static_cast<float>(l);
        }
    };
    float sumlx, suml2;
    fit(static_cast<float>(-nmax) / max, true, sumlx, suml2);
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
        fit(iscale, false, sumlx, suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            fit(iscale, true, sumlx, suml2);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Symmetric quants L[i] = l + nmax refined one element at a time (up to 5 sweeps) to maximize the weighted fit,
// w = x^2 (ggml's make_q3_quants with do_rmse).
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
    const float max = signed_absmax(x, n);
    if (std::fabs(max) < kGroupMaxEps) {
        std::fill(L, L + n, int8_t{0});
        return 0.0f;
    }
    const float iscale = static_cast<float>(-nmax) / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = static_cast<int8_t>(l);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * static_cast<float>(l);
        suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            const auto li = static_cast<float>(L[i]);
            float slx = sumlx - w * x[i] * li;
            if (slx <= 0) continue;
            float sl2 = suml2 - w * li * li;
            const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (new_l == L[i]) continue;
            const auto nl = static_cast<float>(new_l);
            slx += w * x[i] * nl;
            sl2 += w * nl * nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = static_cast<int8_t>(new_l);
                sumlx = slx;
                suml2 = sl2;
                ++n_changed;
            }
        }
        if (n_changed == 0) break;
    }
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric quants x ~ scale * L[i] - the_min, L in [0, nmax]: a least-squares fit of scale and min for each of
// nstep + 1 trial inverse scales, keeping the one with the least weighted error (ggml's make_qkx2_quants).
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float& the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        std::fill(L, L + n, uint8_t{0});
        the_min = -min;
        return 0.0f;
    }
    auto error_of = [&](float scale, float mn, const uint8_t* q) {
        float err = 0.0f;
        for (int i = 0; i < n; ++i) {
            float diff = scale * static_cast<float>(q[i]) + mn - x[i];
            diff = use_mad ? std::fabs(diff) : diff * diff;
            err += weights[i] * diff;
        }
        return err;
    };
    float iscale = static_cast<float>(nmax) / (max - min);
    float scale = 1 / iscale;
    for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax));
    float best_error = error_of(scale, min, L);
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = static_cast<uint8_t>(l);
            const float w = weights[i];
            const auto lf = static_cast<float>(l);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        const float cur_error = error_of(this_scale, this_min, Laux);
        if (cur_error < best_error) {
            std::copy(Laux, Laux + n, L);
            best_error = cur_error;
            scale = this_scale;
            min = this_min;
        }
    }
    the_min = -min;
    return scale;
}

// The 6-bit scales and mins of the 8 sub-blocks of a Q4_K / Q5_K block, packed into 12 bytes: sub-blocks 0..3 in
// the low 6 bits of bytes 0..3 (scale) and 4..7 (min); 4..7 in the nibbles of bytes 8..11 with their top two bits
// in the high bits of bytes 0..7. get_scale_min_k4 in quant.h undoes it.
void pack_scale_min_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* scales) {
    std::memset(scales, 0, K_SCALE_SIZE);
    for (int j = 0; j < QK_K / 32; ++j) {
        if (j < 4) {
            scales[j] = ls[j];
            scales[j + 4] = lm[j];
        } else {
            scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            scales[j - 4] = static_cast<uint8_t>(scales[j - 4] | ((ls[j] >> 4) << 6));
            scales[j] = static_cast<uint8_t>(scales[j] | ((lm[j] >> 4) << 6));
        }
    }
}

// Shared by Q4_K and Q5_K: the per-sub-block scale search, the 6-bit scale packing and the final quants
// L[256] in [0, nmax] against the rounded scales. Fills scales, d, dmin.
void quantize_k4_scales(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* L,
                        uint8_t* packed_scales, uint16_t& d_half, uint16_t& dmin_half) {
    float scales[QK_K / 32], mins[QK_K / 32];
    float weights[32];
    uint8_t Laux[32];
    float max_scale = 0.0f, max_min = 0.0f;  // scales are positive: the min is taken out
    for (int j = 0; j < QK_K / 32; ++j) {
        const float* xs = x + 32 * j;
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
        scales[j] = make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, mins[j], Laux, rmin, rdelta, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t ls[QK_K / 32], lm[QK_K / 32];
    for (int j = 0; j < QK_K / 32; ++j) {
        ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
        lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    }
    pack_scale_min_k4(ls, lm, packed_scales);
    d_half = fp32_to_fp16(max_scale / 63.0f);
    dmin_half = fp32_to_fp16(max_min / 63.0f);

    // Requantize against the scales as stored; a sub-block whose scale rounds to zero keeps the search's quants.
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        get_scale_min_k4(j, packed_scales, sc, m);
        const float d = fp16_to_fp32(d_half) * static_cast<float>(sc);
        if (d == 0.0f) continue;
        const float dm = fp16_to_fp32(dmin_half) * static_cast<float>(m);
        for (int ii = 0; ii < 32; ++ii) {
            L[32 * j + ii] = static_cast<uint8_t>(clamp_int(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax));
        }
    }
}

// Q2_K / Q3_K quants: 2 bits each; byte l of each 32-byte half holds elements l, l+32, l+64, l+96 of that half.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < QK_K; j += 128) {
        for (int l = 0; l < 32; ++l) {
            qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                                 (L[j + l + 96] << 6));
        }
    }
}

// Inverse of pack_2bit: q[256].
void unpack_2bit(const uint8_t* qs, int* q) {
    for (int e = 0; e < QK_K; ++e) {
        const int half = e / 128, r = e % 128;
        q[e] = (qs[half * 32 + r % 32] >> (2 * (r / 32))) & 3;
    }
}

// The signed 6-bit scale j (0..15) of a Q3_K block: low nibble in bytes 0..7, top two bits in bytes 8..11.
int q3_k_scale(const uint8_t* scales, int j) {
    const int low = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
    const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | (high << 4)) - 32;
}

}  // namespace

// ---- Q2_K: x = d * sc * q - dmin * m, 16 sub-blocks of 16 with 4-bit sc and m ----

void dequantize_q2_k(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK_K) {
        const auto b = load_block<BlockQ2_K>(src, i);
        const float d = fp16_to_fp32(b.d);
        const float dmin = fp16_to_fp32(b.dmin);
        int q[QK_K];
        unpack_2bit(b.qs, q);
        for (int e = 0; e < QK_K; ++e) {
            const uint8_t sc = b.scales[e / 16];
            const float dl = d * static_cast<float>(sc & 0xF);
            const float ml = dmin * static_cast<float>(sc >> 4);
            y[e] = dl * static_cast<float>(q[e]) - ml;
        }
    }
}

void quantize_q2_k(const float* x, void* dst, int64_t n_blocks) {
    constexpr float q4scale = 15.0f;
    for (int64_t i = 0; i < n_blocks; ++i, x += QK_K) {
        uint8_t L[QK_K], Laux[16];
        float weights[16], scales[QK_K / 16], mins[QK_K / 16];
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        BlockQ2_K b{};
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) b.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
            b.d = fp32_to_fp16(max_scale / q4scale);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; ++j) {
                b.scales[j] = static_cast<uint8_t>(b.scales[j] | (nearest_int(iscale * mins[j]) << 4));
            }
            b.dmin = fp32_to_fp16(max_min / q4scale);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_fp32(b.d) * static_cast<float>(b.scales[j] & 0xF);
            if (d == 0.0f) continue;
            const float dm = fp16_to_fp32(b.dmin) * static_cast<float>(b.scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                L[16 * j + ii] = static_cast<uint8_t>(clamp_int(nearest_int((x[16 * j + ii] + dm) / d), 0, 3));
            }
        }
        pack_2bit(L, b.qs);
        store_block(dst, i, b);
    }
}

// ---- Q3_K: x = d * sc * (q - 4), q = 2 low bits in qs + 1 high bit in hmask; 16 signed 6-bit scales ----

void dequantize_q3_k(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK_K) {
        const auto b = load_block<BlockQ3_K>(src, i);
        const float d_all = fp16_to_fp32(b.d);
        int q[QK_K];
        unpack_2bit(b.qs, q);
        for (int e = 0; e < QK_K; ++e) {
            const float dl = d_all * static_cast<float>(q3_k_scale(b.scales, e / 16));
            const bool high = (b.hmask[e % 32] >> (e / 32)) & 1;  // element e: byte e % 32, bit e / 32
            y[e] = dl * static_cast<float>(q[e] - (high ? 0 : 4));
        }
    }
}

void quantize_q3_k(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK_K) {
        int8_t L[QK_K];
        float scales[QK_K / 16];
        float max_scale = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (std::fabs(scales[j]) > amax) {
                amax = std::fabs(scales[j]);
                max_scale = scales[j];
            }
        }
        BlockQ3_K b{};
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                const auto l8 = static_cast<int8_t>(nearest_int(iscale * scales[j]));
                const int l = clamp_int(l8, -32, 31) + 32;
                if (j < 8) {
                    b.scales[j] = static_cast<uint8_t>(l & 0xF);
                } else {
                    b.scales[j - 8] = static_cast<uint8_t>(b.scales[j - 8] | ((l & 0xF) << 4));
                }
                b.scales[j % 4 + 8] = static_cast<uint8_t>(b.scales[j % 4 + 8] | ((l >> 4) << (2 * (j / 4))));
            }
            b.d = fp32_to_fp16(1 / iscale);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_fp32(b.d) * static_cast<float>(q3_k_scale(b.scales, j));
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) {
                L[16 * j + ii] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
            }
        }
        uint8_t low[QK_K];
        for (int e = 0; e < QK_K; ++e) {
            if (L[e] > 3) b.hmask[e % 32] = static_cast<uint8_t>(b.hmask[e % 32] | (1 << (e / 32)));
            low[e] = static_cast<uint8_t>(L[e] & 3);
        }
        pack_2bit(low, b.qs);
        store_block(dst, i, b);
    }
}

// ---- Q4_K: x = d * sc * q - dmin * m, 8 sub-blocks of 32 with 6-bit sc and m; q 4 bits ----

void dequantize_q4_k(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK_K) {
        const auto b = load_block<BlockQ4_K>(src, i);
        const float d = fp16_to_fp32(b.d);
        const float dmin = fp16_to_fp32(b.dmin);
        // Sub-blocks 2k and 2k+1 share qs bytes [32k, 32k + 32): low nibbles, then high nibbles.
        for (int j = 0; j < QK_K / 32; ++j) {
            uint8_t sc, m;
            get_scale_min_k4(j, b.scales, sc, m);
            const float dl = d * static_cast<float>(sc);
            const float ml = dmin * static_cast<float>(m);
            const uint8_t* q = b.qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            for (int l = 0; l < 32; ++l) y[32 * j + l] = dl * static_cast<float>((q[l] >> shift) & 0xF) - ml;
        }
    }
}

void quantize_q4_k(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK_K) {
        BlockQ4_K b{};
        uint8_t L[QK_K];
        quantize_k4_scales(x, 15, -1.0f, 0.1f, 20, L, b.scales, b.d, b.dmin);
        for (int j = 0; j < QK_K / 64; ++j) {
            for (int l = 0; l < 32; ++l) {
                b.qs[32 * j + l] = static_cast<uint8_t>(L[64 * j + l] | (L[64 * j + l + 32] << 4));
            }
        }
        store_block(dst, i, b);
    }
}

// ---- Q5_K: as Q4_K with a fifth bit per element in qh (sub-block j uses bit j of qh[l]) ----

void dequantize_q5_k(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK_K) {
        const auto b = load_block<BlockQ5_K>(src, i);
        const float d = fp16_to_fp32(b.d);
        const float dmin = fp16_to_fp32(b.dmin);
        for (int j = 0; j < QK_K / 32; ++j) {
            uint8_t sc, m;
            get_scale_min_k4(j, b.scales, sc, m);
            const float dl = d * static_cast<float>(sc);
            const float ml = dmin * static_cast<float>(m);
            const uint8_t* q = b.qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            for (int l = 0; l < 32; ++l) {
                const int v = ((q[l] >> shift) & 0xF) + (((b.qh[l] >> j) & 1) << 4);
                y[32 * j + l] = dl * static_cast<float>(v) - ml;
            }
        }
    }
}

void quantize_q5_k(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK_K) {
        BlockQ5_K b{};
        uint8_t L[QK_K];
        quantize_k4_scales(x, 31, -0.5f, 0.1f, 15, L, b.scales, b.d, b.dmin);
        for (int j = 0; j < QK_K / 32; ++j) {
            for (int l = 0; l < 32; ++l) {
                const int v = L[32 * j + l];
                if (v > 15) b.qh[l] = static_cast<uint8_t>(b.qh[l] | (1 << j));
                uint8_t& byte = b.qs[32 * (j / 2) + l];
                byte = static_cast<uint8_t>(byte | ((v & 0xF) << (4 * (j % 2))));
            }
        }
        store_block(dst, i, b);
    }
}

// ---- Q6_K: x = d * sc * (q - 32), 16 sub-blocks of 16 with signed 8-bit sc; q = 4 bits in ql + 2 in qh ----
// Within each 128-element half: element r (0..127) has its low nibble in ql[64 * half + r % 64] (low nibble for
// r < 64, high otherwise) and its top two bits in qh[32 * half + r % 32] at bit 2 * (r / 32).

void dequantize_q6_k(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK_K) {
        const auto b = load_block<BlockQ6_K>(src, i);
        const float d = fp16_to_fp32(b.d);
        for (int e = 0; e < QK_K; ++e) {
            const int half = e / 128, r = e % 128;
            const int low = (b.ql[64 * half + r % 64] >> (4 * (r / 64))) & 0xF;
            const int high = (b.qh[32 * half + r % 32] >> (2 * (r / 32))) & 3;
            const int q = (low | (high << 4)) - 32;
            y[e] = d * static_cast<float>(b.scales[e / 16]) * static_cast<float>(q);
        }
    }
}

void quantize_q6_k(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK_K) {
        int8_t L[QK_K];
        float scales[QK_K / 16];
        float max_scale = 0.0f, max_abs_scale = 0.0f;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            if (std::fabs(scales[ib]) > max_abs_scale) {
                max_abs_scale = std::fabs(scales[ib]);
                max_scale = scales[ib];
            }
        }
        BlockQ6_K b{};
        if (max_abs_scale < kGroupMaxEps) {  // all zero
            store_block(dst, i, b);
            continue;
        }
        const float iscale = -128.0f / max_scale;
        b.d = fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            b.scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_fp32(b.d) * static_cast<float>(b.scales[j]);
            if (d == 0.0f) continue;
            for (int ii = 0; ii < 16; ++ii) {
                L[16 * j + ii] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
            }
        }
        for (int e = 0; e < QK_K; ++e) {
            const int half = e / 128, r = e % 128;
            uint8_t& lo = b.ql[64 * half + r % 64];
            lo = static_cast<uint8_t>(lo | ((L[e] & 0xF) << (4 * (r / 64))));
            uint8_t& hi = b.qh[32 * half + r % 32];
            hi = static_cast<uint8_t>(hi | (((L[e] >> 4) & 3) << (2 * (r / 32))));
        }
        store_block(dst, i, b);
    }
}

// ---- Q8_K: x = d * q with a float d; bsums[k] = sum of q over elements [16k, 16k + 16) ----

void dequantize_q8_k(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK_K) {
        const auto b = load_block<BlockQ8_K>(src, i);
        for (int e = 0; e < QK_K; ++e) y[e] = b.d * static_cast<float>(b.qs[e]);
    }
}

void quantize_q8_k(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK_K) {
        BlockQ8_K b{};
        const float max = signed_absmax(x, QK_K);
        if (max != 0.0f) {
            const float iscale = -127.0f / max;
            for (int e = 0; e < QK_K; ++e) b.qs[e] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[e])));
            for (int k = 0; k < QK_K / 16; ++k) {
                int sum = 0;
                for (int e = 0; e < 16; ++e) sum += b.qs[16 * k + e];
                b.bsums[k] = static_cast<int16_t>(sum);
            }
            b.d = 1 / iscale;
        }
        store_block(dst, i, b);
    }
}

}  // namespace quill::detail
