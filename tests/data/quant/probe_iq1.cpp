// Probes the oracle ggml's IQ1 dequantizers: writes iq1_grids.h (the 2048-entry grid read back from crafted IQ1_S
// blocks) and the reference vectors iq1_s.txt, iq1_m.txt (random valid blocks and ggml's to_float of them). Not built
// by CMake or run by CI. Built and run against the oracle's libraries:
//   L=.../llama_cpp_python-0.3.36/vendor/llama.cpp
//   g++ -O1 -std=c++17 probe_iq1.cpp -I$L/ggml/include -L$L/build/bin -lggml-base -Wl,-rpath,$L/build/bin -o probe_iq1
//   ./probe_iq1 engine/format/iq1_grids.h tests/data/quant
// Grid: IQ1_S blocks of d = 1, sub-block scale 0 (dl = 1), positive delta (+1/8), one grid index per 8 values; the
// values less 1/8 are the entry's levels (-1, 0 or 1). The probe then checks the negative delta and the IQ1_M scale
// packing (the fp16 d from the top nibbles of the four 16-bit scale words) on crafted blocks.
#include "probe_util.h"

#include <ggml.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// The 8 levels of values y = dl (g + delta), element j in byte j as int8.
static uint64_t pack8(const float* y, float dl, float delta) {
    uint64_t v = 0;
    for (int j = 0; j < 8; ++j) {
        const float q = y[j] / dl - delta;
        const long r = lroundf(q);
        if (std::fabs(q - r) > 1e-6f || r < -1 || r > 1) { fprintf(stderr, "not a grid level %g\n", q); exit(1); }
        v |= uint64_t(uint8_t(int8_t(r))) << (8 * j);
    }
    return v;
}

// IQ1_S block: d (2), qs[32] (low 8 bits of the index of entry 4 ib + l), qh[8] as uint16 (bits 3 l: the index's
// high 3 bits of entry l, bits 12..14 the scale, bit 15 the delta's sign).
static std::vector<uint64_t> probe_grid() {
    std::vector<uint64_t> grid;
    for (int blk = 0; blk < 64; ++blk) {
        uint8_t b[50] = {};
        memcpy(b, &kOne, 2);
        for (int ib = 0; ib < 8; ++ib) {
            uint16_t qh = 0;
            for (int l = 0; l < 4; ++l) {
                const int idx = 32 * blk + 4 * ib + l;
                b[2 + 4 * ib + l] = uint8_t(idx & 255);
                qh |= uint16_t((idx >> 8) << (3 * l));
            }
            memcpy(b + 34 + 2 * ib, &qh, 2);
        }
        std::vector<uint8_t> v(b, b + 50);
        auto y = to_float(GGML_TYPE_IQ1_S, v, 256);
        for (int k = 0; k < 32; ++k) grid.push_back(pack8(&y[8 * k], 1.0f, 0.125f));
    }
    return grid;
}

// The negative delta (bit 15) and the scale (bits 12..14: dl = 2 s + 1) of IQ1_S.
static void check_iq1_s(const std::vector<uint64_t>& grid) {
    for (int s = 0; s < 8; ++s) {
        uint8_t b[50] = {};
        memcpy(b, &kOne, 2);
        b[2] = 77;  // entry 0 of sub-block 0: index 77 | 5 << 8
        const uint16_t qh = uint16_t(5 | (s << 12) | 0x8000);
        memcpy(b + 34, &qh, 2);
        std::vector<uint8_t> v(b, b + 50);
        auto y = to_float(GGML_TYPE_IQ1_S, v, 256);
        if (pack8(y.data(), float(2 * s + 1), -0.125f) != grid[77 | (5 << 8)]) { fprintf(stderr, "iq1_s scale %d\n", s); exit(1); }
    }
}

// IQ1_M block: qs[32], qh[16] (byte 2 ib + h: bits 0..2 the high index bits of entry 2 h, bit 3 its delta's sign,
// bits 4..6 and 7 the same for entry 2 h + 1), scales[8] as four uint16: bits 6 (ib % 2) .. + 2 the scale of the
// first 16 values of sub-block ib (word ib / 2), the next 3 bits the last 16's, bits 12..15 a nibble of d.
static void check_iq1_m(const std::vector<uint64_t>& grid) {
    const uint16_t d = 0x3A66;  // 0.8 in fp16
    uint8_t b[56] = {};
    for (int w = 0; w < 4; ++w) {
        uint16_t sc = uint16_t(((d >> (4 * w)) & 0xF) << 12);
        sc |= uint16_t((w + 1) | ((w + 2) << 3) | ((7 - w) << 6) | (w << 9));  // sub-blocks 2 w and 2 w + 1
        memcpy(b + 48 + 2 * w, &sc, 2);
    }
    for (int k = 0; k < 32; ++k) b[k] = uint8_t(37 * k + 11);
    for (int i = 0; i < 16; ++i) b[32 + i] = uint8_t(29 * i + 5);
    std::vector<uint8_t> v(b, b + 56);
    auto y = to_float(GGML_TYPE_IQ1_M, v, 256);
    const float df = ggml_fp16_to_fp32(d);
    for (int ib = 0; ib < 8; ++ib) {
        const int w = ib / 2;
        const int s[2] = {ib % 2 ? 7 - w : w + 1, ib % 2 ? w : w + 2};
        for (int l = 0; l < 4; ++l) {
            const int k = 4 * ib + l;
            const uint8_t h = b[32 + k / 2] >> (4 * (k % 2));
            const int idx = b[k] | ((h & 7) << 8);
            const float delta = h & 8 ? -0.125f : 0.125f;
            if (pack8(&y[8 * k], df * float(2 * s[l / 2] + 1), delta) != grid[idx]) { fprintf(stderr, "iq1_m %d\n", k); exit(1); }
        }
    }
}

