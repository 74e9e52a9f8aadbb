// Log-probabilities: the sampler's figures against a softmax of the raw logits in double precision, a generation's
// against the model's own logits, and their JSON in `run --json` and batch records (quill's, OpenAI's chat and
// legacy completions shapes).
#include "engine/cpu/cpu_backend.h"
#include "engine/runtime/generator.h"
#include "engine/runtime/perplexity.h"
#include "engine/runtime/sampler.h"
#include "tests/support/backend_checks.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tokenizer/tokenizer.h"
#include "engine/io/utf8.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <random>

namespace test_logprobs {

using namespace quill;
using nlohmann::json;

namespace {

std::vector<float> random_row(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 3.0f);
    std::vector<float> row(n);
    for (float& x : row) x = d(rng);
    row[n / 3] = row[n / 2];  // a tie: the lower id ranks first
    return row;
}

// log softmax of the row at every id, in double precision.
std::vector<double> log_softmax(const std::vector<float>& row) {
    double max = *std::max_element(row.begin(), row.end()), sum = 0;
    for (float v : row) sum += std::exp(v - max);
    std::vector<double> out;
    for (float v : row) out.push_back(v - max - std::log(sum));
    return out;
}

std::vector<json> records(const std::string& text) {
    std::vector<json> out;
    for (size_t start = 0; start < text.size();) {
        const size_t nl = text.find('\n', start);
        REQUIRE(nl != std::string::npos);
        out.push_back(json::parse(text.substr(start, nl - start)));
        start = nl + 1;
    }
    return out;
}

// Each entry's alternatives are the most likely tokens, descending, the entry's own logprob among them when it is
// the top one; every probability at most 1 and together at most 1.
void check_entries(const json& content, size_t top_n, bool greedy) {
    for (const json& e : content) {
        REQUIRE(e["top_logprobs"].size() == top_n);
        double total = 0;
        for (size_t i = 0; i < top_n; ++i) {
            const double lp = e["top_logprobs"][i]["logprob"];
            CHECK(lp <= 0);
            if (i > 0) CHECK(lp <= e["top_logprobs"][i - 1]["logprob"].get<double>());
            total += std::exp(lp);
        }
        CHECK(total <= 1.0 + 1e-12);
        if (greedy && top_n > 0) {
            CHECK(e["top_logprobs"][0]["token"] == e["token"]);
            CHECK(e["top_logprobs"][0]["logprob"] == e["logprob"]);
        }
        // "token" is the bytes as text; where they are not whole UTF-8 characters the JSON writer replaced them.
        std::string bytes;
        for (const json& b : e["bytes"]) bytes += static_cast<char>(b.get<int>());
        if (utf8::is_valid(bytes)) CHECK(bytes == e["token"].get<std::string>());
    }
}

}  // namespace

TEST_CASE("the sampler's logprobs are a softmax of the raw logits in double precision", "[logprobs]") {
    const std::vector<float> row = random_row(1000, 3);
    const std::vector<double> want = log_softmax(row);
    std::vector<int32_t> order(row.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });

    SECTION("greedy: the pick is the top alternative") {
        SamplingParams p;
        p.temperature = 0;
        Sampler s(p);
        CHECK(s.plain_greedy());
        s.set_logprobs(5);
        CHECK_FALSE(s.plain_greedy());  // a device must hand over the whole row
        CHECK(s.top_needed() == 0);
        std::vector<float> r = row;
        const int32_t t = s.sample(r);
        const TokenLogprobs& lp = s.last_logprobs();
        CHECK(lp.token == t);
        CHECK(t == order[0]);
        CHECK(lp.logprob == Approx(want[static_cast<size_t>(t)]).epsilon(1e-12));
        REQUIRE(lp.top.size() == 5);
        for (size_t i = 0; i < 5; ++i) {
            CHECK(lp.top[i].first == order[i]);
            CHECK(lp.top[i].second == Approx(want[static_cast<size_t>(order[i])]).epsilon(1e-12));
        }
    }
    SECTION("sampled with penalties: the model's distribution, before the penalties and the temperature") {
        SamplingParams p;
        p.temperature = 1.5f;
        p.top_k = 0;
        p.top_p = 1.0f;
        p.min_p = 0.0f;
        p.repeat_penalty = 3.0f;
        p.seed = 11;
        Sampler s(p);
        s.set_logprobs(0);
        for (int i = 0; i < 10; ++i) s.accept(order[static_cast<size_t>(i)]);  // the ten most likely, penalized
        for (int step = 0; step < 50; ++step) {
            std::vector<float> r = row;
            const int32_t t = s.sample(r);
            CHECK(s.last_logprobs().token == t);
            CHECK(s.last_logprobs().top.empty());
            CHECK(s.last_logprobs().logprob == Approx(want[static_cast<size_t>(t)]).epsilon(1e-12));
        }
    }
    SECTION("the same picks as without logprobs") {
        SamplingParams p;
        p.seed = 5;
        Sampler a(p), b(p);
        b.set_logprobs(3);
        for (int step = 0; step < 100; ++step) {
            std::vector<float> ra = random_row(300, static_cast<uint32_t>(step)), rb = ra;
            CHECK(a.sample(ra) == b.sample(rb));
        }
    }
}

