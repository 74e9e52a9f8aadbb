// Probes the oracle ggml's IQ2 dequantizers: writes iq2_grids.h (the grids read back from crafted blocks) and the
// reference vectors iq2_xxs.txt, iq2_xs.txt, iq2_s.txt (random valid blocks and ggml's to_float of them).
// Build: g++ -O1 -std=c++17 probe_iq2.cpp -I$L/ggml/include -L$L/build/bin -lggml-base -Wl,-rpath,$L/build/bin
#include "probe_util.h"

#include <ggml.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <random>
#include <string>
#include <vector>

static uint64_t pack8(const float* y, float db) {
    uint64_t v = 0;
    for (int j = 0; j < 8; ++j) {
        const float q = y[j] / db;
        const long r = lroundf(q);
        if (std::fabs(q - r) > 1e-6f || r < 0 || r > 255) { fprintf(stderr, "not an integer grid value %g\n", q); exit(1); }
        v |= uint64_t(r) << (8 * j);
    }
    return v;
}

// One grid entry per 8 values: blocks of d = 1, sub-block scale 0 (db = 0.125), no signs.
static std::vector<uint64_t> probe_xxs() {
    std::vector<uint64_t> grid;
    for (int blk = 0; blk < 8; ++blk) {
        uint8_t b[66] = {};
        memcpy(b, &kOne, 2);
        for (int ib = 0; ib < 8; ++ib)
            for (int l = 0; l < 4; ++l) b[2 + 8 * ib + l] = uint8_t(32 * blk + 4 * ib + l);
        std::vector<uint8_t> v(b, b + 66);
        auto y = to_float(GGML_TYPE_IQ2_XXS, v, 256);
        for (int k = 0; k < 32; ++k) grid.push_back(pack8(&y[8 * k], 0.125f));
    }
    return grid;
}

static std::vector<uint64_t> probe_xs() {
    std::vector<uint64_t> grid;
    for (int blk = 0; blk < 16; ++blk) {
        uint8_t b[74] = {};
        memcpy(b, &kOne, 2);
        for (int k = 0; k < 32; ++k) { uint16_t q = uint16_t(32 * blk + k); memcpy(b + 2 + 2 * k, &q, 2); }
        std::vector<uint8_t> v(b, b + 74);
        auto y = to_float(GGML_TYPE_IQ2_XS, v, 256);
        for (int k = 0; k < 32; ++k) grid.push_back(pack8(&y[8 * k], 0.125f));
    }
    return grid;
}

static std::vector<uint64_t> probe_s() {
    std::vector<uint64_t> grid;
    for (int blk = 0; blk < 32; ++blk) {
        uint8_t b[82] = {};
        memcpy(b, &kOne, 2);
        for (int k = 0; k < 32; ++k) {
            const int idx = 32 * blk + k;
            b[2 + k] = uint8_t(idx & 255);                            // qs: low 8 bits
            b[2 + 64 + k / 4] |= uint8_t((idx >> 8) << (2 * (k % 4)));  // qh: 2 high bits per entry
        }
        std::vector<uint8_t> v(b, b + 82);
        auto y = to_float(GGML_TYPE_IQ2_S, v, 256);
        for (int k = 0; k < 32; ++k) grid.push_back(pack8(&y[8 * k], 0.125f));
    }
    return grid;
}

// The sign table: IQ2_XXS blocks whose sign index i sets the signs of an entry; checks i | parity(i) << 7.
static void check_signs() {
    for (int i = 0; i < 128; ++i) {
        uint8_t b[66] = {};
        memcpy(b, &kOne, 2);
        const uint32_t s = uint32_t(i);
        memcpy(b + 2 + 4, &s, 4);  // sub-block 0, entry 0 (grid index 0), scale 0
        std::vector<uint8_t> v(b, b + 66);
        auto y = to_float(GGML_TYPE_IQ2_XXS, v, 256);
        int bits = 0;
        for (int j = 0; j < 8; ++j) bits |= (y[j] < 0) << j;
        const int want = i | ((__builtin_popcount(i) & 1) << 7);
        if (bits != want) { fprintf(stderr, "sign %d: got %x want %x\n", i, bits, want); exit(1); }
    }
}

