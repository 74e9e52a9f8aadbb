// libFuzzer target: arbitrary bytes as the first bytes of a GGUF a hub serves (engine/hub/gguf_header.h, read before a
// download). Malformed input must end in quill::FileError; any prefix of a header must ask for more bytes (nullopt)
// or give the header the whole input gives; and a file GgufFile accepts must give the same architecture and tensors.
#include "engine/error.h"
#include "engine/format/gguf.h"
#include "engine/hub/gguf_header.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::span<const uint8_t> bytes(data, size);
    std::optional<quill::hub::GgufHeader> header;
    try {
        header = quill::hub::parse_gguf_header(bytes, "fuzz.gguf");
    } catch (const quill::FileError&) {
        return 0;
    }
    if (!header) return 0;
    (void)quill::hub::why_unsupported(*header);
    (void)quill::hub::main_weight_type(*header);
    // The header alone is enough, and one byte less is not.
    if (!quill::hub::parse_gguf_header(bytes.first(header->bytes), "fuzz.gguf")) __builtin_trap();
    if (header->bytes > 0 && quill::hub::parse_gguf_header(bytes.first(header->bytes - 1), "fuzz.gguf"))
        __builtin_trap();
    try {
        const quill::GgufFile file = quill::GgufFile::parse("fuzz.gguf", bytes);
        if (file.tensors().size() != header->tensors.size()) __builtin_trap();
        if (file.get_string("general.architecture").value_or("") != header->architecture) __builtin_trap();
    } catch (const quill::Error&) {
    }
    return 0;
}
