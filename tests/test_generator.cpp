// Generation: stop strings held back and cut, finish reasons, and the whole loop on the real stories260K model.
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/runtime/generator.h"
#include "engine/model/model.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

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

struct Stories {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tok;
    std::unique_ptr<cpu::CpuBackend> backend;
};

std::optional<Stories> load_stories(int64_t n_ctx = 256) {
    auto path = test::require_testdata("models/stories260K.gguf");
    if (!path) return std::nullopt;
    Stories s;
    s.model = Model::load(path->string());
    s.tok = Tokenizer::from_gguf(s.model->file);
    cpu::CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    s.backend = std::make_unique<cpu::CpuBackend>(s.model->config, s.model->weights, o);
    return s;
}

GenerationParams greedy_params(int n) {
    GenerationParams p;
    p.max_tokens = n;
    p.sampling.temperature = 0;
    return p;
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

TEST_CASE("a stop string ends generation and is not printed", "[generator][model]") {
    auto s = load_stories();
    if (!s) return;
    GenerationParams p = greedy_params(64);
    p.stop = {"Lily."};
    Generation gen(*s->tok, s->tok->encode("Once upon a time", true, false), p, 256);
    std::string text;
    generate(*s->backend, gen, 0, [&](std::string_view piece) { text += piece; });
    CHECK(text == ", there was a little girl named ");
    CHECK(gen.finish_reason() == FinishReason::stop);
}

TEST_CASE("a full context ends generation with finish reason length", "[generator][model]") {
    auto s = load_stories(20);
    if (!s) return;
    Generation gen(*s->tok, s->tok->encode("Once upon a time", true, false), greedy_params(-1), 20);
    std::string text;
    GenerationStats st = generate(*s->backend, gen, 0, [&](std::string_view piece) { text += piece; });
    CHECK(gen.finish_reason() == FinishReason::context);
    CHECK(finish_reason_name(gen.finish_reason()) == "length");
    CHECK(st.completion_tokens == 16);  // positions 5..19 filled, plus the token sampled from the last
    CHECK(std::string(kReference).starts_with(text));
}

TEST_CASE("a prompt longer than the context is refused before any work", "[generator][model]") {
    auto s = load_stories(4);
    if (!s) return;
    CHECK_THROWS_WITH(Generation(*s->tok, s->tok->encode("Once upon a time", true, false), greedy_params(8), 4),
                      Catch::Contains("the prompt is 5 tokens, longer than the context of 4"));
    CHECK_THROWS_AS(Generation(*s->tok, {}, greedy_params(8), 4), UsageError);
}

TEST_CASE("the same seed gives the same sampled text", "[generator][model]") {
    auto s = load_stories();
    if (!s) return;
    auto run = [&](uint64_t seed) {
        GenerationParams p;
        p.max_tokens = 40;
        p.sampling.seed = seed;
        p.sampling.temperature = 1.0f;
        Generation gen(*s->tok, s->tok->encode("Once upon a time", true, false), p, 256);
        std::string text;
        generate(*s->backend, gen, 0, [&](std::string_view piece) { text += piece; });
        return text;
    };
    CHECK(run(5) == run(5));
    CHECK(run(5) != run(6));
}
