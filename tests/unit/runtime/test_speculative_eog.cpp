// Speculative decoding stops guessing at an end of generation: a draft model's and prompt lookup's guesses end with
// the first end-of-generation token they guess (the sequence ends there if the model takes it, so nothing after it
// could be kept), which stays the last guess so that the model can take it; and no guess goes past -n, the
// generation's context or the draft model's context.
#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/runtime/draft.h"
#include "engine/runtime/generator.h"
#include "engine/runtime/lookup.h"
#include "tests/support/tiny_loaded.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <utility>

namespace test_speculative_eog {

using namespace quill;

namespace {

using test::Loaded;
using test::load_tiny;
using test::small_spec;

std::unique_ptr<Backend> cpu_backend(const Model& m, int64_t n_ctx) {
    cpu::CpuBackendOptions o;
    o.n_threads = 1;
    o.n_ctx = n_ctx;
    o.n_slots = 1;
    return std::make_unique<cpu::CpuBackend>(m.config, m.weights, o);
}

// A backend over a real one (which keeps the cache) whose logits row of a token in `next` makes next[token] its
// greedy choice, nearly all of a sampler's mass (other rows keep the model's logits); it watches the guesses of each
// forward pass: the tokens of a sequence after its decode token.
class Successors final : public Backend {
public:
    Successors(Backend& inner, std::map<int32_t, int32_t> next, int32_t eog)
        : inner_(inner), next_(std::move(next)), eog_(eog) {}
    std::string_view name() const override { return inner_.name(); }
    const ModelConfig& config() const override { return inner_.config(); }
    const KvCacheShape& kv_shape() const override { return inner_.kv_shape(); }
    void forward(const Batch& batch, std::span<float> logits) override {
        inner_.forward(batch, logits);
        ++forwards;
        watch(batch);
        const auto n_vocab = static_cast<size_t>(config().n_vocab);
        size_t r = 0;
        for (const BatchToken& t : batch.tokens) {
            if (!t.logits) continue;
            const std::span<float> row = logits.subspan(r++ * n_vocab, n_vocab);
            logit_rows += 1;
            const auto it = next_.find(t.token);
            if (it == next_.end()) continue;
            std::fill(row.begin(), row.end(), 0.0f);
            row[static_cast<size_t>(it->second)] = 100.0f;
        }
    }

    int forwards = 0, logit_rows = 0;
    int guesses = 0, eog_guesses = 0;
    int past_eog = 0;           // guesses after an end-of-generation guess of the same sequence and pass
    int32_t last_guess_pos = -1;  // the highest position of a guess

private:
    void watch(const Batch& batch) {
        bool decoded = false, after_eog = false;  // (one sequence: its decode token, then its guesses)
        for (const BatchToken& t : batch.tokens) {
            if (!t.decode) continue;
            if (!std::exchange(decoded, true)) continue;
            ++guesses;
            past_eog += after_eog;
            after_eog = after_eog || t.token == eog_;
            eog_guesses += t.token == eog_;
            last_guess_pos = std::max(last_guess_pos, t.pos);
        }
    }

