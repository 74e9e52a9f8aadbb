// Grammar mask micro-benchmark (not a test): per-token mask time while JSON documents that follow a schema are fed
// token by token (their own tokenization by the model's vocabulary), first with cold caches (five passes, each on a
// fresh copy of the grammar), then warm; and the sampler's time on a row of logits with and without the grammar.
// Times are the thread's CPU time, so that other processes on a busy machine do not count.
//   bench_grammar MODEL.gguf [SCHEMA.json DOC.json...]
#include "engine/format/gguf.h"
#include "engine/grammar/constraint.h"
#include "engine/runtime/sampler.h"
#include "tests/bench/people_schema.h"
#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <time.h>

using namespace quill;

namespace {
// The calling thread's CPU time.
struct Clock {
    using time_point = double;  // seconds
    static double now() {
        timespec ts{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
    }
};
}  // namespace

namespace {

const char* const kDocs[] = {
    R"({"name": "Alice Martin", "age": 34, "email": "alice.martin@example.com", "born": "1990-04-12", "address": {"street": "12 Rue de la Paix", "city": "Paris", "zip": "75002"}, "tags": ["engineer", "cyclist", "amateur photographer"], "status": "active", "score": 87.5, "friends": [{"name": "Bob", "age": 36, "status": "inactive"}]})",
    "{\n  \"name\": \"Kenji Watanabe\",\n  \"age\": 58,\n  \"address\": {\n    \"street\": \"3-1 Marunouchi\",\n    \"city\": \"東京\"\n  },\n  \"tags\": [\"gardening\", \"go\", \"haiku\"],\n  \"status\": \"banned\",\n  \"score\": 12\n}",
    R"({"name":"Zoë O'Brien","age":7,"status":"active","score":99.25,"friends":[{"name":"Max","age":8,"tags":["lego"],"status":"active"},{"name":"Ida","age":7,"status":"active"}]})",
    R"({"name": "Dr. Ngozi Okafor-Smith, PhD", "age": 45, "email": "n.okafor@uni.edu.ng", "address": {"street": "Plot 7, Admiralty Way", "city": "Lagos"}, "tags": ["medicine", "public health", "running", "jollof"], "status": "inactive"})",
};

double us_since(Clock::time_point t0) { return (Clock::now() - t0) * 1e6; }

struct Stats {
    std::vector<double> us;
    void add(double v) { us.push_back(v); }
    std::string line() {
        if (us.empty()) return "-";
        std::sort(us.begin(), us.end());
        double sum = 0;
        for (double v : us) sum += v;
        return fmt::format("{} tokens: mean {:.1f} us, median {:.1f} us, p99 {:.1f} us, max {:.1f} us", us.size(),
                           sum / static_cast<double>(us.size()), us[us.size() / 2], us[us.size() * 99 / 100],
                           us.back());
    }
};

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        fmt::print(stderr, "usage: bench_grammar MODEL.gguf [SCHEMA.json DOC.json...]\n");
        return 2;
    }
    const auto tok = Tokenizer::from_gguf(GgufFile::open(argv[1]));
    std::string schema = bench::kPeopleSchema;
    std::vector<std::string> docs(std::begin(kDocs), std::end(kDocs));
    if (argc >= 3) {
        auto slurp = [](const char* p) { std::ifstream f(p); std::stringstream ss; ss << f.rdbuf(); return ss.str(); };
        schema = slurp(argv[2]);
        docs.clear();
        for (int i = 3; i < argc; ++i) docs.push_back(slurp(argv[i]));
    }
    auto t0 = Clock::now();
    auto grammar = grammar::compile_constraint({grammar::ConstraintSpec::Kind::json_schema, schema, "schema"});
    const double compile_us = us_since(t0);
    t0 = Clock::now();
    auto tg = std::make_shared<grammar::TokenGrammar>(grammar, *tok);
    const double bind_us = us_since(t0);
    fmt::print("vocabulary {} tokens; schema compiled in {:.1f} ms, bound to the vocabulary in {:.1f} ms\n",
               tok->n_vocab(), compile_us / 1000, bind_us / 1000);

    // cold: kColdRounds first passes, each on a fresh copy of the grammar; warm: two more passes on the last copy
    constexpr int kColdRounds = 5;
    Stats cold, warm;
    for (int round = 0; round < kColdRounds + 2; ++round) {
        if (round > 0 && round < kColdRounds) tg = tg->renewed();
        for (size_t d = 0; d < docs.size(); ++d) {
            const std::vector<int32_t> ids = tok->encode(docs[d], false, false);
            grammar::GrammarMatcher m(tg);
            for (int32_t id : ids) {
                t0 = Clock::now();
                const auto mask = m.mask();
                const double us = us_since(t0);
                (round < kColdRounds ? cold : warm).add(us);
                if (!((mask[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1)) {
                    fmt::print(stderr, "document {}: token {} '{}' refused\n", d, id, tok->token_bytes(id));
                    return 1;
                }
                m.accept(id);
            }
            if (!m.complete()) {
                fmt::print(stderr, "document {} is not complete under the schema\n", d);
                return 1;
            }
        }
    }
    fmt::print("mask, first passes over the documents (cold caches, {} fresh grammars): {}\n", kColdRounds,
               cold.line());
    fmt::print("mask, later passes (warm caches): {}\n", warm.line());
    const auto stats = tg->stats();
    fmt::print("last grammar: local walks {} ({} trie nodes of {} visited), state masks built {}, found cached {}\n",
               stats.local_walks, stats.walk_nodes, tg->trie_size(), stats.masks_built, stats.mask_hits);
    fmt::print("last grammar: {} transitions asked of the automaton ({} states), the walks' table started over {} "
               "times\n",
               stats.dense_steps, tg->automaton().n_states(), stats.dense_restarts);

    // the sampler on a row of logits: the mask applied, then the chain (top-k 40, top-p 0.95, temperature 0.8)
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0, 3);
    std::vector<float> row(static_cast<size_t>(tok->n_vocab()));
    for (float& l : row) l = normal(rng);
    for (int constrained = 0; constrained < 2; ++constrained) {
        Stats st;
        for (int rep = 0; rep < 20; ++rep) {
            const std::vector<int32_t> ids = tok->encode(docs[0], false, false);
            Sampler s(SamplingParams{});
            if (constrained) s.constrain(tg);
            for (int32_t id : ids) {
                std::vector<float> logits = row;
                t0 = Clock::now();
                (void)s.sample(logits);
                st.add(us_since(t0));
                s.accept_output(id);
            }
        }
        fmt::print("sample() {}: {}\n", constrained ? "with the grammar" : "without a grammar", st.line());
    }
    return 0;
}
