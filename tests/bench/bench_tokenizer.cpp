// Tokenizer throughput (not a test; build with `--target bench_tokenizer`).
//
// Encodes and decodes about 1 MB of English-like text, and as much text of made-up words (few repeat, so the
// per-call word cache misses), with the gpt-2, starcoder and llama-spm vocabularies of the shared test data
// ($QUILL_TESTDATA, default ../shared/testdata: vocab/ggml-vocab-<name>.gguf); prints MB/s for each and checks that
// decoding gives the text back.
//
//   bench_tokenizer
#include "engine/error.h"
#include "engine/format/gguf.h"
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;

fs::path testdata_dir() {
    if (const char* env = std::getenv("QUILL_TESTDATA"); env && *env) return env;
    return fs::path(QUILL_SOURCE_DIR) / ".." / "shared" / "testdata";
}

// ~1 MB of English-like text from a fixed word list and a small linear congruential generator (state carries on
// into made_up_words).
std::string english_text(uint32_t& state) {
    const std::vector<std::string> words = {
        "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
        "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they",
        "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when",
        "will", "would", "who", "so", "no", "language", "model", "tokenizer", "generation", "quickly",
        "brown", "foxes", "jumped", "over", "lazy", "dogs", "computation", "inference", "parameters", "1984",
        "Tuesday", "London", "don't", "it's", "we'll", "they've", "(example)", "e.g.", "well-known", "$42.50"};
    std::string text;
    size_t in_sentence = 0;
    while (text.size() < (1u << 20)) {
        state = state * 1664525u + 1013904223u;
        const std::string& w = words[(state >> 8) % words.size()];
        const size_t start = text.size();
        text += w;
        if (in_sentence == 0) text[start] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[start])));
        ++in_sentence;
        if (((state >> 20) & 15) == 0) text += ",";
        if (in_sentence > 6 && ((state >> 24) & 7) == 0) {
            text += ((state >> 27) & 3) == 0 ? ".\n\n" : ". ";
            in_sentence = 0;
        } else {
            text += " ";
        }
    }
    return text;
}

// `size` bytes of made-up words.
std::string made_up_words(uint32_t& state, size_t size) {
    std::string unique;
    while (unique.size() < size) {
        state = state * 1664525u + 1013904223u;
        const size_t len = 2 + (state >> 28);
        for (size_t i = 0; i < len; ++i) {
            state = state * 1664525u + 1013904223u;
            unique.push_back(static_cast<char>('a' + (state >> 24) % 26));
        }
        unique += ((state >> 16) & 15) == 0 ? ".\n" : " ";
    }
    return unique;
}

}  // namespace

int main() {
    uint32_t state = 12345;
    const std::string text = english_text(state);
    const std::string unique = made_up_words(state, text.size());
    int status = 0;
    try {
        for (const std::string name : {"gpt-2", "starcoder", "llama-spm"}) {
            const fs::path path = testdata_dir() / "vocab" / ("ggml-vocab-" + name + ".gguf");
            const auto tok = quill::Tokenizer::from_gguf(quill::GgufFile::open(path.string()));
            for (const auto& [kind, input] : {std::pair{"english", &text}, std::pair{"made-up", &unique}}) {
                const double mb = static_cast<double>(input->size()) / (1 << 20);
                const auto t0 = std::chrono::steady_clock::now();
                const std::vector<int32_t> ids = tok->encode(*input, false, false);
                const auto t1 = std::chrono::steady_clock::now();
                const std::string back = quill::decode(*tok, ids);
                const auto t2 = std::chrono::steady_clock::now();
                const double enc = std::chrono::duration<double>(t1 - t0).count();
                const double dec = std::chrono::duration<double>(t2 - t1).count();
                fmt::print("{:<10} {:<8} {:.2f} MB -> {:>6} tokens: encode {:.3f} s ({:6.1f} MB/s), "
                           "decode {:6.1f} MB/s\n", name, kind, mb, ids.size(), enc, mb / enc, mb / dec);
                if (back != *input) {
                    fmt::print(stderr, "bench_tokenizer: {} {}: decoding does not give the text back\n", name, kind);
                    status = 1;
                }
            }
        }
    } catch (const quill::Error& e) {
        fmt::print(stderr, "bench_tokenizer: {}\n", e.what());
        return 1;
    }
    return status;
}
