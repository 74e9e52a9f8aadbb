// The reference quantization vectors of tests/data/quant/<type>.txt (made by ggml: the IQ4 types' by its quantizer,
// the IQ2 types' by tests/data/quant/probe_iq2.cpp from random blocks), read for the codec tests; and the kernels'
// check against the dequantized weights.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace quill::test {

struct QuantVector {
    std::map<std::string, std::string> header;  // "key value" lines: type, ggml_type_id, blck_size, type_size...
    std::vector<float> input, dequantized;       // input: empty where the blocks were not quantized from floats
    std::vector<uint8_t> bytes;
};

// Header lines "key value", then sections input / quantized_hex / dequantized / end; floats as %.9g, so strtof
// gives back ggml's bits.
inline QuantVector read_quant_vector(const std::string& name) {
    std::ifstream in(std::filesystem::path(QUILL_SOURCE_DIR) / "tests" / "data" / "quant" / (name + ".txt"));
    REQUIRE(in.good());
    QuantVector v;
    std::string line, section;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        if (line == "input" || line == "quantized_hex" || line == "dequantized" || line == "end") {
            section = line;
            continue;
        }
        std::istringstream ss(line);
        std::string tok;
        if (section.empty()) {
            std::string value;
            ss >> tok >> value;
            v.header[tok] = value;
        } else if (section == "quantized_hex") {
            for (size_t i = 0; i + 1 < line.size(); i += 2) {
                v.bytes.push_back(static_cast<uint8_t>(std::stoul(line.substr(i, 2), nullptr, 16)));
            }
        } else if (section != "end") {
            auto& out = section == "input" ? v.input : v.dequantized;
            while (ss >> tok) out.push_back(std::strtof(tok.c_str(), nullptr));
        }
    }
    return v;
}

// How many of y [n_tokens, n_out] differ from the dot of the dequantized weights wd [n_out, n_in] with the
// activations as the kernels see them, xq [n_tokens, n_in] (cpu::reference_activations), by more than 1e-5 of
// sum |w x| (the kernels' integer dots are exact: only float rounding separates them); the first one is reported.
inline int dot_mismatches(const std::vector<float>& wd, const std::vector<float>& xq, const std::vector<float>& y,
                          int64_t n_tokens, int64_t n_out, int64_t n_in) {
    int bad = 0;
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t r = 0; r < n_out; ++r) {
            double want = 0, abs_wx = 0;
            for (int64_t i = 0; i < n_in; ++i) {
                const double p = static_cast<double>(wd[r * n_in + i]) * xq[t * n_in + i];
                want += p;
                abs_wx += std::fabs(p);
            }
            const double got = y[t * n_out + r];
            if (!(std::fabs(got - want) <= 1e-5 * abs_wx) && bad++ == 0)
                UNSCOPED_INFO("token " << t << " row " << r << ": " << got << " vs " << want);
        }
    }
    return bad;
}

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
}

}  // namespace quill::test
