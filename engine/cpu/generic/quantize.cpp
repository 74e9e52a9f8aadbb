// The activations' int8 form, the quantizer every ISA shares: blocks of 32, da = max|x| / 127, q = round(x / da),
// and the lane layout the AVX2 kernels read.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/cpu/kernels.h"
#include "engine/error.h"

namespace quill::cpu {

// Every input, finite or not, quantizes to a value in -127..127: x * inv is clamped before it is converted (a float
// outside int32's range converts with undefined behaviour). inv overflows to inf for a subnormal scale and is 0 for
// an infinite one, and NaN never compares, so the clamp also covers those: NaN becomes 0, inf the nearest end.
// The non-finite activations themselves are caught after the layer (CpuBackend::forward).
float generic::quantize_block(const float* x, int8_t* q, int32_t* sums) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    for (int h = 0; h < 2; ++h) {
        sums[h] = 0;
        for (int i = 16 * h; i < 16 * h + 16; ++i) {
            const float y = x[i] * inv;
            const float clamped = y >= 127.0f ? 127.0f : y <= -127.0f ? -127.0f : y == y ? y : 0.0f;
            const auto v = static_cast<int32_t>(std::round(clamped));
            q[i] = static_cast<int8_t>(v);
            sums[h] += v;
        }
    }
    return d;
}

void quantize_activation_blocks(const float* x, int64_t n_in, int64_t t0, int64_t t1, int64_t b0, int64_t b1,
                                const QuantizedActs& out, QuantizeBlock quantize_block) {
    for (int64_t t = t0; t < t1; ++t) {
        const float* xr = x + t * n_in;                    // [n_in]
        int8_t* qr = out.qs + t * out.qs_stride;           // [qs_stride]
        float* dr = out.d + t * out.blk_stride;            // [blk_stride]
        float* dsr = out.ds + t * out.blk_stride;          // [blk_stride]
        float* ds16r = out.ds16 + 2 * t * out.blk_stride;  // [2 * blk_stride]
        int32_t* isumr = out.isum + t * out.blk_stride;    // [blk_stride]
        for (int64_t b = b0; b < b1; ++b) {
            int32_t sum[2];
            // The scale kept is rounded to fp16, as in a Q8_0 block: the oracle (reference_activations) and the
            // reference implementation see the same values.
            const float scale = fp16_to_fp32(fp32_to_fp16(quantize_block(xr + 32 * b, qr + 32 * b, sum)));
            dr[b] = scale;
            dsr[b] = scale * static_cast<float>(sum[0] + sum[1]);
            isumr[b] = sum[0] + sum[1];
            ds16r[2 * b] = scale * static_cast<float>(sum[0]);
            ds16r[2 * b + 1] = scale * static_cast<float>(sum[1]);
        }
        if (out.qs_u != nullptr) {
            uint8_t* ur = out.qs_u + t * out.qs_stride;
            for (int64_t i = 32 * b0; i < 32 * b1; i += 8) {  // eight bytes at a time: q ^ 0x80 = q + 128
                uint64_t w;
                std::memcpy(&w, qr + i, 8);
                w ^= 0x8080808080808080u;
                std::memcpy(ur + i, &w, 8);
            }
        }
        if (out.tile_qs != nullptr) {  // the token's place in its group's A tiles
            for (int64_t b = b0; b < b1; ++b) {
                std::memcpy(out.tile_qs + tile_entry(out, t, b) * 32, qr + 32 * b, 32);
                const int64_t at = tile_scale_entry(out, t, b);
                out.tile_d[at] = dr[b];
                out.tile_ds[at] = dsr[b];
                out.tile_isum[at] = isumr[b];
            }
        }
    }
}

void generic::lay_out_lanes(const QuantizedActs& q, int64_t t0, int64_t t1, int64_t b0, int64_t b1) {
    const int64_t nb = q.n_in / 32;
    for (int64_t t = t0; t < std::min(t1, q.n_tokens / kLaneTokens * kLaneTokens); ++t) {
        const int64_t j = t % kLaneTokens;
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t at = t * q.blk_stride + b;
            LaneActs& l = q.lanes[t / kLaneTokens * nb + b];
            for (int k = 0; k < 8; ++k) std::memcpy(l.qs[k] + 4 * j, q.qs + t * q.qs_stride + 32 * b + 4 * k, 4);
            l.d[j] = q.d[at];
            l.ds[j] = q.ds[at];
            l.isum[j] = q.isum[at];
        }
    }
}

void quantize_activations(const float* x, int64_t n_in, int64_t t0, int64_t t1, const QuantizedActs& out,
                          QuantizeBlock quantize_block) {
    const int64_t nb = n_in / 32;
    quantize_activation_blocks(x, n_in, t0, t1, 0, nb, out, quantize_block);
    for (int64_t t = t0; t < t1; ++t) write_row_padding(out, t, nb);
}

}  // namespace quill::cpu
