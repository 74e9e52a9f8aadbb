// The scheduler: mixed prefill + decode batches give every request the text it gets alone, finished slots are
// refilled at the next step, the token budget splits long prompts without ever skipping a decoding sequence, and
// cancellation stops admission or abandons running requests.
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/runtime/generator.h"
#include "engine/runtime/scheduler.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

namespace test_scheduler {

using namespace quill;

namespace {

// A backend that records every batch it runs and hands it on (and can claim to keep no positions to go back to,
// as with sliding-window rings shorter than a prompt).
class RecordingBackend final : public Backend {
public:
    explicit RecordingBackend(Backend& inner) : inner_(inner) {}
    std::string_view name() const override { return inner_.name(); }
    const ModelConfig& config() const override { return inner_.config(); }
    const KvCacheShape& kv_shape() const override { return inner_.kv_shape(); }
    void forward(const Batch& batch, std::span<float> logits) override {
        batches.push_back(batch);
        inner_.forward(batch, logits);
    }
    int64_t max_rewind() const override { return can_rewind ? inner_.max_rewind() : 0; }
    bool can_copy_kv() const override { return can_copy && inner_.can_copy_kv(); }
    void copy_kv(int32_t src, int32_t dst, int64_t begin, int64_t end) override {
        copies.push_back({src, dst, begin, end, batches.size()});
        inner_.copy_kv(src, dst, begin, end);
    }
    struct Copy {
        int32_t src, dst;
        int64_t begin, end;
        size_t before;  // batches run before it
    };
    std::vector<Batch> batches;
    std::vector<Copy> copies;
    bool can_rewind = true;
    bool can_copy = true;

private:
    Backend& inner_;
};

struct Tiny {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tok;
};

// The tiny model the tests write.
Tiny load() {
    Tiny s;
    s.model = Model::load(test::tiny_model_file(test::TinyModel::spm).string());
    s.tok = Tokenizer::from_gguf(s.model->file);
    return s;
}

std::unique_ptr<cpu::CpuBackend> backend(const Tiny& s, int64_t n_slots, int64_t n_ctx = 256) {
    cpu::CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    o.n_slots = n_slots;
    return std::make_unique<cpu::CpuBackend>(s.model->config, s.model->weights, o);
}

GenerationParams params(int n, float temp = 0.0f, uint64_t seed = 0) {
    GenerationParams p;
    p.max_tokens = n;
    p.sampling.temperature = temp;
    p.sampling.seed = seed;
    return p;
}

const std::vector<std::string> kPrompts = {
    "Once upon a time", "The little dog", "Lily and Tom went to the park to play with a big red ball and",
    "One day", "Sam had a toy car. He", "The sun was", "Mom said", "A bird sat on a tree and sang a song about"};

// The text each prompt gets alone, through generate() on a one-slot backend.
std::vector<std::string> alone(const Tiny& s, const std::vector<GenerationParams>& ps) {
    auto b = backend(s, 1);
    std::vector<std::string> out;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
        Generation gen(*s.tok, s.tok->encode(kPrompts[i], true, false), ps[i], 256);
        std::string text;
        generate(*b, gen, 0, [&](std::string_view t) { text += t; });
        out.push_back(text);
    }
    return out;
}

struct SchedRun {
    std::vector<std::string> texts;
    std::vector<int> finish_step;  // [request] forward passes run when it finished
    std::vector<Batch> batches;
};

// Two families of prompts with long shared prefixes, for the prefix-reuse tests.
const std::string kFamilyA = "Once upon a time, there was a little girl named Lily. She loved to play outside.";
const std::string kFamilyB = "Tom had a big red ball. He liked to kick it in the park with his dog every";

// The text of each tokenized prompt alone, each on a fresh one-slot backend.
std::vector<std::string> each_alone(const Tiny& s, const std::vector<std::vector<int32_t>>& tokens,
                                    const std::vector<GenerationParams>& ps) {
    std::vector<std::string> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
        auto b1 = backend(s, 1);
        Generation gen(*s.tok, tokens[i], ps[i], 256);
        std::string text;
        generate(*b1, gen, 0, [&](std::string_view t) { text += t; });
        out.push_back(text);
    }
    return out;
}

