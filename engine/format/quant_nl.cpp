// The scalar reference codecs of the non-linear 4-bit types: IQ4_NL and IQ4_XS (a 16-level table with one fp16
// scale per 32 elements, or 6-bit scales under one fp16 per 256) and MXFP4 (E2M1 values under a power-of-two E8M0
// scale per 32). The quantizers reproduce ggml's quantize_iq4_nl / quantize_iq4_xs without an importance matrix
// and quantize_row_mxfp4_ref bit for bit: the same float operations in the same order.
#include "engine/format/quant.h"
#include "engine/format/quant_k.h"

#include <algorithm>
#include <cmath>

namespace quill::detail {

namespace {

// Scale candidates tried on each side of the first guess (ggml's ntry).
constexpr int kIq4Tries = 7;

// Index of the level of kIq4nlValues nearest x (the lower one on ties), by bisection as ggml does.
int nearest_iq4_level(float x) {
    const int8_t* v = kIq4nlValues;
    if (x <= v[0]) return 0;
    if (x >= v[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < v[mid]) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

// The least-squares scale of one 32-element block, found as ggml's quantize_row_iq4_nl_impl does without an
// importance matrix: weights x^2, a first guess from the largest magnitude, then 2 * kIq4Tries + 1 more guesses
// that move the largest value to neighbouring levels. L receives the levels of the first guess. 0 for a block of
// (near) zeros.
float iq4_block_scale(const float* x, uint8_t* L) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
        const float ax = std::fabs(x[j]);
        if (ax > amax) {
            amax = ax;
            max = x[j];
        }
    }
    if (amax < 1e-15f) return 0.0f;
    const auto v0 = static_cast<float>(kIq4nlValues[0]);
    float id = 1 / (-max / v0);
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
        const int l = nearest_iq4_level(id * x[j]);
        L[j] = static_cast<uint8_t>(l);
        const auto q = static_cast<float>(kIq4nlValues[l]);
        const float w = x[j] * x[j];
        sumqx += w * q * x[j];
        sumq2 += w * q * q;
    }
    float d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int itry = -kIq4Tries; itry <= kIq4Tries; ++itry) {
        id = (static_cast<float>(itry) + v0) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            const auto q = static_cast<float>(kIq4nlValues[nearest_iq4_level(id * x[j])]);
            const float w = x[j] * x[j];
            sumqx += w * q * x[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

// Packs the levels of 32 elements: element j in the low nibble of byte j, element j + 16 in its high nibble.
void pack_nibbles(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

void unpack_table(const uint8_t* qs, const int8_t* values, float d, float* y) {
    for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>(values[qs[j] & 0xF]);
        y[j + 16] = d * static_cast<float>(values[qs[j] >> 4]);
    }
}

// Index of the MXFP4 value nearest x / e (the first one on ties).
int nearest_mxfp4_code(float x, float e) {
    int best = 0;
    float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * e - x);
    for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(static_cast<float>(kMxfp4Values[i]) * e - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

}  // namespace

void dequantize_iq4_nl(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK4_NL) {
        const auto b = load_block<BlockIq4Nl>(src, i);
        unpack_table(b.qs, kIq4nlValues, fp16_to_fp32(b.d), y);
    }
}

void dequantize_iq4_xs(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i) {
        const auto b = load_block<BlockIq4Xs>(src, i);
        const float d = fp16_to_fp32(b.d);
        for (int j = 0; j < QK_K / 32; ++j, y += 32) {
            unpack_table(b.qs + 16 * j, kIq4nlValues, d * static_cast<float>(iq4_xs_scale(b, j) - 32), y);
        }
    }
}

void dequantize_mxfp4(const void* src, float* y, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, y += QK_MXFP4) {
        const auto b = load_block<BlockMxfp4>(src, i);
        const float d = mxfp4_scale(b.e);
        for (int j = 0; j < 16; ++j) {
            y[j] = static_cast<float>(kMxfp4Values[b.qs[j] & 0xF]) * d;
            y[j + 16] = static_cast<float>(kMxfp4Values[b.qs[j] >> 4]) * d;
        }
    }
}

void quantize_iq4_nl(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK4_NL) {
        BlockIq4Nl b{};
        uint8_t L[QK4_NL] = {};
        const float d = iq4_block_scale(x, L);
        b.d = fp32_to_fp16(d);
        // The levels are chosen again for the scale found (the level of 0 everywhere when the block is zero).
        const float id = d != 0.0f ? 1 / d : 0.0f;
        for (int j = 0; j < QK4_NL; ++j) L[j] = static_cast<uint8_t>(nearest_iq4_level(id * x[j]));
        pack_nibbles(L, b.qs);
        store_block(dst, i, b);
    }
}

void quantize_iq4_xs(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK_K) {
        BlockIq4Xs b{};
        uint8_t L[QK_K] = {};
        float scales[QK_K / 32];
        float max_scale = 0.0f, amax_scale = 0.0f;
        for (int j = 0; j < QK_K / 32; ++j) {
            scales[j] = iq4_block_scale(x + 32 * j, L + 32 * j);
            if (std::fabs(scales[j]) > amax_scale) {
                amax_scale = std::fabs(scales[j]);
                max_scale = scales[j];
            }
        }
        // One fp16 scale for the super-block, each sub-block's scale as a 6-bit multiple of it.
        const float d = -max_scale / 32;
        b.d = fp32_to_fp16(d);
        const float id = d != 0.0f ? 1 / d : 0.0f;
        for (int j = 0; j < QK_K / 32; ++j) {
            const int l = std::clamp(static_cast<int>(std::nearbyint(id * scales[j])), -32, 31);
            const float dl = d * static_cast<float>(l);
            const float idl = dl != 0.0f ? 1 / dl : 0.0f;
            for (int k = 0; k < 32; ++k) L[32 * j + k] = static_cast<uint8_t>(nearest_iq4_level(idl * x[32 * j + k]));
            const int ls = l + 32;
            b.scales_l[j / 2] = static_cast<uint8_t>(b.scales_l[j / 2] | ((ls & 0xF) << (4 * (j % 2))));
            b.scales_h = static_cast<uint16_t>(b.scales_h | ((ls >> 4) << (2 * j)));
        }
        for (int j = 0; j < QK_K / 32; ++j) pack_nibbles(L + 32 * j, b.qs + 16 * j);
        store_block(dst, i, b);
    }
}

void quantize_mxfp4(const float* x, void* dst, int64_t n_blocks) {
    for (int64_t i = 0; i < n_blocks; ++i, x += QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; ++j) amax = std::max(amax, std::fabs(x[j]));
        // The largest power of two <= amax becomes the value 4 (doubled 8): e = floor(log2(amax)) - 2 + 127,
        // kept within the 8 bits (ggml leaves magnitudes outside 2^-125..2^128 undefined).
        BlockMxfp4 b{};
        if (amax > 0.0f) {
            const float e = std::floor(std::log2(amax)) - 2 + 127;
            b.e = static_cast<uint8_t>(std::clamp(e, 0.0f, 255.0f));
        }
        const float d = mxfp4_scale(b.e);
        for (int j = 0; j < 16; ++j) {
            b.qs[j] = static_cast<uint8_t>(nearest_mxfp4_code(x[j], d) | (nearest_mxfp4_code(x[j + 16], d) << 4));
        }
        store_block(dst, i, b);
    }
}

}  // namespace quill::detail
