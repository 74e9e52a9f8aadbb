// libFuzzer target: arbitrary bytes as a GGUF file, then everything a load reads from it (model config, weight
// views, tokenizer). Malformed input must end in a quill::Error; a crash, a leak, undefined behaviour, any other
// exception (std::bad_alloc from an absurd count included) or a sanitizer report is a finding.
#include "engine/error.h"
#include "engine/format/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "tokenizer/tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace {

// Reads the first elements of an array, and of the arrays in it: the reader checked every element, so none may
// fail (a QUILL_CHECK here is a finding).
void read_elements(const quill::GgufArray& a) {
    for (size_t i = 0; i < a.size() && i < 64; ++i) {
        const quill::GgufValue v = a.at(i);
        if (v.type() == quill::GgufType::ARRAY) read_elements(v.as_array());
        if (v.type() == quill::GgufType::STRING && a.string_at(i) != v.as_string()) __builtin_trap();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::optional<quill::GgufFile> file;
    try {
        file = quill::GgufFile::parse("fuzz.gguf", std::span<const uint8_t>(data, size));
    } catch (const quill::Error&) {
        return 0;
    }
    for (const auto& [key, value] : file->metadata())
        if (value.type() == quill::GgufType::ARRAY) read_elements(value.as_array());
    try {
        const quill::ModelConfig config = quill::ModelConfig::from_gguf(*file);
        const quill::Weights weights = quill::Weights::from_gguf(*file, config);
    } catch (const quill::Error&) {
    }
    std::unique_ptr<quill::Tokenizer> tok;
    try {
        tok = quill::Tokenizer::from_gguf(*file);
    } catch (const quill::Error&) {
        return 0;
    }
    // A tokenizer that loaded must work, without throwing: encode a little text both ways and decode it.
    for (bool parse_special : {false, true}) {
        const std::vector<int32_t> ids = tok->encode("Hello <s> world\n\xC3\xA9", true, parse_special);
        (void)quill::decode(*tok, ids);
    }
    return 0;
}
