// What a GGUF's first bytes say before the rest is downloaded: its architecture and the type of each tensor, enough
// to refuse a model quill cannot run before fetching gigabytes of it (and for `quill list` to describe cached files
// without mapping them).
#pragma once

#include "engine/format/quant.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace quill::hub {

struct GgufHeader {
    std::string architecture;   // general.architecture ("" when absent)
    uint32_t split_count = 0;   // split.count (0 when not split)
    struct Tensor {
        std::string name;
        uint32_t type;          // a GgmlType value, possibly one quill does not know
        uint32_t n_dims;
        double n_elements = 1;  // the product of its dimensions (a double: a header's may overflow 64 bits)
    };
    std::vector<Tensor> tensors;
    uint64_t bytes = 0;         // the header's length (metadata and tensor infos)
};

// The header at the start of `prefix`; nullopt when the prefix ends before the header does. FileError naming
// `name` when the bytes are not a GGUF header.
std::optional<GgufHeader> parse_gguf_header(std::span<const uint8_t> prefix, const std::string& name);

// "" when quill can run a model with this header; else why not (its architecture, or a weight matrix whose type
// the CPU backend cannot multiply: the checks of ModelConfig::from_gguf and CpuBackend::check_weights).
std::string why_unsupported(const GgufHeader& header);

// The dominant weight type of the header's matrices (the one most of their elements have, so that a mixture of
// experts is named by its experts' type), e.g. "Q4_K"; "" when none.
std::string main_weight_type(const GgufHeader& header);

}  // namespace quill::hub
