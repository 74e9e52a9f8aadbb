// PackedWeights on AVX-512: the packer (the sixteen-row records, with transposes) and the kernels that read the
// records as they lie, with AMX tile multiplies for prefill where built.
//
// packed_k_rows hands rows16_tokens its steps and no rows: GCC 12 carries the null rows into lanes.h's branch for no
// steps (rows16_decode), which never runs here, and reports its rows[0] as out of bounds (a warning about lanes.h's
// code, so it is turned off before the includes).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Warray-bounds"
#endif
#include "engine/cpu/x86/avx512/amx.h"
#include "engine/cpu/x86/avx512/iq4_decoders.h"
#include "engine/cpu/x86/avx512/lanes.h"
#include "engine/cpu/x86/avx512/rows.h"

// (not in the tests' SIMDe build: the backend calls the file's-rows kernels alone)
#if defined(QUILL_AVX512_BUILT) && !defined(QUILL_AVX512_EMULATED)

namespace quill::cpu::QUILL_AVX512_NS {

namespace {

// ---- PackedWeights: the sixteen-row records read as they lie ----
// A record (packed_record_bytes) holds a block's values already in lanes and the sixteen scales side by side, so
// a Step16 is a few loads (and nibble masks) instead of a transpose and gathers, and the tiles are one stream.
// The arithmetic is rows16_block's (and amx_tile's), so results have the bits of the unpacked kernels.

template <GgmlType Type>
struct Packed16 {
    static constexpr bool kQ8 = Type == GgmlType::Q8_0;
    static constexpr bool kQ5 = Type == GgmlType::Q5_0 || Type == GgmlType::Q5_1;
    static constexpr int kOffset = kQ8 ? 128 : Type == GgmlType::Q4_0 ? 8 : Type == GgmlType::Q5_0 ? 16 : 0;
    static constexpr bool kHasMin = Type == GgmlType::Q4_1 || Type == GgmlType::Q5_1;
    static constexpr int64_t kRecordBytes = packed_record_bytes(Type);
    static constexpr int64_t kValueBytes = kQ8 ? 512 : 256;
    static constexpr int64_t kScalesAt = kValueBytes + (kQ5 ? 64 : 0);  // Q5_0, Q5_1: the rows' qh words first
    static_assert(kRecordBytes > 0);

    [[gnu::always_inline]] static Step16 step(const uint8_t* rec) {
        Step16 s;
        if constexpr (kQ8) {  // signed values flipped to unsigned (u = q + 128)
            for (int k = 0; k < 8; ++k)
                s.w[k] = _mm512_xor_si512(_mm512_loadu_si512(rec + 64 * k), _mm512_set1_epi8(static_cast<char>(0x80)));
        } else {
            for (int j = 0; j < 4; ++j) {
                const __m512i x = _mm512_loadu_si512(rec + 64 * j);
                s.w[j] = low_nibbles(x);
                s.w[4 + j] = high_nibbles(x);
            }
        }
        if constexpr (kQ5) {  // lane r's qh word spread: bit 8i + k the fifth bit of element 4k + i (byte i of w[k])
            const __m512i qh = _mm512_loadu_si512(rec + kValueBytes);
            for (int k = 0; k < 8; ++k) {
                const __mmask64 set = _mm512_test_epi8_mask(qh, _mm512_set1_epi8(static_cast<char>(1 << k)));
                s.w[k] = _mm512_mask_add_epi8(s.w[k], set, s.w[k], _mm512_set1_epi8(16));
            }
        }
        s.ws = _mm512_cvtph_ps(load256(rec + kScalesAt));
        if constexpr (kHasMin) s.wm = _mm512_cvtph_ps(load256(rec + kScalesAt + 32));
        return s;
    }
};

// Packed IQ4_NL: Q4_0's records (an IQ4_NL block is laid out as Q4_0's: the fp16 d, then the 16 bytes of nibbles),
// the nibbles looked up in the type's 16 levels plus 128: Dec16Table's bytes, so the steps and the bits of the file's
// rows.
struct Packed16Iq4Nl {
    static constexpr int kOffset = 128;
    static constexpr bool kHasMin = false;
    static constexpr int64_t kRecordBytes = packed_record_bytes(GgmlType::IQ4_NL);
    static_assert(kRecordBytes == Packed16<GgmlType::Q4_0>::kRecordBytes);

