// PackedWeights' tiles written a value at a time: the layout avx512::pack_tiles writes with its transposes, for
// machines without AVX-512, and the Q5_0, Q5_1, IQ4_XS, Q6_K, Q3_K and Q2_K layouts for every family (Q6_K's AVX2 one
// besides).
#include <array>
#include <cstring>

#include "engine/cpu/kernels.h"
#include "engine/error.h"

namespace quill::cpu::generic {

namespace {

// Byte j of a Q5 block's qh word (elements 8j .. 8j + 7: k = 2j and 2j + 1, i = 0..3) spread as pack_tiles lays the
// word out, shifted by 2j: bit 8i of an entry is bit i of the byte (element 8j + i), bit 8i + 1 its bit 4 + i. A
// table look-up a byte instead of 32 single bits, which made packing a Q5_0 file far slower than a Q4_0 one.
constexpr std::array<uint32_t, 256> kSpreadQh = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t b = 0; b < 256; ++b)
        for (uint32_t i = 0; i < 4; ++i) t[b] |= ((b >> i) & 1u) << (8 * i) | ((b >> (4 + i)) & 1u) << (8 * i + 1);
    return t;
}();

// pack_tiles for Q4_K, Q5_K and IQ4_XS (see kernels.h): bytes o .. o + 3 of row r of a super-block at 8 o + 4 r.
void pack_k_tiles(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1) {
    const auto block_bytes = static_cast<int64_t>(row_size(w.type, 256));
    const int64_t n_groups = w.n_in / 256;
    const int64_t half_bytes = n_groups * block_bytes * 8;
    for (int64_t tile = tile0; tile < tile1; ++tile) {
        for (int64_t h = 0; h < 2; ++h) {
            auto* dst = static_cast<uint8_t*>(out) + (2 * tile + h) * half_bytes;
            for (int64_t g = 0; g < n_groups; ++g)
                for (int64_t o = 0; o < block_bytes; o += 4)
                    for (int64_t r = 0; r < 8; ++r, dst += 4) {  // a ragged tile repeats its last row
                        const int64_t row = std::min(tile * 16 + 8 * h + r, w.n_out - 1);
                        std::memcpy(dst,
                                    static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes) +
                                        g * block_bytes + o,
                                    4);
                    }
        }
    }
}

// The Rows rows of w from `first` as Block arrays: a ragged tile repeats its last row.
template <typename Block, int Rows>
std::array<const Block*, Rows> tile_rows(const WeightMatrix& w, int64_t first) {
    std::array<const Block*, Rows> rows{};
    for (int r = 0; r < Rows; ++r) {
        const int64_t row = std::min(first + r, w.n_out - 1);
        rows[r] = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w.data) +
                                                 row * static_cast<int64_t>(w.row_bytes));
    }
    return rows;
}

// The eight-row layouts' walk: each eight-row half of tiles [tile0, tile1) (two halves a tile), each of its
// super-blocks (super_bytes in out), each of its eight rows: pack_row(the row's block, the super-block's bytes, r).
template <typename Block, typename PackRow>
void pack_eight_row_halves(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1, int64_t super_bytes,
                           PackRow pack_row) {
    const int64_t n_groups = w.n_in / 256;
    for (int64_t half = 2 * tile0; half < 2 * tile1; ++half) {
        const auto rows = tile_rows<Block, 8>(w, 8 * half);
        auto* dst = static_cast<uint8_t*>(out) + half * n_groups * super_bytes;
        for (int64_t g = 0; g < n_groups; ++g, dst += super_bytes)
            for (int r = 0; r < 8; ++r) pack_row(rows[r][g], dst, r);
    }
}

// pack_tiles for Q6_K (see kQ6QuadBytes in kernels.h): each quad's super-blocks, each its halves' ql and qh chunks
// with the four rows side by side, then the rows' scales and d.
void pack_q6_k_tiles(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1) {
    const int64_t n_groups = w.n_in / 256;
    for (int64_t quad = 4 * tile0; quad < 4 * tile1; ++quad) {
        const auto rows = tile_rows<BlockQ6_K, 4>(w, 4 * quad);
        auto* dst = static_cast<uint8_t*>(out) + quad * n_groups * kQ6QuadBytes;
        for (int64_t g = 0; g < n_groups; ++g, dst += kQ6QuadBytes) {
            for (int64_t r = 0; r < 4; ++r) {
                const BlockQ6_K& b = rows[r][g];
                for (int64_t h = 0; h < 2; ++h) {
                    uint8_t* half = dst + h * kQ6HalfBytes;
                    for (int64_t c = 0; c < 4; ++c) std::memcpy(half + 64 * c + 16 * r, b.ql + 64 * h + 16 * c, 16);
                    for (int64_t c = 0; c < 2; ++c) std::memcpy(half + 256 + 64 * c + 16 * r, b.qh + 32 * h + 16 * c, 16);
                }
                std::memcpy(dst + kQ6ScalesAt + 16 * r, b.scales, 16);
                std::memcpy(dst + kQ6DAt + 2 * r, &b.d, 2);
            }
        }
    }
}