TEST_CASE("a generation's logprobs are the model's own next-token distribution at each step", "[logprobs]") {
    test::TinySpec spec = test::tiny_model_spec(test::TinyModel::bpe_chat);
    auto model = test::make_tiny_model(spec);
    auto tok = Tokenizer::from_gguf(model->file);
    cpu::CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = 128;
    o.kv_type = KvType::f32;
    cpu::CpuBackend backend(model->config, model->weights, o);
    const std::vector<int32_t> prompt = tok->encode("Once upon a time", false, false);
    GenerationParams gp;
    gp.max_tokens = 12;
    gp.sampling.seed = 3;
    gp.logprobs = 4;
    Generation gen(*tok, prompt, gp, 128);
    generate(backend, gen, 0, [](std::string_view) {});
    REQUIRE(gen.logprobs().size() == gen.generated().size());
    REQUIRE(gen.generated().size() == 12);

    // The logits of prompt + generated, all in one prefill on a fresh backend (the same logits as the decode steps:
    // batch invariance), give every figure again.
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), gen.generated().begin(), gen.generated().end() - 1);
    cpu::CpuBackend fresh(model->config, model->weights, o);
    const std::vector<float> logits = test::prefill_logits(fresh, all);
    const int64_t nv = model->config.n_vocab;
    for (size_t i = 0; i < gen.generated().size(); ++i) {
        const size_t pos = prompt.size() - 1 + i;
        const std::span<const float> row(logits.data() + pos * nv, static_cast<size_t>(nv));
        const TokenLogprobs& lp = gen.logprobs()[i];
        CHECK(lp.token == gen.generated()[i]);
        CHECK(lp.logprob == Approx(log_softmax_at(row, lp.token)).epsilon(1e-9));
        REQUIRE(lp.top.size() == 4);
        for (const auto& [id, v] : lp.top) CHECK(v == Approx(log_softmax_at(row, id)).epsilon(1e-9));
    }
}