    [[gnu::always_inline]] static Step16 step(const uint8_t* rec) {
        Step16 s = Packed16<GgmlType::Q4_0>::step(rec);
        const __m512i levels = levels_512(kIq4nlValues);
        for (__m512i& w : s.w) w = _mm512_shuffle_epi8(levels, w);
        return s;
    }
};

// The record kPrefetchBytes ahead of rec, into L2 (the packed tiles of a thread's rows are one stream).
template <typename P>
[[gnu::always_inline]] inline void prefetch_record(const uint8_t* rec) {
    for (int64_t o = 0; o < P::kRecordBytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(rec + kPrefetchBytes + o), _MM_HINT_T1);
}

#ifdef QUILL_AMX
// amx_tile's steps for a single token group, over the row tiles of a range one after another (their records are
// one stream): each record is decoded (signed) two blocks before the tile unit loads it, into a ring of four, so
// that the stores have reached the cache when the tile load reads them and the decode overlaps the tile work; the
// next row tile's first blocks are decoded while the one before ends (no stall on them at a tile's first multiply).
template <typename P>
struct StepStream {
    const uint8_t* records;  // the range's first row tile
    int64_t nb, total;       // blocks per row tile, in the range
    int64_t base = 0;        // the current row tile's first block in the stream
    Step16 ring[4];
    StepStream(const uint8_t* first, int64_t n, int64_t tiles) : records(first), nb(n), total(n * tiles) {
        for (int64_t g = 0; g < 2 && g < total; ++g) decode(g);
    }
    // (Inlined: a call inside amx_tile's loop would make its accumulators, caller-saved registers, live in memory.)
    [[gnu::always_inline]] void decode(int64_t g) {
        const uint8_t* rec = records + g * P::kRecordBytes;
        prefetch_record<P>(rec);
        Step16 st = P::step(rec);
        to_signed<P>(st);
        ring[g & 3] = st;
    }
    // Block b of the current row tile.
    [[gnu::always_inline]] const Step16& operator()(int64_t b) {
        const int64_t g = base + b;
        if (g + 2 < total) decode(g + 2);
        return ring[g & 3];
    }
    void next_tile() { base += nb; }
};
#endif

// out[t][r] = row r of a tile against token t0 + t, t < T (decode: the steps decoded as they stream by), from
// each_step(f), which calls f(b, step) for the tile's blocks in order.
template <typename Dec, int T, typename Steps>
[[gnu::always_inline]] inline void decode_tokens(const QuantizedActs& q, int64_t t0, float (*out)[16],
                                                 Steps&& each_step) {
    __m512 acc[T];
    TokenActs ta[T];
    for (int t = 0; t < T; ++t) {
        ta[t] = TokenActs(q, t0 + t);
        acc[t] = _mm512_setzero_ps();
    }
    each_step([&](int64_t b, const Step16& st) __attribute__((always_inline)) {
        for (int t = 0; t < T; ++t) rows16_block<Dec>(st, ta[t], b, acc[t]);
    });
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(out[t], acc[t]);
}

// decode_tokens over a packed tile's records.
template <typename P, int T>
void packed_decode(const uint8_t* tile, int64_t nb, const QuantizedActs& q, int64_t t0, float (*out)[16]) {
    decode_tokens<P, T>(q, t0, out, [&](auto&& f) __attribute__((always_inline)) {
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* rec = tile + b * P::kRecordBytes;
            prefetch_record<P>(rec);
            f(b, P::step(rec));
        }
    });
}

// Rows [r0, r1) of y for all tokens from PackedWeights: decode below kRows16MinTokens tokens; exactly one group of
// the tile layout (a 16-sequence decode step) in one pass, rows16_group; more decode each tile into steps once and
// run rows16_tile over them, or with Amx from kAmxMinTokens on amx_tile (tokens in chunks).
template <typename P, bool Amx>
void packed_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    const WeightMatrix& w = *args.w;
    const QuantizedActs& q = *args.q;
    const int64_t nb = w.n_in / 32, n_tokens = args.n_tokens;
    const auto* packed = static_cast<const uint8_t*>(w.packed);
    const int64_t tile_bytes = nb * P::kRecordBytes;
    auto* steps = reinterpret_cast<Step16*>(scratch);  // [nb] (scratch is 64-byte aligned)
    const bool prefill = n_tokens >= kRows16MinTokens;
#ifdef QUILL_AMX
    const bool amx = Amx && n_tokens >= kAmxMinTokens && q.tile_qs != nullptr;
    if (amx) configure_tiles();
    const int64_t chunk = amx ? amx_chunk_tokens(q) : n_tokens;
    std::optional<StepStream<P>> stream;  // one token group's records, across the row tiles
#else
    const int64_t chunk = n_tokens;
#endif
    for (int64_t c0 = 0; c0 < n_tokens; c0 += chunk) {
        const int64_t c1 = min64(n_tokens, c0 + chunk);
        for (int64_t r = r0; r < r1; r += 16) {
            const auto mask = static_cast<__mmask16>((1u << min64(16, r1 - r)) - 1);
            const uint8_t* tile = packed + (r / 16) * tile_bytes;
#ifdef QUILL_AMX
            if (amx && c1 - c0 <= 16) {  // one token group: each record decoded as the tile unit comes to it
                if (r == r0) stream.emplace(tile, nb, (r1 - r0 + 15) / 16);
                const int nt = static_cast<int>(c1 - c0);
                float* y = args.y + c0 * w.n_out + r;
                if (nt > 8) {
                    amx_tile<P, 16>(*stream, nb, q, c0, nt, y, w.n_out, mask);
                } else {
                    amx_tile<P, 8>(*stream, nb, q, c0, nt, y, w.n_out, mask);
                }
                stream->next_tile();
                continue;
            }
#endif
#ifdef QUILL_AMX
            if (amx) {
                for (int64_t b = 0; b < nb; ++b) {
                    const uint8_t* rec = tile + b * P::kRecordBytes;
                    prefetch_record<P>(rec);
                    steps[b] = P::step(rec);
                    to_signed<P>(steps[b]);
                }
                amx_tokens<P>(steps, nb, q, c0, c1, args.y + r, w.n_out, mask);
                continue;
            }
#endif
            if (prefill && c1 - c0 == kAmxGroup && q.tile_qs != nullptr && c0 % kAmxGroup == 0) {  // one whole group
                float out[kAmxGroup][16];
                // The next tile's records even past r1: a thread's next rows usually follow (UnitRanges).
                rows16_group<P>(nb, q, c0, out, {r + 16 < w.n_out ? tile + tile_bytes : nullptr, P::kRecordBytes},
                                tile);
                float* y = args.y + c0 * w.n_out + r;
                for (int j = 0; j < kAmxGroup; ++j) _mm512_mask_storeu_ps(y + j * w.n_out, mask, _mm512_loadu_ps(out[j]));
                continue;
            }
            for (int64_t t = c0; t < c1;) {
                float* y = args.y + t * w.n_out + r;
                float out[kRows16Tokens][16];
                int nt;
                if (prefill) {  // the first tokens' multiply decodes the tile; the first passes prefetch the next one
                    // With two passes or more, the first two take every other record each.
                    const bool split = c1 - c0 > kRows16Tokens;
                    const bool prefetching = r + 16 < w.n_out && (t == c0 || (split && t == c0 + kRows16Tokens));
                    const NextRecords next{prefetching ? tile + tile_bytes : nullptr, P::kRecordBytes, split ? 2 : 1,
                                           t == c0 ? 0 : 1};
                    nt = rows16_tokens<P>(steps, nullptr, 0, nb, q, t, c1 - t, out, next, t == c0 ? tile : nullptr);
                } else if (c1 - t >= 3) {
                    packed_decode<P, 3>(tile, nb, q, t, out), nt = 3;
                } else if (c1 - t == 2) {
                    packed_decode<P, 2>(tile, nb, q, t, out), nt = 2;
                } else {
                    packed_decode<P, 1>(tile, nb, q, t, out), nt = 1;
                }
                for (int j = 0; j < nt; ++j) _mm512_mask_storeu_ps(y + j * w.n_out, mask, _mm512_loadu_ps(out[j]));
                t += nt;
            }
        }
    }
#ifdef QUILL_AMX
    if (amx) _tile_release();
#endif
}

