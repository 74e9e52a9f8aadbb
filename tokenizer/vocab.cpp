#include "tokenizer/vocab.h"

#include "engine/error.h"
#include "engine/format/gguf.h"

#include <fmt/format.h>

namespace quill {

namespace {

TokenType token_type_from_gguf(int64_t value) {
    switch (value) {
        case 2: return TokenType::unknown;
        case 3: return TokenType::control;
        case 4: return TokenType::user_defined;
        case 5: return TokenType::unused;
        case 6: return TokenType::byte;
        default: return TokenType::normal;  // 1, and undefined (0) or unknown values
    }
}

[[noreturn]] void fail(const GgufFile& file, const std::string& what) {
    throw FileError(fmt::format("{}: {}", file.path(), what));
}

std::vector<std::string> read_pieces(const GgufFile& file) {
    const GgufArray* tokens = file.get_array("tokenizer.ggml.tokens", GgufType::STRING);
    if (!tokens) fail(file, "metadata 'tokenizer.ggml.tokens' is missing (expected the vocabulary as strings)");
    if (tokens->empty()) fail(file, "metadata 'tokenizer.ggml.tokens' is empty");
    if (tokens->size() > static_cast<size_t>(INT32_MAX))
        fail(file, fmt::format("metadata 'tokenizer.ggml.tokens' has {} entries, too many", tokens->size()));
    std::vector<std::string> pieces;
    pieces.reserve(tokens->size());
    for (size_t i = 0; i < tokens->size(); ++i) {
        pieces.emplace_back(tokens->string_at(i));
        if (pieces.back().empty()) pieces.back() = fmt::format("[EMPTY_{}]", pieces.size() - 1);
    }
    return pieces;
}

void check_length(const GgufFile& file, const char* key, size_t n, size_t n_vocab) {
    if (n != n_vocab)
        fail(file, fmt::format("metadata '{}' has {} entries, expected one per token ({})", key, n, n_vocab));
}

}  // namespace

void read_gguf_specials(const GgufFile& file, Vocab& vocab) {
    auto id = [&](const char* key, std::optional<int64_t>& out) {
        if (auto v = file.get_int(key)) out = *v;
    };
    id("tokenizer.ggml.bos_token_id", vocab.bos);
    id("tokenizer.ggml.eos_token_id", vocab.eos);
    id("tokenizer.ggml.unknown_token_id", vocab.unk);
    id("tokenizer.ggml.eot_token_id", vocab.eot);
    id("tokenizer.ggml.eom_token_id", vocab.eom);
    if (auto v = file.get_bool("tokenizer.ggml.add_bos_token")) vocab.add_bos = *v;
    if (auto v = file.get_bool("tokenizer.ggml.add_eos_token")) vocab.add_eos = *v;
    if (auto v = file.get_string("general.name")) vocab.general_name = *v;
}

Vocab read_gguf_vocab(const GgufFile& file) {
    Vocab vocab;
    vocab.source = file.path();
    auto model = file.get_string("tokenizer.ggml.model");
    if (!model) fail(file, "metadata 'tokenizer.ggml.model' is missing (expected 'llama', 'gpt2' or 'gemma4')");
    vocab.model = *model;
    vocab.pre = file.get_string("tokenizer.ggml.pre").value_or("");

    vocab.pieces = read_pieces(file);
    const size_t n_vocab = vocab.pieces.size();

    vocab.scores.assign(n_vocab, 0.0f);
    if (const GgufArray* scores = file.get_array("tokenizer.ggml.scores", GgufType::F32)) {
        check_length(file, "tokenizer.ggml.scores", scores->size(), n_vocab);
        for (size_t i = 0; i < n_vocab; ++i) vocab.scores[i] = static_cast<float>(scores->at(i).as_float());
    }

    vocab.types.assign(n_vocab, TokenType::normal);
    if (const GgufArray* types = file.get_array("tokenizer.ggml.token_type", GgufType::I32)) {
        check_length(file, "tokenizer.ggml.token_type", types->size(), n_vocab);
        for (size_t i = 0; i < n_vocab; ++i) vocab.types[i] = token_type_from_gguf(types->at(i).as_int());
    }

    if (const GgufArray* merges = file.get_array("tokenizer.ggml.merges", GgufType::STRING)) {
        vocab.merges.reserve(merges->size());
        for (size_t i = 0; i < merges->size(); ++i) vocab.merges.emplace_back(merges->string_at(i));
    }

    read_gguf_specials(file, vocab);
    if (auto v = file.get_bool("tokenizer.ggml.add_space_prefix")) vocab.add_space_prefix = *v;
    return vocab;
}

}  // namespace quill
