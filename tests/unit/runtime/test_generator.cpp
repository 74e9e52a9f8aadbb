// Generation: stop strings held back and cut, finish reasons, and the whole loop on the tiny model the tests write
// and on the real stories260K model.
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/runtime/generator.h"
#include "tests/support/backend_checks.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

namespace test_generator {

using namespace quill;

namespace {

// Feeds the pieces one by one and returns what was printed, and whether a stop string matched.
std::pair<std::string, bool> feed(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
    StopMatcher m(stops);
    std::string out;
    for (const auto& p : pieces) {
        out += m.push(p);
        if (m.matched()) return {out, true};
    }
    return {out + m.flush(), false};
}

}  // namespace

TEST_CASE("stop strings are cut, partial matches held back and released", "[generator]") {
    CHECK(feed({"END"}, {"hello ", "wor", "ld"}) == std::make_pair(std::string("hello world"), false));
    CHECK(feed({"END"}, {"abc E", "N", "D more"}) == std::make_pair(std::string("abc "), true));
    CHECK(feed({"END"}, {"abcEN", "x"}) == std::make_pair(std::string("abcENx"), false));
    CHECK(feed({"\n\n"}, {"a\n", "\nb"}) == std::make_pair(std::string("a"), true));
    CHECK(feed({"y", "xyz"}, {"axyz"}) == std::make_pair(std::string("a"), true));  // the earliest match wins
    CHECK(feed({"", "stop"}, {"no stop", "s"}).second == true);

    // A held-back prefix is not printed until it is known not to be a stop string.
    StopMatcher m({"###"});
    CHECK(m.push("text #") == "text ");
    CHECK(m.push("#") == "");
    CHECK(m.push("x") == "##x");
    CHECK(!m.matched());
}

namespace {

struct Loaded {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tok;
    std::unique_ptr<cpu::CpuBackend> backend;
};

Loaded load(const std::filesystem::path& path, int64_t n_ctx) {
    Loaded s;
    s.model = Model::load(path.string());
    s.tok = Tokenizer::from_gguf(s.model->file);
    cpu::CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    s.backend = std::make_unique<cpu::CpuBackend>(s.model->config, s.model->weights, o);
    return s;
}

std::optional<Loaded> load_stories(int64_t n_ctx = 256) {
    auto path = test::require_testdata("models/stories260K.gguf");
    if (!path) return std::nullopt;
    return load(*path, n_ctx);
}

// The tiny model the tests write.
Loaded load_tiny(int64_t n_ctx = 256) { return load(test::tiny_model_file(test::TinyModel::spm), n_ctx); }

GenerationParams greedy_params(int n) {
    GenerationParams p;
    p.max_tokens = n;
    p.sampling.temperature = 0;
    return p;
}

// The text of n greedy tokens after "Once upon a time".
std::string greedy_text(const Loaded& s, int n) {
    Generation gen(*s.tok, s.tok->encode("Once upon a time", true, false), greedy_params(n), 256);
    std::string text;
    generate(*s.backend, gen, 0, [&](std::string_view piece) { text += piece; });
    return text;
}

// The text of ids that continue a prompt, decoded at once.
std::string decode_continuation(const Tokenizer& tok, const std::vector<int32_t>& ids) {
    Detokenizer d(tok, false);
    std::string text;
    for (int32_t id : ids) text += d.push(id);
    return text + d.finish();
}

const char* kReference =
    ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red "
    "ball. She wanted to play with it, but it was too high.\nLily's mom said";

}  // namespace

TEST_CASE("greedy generation on stories260K streams the reference text", "[generator][model]") {
    auto s = load_stories();
    if (!s) return;
    Generation gen(*s->tok, s->tok->encode("Once upon a time", true, false), greedy_params(64), 256);
    CHECK(gen.prompt() == std::vector<int32_t>{1, 403, 407, 261, 378});
    std::string text;
    int pieces = 0;
    GenerationStats st = generate(*s->backend, gen, 0, [&](std::string_view p) {
        text += p;
        ++pieces;
    });
    CHECK(text == kReference);
    CHECK(pieces > 50);  // streamed token by token, not at the end
    CHECK(gen.finish_reason() == FinishReason::length);
    CHECK(st.completion_tokens == 64);
    CHECK(st.prompt_tokens == 5);
}

TEST_CASE("greedy generation streams the backend's argmax tokens piece by piece and stops at max_tokens",
          "[generator]") {
    Loaded s = load_tiny();
    const std::vector<int32_t> prompt = s.tok->encode("Once upon a time", true, false);
    Generation gen(*s.tok, prompt, greedy_params(64), 256);
    std::string text;
    int pieces = 0;
    GenerationStats st = generate(*s.backend, gen, 0, [&](std::string_view p) {
        text += p;
        ++pieces;
    });
    // The oracle: the argmax of each step's logits in a plain loop on a fresh backend, detokenized at once.
    const std::vector<int32_t> want = test::greedy_tokens(*load_tiny().backend, prompt, 64);
    CHECK(gen.generated() == want);
    CHECK(text == decode_continuation(*s.tok, want));
    CHECK(pieces > 50);  // streamed token by token, not at the end
    CHECK(gen.finish_reason() == FinishReason::length);
    CHECK(st.completion_tokens == 64);
    CHECK(st.prompt_tokens == 5);
}

TEST_CASE("a stop string ends generation and is not printed", "[generator][model]") {
    Loaded s = load_tiny();
    const std::string text = greedy_text(s, 64);
    REQUIRE(text.size() > 40);
    // A stop string from the middle of the greedy text: what comes before its first occurrence is printed.
    const std::string stop = text.substr(text.size() / 2, 5);
    GenerationParams p = greedy_params(64);
    p.stop = {stop};
    Generation gen(*s.tok, s.tok->encode("Once upon a time", true, false), p, 256);
    std::string got;
    generate(*s.backend, gen, 0, [&](std::string_view piece) { got += piece; });
    CHECK(got == text.substr(0, text.find(stop)));
    CHECK(gen.finish_reason() == FinishReason::stop);
}

TEST_CASE("a full context ends generation with finish reason length", "[generator][model]") {
    const std::string full = greedy_text(load_tiny(), 64);
    Loaded s = load_tiny(20);
    Generation gen(*s.tok, s.tok->encode("Once upon a time", true, false), greedy_params(-1), 20);
    std::string text;
    GenerationStats st = generate(*s.backend, gen, 0, [&](std::string_view piece) { text += piece; });
    CHECK(gen.finish_reason() == FinishReason::context);
    CHECK(finish_reason_name(gen.finish_reason()) == "length");
    CHECK(st.completion_tokens == 16);  // positions 5..19 filled, plus the token sampled from the last
    CHECK(!text.empty());
    CHECK(full.starts_with(text));
}

TEST_CASE("a prompt longer than the context is refused before any work", "[generator][model]") {
    Loaded s = load_tiny(4);
    CHECK_THROWS_WITH(Generation(*s.tok, s.tok->encode("Once upon a time", true, false), greedy_params(8), 4),
                      Catch::Contains("the prompt is 5 tokens, longer than the context of 4"));
    CHECK_THROWS_AS(Generation(*s.tok, {}, greedy_params(8), 4), UsageError);
}

TEST_CASE("the same seed gives the same sampled text", "[generator][model]") {
    Loaded s = load_tiny();
    auto run = [&](uint64_t seed) {
        GenerationParams p;
        p.max_tokens = 40;
        p.sampling.seed = seed;
        p.sampling.temperature = 1.0f;
        Generation gen(*s.tok, s.tok->encode("Once upon a time", true, false), p, 256);
        std::string text;
        generate(*s.backend, gen, 0, [&](std::string_view piece) { text += piece; });
        return text;
    };
    CHECK(run(5) == run(5));
    CHECK(run(5) != run(6));
}

}  // namespace test_generator