// ---- Packed Q4_K, Q5_K and IQ4_XS: generic::pack_tiles' layout, which the AVX2 kernels read too ----
// A tile is two eight-row halves, each its rows' super-blocks in order, each super-block's 16-byte chunks as the
// four vectors of AVX2's transpose of eight rows; the two halves' 32 bytes side by side are the vectors
// transpose_16x16 makes of the sixteen rows, two loads each instead of a transpose, so Dec16K4::steps gives the
// steps (and the bits) of the file's layout from one stream a half (Dec16Iq4Xs::steps likewise).
template <typename Dec>
struct PackedK16 {
    static constexpr int64_t kSuperBytes = 8 * Dec::kGroupBytes;  // a super-block of eight rows
    int64_t half;                                                  // from half 0 of a tile to half 1
    const uint8_t* tile;
    PackedK16(const WeightMatrix& w, int64_t r)
        : half(w.n_in / 256 * kSuperBytes), tile(static_cast<const uint8_t*>(w.packed) + r / 16 * 2 * half) {}

    // f(b, step) for the sub-blocks b of super-block g, in order; the same share of `next` (the next tile, or
    // null) prefetched into L2, so that the next tile is in cache when this one ends.
    template <typename F>
    [[gnu::always_inline]] void for_group(int64_t g, const uint8_t* next, F&& f) const {
        const uint8_t* sb = tile + g * kSuperBytes;
        constexpr int64_t kLines = (kSuperBytes + 63) / 64;
        int64_t line = 0;
        Dec::steps(g, [&](size_t at, __m512i x[4]) __attribute__((always_inline)) {
            for (int k = 0; k < 4; ++k) {
                const uint8_t* p = sb + 8 * at + 32 * k;
                x[k] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(p)), load256(p + half), 1);
            }
        }, [&](int64_t b, const Step16& st) __attribute__((always_inline)) {
            // An eighth of the lines a sub-block: all of a super-block's at once filled the line-fill buffers and
            // stalled the loads.
            const int64_t upto = kLines * (b % 8 + 1) / 8;
            for (; next != nullptr && line < upto; ++line) {
                _mm_prefetch(reinterpret_cast<const char*>(next + g * kSuperBytes + 64 * line), _MM_HINT_T1);
                _mm_prefetch(reinterpret_cast<const char*>(next + half + g * kSuperBytes + 64 * line), _MM_HINT_T1);
            }
            f(b, st);
        });
    }
};