// pack_tiles for Q3_K (see kQ3SuperBytes in kernels.h): each eight-row half's super-blocks, each its 32-blocks' values
// three bits to the value in lanes, then the rows' unpacked scales and d.
void pack_q3_k_tiles(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1) {
    const auto pack_row = [](const BlockQ3_K& b, uint8_t* dst, int r) {
        for (int j = 0; j < 8; ++j) {
            uint8_t* x = dst + j * kQ3BlockBytes + 4 * r;  // X0 at x, X1 at x + 32, X2 at x + 64
            for (int i = 0; i < 4; ++i) {
                int u[8];  // u[k]: element 4 k + i of block j
                for (int k = 0; k < 8; ++k) {
                    const int l = 4 * k + i;
                    u[k] = ((b.qs[32 * (j / 4) + l] >> (2 * (j % 4))) & 3) | (((b.hmask[l] >> j) & 1) << 2);
                }
                x[i] = static_cast<uint8_t>(u[0] | u[1] << 3 | (u[2] & 3) << 6);
                x[32 + i] = static_cast<uint8_t>(u[3] | u[4] << 3 | (u[5] & 3) << 6);
                x[64 + i] = static_cast<uint8_t>(u[6] | u[7] << 3 | (u[2] >> 2) << 6 | (u[5] >> 2) << 7);
            }
        }
        for (int i = 0; i < 16; ++i) dst[kQ3ScalesAt + 8 * i + r] = static_cast<uint8_t>(q3_k_scale(b.scales, i));
        std::memcpy(dst + kQ3DAt + 2 * r, &b.d, 2);
    };
    pack_eight_row_halves<BlockQ3_K>(w, out, tile0, tile1, kQ3SuperBytes, pack_row);
}

// The 6-bit value q + 32 of element e (0..255) of a Q6_K block: the low four bits a nibble of ql, the top two bits
// of qh (see DecQ6_K in engine/cpu/x86/avx2/decoders.h).
int q6_k_value(const BlockQ6_K& b, int e) {
    const int half = e / 128, c = e % 128 / 32, l = e % 32;
    const int low = (b.ql[64 * half + 32 * (c % 2) + l] >> (4 * (c / 2))) & 0xF;
    return low | ((b.qh[32 * half + l] >> (2 * c)) & 3) << 4;
}

// pack_avx2_tiles for Q6_K (see kQ6EightSuperBytes in kernels.h): each eight-row half's super-blocks, each its
// 32-blocks' values six bits to the value in lanes, then the rows' scales and d.
void pack_q6_k_eights(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1) {
    const auto pack_row = [](const BlockQ6_K& b, uint8_t* dst, int r) {
        for (int j = 0; j < 8; ++j) {
            uint8_t* x = dst + j * kQ6EightBlockBytes + 4 * r;  // X_k at x + 32 k
            for (int i = 0; i < 4; ++i) {
                int u[8];  // u[k]: element 4 k + i of block j
                for (int k = 0; k < 8; ++k) u[k] = q6_k_value(b, 32 * j + 4 * k + i);
                for (int k = 0; k < 6; ++k)
                    x[32 * k + i] = static_cast<uint8_t>(u[k] | ((u[6 + k / 3] >> (2 * (k % 3))) & 3) << 6);
            }
        }
        for (int i = 0; i < 16; ++i) dst[kQ6EightScalesAt + 8 * i + r] = static_cast<uint8_t>(b.scales[i]);
        std::memcpy(dst + kQ6EightDAt + 2 * r, &b.d, 2);
    };
    pack_eight_row_halves<BlockQ6_K>(w, out, tile0, tile1, kQ6EightSuperBytes, pack_row);
}