TEST_CASE("run --json --logprobs: an entry per generated token, the greedy pick the top alternative", "[logprobs][cli]") {
    const auto& path = test::tiny_model_file(test::TinyModel::bpe_chat);
    const auto r = test::run_quill({"run", "-m", path.string(), "-p", "Once upon a time", "-n", "10", "--temp", "0",
                                    "--json", "--logprobs", "3", "-q"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    const json j = json::parse(r.out);
    REQUIRE(j["logprobs"].size() == j["completion_tokens"].get<size_t>());
    check_entries(j["logprobs"], 3, true);
    // The tokens' bytes are the text (compared where they make whole characters: the JSON writer replaces the rest).
    std::string bytes;
    for (const json& e : j["logprobs"])
        for (const json& b : e["bytes"]) bytes += static_cast<char>(b.get<int>());
    if (utf8::is_valid(bytes)) CHECK(bytes == j["text"].get<std::string>());
    else CHECK(bytes.size() >= 10);

    const auto no_json = test::run_quill({"run", "-m", path.string(), "-p", "x", "--logprobs", "3"});
    CHECK(no_json.status == 2);
    CHECK(no_json.err.find("--logprobs requires --json") != std::string::npos);
    const auto too_many = test::run_quill({"run", "-m", path.string(), "-p", "x", "--json", "--logprobs", "21"});
    CHECK(too_many.status == 2);
}

TEST_CASE("batch logprobs: the request's fields, the flag, and each output format's shape", "[logprobs][cli]") {
    const auto& path = test::tiny_model_file(test::TinyModel::bpe_chat);
    const std::string jsonl =
        R"({"id": "a", "prompt": "Once upon a time", "max_tokens": 6, "temperature": 0, "logprobs": true, "top_logprobs": 2})"
        "\n"
        R"({"id": "b", "prompt": "The little dog", "max_tokens": 6, "temperature": 0})"
        "\n"
        R"({"id": "c", "prompt": "The sun", "max_tokens": 6, "top_logprobs": 2})"
        "\n"
        R"({"id": "d", "prompt": "The sun", "max_tokens": 6, "logprobs": true, "top_logprobs": 21})"
        "\n";
    auto r = test::run_quill({"batch", "-m", path.string(), "-q"}, jsonl);
    INFO(r.err);
    std::vector<json> recs = records(r.out);
    REQUIRE(recs.size() == 4);
    std::map<std::string, json> by;
    for (const json& rec : recs) by[rec["id"]] = rec;
    REQUIRE(by["a"].contains("logprobs"));
    CHECK(by["a"]["logprobs"].size() == by["a"]["usage"]["completion_tokens"].get<size_t>());
    check_entries(by["a"]["logprobs"], 2, true);
    CHECK(by["a"]["logprobs"][0].contains("id"));
    CHECK_FALSE(by["b"].contains("logprobs"));
    CHECK(by["c"]["error"]["message"].get<std::string>().find("\"top_logprobs\" needs \"logprobs\": true") !=
          std::string::npos);
    CHECK(by["d"]["error"]["message"].get<std::string>().find("out of range") != std::string::npos);

    // --logprobs sets every request's; OpenAI batch bodies: chat completions' and legacy completions' shapes.
    const std::string openai =
        R"({"custom_id": "chat", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5, "temperature": 0, "logprobs": true, "top_logprobs": 3}})"
        "\n"
        R"({"custom_id": "plain", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5, "temperature": 0}})"
        "\n"
        R"({"custom_id": "legacy", "method": "POST", "url": "/v1/completions", "body": {"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "logprobs": 2}})"
        "\n";
    r = test::run_quill({"batch", "-m", path.string(), "-q"}, openai);
    recs = records(r.out);
    REQUIRE(recs.size() == 3);
    by.clear();
    for (const json& rec : recs) by[rec["custom_id"]] = rec;
    const json& chat = by["chat"]["response"]["body"]["choices"][0];
    REQUIRE(chat["logprobs"].is_object());
    check_entries(chat["logprobs"]["content"], 3, true);
    CHECK_FALSE(chat["logprobs"]["content"][0].contains("id"));
    CHECK(by["plain"]["response"]["body"]["choices"][0]["logprobs"].is_null());
    const json& legacy = by["legacy"]["response"]["body"]["choices"][0]["logprobs"];
    const size_t n = legacy["tokens"].size();
    CHECK(n == by["legacy"]["response"]["body"]["usage"]["completion_tokens"].get<size_t>());
    CHECK(legacy["token_logprobs"].size() == n);
    CHECK(legacy["top_logprobs"].size() == n);
    REQUIRE(legacy["text_offset"].size() == n);
    // Byte offsets: each token's bytes after the last's (checked where the token is whole characters).
    CHECK(legacy["text_offset"][0] == 0);
    for (size_t i = 0; i + 1 < n; ++i) {
        const std::string t = legacy["tokens"][i];
        if (t.find("\xEF\xBF\xBD") == std::string::npos)
            CHECK(legacy["text_offset"][i + 1].get<size_t>() - legacy["text_offset"][i].get<size_t>() == t.size());
        CHECK(legacy["top_logprobs"][i].size() <= 2);
    }

    r = test::run_quill({"batch", "-m", path.string(), "-q", "--logprobs", "1"},
                        R"({"id": "x", "prompt": "The sun", "max_tokens": 4})"
                        "\n");
    recs = records(r.out);
    REQUIRE(recs.size() == 1);
    check_entries(recs[0]["logprobs"], 1, false);
}

}  // namespace test_logprobs