SchedRun run_all(const Tiny& s, const std::vector<GenerationParams>& ps, int64_t n_slots, int n_batch) {
    auto inner = backend(s, n_slots);
    RecordingBackend rec(*inner);
    SchedRun r;
    r.texts.resize(kPrompts.size());
    r.finish_step.resize(kPrompts.size(), -1);
    Scheduler sched(
        rec, SchedulerOptions{n_batch}, [&](int64_t id, std::string_view t) { r.texts[id] += t; },
        [&](int64_t id, const GenerationStats&) { r.finish_step[id] = static_cast<int>(rec.batches.size()); });
    std::vector<std::unique_ptr<Generation>> gens;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
        gens.push_back(std::make_unique<Generation>(*s.tok, s.tok->encode(kPrompts[i], true, false), ps[i], 256));
        sched.submit(static_cast<int64_t>(i), *gens.back());
    }
    while (sched.step()) {
    }
    r.batches = std::move(rec.batches);
    return r;
}

}  // namespace

TEST_CASE("mixed prefill and decode batches give each request its text alone", "[scheduler][model]") {
    const Tiny s = load();
    std::vector<GenerationParams> ps;
    for (size_t i = 0; i < kPrompts.size(); ++i) ps.push_back(params(8 + 5 * static_cast<int>(i)));  // unequal ends
    // Sampled ones too: a request's draws depend on its own seed only.
    ps[2] = params(30, 1.0f, 11);
    ps[5] = params(25, 0.8f, 12);
    const std::vector<std::string> want = alone(s, ps);
    for (auto [n_slots, n_batch] : {std::pair{3, 7}, std::pair{8, 512}, std::pair{2, 1}}) {
        INFO(n_slots << " slots, " << n_batch << " tokens per batch");
        const SchedRun r = run_all(s, ps, n_slots, n_batch);
        CHECK(r.texts == want);
        bool mixed = false;  // some batch held decode tokens and a prefill chunk together
        for (const Batch& b : r.batches) {
            std::set<int32_t> slots;
            for (const auto& t : b.tokens) slots.insert(t.slot);
            mixed = mixed || (slots.size() > 1 && b.n_logits() < static_cast<int>(b.tokens.size()));
        }
        if (n_batch > 1) CHECK(mixed);
    }
}

TEST_CASE("a finished sequence's slot is refilled at the next step", "[scheduler][model]") {
    const Tiny s = load();
    std::vector<GenerationParams> ps;
    for (size_t i = 0; i < kPrompts.size(); ++i) ps.push_back(params(3 + 4 * static_cast<int>(i % 3)));
    const SchedRun r = run_all(s, ps, 3, 512);
    // While requests wait, every batch holds tokens of all 3 slots: a freed slot never sits idle.
    std::vector<int> finished_by(r.batches.size() + 1, 0);  // [step] requests finished after that many steps
    for (int f : r.finish_step) {
        REQUIRE(f >= 0);
        for (size_t b = static_cast<size_t>(f); b < finished_by.size(); ++b) ++finished_by[b];
    }
    for (size_t b = 0; b < r.batches.size(); ++b) {
        std::set<int32_t> slots;
        for (const auto& t : r.batches[b].tokens) slots.insert(t.slot);
        const int unfinished = static_cast<int>(kPrompts.size()) - finished_by[b];
        INFO("batch " << b);
        CHECK(static_cast<int>(slots.size()) == std::min(3, unfinished));
    }
}

TEST_CASE("the token budget splits prompts and never starves a decoding sequence", "[scheduler][model]") {
    const Tiny s = load();
    std::vector<GenerationParams> ps(kPrompts.size(), params(12));
    const int n_batch = 5;
    const SchedRun r = run_all(s, ps, 4, n_batch);
    // A sequence that got logits in batch b - 1 and did not finish then has its next token (pos + 1) in batch b:
    // decoding sequences are never left out, however much prompt waits.
    std::map<int32_t, int32_t> prev;  // slot -> position of its logits token in the previous batch
    for (size_t b = 0; b < r.batches.size(); ++b) {
        const Batch& batch = r.batches[b];
        INFO("batch " << b);
        CHECK(static_cast<int>(batch.tokens.size()) <= std::max<int>(n_batch, static_cast<int>(prev.size()) + 1));
        std::map<int32_t, int32_t> seen;
        for (const auto& t : batch.tokens)
            if (t.logits) seen[t.slot] = t.pos;
        int continuing = 0;
        for (auto [slot, pos] : prev) continuing += seen.contains(slot) && seen[slot] == pos + 1;
        const auto finished = std::count(r.finish_step.begin(), r.finish_step.end(), static_cast<int>(b));
        CHECK(continuing == static_cast<int>(prev.size()) - static_cast<int>(finished));
        prev = seen;
    }
    // And the texts are still those of the requests alone.
    CHECK(r.texts == alone(s, ps));
}

