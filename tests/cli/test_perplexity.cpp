// `quill perplexity`: the engine's scoring against an independent computation on a tiny model, and the command's
// figures against llama.cpp's llama-perplexity on the same model and text (tests/data/ppl).
#include "engine/cpu/cpu_backend.h"
#include "engine/format/gguf.h"
#include "engine/format/quant.h"
#include "engine/runtime/perplexity.h"
#include "tests/support/backend_checks.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

namespace test_perplexity {

using namespace quill;

namespace {

const std::filesystem::path kStory = std::filesystem::path(QUILL_SOURCE_DIR) / "tests/data/ppl/story.txt";

std::unique_ptr<Backend> cpu_backend(const Model& m, int64_t n_ctx, KvType kv = KvType::f32) {
    cpu::CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    o.kv_type = kv;
    return std::make_unique<cpu::CpuBackend>(m.config, m.weights, o);
}

std::vector<int32_t> random_tokens(size_t n, int n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
    return t;
}

struct LlamaFigure {
    double ppl = 0, error = 0;
};

// The llama-perplexity figure for (model, c) from tests/data/ppl/story.llama-perplexity.txt.
LlamaFigure llama_figure(const std::string& model, int c) {
    std::ifstream in(std::filesystem::path(QUILL_SOURCE_DIR) / "tests/data/ppl/story.llama-perplexity.txt");
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream is(line);
        std::string name, kv;
        int ctx = 0;
        LlamaFigure f;
        is >> name >> ctx >> kv >> f.ppl >> f.error;
        if (name == model && ctx == c) return f;
    }
    FAIL("no llama-perplexity figure for " << model << " c=" << c);
    return {};
}

nlohmann::json perplexity_json(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"perplexity", "-f", kStory.string(), "--json", "-q", "-t", "2"};
    all.insert(all.end(), args.begin(), args.end());
    const auto r = test::run_quill(all);
    INFO(r.err);
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("log_softmax_at is the log of a softmax computed in double precision", "[perplexity]") {
    const std::vector<float> logits = {1.5f, -2.0f, 30.0f, 29.5f, 0.0f};
    double sum = 0;
    for (float v : logits) sum += std::exp(static_cast<double>(v));
    for (int t = 0; t < 5; ++t)
        CHECK(log_softmax_at(logits, t) == Approx(std::log(std::exp(static_cast<double>(logits[t])) / sum)).epsilon(1e-12));
}

TEST_CASE("perplexity scores the second half of each chunk, each chunk from an empty cache starting with BOS",
          "[perplexity]") {
    auto model = test::make_tiny_model({});
    const int nv = static_cast<int>(model->config.n_vocab);
    const int64_t n_ctx = 24;
    const auto tokens = random_tokens(3 * n_ctx + 5, nv, 7);  // three whole chunks and a remainder left out
    const int32_t bos = 1;

    // The same figure computed here: each chunk alone in a fresh backend, every position's logits at once.
    double sum = 0;
    int64_t n = 0;
    std::vector<double> running;
    for (int64_t c = 0; c < 3; ++c) {
        std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
        chunk[0] = bos;
        const std::vector<float> logits = test::prefill_logits(*cpu_backend(*model, n_ctx), chunk);
        for (int64_t p = n_ctx / 2; p + 1 < n_ctx; ++p) {
            const std::span<const float> row(logits.data() + p * nv, static_cast<size_t>(nv));
            sum -= log_softmax_at(row, tokens[static_cast<size_t>(c * n_ctx + p + 1)]);
            ++n;
        }
        running.push_back(std::exp(sum / static_cast<double>(n)));
    }

    for (int64_t n_batch : {int64_t{5}, int64_t{24}, int64_t{512}}) {
        INFO("n_batch " << n_batch);
        auto b = cpu_backend(*model, n_ctx);
        PerplexityOptions o;
        o.n_ctx = n_ctx;
        o.n_batch = n_batch;
        o.bos = bos;
        std::vector<int64_t> seen;
        const PerplexityResult r = perplexity(*b, tokens, o, [&](const PerplexityResult& s) { seen.push_back(s.n_chunks); });
        CHECK(r.n_chunks == 3);
        CHECK(r.n_scored == 3 * (n_ctx - n_ctx / 2 - 1));
        CHECK(seen == std::vector<int64_t>{1, 2, 3});
        // The batch-invariance guarantee: the same logits whatever the batch, so the same figure to the last bit.
        CHECK(r.chunk_ppl == running);
        CHECK(r.ppl == running.back());
        CHECK(r.ppl_error > 0);
    }

    PerplexityOptions o;
    o.n_ctx = n_ctx;
    o.max_chunks = 2;
    auto b = cpu_backend(*model, n_ctx);
    CHECK(perplexity(*b, tokens, o).n_chunks == 2);
    // Stopped after the first forward pass: the chunks finished so far, and no more.
    int polls = 0;
    o.max_chunks = 0;
    o.n_batch = n_ctx;
    const PerplexityResult stopped = perplexity(*b, tokens, o, {}, [&] { return ++polls > 2; });
    CHECK(stopped.n_chunks == 2);
}

TEST_CASE("perplexity refuses a text shorter than two chunks and a context the backend does not hold",
          "[perplexity]") {
    auto model = test::make_tiny_model({});
    auto b = cpu_backend(*model, 32);
    PerplexityOptions o;
    o.n_ctx = 32;
    const auto tokens = random_tokens(63, static_cast<int>(model->config.n_vocab), 1);
    CHECK_THROWS_WITH(perplexity(*b, tokens, o), Catch::Contains("the text is 63 tokens") && Catch::Contains("at least 64"));
    o.n_ctx = 64;
    CHECK_THROWS_WITH(perplexity(*b, random_tokens(200, 100, 1), o), Catch::Contains("more than the backend holds"));
}

TEST_CASE("quill perplexity on a tiny model: the engine's figure, JSON and errors", "[perplexity][cli]") {
    const auto& path = test::tiny_model_file(test::TinyModel::spm);
    const nlohmann::json j = perplexity_json({"-m", path.string(), "-c", "64", "--kv-type", "f32"});
    CHECK(j["n_ctx"] == 64);
    const int64_t n_tokens = j["n_tokens"];
    CHECK(j["n_chunks"] == n_tokens / 64);
    CHECK(j["chunks"].size() == j["n_chunks"].get<size_t>());
    CHECK(j["perplexity"].get<double>() == Approx(std::exp(j["mean_nll"].get<double>())).epsilon(1e-12));
    CHECK(j["chunks"].back().get<double>() == j["perplexity"].get<double>());

    // The text line says the same.
    const auto text = test::run_quill({"perplexity", "-m", path.string(), "-f", kStory.string(), "-c", "64", "-q",
                                       "--kv-type", "f32", "--chunks", "3"});
    REQUIRE(text.status == 0);
    CHECK(text.out.find("(3 chunks of 64 tokens, 93 tokens scored)") != std::string::npos);

    const auto dir = test::temp_dir("perplexity-cli");
    std::ofstream(dir / "short.txt") << "too short";
    const auto short_text = test::run_quill({"perplexity", "-m", path.string(), "-f", (dir / "short.txt").string()});
    CHECK(short_text.status == 2);
    CHECK(short_text.err.find("perplexity with a context of") != std::string::npos);
    const auto no_file = test::run_quill({"perplexity", "-m", path.string()});
    CHECK(no_file.status == 2);
    CHECK(no_file.err.find("--file is required") != std::string::npos);
}

TEST_CASE("quill perplexity gives llama-perplexity's figure on stories260K (F32)", "[perplexity][cli][model]") {
    const auto model = test::require_testdata("models/stories260K.gguf");
    if (!model) return;
    for (int c : {64, 256}) {
        INFO("c " << c);
        const LlamaFigure want = llama_figure("stories260K.gguf", c);
        const nlohmann::json j = perplexity_json({"-m", model->string(), "-c", std::to_string(c), "--kv-type", "f32"});
        // llama.cpp prints 4 and 5 decimals: equal to those within 0.01%.
        CHECK(j["perplexity"].get<double>() == Approx(want.ppl).epsilon(1e-4));
        CHECK(j["perplexity_error"].get<double>() == Approx(want.error).epsilon(1e-4));
    }
}

TEST_CASE("quill perplexity on the default model: llama-perplexity's figure, F32 within 0.01%, Q4_1 within 0.5%",
          "[perplexity][cli][model]") {
    const auto q4 = test::require_default_model();
    if (!q4) return;
    const LlamaFigure want_q4 = llama_figure("SmolLM2-135M-Instruct.Q4_1.gguf", 128);
    const nlohmann::json j = perplexity_json({"-m", q4->string(), "-c", "128"});
    // Both multiply int8-rounded activations, each rounding its own way.
    CHECK(j["perplexity"].get<double>() == Approx(want_q4.ppl).epsilon(5e-3));

    // The F32 file llama.cpp ran: every tensor of the Q4_1 file dequantized (no activation rounding anywhere).
    const auto f32 = test::temp_dir("perplexity-f32") / "SmolLM2-135M-Instruct.F32.gguf";
    {
        const GgufFile src = GgufFile::open(q4->string());
        GgufWriter w(src.version());
        for (const auto& [key, value] : src.metadata())
            if (key != "general.file_type") w.set(key, value);
        for (const GgufTensorInfo& t : src.tensors()) {
            std::vector<uint8_t> out(static_cast<size_t>(t.n_elements) * sizeof(float));
            const int64_t rows = t.n_elements / t.ne[0];
            const size_t in_row = row_size(t.type, t.ne[0]);
            for (int64_t r = 0; r < rows; ++r)
                dequantize_row(t.type, src.tensor_data(t) + r * in_row,
                               reinterpret_cast<float*>(out.data()) + r * t.ne[0], t.ne[0]);
            w.add_tensor(t.name, GgmlType::F32, t.ne, std::move(out));
        }
        w.write(f32.string());
    }
    const LlamaFigure want = llama_figure("SmolLM2-135M-Instruct.F32", 128);
    const nlohmann::json jf = perplexity_json({"-m", f32.string(), "-c", "128", "--kv-type", "f32"});
    CHECK(jf["perplexity"].get<double>() == Approx(want.ppl).epsilon(1e-4));
    CHECK(jf["perplexity_error"].get<double>() == Approx(want.error).epsilon(1e-4));
    std::filesystem::remove(f32);
}

}  // namespace test_perplexity
