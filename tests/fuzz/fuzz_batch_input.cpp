// Fuzz target: `quill batch` input parsing (the format read from the text and given), the --resume scan of an
// output file and --shard, on arbitrary bytes. Bad input must come back as error entries or quill::Error, never a
// crash, a hang or an abort; JSON nested past the limit is an error entry, never a deep tree.
#include "engine/batch/input.h"
#include "engine/batch/records.h"
#include "engine/error.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    // The format read from the text, or given (--format, a file's extension): which one varies with the length.
    const quill::batch::FormatHint hints[] = {quill::batch::FormatHint::none, quill::batch::FormatHint::none,
                                              quill::batch::FormatHint::json, quill::batch::FormatHint::openai};
    {
        const quill::batch::FormatHint hint = hints[size % 4];
        try {
            const quill::batch::BatchInput in = quill::batch::parse_batch_input(text, hint);
            for (const auto& e : in.entries) {
                const auto& r = e.request;
                // Every entry is a request with exactly one of prompt and messages, or an error; ids are never empty.
                if (r.id.empty() || r.line == 0) std::abort();
                if (!e.error && r.prompt.has_value() == r.messages.has_value()) std::abort();
            }
            // Lines of invalid UTF-8: in order, each a line of an entry.
            size_t prev = 0;
            for (size_t line : in.invalid_utf8_lines) {
                if (line <= prev || line > in.entries.back().request.line) std::abort();
                prev = line;
            }
        } catch (const quill::UsageError&) {
            // duplicate ids
        }
    }
    try {
        const quill::batch::ResumeScan scan = quill::batch::scan_output(text, "fuzz");
        if (scan.intact_bytes > size) std::abort();
    } catch (const quill::FileError&) {
    }
    try {
        const quill::batch::Shard s = quill::batch::parse_shard(text);
        if (s.k < 1 || s.k > s.n) std::abort();
    } catch (const quill::UsageError&) {
    }
    return 0;
}