TEST_CASE("cancellation stops admission, and abandoning ends running requests as interrupted", "[scheduler][model]") {
    const Tiny s = load();
    auto b = backend(s, 2);
    std::vector<std::unique_ptr<Generation>> gens;
    std::map<int64_t, FinishReason> ended;
    Scheduler sched(*b, {}, [](int64_t, std::string_view) {},
                    [&](int64_t id, const GenerationStats&) { ended[id] = gens[id]->finish_reason(); });
    for (int i = 0; i < 4; ++i) {
        gens.push_back(std::make_unique<Generation>(*s.tok, s.tok->encode(kPrompts[i], true, false), params(50), 256));
        sched.submit(i, *gens.back());
    }
    REQUIRE(sched.step());
    CHECK(sched.n_running() == 2);
    sched.stop_admission();
    for (int i = 0; i < 3; ++i) REQUIRE(sched.step());
    sched.abandon_running();
    CHECK(ended.size() == 2);
    CHECK(ended[0] == FinishReason::interrupted);
    CHECK(ended[1] == FinishReason::interrupted);
    CHECK(gens[0]->n_generated() == 4);
    CHECK(sched.n_waiting() == 2);  // never started
    CHECK_FALSE(sched.step());
    // Bad submissions are refused.
    Generation g(*s.tok, s.tok->encode("Hi", true, false), params(2), 256);
    CHECK_THROWS_AS(sched.submit(9, g, 2), UsageError);
    CHECK_THROWS_AS(sched.submit(9, g, -1, 1), UsageError);
    CHECK_THROWS_AS(sched.submit(9, g, 0, 99), UsageError);
}

TEST_CASE("generate() with a cached prefix continues a pinned slot", "[scheduler][model]") {
    const Tiny s = load();
    // A first turn fills slot 1; the second prompt extends it and reuses the cached tokens (n_past).
    auto b = backend(s, 2);
    const std::vector<int32_t> first = s.tok->encode("Once upon a time", true, false);
    Generation g1(*s.tok, first, params(10), 256);
    generate(*b, g1, 1, [](std::string_view) {});
    std::vector<int32_t> second = first;
    second.insert(second.end(), g1.generated().begin(), g1.generated().end() - 1);  // what is in the cache
    const int32_t cached = static_cast<int32_t>(second.size());
    for (int32_t t : s.tok->encode(" Then", false, false)) second.push_back(t);
    std::string with_cache, fresh;
    Generation g2(*s.tok, second, params(10), 256);
    GenerateOptions o;
    o.n_past = cached;
    const GenerationStats st = generate(*b, g2, 1, [&](std::string_view t) { with_cache += t; }, o);
    CHECK(st.reused_tokens == cached);
    CHECK(st.prefilled_tokens == static_cast<int>(second.size()) - cached);
    auto b1 = backend(s, 1);
    Generation g3(*s.tok, second, params(10), 256);
    generate(*b1, g3, 0, [&](std::string_view t) { fresh += t; });
    CHECK(with_cache == fresh);
}

