// A reply cut inside a multi-byte character (by the token limit, a full context or an interrupt) ends with the
// characters that were whole: the first bytes of the cut one are withheld, never printed as U+FFFD. A reply that
// ended (an end-of-generation token) after such bytes still shows U+FFFD: that is what the model wrote.
#include "engine/cpu/cpu_backend.h"
#include "engine/format/gguf.h"
#include "engine/runtime/generator.h"
#include "tests/support/random_model.h"
#include "tests/support/scripted_backend.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_vocab.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace test_cut_character {

using namespace quill;

namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";

// The text of ids[0..n) as a reply streams it (after a prompt, so SPM's first space stays), finished.
std::string reply_text(const Tokenizer& tok, const std::vector<int32_t>& ids, size_t n) {
    Detokenizer d(tok, false);
    std::string text;
    for (size_t i = 0; i < n; ++i) text += d.push(ids[i]);
    return text + d.finish();
}

// The ids of `text`; `cut` is the index of the first token that ends inside a character (a byte token), which the
// text must have.
std::vector<int32_t> split_ids(const Tokenizer& tok, const std::string& text, size_t& cut) {
    std::vector<int32_t> ids = tok.encode(text, false, false);
    cut = 0;
    while (cut < ids.size() && !reply_text(tok, ids, cut + 1).ends_with(kReplacement)) ++cut;
    REQUIRE(cut < ids.size());
    return ids;
}

// Runs `ids` through a Generation with the given limit and context, interrupting after `n_before_interrupt` ids when
// that is not -1; returns the text and the finish reason.
std::pair<std::string, FinishReason> say(const Tokenizer& tok, const std::vector<int32_t>& ids, int max_tokens,
                                         int64_t n_ctx, int n_before_interrupt = -1) {
    GenerationParams gp;
    gp.max_tokens = max_tokens;
    Generation gen(tok, {ids.front()}, gp, n_ctx);
    std::string text;
    for (size_t i = 0; i < ids.size() && !gen.finished(); ++i) {
        if (static_cast<int>(i) == n_before_interrupt) {
            text += gen.interrupt();
            break;
        }
        text += gen.advance(ids[i]);
    }
    return {text, gen.finish_reason()};
}

void check_cuts(const Tokenizer& tok, const std::string& text) {
    size_t cut = 0;
    const std::vector<int32_t> ids = split_ids(tok, text, cut);
    std::string whole = reply_text(tok, ids, cut + 1);  // the characters before the cut one, then U+FFFD
    whole.resize(whole.size() - std::string(kReplacement).size());
    INFO(text << ": cut after token " << cut);
    const int n = static_cast<int>(cut) + 1;  // ends inside a character
    auto [by_limit, r1] = say(tok, ids, n, 4096);
    CHECK(r1 == FinishReason::length);
    CHECK(by_limit == whole);
    auto [by_context, r2] = say(tok, ids, -1, n);  // the prompt's one token, then n - 1 fed back
    CHECK(r2 == FinishReason::context);
    CHECK(by_context == whole);
    auto [by_interrupt, r3] = say(tok, ids, -1, 4096, n);
    CHECK(r3 == FinishReason::interrupted);
    CHECK(by_interrupt == whole);
    // Ended by the model after the first bytes: the bytes it wrote are not a character.
    std::vector<int32_t> ended(ids.begin(), ids.begin() + n);
    ended.push_back(tok.eog_ids().front());
    auto [by_eog, r4] = say(tok, ended, -1, 4096);
    CHECK(r4 == FinishReason::stop);
    CHECK(by_eog == whole + kReplacement);
}

}  // namespace

TEST_CASE("a reply cut inside a character withholds its first bytes (byte-level BPE and SPM byte tokens)",
          "[runtime][tokenizer]") {
    const auto bpe = test::make_tokenizer(test::tiny_bpe_vocab());
    check_cuts(*bpe, " Once caf\xC3\xA9");
    check_cuts(*bpe, " a \xF0\x9F\x99\x82 time");
    const auto spm = test::make_tokenizer(test::tiny_spm_vocab(true));
    check_cuts(*spm, "Once caf\xC3\xA9");
    check_cuts(*spm, "a \xE6\x97\xA5\xE6\x9C\xAC");
}

TEST_CASE("a reply of the default model cut inside a character withholds its first bytes", "[runtime][model]") {
    const auto path = test::require_default_model();
    if (!path) return;
    const GgufFile file = GgufFile::open(path->string());
    const auto tok = Tokenizer::from_gguf(file);
    check_cuts(*tok, "Nice \xF0\x9F\x99\x82 and \xE6\x97\xA5\xE6\x9C\xAC");
}

TEST_CASE("a scripted model's reply cut by -n inside a character streams no U+FFFD", "[runtime]") {
    const test::TinyVocab vocab = test::tiny_bpe_vocab();
    const auto tok = test::make_tokenizer(vocab);
    test::TinySpec spec;
    spec.n_vocab = vocab.size();
    spec.n_ctx_train = 256;
    const auto model = test::make_tiny_model(spec);
    cpu::CpuBackendOptions o;
    o.n_threads = 1;
    o.n_ctx = 256;
    cpu::CpuBackend cpu(model->config, model->weights, o);
    test::ScriptedBackend backend(cpu, tok->eog_ids().front());
    size_t cut = 0;
    const std::vector<int32_t> ids = split_ids(*tok, " caf\xC3\xA9 time", cut);
    backend.say(ids);
    GenerationParams gp;
    gp.max_tokens = static_cast<int>(cut) + 1;
    Generation gen(*tok, tok->encode(" Once upon", false, false), gp, 256);
    std::string streamed;
    generate(backend, gen, 0, [&](std::string_view t) { streamed += t; });
    CHECK(gen.finish_reason() == FinishReason::length);
    CHECK(streamed == " caf");
}

}  // namespace test_cut_character
