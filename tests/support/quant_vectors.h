// The reference quantization vectors of tests/data/quant/<type>.txt (made by ggml: the IQ4 types' by its quantizer,
// the IQ2 types' by tests/data/quant/probe_iq2.cpp from random blocks), read for the codec tests.
#pragma once

#include <catch2/catch.hpp>

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

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    return u;
}

}  // namespace quill::test