// decode_tokens over a packed K tile's super-blocks (sixteen rows a vector; each lane's operations are those of
// rows8_block, the unpacked decode path's).
template <typename Dec, int T>
void packed_k_decode(const PackedK16<Dec>& src, const uint8_t* next, int64_t nb, const QuantizedActs& q, int64_t t0,
                     float (*out)[16]) {
    decode_tokens<Dec, T>(q, t0, out, [&](auto&& f) __attribute__((always_inline)) {
        for (int64_t g = 0; g < nb / Dec::kGroupSteps; ++g) src.for_group(g, next, f);
    });
}

// Rows [r0, r1) of y for all tokens from packed Q4_K or Q5_K: decode below kRows16MinTokens tokens; more decode
// each tile into steps once and run rows16_tile over them, or with Amx from kAmxMinTokens on amx_tile (tokens in
// chunks, a tile decoded again for each).
template <typename Dec, bool Amx>
void packed_k_rows(const KernelArgs& args, int64_t r0, int64_t r1, float* scratch) {
    const WeightMatrix& w = *args.w;
    const QuantizedActs& q = *args.q;
    const int64_t nb = w.n_in / 32, n_tokens = args.n_tokens;
    auto* steps = reinterpret_cast<Step16*>(scratch);  // [nb] (scratch is 64-byte aligned)
    // One group of the tile layout, 8 to 16 tokens (decode steps of that many sequences): each super-block decoded
    // once and multiplied by the tokens in one pass (group_tokens for 8, 12 or 16 of them), on AMX too: decoding the
    // tile into steps for amx_tile and reading them back took longer at every count from 8 to 16, as did the
    // AVX-512 kernels' passes of eight over the steps.
    const bool one_group = n_tokens <= kAmxGroup && q.tile_qs != nullptr;
#ifdef QUILL_AMX
    const bool amx = Amx && n_tokens >= kAmxMinTokens && q.tile_qs != nullptr && !one_group;
    if (amx) configure_tiles();
    const int64_t chunk = amx ? amx_chunk_tokens(q) : n_tokens;
#else
    const int64_t chunk = n_tokens;
#endif
    for (int64_t c0 = 0; c0 < n_tokens; c0 += chunk) {
        const int64_t c1 = min64(n_tokens, c0 + chunk);
        for (int64_t r = r0; r < r1; r += 16) {
            const auto mask = static_cast<__mmask16>((1u << min64(16, r1 - r)) - 1);
            const PackedK16<Dec> src(w, r);
            // The next tile even past r1: a thread's next rows usually follow (UnitRanges).
            const uint8_t* next = r + 16 < w.n_out ? src.tile + 2 * src.half : nullptr;
            float out[kRows16Tokens][16];
            if (n_tokens < kRows16MinTokens) {
                for (int64_t t = c0; t < c1;) {
                    int nt = 1;
                    if (c1 - t >= 3) {
                        packed_k_decode<Dec, 3>(src, next, nb, q, t, out), nt = 3;
                    } else if (c1 - t == 2) {
                        packed_k_decode<Dec, 2>(src, next, nb, q, t, out), nt = 2;
                    } else {
                        packed_k_decode<Dec, 1>(src, next, nb, q, t, out);
                    }
                    for (int j = 0; j < nt; ++j)
                        _mm512_mask_storeu_ps(args.y + (t + j) * w.n_out + r, mask, _mm512_loadu_ps(out[j]));
                    t += nt;
                }
                continue;
            }
            if (one_group) {
                float group[kAmxGroup][16];
                auto each_step = [&](auto&& f) __attribute__((always_inline)) {
                    for (int64_t g = 0; g < nb / Dec::kGroupSteps; ++g) src.for_group(g, next, f);
                };
                if (n_tokens > 12) {  // (the tile layout's padding tokens are zeros)
                    group_tokens<Dec>(q, 0, group, each_step);
                } else if (n_tokens > 8) {
                    group_tokens<Dec, 12>(q, 0, group, each_step);
                } else {
                    group_tokens<Dec, 8>(q, 0, group, each_step);
                }
                for (int j = 0; j < n_tokens; ++j)
                    _mm512_mask_storeu_ps(args.y + j * w.n_out + r, mask, _mm512_loadu_ps(group[j]));
                continue;
            }
            for (int64_t g = 0; g < nb / Dec::kGroupSteps; ++g) {
                src.for_group(g, next, [&](int64_t b, const Step16& st) {
                    steps[b] = st;
#ifdef QUILL_AMX
                    if (amx) to_signed<Dec>(steps[b]);
#endif
                });
            }
#ifdef QUILL_AMX
            if (amx) {
                amx_tokens<Dec>(steps, nb, q, c0, c1, args.y + r, w.n_out, mask);
                continue;
            }
#endif
            for (int64_t t = c0; t < c1;) {
                const int nt = rows16_tokens<Dec>(steps, nullptr, 0, nb, q, t, c1 - t, out);
                for (int j = 0; j < nt; ++j)
                    _mm512_mask_storeu_ps(args.y + (t + j) * w.n_out + r, mask, _mm512_loadu_ps(out[j]));
                t += nt;
            }
        }
    }
#ifdef QUILL_AMX
    if (amx) _tile_release();
#endif
}

