// Tokenizer test vectors in llama.cpp's format: reading them, finding the vocabularies models/fetch_vocab.sh
// writes, and checking a tokenizer against them (shared by the tokenizer test files).
#pragma once

#include <catch2/catch.hpp>

#include "engine/format/gguf.h"
#include "tests/support/test_util.h"
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace quill::test {

struct Case {
    std::string text;
    std::vector<int32_t> ids;
};

// <name>.inp holds inputs each followed by "\n__ggml_vocab_test__\n" (but the last, in llama.cpp's gemma-4 file);
// <name>.out one line of ids per input.
inline std::vector<Case> read_vectors(const std::filesystem::path& inp, const std::filesystem::path& out) {
    const std::string sep = "\n__ggml_vocab_test__\n";
    const std::string text = read_file(inp);
    std::vector<Case> cases;
    for (size_t pos = 0; pos < text.size();) {
        const size_t end = std::min(text.find(sep, pos), text.size());
        cases.push_back({text.substr(pos, end - pos), {}});
        pos = end + sep.size();
    }
    std::istringstream lines(read_file(out));
    std::string line;
    for (Case& c : cases) {
        REQUIRE(std::getline(lines, line));
        std::istringstream ids(line);
        for (int32_t id; ids >> id;) c.ids.push_back(id);
    }
    REQUIRE_FALSE(std::getline(lines, line));
    return cases;
}

inline std::string escaped(const std::string& s) {
    std::string e;
    for (unsigned char c : s) {
        if (c == '\n') e += "\\n";
        else if (c == '\t') e += "\\t";
        else if (c < 0x20) e += fmt::format("\\x{:02x}", c);
        else e.push_back(static_cast<char>(c));
    }
    return e;
}

// Every input tokenizes to its ids (no BOS, special tokens not parsed) and decodes back to itself.
inline void check_vectors(const quill::Tokenizer& tok, const std::filesystem::path& inp,
                          const std::filesystem::path& out) {
    const std::vector<Case> cases = read_vectors(inp, out);
    REQUIRE(cases.size() > 10);
    size_t passed = 0;
    for (const Case& c : cases) {
        const std::vector<int32_t> ids = tok.encode(c.text, false, false);
        const std::string back = quill::decode(tok, ids);
        INFO("input:    \"" << escaped(c.text) << "\"");
        INFO("expected: " << fmt::format("{}", fmt::join(c.ids, " ")));
        INFO("actual:   " << fmt::format("{}", fmt::join(ids, " ")));
        INFO("decoded:  \"" << escaped(back) << "\"");
        CHECK(ids == c.ids);
        CHECK(back == c.text);
        passed += ids == c.ids && back == c.text;
    }
    UNSCOPED_INFO(inp.filename().string() << ": " << passed << "/" << cases.size() << " inputs passed");
    CHECK(passed == cases.size());
}

// A vocabulary models/fetch_vocab.sh writes, or nullopt after a skip.
inline std::optional<std::filesystem::path> fetched_vocab(const std::string& file) {
    const std::filesystem::path p = std::filesystem::path(QUILL_SOURCE_DIR) / "models" / file;
    if (std::filesystem::exists(p)) return p;
    skip(file + " is absent: run models/fetch_vocab.sh");
    return std::nullopt;
}

// tests/data/vocab/<name>.
inline std::filesystem::path vocab_data(const std::string& name) {
    return std::filesystem::path(QUILL_SOURCE_DIR) / "tests" / "data" / "vocab" / name;
}

// The fetched vocabulary `file` against the vectors tests/data/vocab/<vectors>.inp/.out.
inline void check_fetched_vocab(const std::string& file, const std::string& vectors) {
    const auto path = fetched_vocab(file);
    if (!path) return;
    const auto tok = quill::Tokenizer::from_gguf(quill::GgufFile::open(path->string()));
    check_vectors(*tok, vocab_data(vectors + ".inp"), vocab_data(vectors + ".out"));
}

}  // namespace quill::test