// Random valid blocks: d a positive or negative fp16 of magnitude 2^-9 .. 2^-6; every grid index, scale value and
// delta sign occurs (a shuffled sweep of each).
static std::vector<uint8_t> random_blocks(ggml_type t, int n_blocks, std::mt19937& rng) {
    std::vector<uint8_t> out;
    const int entries = 32 * n_blocks;
    auto idx = sweep<uint16_t>(2048, entries, rng);
    if (t == GGML_TYPE_IQ1_S) {
        auto sc = sweep<uint16_t>(8, 8 * n_blocks, rng);
        auto dl = sweep<uint16_t>(2, 8 * n_blocks, rng);
        for (int b = 0; b < n_blocks; ++b) {
            uint8_t blk[50];
            const uint16_t d = random_d(rng);
            memcpy(blk, &d, 2);
            for (int ib = 0; ib < 8; ++ib) {
                uint16_t qh = uint16_t((sc[8 * b + ib] << 12) | (dl[8 * b + ib] << 15));
                for (int l = 0; l < 4; ++l) {
                    const int i = idx[32 * b + 4 * ib + l];
                    blk[2 + 4 * ib + l] = uint8_t(i & 255);
                    qh |= uint16_t((i >> 8) << (3 * l));
                }
                memcpy(blk + 34 + 2 * ib, &qh, 2);
            }
            out.insert(out.end(), blk, blk + 50);
        }
    } else {
        auto sc = sweep<uint16_t>(8, 16 * n_blocks, rng);
        auto dl = sweep<uint8_t>(2, entries, rng);
        for (int b = 0; b < n_blocks; ++b) {
            uint8_t blk[56] = {};
            const uint16_t d = random_d(rng);
            for (int k = 0; k < 32; ++k) {
                const int i = idx[32 * b + k];
                blk[k] = uint8_t(i & 255);
                blk[32 + k / 2] |= uint8_t(((i >> 8) | (dl[32 * b + k] << 3)) << (4 * (k % 2)));
            }
            for (int w = 0; w < 4; ++w) {
                uint16_t s = uint16_t(((d >> (4 * w)) & 0xF) << 12);
                for (int q = 0; q < 4; ++q) s |= uint16_t(sc[16 * b + 4 * w + q] << (3 * q));
                memcpy(blk + 48 + 2 * w, &s, 2);
            }
            out.insert(out.end(), blk, blk + 56);
        }
    }
    return out;
}

static void write_random_vector(const char* dir, ggml_type t, int n_blocks, uint32_t seed) {
    std::mt19937 rng(seed);
    const auto bytes = random_blocks(t, n_blocks, rng);
    write_vector(dir, t, bytes, 256 * int64_t(n_blocks), seed,
                 "# ggml reference dequantization vector (llama.cpp vendored by llama-cpp-python 0.3.36): random valid\n"
                 "# blocks (every grid index, scale value and delta sign occurs; made by tests/data/quant/probe_iq1.cpp)\n"
                 "# and ggml's to_float of them\n");
}

int main(int argc, char** argv) {
    if (argc != 3) { fprintf(stderr, "usage: probe_iq1 HEADER_OUT DATA_DIR\n"); return 2; }
    const auto grid = probe_grid();
    check_iq1_s(grid);
    check_iq1_m(grid);
    FILE* f = fopen(argv[1], "w");
    fprintf(f, "// The IQ1 grid (IQ1_S and IQ1_M): entry i packs the 8 levels (-1, 0 or 1) of grid index i, element j in\n"
               "// byte j as int8. Generated by tests/data/quant/probe_iq1.cpp, which dequantizes crafted IQ1_S blocks (d = 1,\n"
               "// one grid index per 8 values, scale 0, delta +1/8) with ggml and reads the values back; do not edit.\n"
               "#pragma once\n\n#include <cstdint>\n\nnamespace quill {\n\n");
    fprintf(f, "// 2048 entries.\n");
    write_grid(f, "kIq1Grid", grid);
    fprintf(f, "\n}  // namespace quill\n");
    fclose(f);
    write_random_vector(argv[2], GGML_TYPE_IQ1_S, 64, 1101);
    write_random_vector(argv[2], GGML_TYPE_IQ1_M, 64, 1201);
    return 0;
}