// generic::pack_tiles' layout of Q4_K and Q5_K: each 16-byte chunk of sixteen rows' super-blocks transposed once,
// its vectors' two halves stored to the tile's two halves.
void pack_k_tiles(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1) {
    const auto block_bytes = static_cast<int64_t>(row_size(w.type, 256));
    const int64_t n_groups = w.n_in / 256, half_bytes = n_groups * block_bytes * 8;
    for (int64_t tile = tile0; tile < tile1; ++tile) {
        const uint8_t* rows[16];
        for (int r = 0; r < 16; ++r) {  // a ragged tile repeats its last row
            const int64_t row = min64(tile * 16 + r, w.n_out - 1);
            rows[r] = static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes);
        }
        auto* half0 = static_cast<uint8_t*>(out) + 2 * tile * half_bytes;
        for (int64_t g = 0; g < n_groups; ++g) {
            for (int64_t c = 0; c < block_bytes / 16; ++c) {
                __m512i x[4];
                transpose_16x16(rows, static_cast<size_t>(g * block_bytes + 16 * c), x);
                for (int k = 0; k < 4; ++k) {
                    auto* at = reinterpret_cast<__m256i*>(half0 + g * 8 * block_bytes + 128 * c + 32 * k);
                    _mm256_storeu_si256(at, _mm512_castsi512_si256(x[k]));
                    _mm256_storeu_si256(at + half_bytes / 32, _mm512_extracti64x4_epi64(x[k], 1));
                }
            }
        }
    }
}

}  // namespace