TEST_CASE("a request reuses the prompt prefix its free slot already holds", "[scheduler][model]") {
    const Tiny s = load();
    const std::string &a = kFamilyA, &b = kFamilyB;
    const std::vector<std::string> prompts = {a + " One day", a + " Her mom", b + " day", b + " morning",
                                              a + " She saw", a + " She saw"};
    std::vector<std::vector<int32_t>> tokens;
    for (const auto& p : prompts) tokens.push_back(s.tok->encode(p, true, false));
    std::vector<GenerationParams> ps;
    for (size_t i = 0; i < prompts.size(); ++i) ps.push_back(params(6 + 3 * static_cast<int>(i % 3)));
    ps[3] = params(12, 0.9f, 5);  // a sampled one: its draws depend on its seed only
    const std::vector<std::string> want = each_alone(s, tokens, ps);
    // The tokens a request may skip after one that ran `before` on its slot: the common prefix, but for the
    // prompt's last token, which always runs for its logits.
    auto reusable = [&](size_t before, size_t i) {
        const auto &x = tokens[before], &y = tokens[i];
        size_t n = 0;
        while (n < x.size() && n + 1 < y.size() && x[n] == y[n]) ++n;
        return static_cast<int>(n);
    };

    SECTION("one slot: each request after the previous one") {
        for (bool rewind : {true, false}) {
            INFO((rewind ? "a backend that can go back" : "a backend that cannot go back"));
            auto inner = backend(s, 1);
            RecordingBackend rec(*inner);
            rec.can_rewind = rewind;
            std::vector<std::string> texts(prompts.size());
            std::vector<GenerationStats> stats(prompts.size());
            Scheduler sched(
                rec, SchedulerOptions{512},
                [&](int64_t id, std::string_view t) { texts[id] += t; },
                [&](int64_t id, const GenerationStats& st) { stats[id] = st; });
            std::vector<std::unique_ptr<Generation>> gens;
            for (size_t i = 0; i < prompts.size(); ++i) {
                gens.push_back(std::make_unique<Generation>(*s.tok, tokens[i], ps[i], 256));
                sched.submit(static_cast<int64_t>(i), *gens.back());
            }
            while (sched.step()) {
            }
            CHECK(texts == want);
            int prefilled = 0, total = 0;  // only what was not reused ran through the model
            for (const Batch& batch : rec.batches)
                for (const auto& t : batch.tokens) prefilled += !t.decode;
            for (size_t i = 0; i < prompts.size(); ++i) {
                INFO("request " << i);
                CHECK(stats[i].reused_tokens == (rewind && i > 0 ? reusable(i - 1, i) : 0));
                CHECK(stats[i].prefilled_tokens == static_cast<int>(tokens[i].size()) - stats[i].reused_tokens);
                prefilled -= stats[i].prefilled_tokens;
                total += stats[i].reused_tokens;
            }
            CHECK(prefilled == 0);
            if (rewind) CHECK(total > 40);  // the shared prefixes are long
        }
    }
    SECTION("two slots: the free slot with the longest prefix, not the first free one") {
        auto b2 = backend(s, 2);
        std::vector<std::string> texts(prompts.size());
        std::vector<GenerationStats> stats(prompts.size());
        Scheduler sched(
            *b2, SchedulerOptions{512}, [&](int64_t id, std::string_view t) { texts[id] += t; },
            [&](int64_t id, const GenerationStats& st) { stats[id] = st; });
        std::vector<std::unique_ptr<Generation>> gens;
        for (size_t i = 0; i < prompts.size(); ++i)
            gens.push_back(std::make_unique<Generation>(*s.tok, tokens[i], ps[i], 256));
        auto run = [&](std::initializer_list<size_t> ids) {
            for (size_t i : ids) sched.submit(static_cast<int64_t>(i), *gens[i]);
            while (sched.step()) {
            }
        };
        run({2, 0});  // slot 0 holds b's prompt, slot 1 a's
        run({1});     // a: slot 1
        run({3});     // b: slot 0
        run({4});     // a: slot 1 again
        CHECK(stats[2].reused_tokens == 0);
        CHECK(stats[0].reused_tokens == 0);
        CHECK(stats[1].reused_tokens == reusable(0, 1));
        CHECK(stats[3].reused_tokens == reusable(2, 3));
        CHECK(stats[4].reused_tokens == reusable(1, 4));
        CHECK(stats[1].reused_tokens > 10);
        CHECK(stats[3].reused_tokens > 10);
        for (size_t i : {0, 1, 2, 3, 4}) CHECK(texts[i] == want[i]);
        // The same prompt again: all of it but its last token.
        run({5});
        CHECK(stats[5].reused_tokens == static_cast<int>(tokens[5].size()) - 1);
        CHECK(texts[5] == want[5]);
    }
}