// pack_tiles for Q2_K (see kQ2SuperBytes in kernels.h): each eight-row half's super-blocks, each its 32-blocks' values
// two bits to the value in lanes, then the rows' scale bytes, d and dmin.
void pack_q2_k_tiles(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1) {
    const auto pack_row = [](const BlockQ2_K& b, uint8_t* dst, int r) {
        for (int j = 0; j < 8; ++j) {
            uint8_t* x = dst + j * kQ2BlockBytes + 4 * r;  // X0 at x, X1 at x + 32
            for (int i = 0; i < 4; ++i) {
                for (int v = 0; v < 2; ++v) {
                    int byte = 0;  // u_k of element 4 k + i of block j, k = 4 v .. 4 v + 3
                    for (int k = 4 * v; k < 4 * v + 4; ++k)
                        byte |= ((b.qs[32 * (j / 4) + 4 * k + i] >> (2 * (j % 4))) & 3) << (2 * (k % 4));
                    x[32 * v + i] = static_cast<uint8_t>(byte);
                }
            }
        }
        for (int i = 0; i < 16; ++i) dst[kQ2ScalesAt + 8 * i + r] = b.scales[i];
        std::memcpy(dst + kQ2DAt + 2 * r, &b.d, 2);
        std::memcpy(dst + kQ2DminAt + 2 * r, &b.dmin, 2);
    };
    pack_eight_row_halves<BlockQ2_K>(w, out, tile0, tile1, kQ2SuperBytes, pack_row);
}

}  // namespace

bool pack_avx2_tiles(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1) {
    if (w.type != GgmlType::Q6_K) return false;
    pack_q6_k_eights(w, out, tile0, tile1);
    return true;
}

void pack_tiles(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1) {
    if (w.type == GgmlType::Q4_K || w.type == GgmlType::Q5_K || w.type == GgmlType::IQ4_XS)
        return pack_k_tiles(w, out, tile0, tile1);
    if (w.type == GgmlType::Q6_K) return pack_q6_k_tiles(w, out, tile0, tile1);
    if (w.type == GgmlType::Q3_K) return pack_q3_k_tiles(w, out, tile0, tile1);
    if (w.type == GgmlType::Q2_K) return pack_q2_k_tiles(w, out, tile0, tile1);
    const int64_t record = packed_record_bytes(w.type), nb = w.n_in / 32;
    const bool q8 = w.type == GgmlType::Q8_0, q5 = w.type == GgmlType::Q5_0 || w.type == GgmlType::Q5_1;
    const bool has_min = w.type == GgmlType::Q4_1 || w.type == GgmlType::Q5_1;
    const int64_t value_bytes = q8 ? 512 : 256;  // per record: 64 bytes per four bytes of each of the 16 rows
    const int64_t scales_at = value_bytes + (q5 ? 64 : 0);  // Q5_0, Q5_1: each row's qh word before the scales
    const auto block_bytes = static_cast<int64_t>(row_size(w.type, 32));
    const size_t qs_at = q8                         ? offsetof(BlockQ8_0, qs)
                         : w.type == GgmlType::Q4_0 || w.type == GgmlType::IQ4_NL ? offsetof(BlockQ4_0, qs)
                         : w.type == GgmlType::Q4_1 ? offsetof(BlockQ4_1, qs)
                         : w.type == GgmlType::Q5_0 ? offsetof(BlockQ5_0, qs)
                                                    : offsetof(BlockQ5_1, qs);
    const size_t qh_at = w.type == GgmlType::Q5_0 ? offsetof(BlockQ5_0, qh) : offsetof(BlockQ5_1, qh);
    static_assert(offsetof(BlockQ4_0, d) == 0 && offsetof(BlockQ8_0, d) == 0 && offsetof(BlockQ4_1, m) == 2);
    static_assert(offsetof(BlockQ5_0, d) == 0 && offsetof(BlockQ5_1, d) == 0 && offsetof(BlockQ5_1, m) == 2);
    static_assert(offsetof(BlockIq4Nl, d) == 0 && offsetof(BlockIq4Nl, qs) == offsetof(BlockQ4_0, qs));
    for (int64_t tile = tile0; tile < tile1; ++tile) {
        auto* rec = static_cast<uint8_t*>(out) + tile * nb * record;
        for (int64_t b = 0; b < nb; ++b, rec += record) {
            for (int64_t r = 0; r < 16; ++r) {  // a ragged tile repeats its last row
                const int64_t row = std::min(tile * 16 + r, w.n_out - 1);
                const uint8_t* block = static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes) +
                                       b * block_bytes;
                for (int64_t c = 0; c < value_bytes / 64; ++c) std::memcpy(rec + 64 * c + 4 * r, block + qs_at + 4 * c, 4);
                if (q5) {  // qh, spread: bit 8i + k = the fifth bit of element 4k + i
                    uint32_t qh = 0, spread = 0;
                    std::memcpy(&qh, block + qh_at, 4);
                    for (int j = 0; j < 4; ++j) spread |= kSpreadQh[(qh >> (8 * j)) & 0xFF] << (2 * j);
                    std::memcpy(rec + value_bytes + 4 * r, &spread, 4);
                }
                std::memcpy(rec + scales_at + 2 * r, block, 2);                        // d
                if (has_min) std::memcpy(rec + scales_at + 32 + 2 * r, block + 2, 2);  // m
            }
        }
    }
}

}  // namespace quill::cpu::generic