bool pack_tiles(const WeightMatrix& w, void* out, int64_t tile0, int64_t tile1) {
    if (w.type == GgmlType::Q4_K || w.type == GgmlType::Q5_K) return pack_k_tiles(w, out, tile0, tile1), true;
    if (w.type != GgmlType::Q4_0 && w.type != GgmlType::Q4_1 && w.type != GgmlType::Q8_0 &&
        w.type != GgmlType::IQ4_NL)
        return false;
    const int64_t record = packed_record_bytes(w.type), nb = w.n_in / 32;
    const bool q8 = w.type == GgmlType::Q8_0, has_min = w.type == GgmlType::Q4_1;
    const int64_t value_bytes = q8 ? 512 : 256;  // per record
    const auto block_bytes = static_cast<int64_t>(row_size(w.type, 32));
    const size_t qs_at = has_min ? offsetof(BlockQ4_1, qs) : q8 ? offsetof(BlockQ8_0, qs) : offsetof(BlockQ4_0, qs);
    static_assert(offsetof(BlockQ4_0, d) == 0 && offsetof(BlockQ8_0, d) == 0 && offsetof(BlockQ4_1, m) == 2);
    static_assert(offsetof(BlockIq4Nl, d) == 0 && offsetof(BlockIq4Nl, qs) == offsetof(BlockQ4_0, qs) &&
                  sizeof(BlockIq4Nl) == sizeof(BlockQ4_0));
    for (int64_t tile = tile0; tile < tile1; ++tile) {
        const uint8_t* rows[16];
        for (int r = 0; r < 16; ++r) {  // a ragged tile repeats its last row
            const int64_t row = min64(tile * 16 + r, w.n_out - 1);
            rows[r] = static_cast<const uint8_t*>(w.data) + row * static_cast<int64_t>(w.row_bytes);
        }
        auto* rec = static_cast<uint8_t*>(out) + tile * nb * record;
        for (int64_t b = 0; b < nb; ++b, rec += record) {
            const auto off = static_cast<size_t>(b * block_bytes);
            for (int64_t half = 0; half < value_bytes / 256; ++half) {  // 16 bytes of each row per transpose
                __m512i x[4];
                transpose_16x16(rows, off + qs_at + 16 * half, x);
                for (int j = 0; j < 4; ++j) _mm512_storeu_si512(rec + 256 * half + 64 * j, x[j]);
            }
            for (int r = 0; r < 16; ++r) {
                std::memcpy(rec + value_bytes + 2 * r, rows[r] + off, 2);                        // d
                if (has_min) std::memcpy(rec + value_bytes + 32 + 2 * r, rows[r] + off + 2, 2);  // m
            }
        }
    }
    return true;
}