// Random valid blocks: d a positive or negative fp16 of magnitude 2^-9 .. 2^-6; every grid index, sign pattern and
// scale value occurs (a shuffled sweep of each), with the rest random.
static std::vector<uint8_t> random_blocks(ggml_type t, int n_blocks, std::mt19937& rng) {
    std::vector<uint8_t> out;
    const int entries = 32 * n_blocks;  // grid entries (8 values each)
    if (t == GGML_TYPE_IQ2_XXS) {
        auto idx = sweep<uint8_t>(256, entries, rng);
        auto sg = sweep<uint32_t>(128, entries, rng);
        auto sc = sweep<uint32_t>(16, 8 * n_blocks, rng);
        for (int b = 0; b < n_blocks; ++b) {
            uint8_t blk[66];
            uint16_t d = random_d(rng);
            memcpy(blk, &d, 2);
            for (int ib = 0; ib < 8; ++ib) {
                uint32_t hi = sc[8 * b + ib] << 28;
                for (int l = 0; l < 4; ++l) {
                    blk[2 + 8 * ib + l] = idx[32 * b + 4 * ib + l];
                    hi |= sg[32 * b + 4 * ib + l] << (7 * l);
                }
                memcpy(blk + 2 + 8 * ib + 4, &hi, 4);
            }
            out.insert(out.end(), blk, blk + 66);
        }
    } else if (t == GGML_TYPE_IQ2_XS) {
        auto idx = sweep<uint16_t>(512, entries, rng);
        auto sg = sweep<uint16_t>(128, entries, rng);
        auto sc = sweep<uint8_t>(16, 16 * n_blocks, rng);
        for (int b = 0; b < n_blocks; ++b) {
            uint8_t blk[74];
            uint16_t d = random_d(rng);
            memcpy(blk, &d, 2);
            for (int k = 0; k < 32; ++k) {
                uint16_t q = uint16_t(idx[32 * b + k] | (sg[32 * b + k] << 9));
                memcpy(blk + 2 + 2 * k, &q, 2);
            }
            for (int ib = 0; ib < 8; ++ib) blk[66 + ib] = uint8_t(sc[16 * b + 2 * ib] | (sc[16 * b + 2 * ib + 1] << 4));
            out.insert(out.end(), blk, blk + 74);
        }
    } else {
        auto idx = sweep<uint16_t>(1024, entries, rng);
        auto sg = sweep<uint16_t>(256, entries, rng);
        auto sc = sweep<uint8_t>(16, 16 * n_blocks, rng);
        for (int b = 0; b < n_blocks; ++b) {
            uint8_t blk[82] = {};
            uint16_t d = random_d(rng);
            memcpy(blk, &d, 2);
            for (int k = 0; k < 32; ++k) {
                const int i = idx[32 * b + k];
                blk[2 + k] = uint8_t(i & 255);
                blk[2 + 32 + k] = uint8_t(sg[32 * b + k]);
                blk[2 + 64 + k / 4] |= uint8_t((i >> 8) << (2 * (k % 4)));
            }
            for (int ib = 0; ib < 8; ++ib) blk[74 + ib] = uint8_t(sc[16 * b + 2 * ib] | (sc[16 * b + 2 * ib + 1] << 4));
            out.insert(out.end(), blk, blk + 82);
        }
    }
    return out;
}

static void write_random_vector(const char* dir, ggml_type t, int n_blocks, uint32_t seed) {
    std::mt19937 rng(seed);
    const auto bytes = random_blocks(t, n_blocks, rng);
    write_vector(dir, t, bytes, 256 * int64_t(n_blocks), seed,
                 "# ggml reference dequantization vector (llama.cpp vendored by llama-cpp-python 0.3.36): random valid\n"
                 "# blocks (every grid index, sign pattern and scale value occurs; made by /work/oracle/tools-iq2/probe_iq2.cpp,\n"
                 "# committed as tests/data/quant/probe_iq2.cpp) and ggml's to_float of them\n");
}

int main(int argc, char** argv) {
    if (argc != 3) { fprintf(stderr, "usage: probe_iq2 HEADER_OUT DATA_DIR\n"); return 2; }
    check_signs();
    FILE* f = fopen(argv[1], "w");
    fprintf(f, "// The IQ2 grids: entry i packs the 8 unsigned magnitudes of grid index i, element j in byte j. Generated by\n"
               "// tests/data/quant/probe_iq2.cpp, which dequantizes crafted blocks (d = 1, one grid index per 8 values, scale\n"
               "// 0, no signs) with ggml and reads the values back; do not edit.\n#pragma once\n\n#include <cstdint>\n\n"
               "namespace quill {\n\n");
    fprintf(f, "// IQ2_XXS: 256 entries.\n");
    write_grid(f, "kIq2XxsGrid", probe_xxs());
    fprintf(f, "\n// IQ2_XS: 512 entries.\n");
    write_grid(f, "kIq2XsGrid", probe_xs());
    fprintf(f, "\n// IQ2_S: 1024 entries.\n");
    write_grid(f, "kIq2SGrid", probe_s());
    fprintf(f, "\n}  // namespace quill\n");
    fclose(f);
    write_random_vector(argv[2], GGML_TYPE_IQ2_XXS, 16, 1601);
    write_random_vector(argv[2], GGML_TYPE_IQ2_XS, 16, 1701);
    write_random_vector(argv[2], GGML_TYPE_IQ2_S, 32, 2201);
    return 0;
}