TEST_CASE("requests that share a prompt prefix copy it from the slot that runs it first", "[scheduler][model]") {
    const Tiny s = load();
    const std::string &a = kFamilyA, &b = kFamilyB;
    // Submitted together into four slots: 0 and 2 start their families, 1 and 3 share their prefixes; 4 and 5 come
    // after them and find the prefix in some slot's cache. 6 shares only the first few tokens of b (under kMinWait).
    const std::vector<std::string> prompts = {a + " One day", a + " Her mom", b + " day", b + " morning",
                                              a + " She saw", b + " night", "Tom had a cat."};
    std::vector<std::vector<int32_t>> tokens;
    for (const auto& p : prompts) tokens.push_back(s.tok->encode(p, true, false));
    auto common = [&](size_t i, size_t j) {  // what j may take from i's prompt
        size_t n = 0;
        while (n < tokens[i].size() && n + 1 < tokens[j].size() && tokens[i][n] == tokens[j][n]) ++n;
        return static_cast<int>(n);
    };
    REQUIRE(common(0, 1) >= static_cast<int>(Scheduler::kMinWait));
    REQUIRE(common(2, 3) >= static_cast<int>(Scheduler::kMinWait));
    REQUIRE(common(2, 6) > 0);
    REQUIRE(common(2, 6) < static_cast<int>(Scheduler::kMinWait));
    std::vector<GenerationParams> ps;
    for (size_t i = 0; i < prompts.size(); ++i) ps.push_back(params(5 + 4 * static_cast<int>(i % 3)));
    ps[3] = params(12, 0.9f, 5);
    const std::vector<std::string> want = each_alone(s, tokens, ps);
    for (bool copy : {true, false}) {
        INFO((copy ? "a backend that copies" : "a backend that cannot copy"));
        auto inner = backend(s, 4);
        RecordingBackend rec(*inner);
        rec.can_copy = copy;
        std::vector<std::string> texts(prompts.size());
        std::vector<GenerationStats> stats(prompts.size());
        Scheduler sched(
            rec, SchedulerOptions{512}, [&](int64_t id, std::string_view t) { texts[id] += t; },
            [&](int64_t id, const GenerationStats& st) { stats[id] = st; });
        std::vector<std::unique_ptr<Generation>> gens;
        for (size_t i = 0; i < prompts.size(); ++i) {
            gens.push_back(std::make_unique<Generation>(*s.tok, tokens[i], ps[i], 256));
            if (i < 4) sched.submit(static_cast<int64_t>(i), *gens.back());
        }
        REQUIRE(sched.step());
        // The first step runs the prompts of 0 and 2 only; 1 and 3 wait for them, and so does 6 (for a slot).
        std::set<int32_t> first;
        for (const auto& t : rec.batches[0].tokens) first.insert(t.slot);
        CHECK(first == (copy ? std::set<int32_t>{0, 2} : std::set<int32_t>{0, 1, 2, 3}));
        for (size_t i = 4; i < prompts.size(); ++i) sched.submit(static_cast<int64_t>(i), *gens[i]);
        while (sched.step()) {
        }
        CHECK(texts == want);
        int prefilled = 0;
        for (const Batch& batch : rec.batches)
            for (const auto& t : batch.tokens) prefilled += !t.decode;
        for (size_t i = 0; i < prompts.size(); ++i) prefilled -= stats[i].prefilled_tokens;
        CHECK(prefilled == 0);
        CHECK(stats[0].reused_tokens == 0);
        CHECK(stats[2].reused_tokens == 0);
        if (!copy) {
            CHECK(rec.copies.empty());
            CHECK(stats[1].reused_tokens == 0);
            CHECK(stats[3].reused_tokens == 0);
            continue;
        }
        // 1 and 3 copied their family's prefix in the second step, from the slot that ran it.
        CHECK(stats[1].reused_tokens == common(0, 1));
        CHECK(stats[3].reused_tokens == common(2, 3));
        // Later requests take the longest prefix any slot holds: 4 that of 0 or 1 (a + " She" at most), 5 b's, and
        // 6 what some slot of b's family holds (below kMinWait, so it never waited for it).
        CHECK(stats[4].reused_tokens == std::max(common(0, 4), common(1, 4)));
        CHECK(stats[5].reused_tokens == std::max(common(2, 5), common(3, 5)));
        CHECK(stats[6].reused_tokens == common(2, 6));
        REQUIRE(rec.copies.size() >= 2);
        CHECK(rec.copies[0].src == 0);
        CHECK(rec.copies[0].dst == 1);
        CHECK(rec.copies[0].begin == 0);
        CHECK(rec.copies[0].end == common(0, 1));
        CHECK(rec.copies[0].before == 1);
        CHECK(rec.copies[1].src == 2);
        CHECK(rec.copies[1].dst == 3);
        CHECK(rec.copies[1].end == common(2, 3));
        CHECK(rec.copies[1].before == 1);
    }
}

}  // namespace test_scheduler