void add_pack_kernels(KernelTable& table) {
    const bool tiles = amx_built();  // (packed_rows' AMX path: the tile layout alone)
    entry(table.packed, GgmlType::Q4_0) = {packed_rows<Packed16<GgmlType::Q4_0>, false>, true};
    entry(table.packed_amx, GgmlType::Q4_0) = {packed_rows<Packed16<GgmlType::Q4_0>, true>, true, false, tiles};
    entry(table.packed, GgmlType::Q4_1) = {packed_rows<Packed16<GgmlType::Q4_1>, false>, true};
    entry(table.packed_amx, GgmlType::Q4_1) = {packed_rows<Packed16<GgmlType::Q4_1>, true>, true, false, tiles};
    entry(table.packed, GgmlType::Q8_0) = {packed_rows<Packed16<GgmlType::Q8_0>, false>, true};
    entry(table.packed_amx, GgmlType::Q8_0) = {packed_rows<Packed16<GgmlType::Q8_0>, true>, true, false, tiles};
    entry(table.packed, GgmlType::Q5_0) = {packed_rows<Packed16<GgmlType::Q5_0>, false>, true};
    entry(table.packed_amx, GgmlType::Q5_0) = {packed_rows<Packed16<GgmlType::Q5_0>, true>, true, false, tiles};
    entry(table.packed, GgmlType::Q5_1) = {packed_rows<Packed16<GgmlType::Q5_1>, false>, true};
    entry(table.packed_amx, GgmlType::Q5_1) = {packed_rows<Packed16<GgmlType::Q5_1>, true>, true, false, tiles};
    entry(table.packed, GgmlType::Q4_K) = {packed_k_rows<Dec16Q4_K, false>, true};
    entry(table.packed_amx, GgmlType::Q4_K) = {packed_k_rows<Dec16Q4_K, true>, true, false, tiles};
    entry(table.packed, GgmlType::Q5_K) = {packed_k_rows<Dec16Q5_K, false>, true};
    entry(table.packed_amx, GgmlType::Q5_K) = {packed_k_rows<Dec16Q5_K, true>, true, false, tiles};
    // IQ4_NL, IQ4_XS and Q6_K have no AMX kernels over the file's rows to give the bits of: the AVX-512 kernels there too.
    entry(table.packed, GgmlType::IQ4_NL) = entry(table.packed_amx, GgmlType::IQ4_NL) = {
        packed_rows<Packed16Iq4Nl, false>, true};
    entry(table.packed, GgmlType::IQ4_XS) = entry(table.packed_amx, GgmlType::IQ4_XS) = {
        packed_k_rows<Dec16Iq4Xs, false>, true};
    entry(table.packed, GgmlType::Q6_K) = entry(table.packed_amx, GgmlType::Q6_K) = {
        quant_rows<DecQ6_K, PackedQ6Tile<PackedQ6_K, kPrefetchBytes>>, true};
}

}  // namespace quill::cpu::QUILL_AVX512_NS

#endif
