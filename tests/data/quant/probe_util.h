// What the i-quant probes (probe_iq1.cpp, probe_iq2.cpp) share: ggml's to_float of blocks, random fp16 scales and
// shuffled sweeps for random valid blocks, and the writers of a grid header and of a reference vector file. Not built
// by CMake; compiled with the probes against the oracle's ggml (see each probe's first lines).
#pragma once

#include <ggml.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

static std::vector<float> to_float(ggml_type t, const std::vector<uint8_t>& bytes, int64_t n) {
    std::vector<float> y(n);
    ggml_get_type_traits(t)->to_float(bytes.data(), y.data(), n);
    return y;
}

static const uint16_t kOne = 0x3C00;  // fp16 1.0

static void write_grid(FILE* f, const char* name, const std::vector<uint64_t>& g) {
    fprintf(f, "inline constexpr uint64_t %s[%zu] = {\n", name, g.size());
    for (size_t i = 0; i < g.size(); ++i)
        fprintf(f, "%s0x%016llx,%s", i % 4 == 0 ? "    " : " ", (unsigned long long)g[i], i % 4 == 3 ? "\n" : "");
    fprintf(f, "};\n");
}

// d of a random block: a positive or negative fp16 of magnitude 2^-9 .. 2^-6.
static uint16_t random_d(std::mt19937& rng) {
    const float mag = std::ldexp(1.0f + (rng() % 1024) / 1024.0f, -9 + int(rng() % 3));
    return ggml_fp32_to_fp16(rng() % 2 ? -mag : mag);
}

// count values, each of 0 .. n_values - 1 as often as count allows, shuffled.
template <typename T>
static std::vector<T> sweep(int n_values, size_t count, std::mt19937& rng) {
    std::vector<T> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = T(i % n_values);
    std::shuffle(v.begin(), v.end(), rng);
    return v;
}

// dir/<type>.txt: the blocks `bytes` (n values, drawn with `seed`) and ggml's to_float of them, in the format of the
// test data's vectors; `comment` is the file's header comment, each line with its "# ".
static void write_vector(const char* dir, ggml_type t, const std::vector<uint8_t>& bytes, int64_t n, uint32_t seed,
                         const char* comment) {
    const char* name = ggml_type_name(t);
    const size_t ts = ggml_type_size(t);
    auto y = to_float(t, bytes, n);
    std::string path = std::string(dir) + "/" + name + ".txt";
    FILE* f = fopen(path.c_str(), "w");
    fputs(comment, f);
    fprintf(f, "type %s\nggml_type_id %d\nn %lld\nblck_size %lld\ntype_size %zu\nbytes %zu\nseed %u\n", name, int(t),
            (long long)n, (long long)ggml_blck_size(t), ts, bytes.size(), seed);
    fprintf(f, "quantized_hex\n");
    for (size_t i = 0; i < bytes.size(); ++i) fprintf(f, "%02x%s", bytes[i], (i + 1) % ts == 0 ? "\n" : "");
    fprintf(f, "dequantized\n");
    for (int64_t i = 0; i < n; ++i) fprintf(f, "%.9g%s", y[i], (i + 1) % 8 == 0 ? "\n" : " ");
    fprintf(f, "end\n");
    fclose(f);
}