    Backend& inner_;
    std::map<int32_t, int32_t> next_;
    int32_t eog_;
};

struct Run {
    std::string text;
    GenerationStats stats;
    FinishReason reason = FinishReason::none;
};

Run generate_text(Backend& b, const Tokenizer& tok, const std::vector<int32_t>& prompt, const GenerationParams& p,
                  int64_t n_ctx) {
    Run r;
    Generation gen(tok, prompt, p, n_ctx);
    r.stats = generate(b, gen, 0, [&](std::string_view t) { r.text += t; });
    r.reason = gen.finish_reason();
    return r;
}

// The tiny model's vocabulary as four words A B C D (" Once upon a time") and its end of generation.
struct Words {
    int32_t a, b, c, d, eog;
};

Words words(const Tokenizer& tok) {
    const std::vector<int32_t> ids = tok.encode("Once upon a time", false, false);
    REQUIRE(ids.size() == 4);
    REQUIRE(tok.is_eog(tok.eos()));
    return {ids[0], ids[1], ids[2], ids[3], tok.eos()};
}

}  // namespace

TEST_CASE("a draft model's guesses end with the first end of generation it guesses", "[speculative]") {
    const Loaded target = load_tiny(small_spec(1));
    const Loaded draft = load_tiny(small_spec(5));
    const Words w = words(*target.tok);
    const std::vector<int32_t> prompt = {target.tok->bos(), w.a};
    // The model says A B C D A B C D ... and never ends; the draft guesses as much, but an end after D.
    auto tm = cpu_backend(*target.model, 256), dm = cpu_backend(*draft.model, 256);
    Successors tb(*tm, {{w.a, w.b}, {w.b, w.c}, {w.c, w.d}, {w.d, w.a}}, w.eog);
    GenerationParams plain;
    plain.max_tokens = 20;
    plain.sampling.temperature = 0.0f;
    const Run want = generate_text(tb, *target.tok, prompt, plain, 256);
    REQUIRE(want.reason == FinishReason::length);
    for (const float temperature : {0.0f, 0.8f}) {
        INFO("temperature " << temperature);
        Successors db(*dm, {{w.a, w.b}, {w.b, w.c}, {w.c, w.d}, {w.d, w.eog}}, w.eog);
        Successors watched(*tm, {{w.a, w.b}, {w.b, w.c}, {w.c, w.d}, {w.d, w.a}}, w.eog);
        GenerationParams p = plain;
        p.sampling.temperature = temperature;
        p.sampling.seed = 3;
        p.drafter = std::make_shared<Drafter>(db);
        p.draft = 6;
        const Run got = generate_text(watched, *target.tok, prompt, p, 256);
        CHECK(got.text == want.text);
        CHECK(watched.eog_guesses > 0);
        CHECK(watched.past_eog == 0);
        // Every guess but the ends was accepted; the draft ran one row per guess.
        CHECK(got.stats.guessed_tokens == watched.guesses);
        CHECK(got.stats.accepted_tokens == watched.guesses - watched.eog_guesses);
        CHECK(db.logit_rows == watched.guesses);
    }
}

TEST_CASE("a model that ends where the draft guessed it ends takes the guess", "[speculative]") {
    const Loaded target = load_tiny(small_spec(1));
    const Loaded draft = load_tiny(small_spec(5));
    const Words w = words(*target.tok);
    const std::vector<int32_t> prompt = {target.tok->bos(), w.a};
    // The model and the draft both say A B C D, then end.
    const std::map<int32_t, int32_t> says = {{w.a, w.b}, {w.b, w.c}, {w.c, w.d}, {w.d, w.eog}};
    auto tm = cpu_backend(*target.model, 256), dm = cpu_backend(*draft.model, 256);
    Successors tb(*tm, says, w.eog), db(*dm, says, w.eog), watched(*tm, says, w.eog);
    GenerationParams p;
    p.max_tokens = 20;
    p.sampling.temperature = 0.0f;
    const Run alone = generate_text(tb, *target.tok, prompt, p, 256);
    CHECK(alone.reason == FinishReason::stop);
    CHECK(alone.text == " upon a time");
    p.drafter = std::make_shared<Drafter>(db);
    p.draft = 6;
    const Run got = generate_text(watched, *target.tok, prompt, p, 256);
    CHECK(got.text == alone.text);
    CHECK(got.reason == FinishReason::stop);
    CHECK(watched.forwards == 2);  // the prompt, then B's decode row with the guesses C, D and the end
    CHECK(watched.guesses == 3);
    CHECK(db.logit_rows == 3);
}

TEST_CASE("prompt lookup's guesses end with the first end of generation they copy", "[speculative]") {
    const std::vector<int32_t> history = {1, 7, 8, 9, 2, 5, 6, 7, 8};
    const std::vector<int32_t> eog = {0, 2};
    CHECK(lookup_guesses(history, 6, 4, 1, eog) == std::vector<int32_t>{9, 2});
    CHECK(lookup_guesses(history, 6) == std::vector<int32_t>{9, 2, 5, 6, 7, 8});
    const Loaded target = load_tiny(small_spec(1));
    const Words w = words(*target.tok);
    // The prompt holds A B C, an end of generation, then other text: after ... A B, lookup copies C and the end.
    const std::vector<int32_t> tail = target.tok->encode(" the dog ran", false, false);
    std::vector<int32_t> prompt = {target.tok->bos(), w.a, w.b, w.c, w.eog};
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    prompt.push_back(w.a);
    auto tm = cpu_backend(*target.model, 256);
    Successors tb(*tm, {{w.a, w.b}, {w.b, w.c}, {w.c, w.d}, {w.d, w.a}}, w.eog);
    GenerationParams plain;
    plain.max_tokens = 16;
    plain.sampling.temperature = 0.0f;
    const Run want = generate_text(tb, *target.tok, prompt, plain, 256);
    GenerationParams p = plain;
    p.lookup = 8;
    Successors watched(*tm, {{w.a, w.b}, {w.b, w.c}, {w.c, w.d}, {w.d, w.a}}, w.eog);
    const Run got = generate_text(watched, *target.tok, prompt, p, 256);
    CHECK(got.text == want.text);
    CHECK(watched.eog_guesses > 0);
    CHECK(watched.past_eog == 0);
    CHECK(got.stats.guessed_tokens == watched.guesses);
}

TEST_CASE("guesses stay within -n, the generation's context and the draft model's context", "[speculative]") {
    const Loaded target = load_tiny(small_spec(1));
    const Loaded draft = load_tiny(small_spec(5));
    const Words w = words(*target.tok);
    const std::map<int32_t, int32_t> cycle = {{w.a, w.b}, {w.b, w.c}, {w.c, w.d}, {w.d, w.a}};
    const std::vector<int32_t> prompt = {target.tok->bos(), w.a, w.b};
    auto tm = cpu_backend(*target.model, 64);
    Successors tb(*tm, cycle, w.eog);
    GenerationParams plain;
    plain.sampling.temperature = 0.0f;
    struct Case {
        const char* what;
        int max_tokens;
        int64_t n_ctx, draft_ctx;
        FinishReason reason;
        int32_t last_pos;  // the last position a guess may take (one before the last generated token's); 0: the draft's
    };
    // Every guess is right, so each step asks for as many as it may.
    const Case cases[] = {
        {"-n", 21, 64, 64, FinishReason::length, 3 + 21 - 2},
        {"the context", -1, 30, 64, FinishReason::context, 30 - 1},
        {"the draft's context", 40, 64, 16, FinishReason::length, 0},
    };
    for (const Case& c : cases) {
        INFO(c.what);
        GenerationParams p = plain;
        p.max_tokens = c.max_tokens;
        const Run want = generate_text(tb, *target.tok, prompt, p, c.n_ctx);
        REQUIRE(want.reason == c.reason);
        auto dm = cpu_backend(*draft.model, c.draft_ctx);
        Successors db(*dm, cycle, w.eog);
        Successors watched(*tm, cycle, w.eog);
        p.drafter = std::make_shared<Drafter>(db);
        p.draft = 8;
        const Run got = generate_text(watched, *target.tok, prompt, p, c.n_ctx);
        CHECK(got.text == want.text);
        CHECK(got.reason == c.reason);
        CHECK(watched.guesses > 0);
        CHECK(got.stats.accepted_tokens == watched.guesses);
        // (the draft's last guess comes from its last position, n_ctx - 1)
        CHECK(watched.last_guess_pos == (c.last_pos > 0 ? c.last_pos : dm->kv_shape().n_ctx));
    }
}

}  // namespace test_speculative_eog
