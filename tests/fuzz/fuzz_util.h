// Shared by the libFuzzer targets in tests/fuzz (built with -DQUILL_FUZZ=ON, see tests/fuzz/CMakeLists.txt).
#pragma once

#include "engine/format/gguf.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace quill::fuzz {

// ../shared/testdata next to the source tree, or $QUILL_TESTDATA.
inline std::filesystem::path testdata_dir() {
    if (const char* env = std::getenv("QUILL_TESTDATA"); env && *env) return env;
    return std::filesystem::path(QUILL_SOURCE_DIR) / ".." / "shared" / "testdata";
}

// A broken property is a finding: say which, then abort so that libFuzzer saves the input.
inline void check(bool ok, std::string_view where, std::string_view what) {
    if (ok) return;
    std::fprintf(stderr, "fuzz: %.*s: %.*s\n", static_cast<int>(where.size()), where.data(),
                 static_cast<int>(what.size()), what.data());
    std::abort();
}

struct NamedTokenizer {
    std::string name;
    std::unique_ptr<Tokenizer> tok;
    std::array<int32_t, 256> byte_token;  // per byte value, a token whose bytes are that byte alone, or -1
};

inline std::array<int32_t, 256> single_byte_tokens(const Tokenizer& tok) {
    std::array<int32_t, 256> ids;
    ids.fill(-1);
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
        const std::string& b = tok.token_bytes(id);
        if (b.size() == 1 && ids[static_cast<uint8_t>(b[0])] < 0) ids[static_cast<uint8_t>(b[0])] = id;
    }
    return ids;
}

// The GGUF files in `dir` whose names start with `prefix`, sorted by name; none when `dir` is absent.
inline std::vector<std::filesystem::path> gguf_files(const std::filesystem::path& dir, std::string_view prefix) {
    std::vector<std::filesystem::path> paths;
    if (!std::filesystem::is_directory(dir)) return paths;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        if (e.path().extension() == ".gguf" && e.path().filename().string().starts_with(prefix))
            paths.push_back(e.path());
    }
    std::sort(paths.begin(), paths.end());
    return paths;
}

// The vocabularies to fuzz: quill's own (tests/fuzz/corpus/fuzz_gguf/tiny-*.gguf, an SPM and a byte-level BPE one
// written by make_seeds.py), then every vocab/ggml-vocab-*.gguf of the test data when it is there.
inline std::vector<NamedTokenizer> load_test_vocabs() {
    std::vector<std::filesystem::path> paths =
        gguf_files(std::filesystem::path(QUILL_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / "fuzz_gguf", "tiny-");
    for (const auto& p : gguf_files(testdata_dir() / "vocab", "ggml-vocab-")) paths.push_back(p);
    if (paths.empty()) std::abort();  // quill's own are committed: without them the run would test nothing
    std::vector<NamedTokenizer> toks;
    for (const auto& p : paths) {
        auto tok = Tokenizer::from_gguf(GgufFile::open(p.string()));
        const auto bytes = single_byte_tokens(*tok);
        toks.push_back({p.stem().string(), std::move(tok), bytes});
    }
    return toks;
}

// The test vocabs, loaded once per fuzzing process (libFuzzer calls the target many times in one process).
inline const std::vector<NamedTokenizer>& test_vocabs() {
    static const std::vector<NamedTokenizer> toks = load_test_vocabs();
    return toks;
}

}  // namespace quill::fuzz
