// `quill tokenize --pieces` prints the text each token stands for, as llama.cpp's llama-tokenize does (not the
// vocabulary's spelling, Ġhello or ▁Once): checked against llama-tokenize's output (tests/data/vocab/
// tokenize_pieces.txt) on the default model (byte-level BPE) and stories260K (SPM with byte tokens), non-ASCII and
// characters split across tokens included; a byte of a character a token holds only part of reads \xNN.
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace test_tokenize_pieces {

using quill::test::run_quill;

namespace {

std::string from_hex(const std::string& hex) {
    std::string s;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) s.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    return s;
}

// escape_for_terminal undone: \\ \n \t \r and \xNN.
std::string unescape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out.push_back(s[i]);
            continue;
        }
        const char c = s[++i];
        if (c == 'n') out.push_back('\n');
        else if (c == 't') out.push_back('\t');
        else if (c == 'r') out.push_back('\r');
        else if (c == 'x') {
            out += from_hex(s.substr(i + 1, 2));
            i += 2;
        } else out.push_back(c);
    }
    return out;
}

struct Block {
    std::string model, prompt;
    std::vector<std::pair<int32_t, std::string>> tokens;  // id, the bytes llama-tokenize printed
};

std::vector<Block> golden() {
    std::ifstream f(std::filesystem::path(QUILL_SOURCE_DIR) / "tests/data/vocab/tokenize_pieces.txt");
    REQUIRE(f);
    std::vector<Block> blocks;
    bool open = false;
    for (std::string line; std::getline(f, line);) {
        if (line.starts_with("#")) continue;
        if (line.empty()) {
            open = false;
            continue;
        }
        const size_t tab = line.find('\t');
        REQUIRE(tab != std::string::npos);
        if (!open) {
            blocks.push_back({line.substr(0, tab), from_hex(line.substr(tab + 1)), {}});
            open = true;
        } else {
            blocks.back().tokens.emplace_back(std::stoi(line.substr(0, tab)), from_hex(line.substr(tab + 1)));
        }
    }
    return blocks;
}

}  // namespace

TEST_CASE("tokenize --pieces prints each token's text as llama-tokenize does", "[cli][model]") {
    const auto smol = quill::test::require_default_model();
    if (!smol) return;
    const auto stories = quill::test::require_testdata("models/stories260K.gguf");
    if (!stories) return;
    const std::vector<Block> blocks = golden();
    REQUIRE(blocks.size() == 8);
    for (const Block& b : blocks) {
        const std::string model = b.model == "stories260K.gguf" ? stories->string() : smol->string();
        INFO(b.model << ": " << b.prompt);
        auto r = run_quill({"tokenize", "-m", model, "--pieces"}, b.prompt);
        REQUIRE(r.status == 0);
        std::vector<std::pair<int32_t, std::string>> got;
        std::istringstream lines(r.out);
        for (std::string line; std::getline(lines, line);) {
            const size_t tab = line.find('\t');
            REQUIRE(tab != std::string::npos);
            got.emplace_back(std::stoi(line.substr(0, tab)), unescape(line.substr(tab + 1)));
        }
        CHECK(got == b.tokens);
    }
    // The escaped form: a byte-level BPE token that holds the space and the first byte of 日, and SPM's.
    auto r = run_quill({"tokenize", "-m", smol->string(), "--pieces"}, "and \xE6\x97\xA5");
    CHECK(r.out.find("\t \\xe6\n") != std::string::npos);
    r = run_quill({"tokenize", "-m", stories->string(), "--pieces", "--json"}, "\xE6\x97\xA5");
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j["pieces"] == nlohmann::json::array({"<s>", " ", "\\xe6", "\\x97", "\\xa5"}));
}

}  // namespace test_tokenize_pieces
