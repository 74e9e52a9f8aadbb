// Real models of models/fetch_real.sh against llama.cpp (tests/data/real/, made by make_refs.sh there with
// llama-cpp-python 0.3.36's llama.cpp: the 32 largest logits of every prompt position, 32 greedy tokens) and their
// chat templates against Jinja2 (render.py there). Each test skips when its model is absent (not fetched by CI).
// Qwen2.5-Coder-0.5B-Instruct Q4_K_M: qwen2 with attention biases, an output matrix apart from the embeddings, and
// Q5_0, Q8_0, Q4_K and Q6_K matrices, which the synthetic models hold one type at a time.
#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "tests/support/backend_checks.h"
#include "tests/support/oracle_refs.h"
#include "tests/support/test_util.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>

namespace test_real_models {

using namespace quill;
namespace fs = std::filesystem;

namespace {

constexpr const char* kQwen = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

std::optional<fs::path> real_model(const std::string& name) {
    fs::path p = fs::path(QUILL_SOURCE_DIR) / "models" / name;
    if (fs::exists(p)) return p;
    test::skip_unfetched(name + " is absent: run models/fetch_real.sh");
    return std::nullopt;
}

fs::path real_data(const std::string& file) { return fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "real" / file; }

// One prompt's llama.cpp reference: STEM.top32.txt (per position: id=logit, largest first) and STEM.greedy.txt.
struct PromptRef {
    std::vector<std::vector<std::pair<int32_t, float>>> top;
    std::vector<int32_t> prompt, greedy;
    std::string text;  // the greedy tokens' text
};

PromptRef read_prompt_ref(const std::string& stem) {
    PromptRef r;
    r.top = test::read_top_logits(real_data(stem + ".top32.txt"));
    const std::string greedy = test::read_file(real_data(stem + ".greedy.txt"));
    auto ids = [&](const std::string& key) {
        const size_t at = greedy.find("\n" + key + " ");
        REQUIRE(at != std::string::npos);
        std::istringstream ss(greedy.substr(at + key.size() + 2, greedy.find('\n', at + 1) - at - key.size() - 2));
        std::vector<int32_t> v;
        for (int32_t x = 0; ss >> x;) v.push_back(x);
        return v;
    };
    r.prompt = ids("prompt_tokens");
    r.greedy = ids("generated_tokens");
    const std::string begin = "generated_text_begin\n", end = "\ngenerated_text_end";
    const size_t b = greedy.find(begin), e = greedy.rfind(end);
    REQUIRE((b != std::string::npos && e != std::string::npos));
    r.text = greedy.substr(b + begin.size(), e - b - begin.size());
    REQUIRE(r.top.size() == r.prompt.size());
    REQUIRE(r.greedy.size() == 32);
    return r;
}

std::unique_ptr<cpu::CpuBackend> cpu_backend(const Model& m, int64_t n_ctx) {
    cpu::CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    o.kv_type = KvType::f32;
    return std::make_unique<cpu::CpuBackend>(m.config, m.weights, o);
}

// The largest |quill - llama.cpp| over the ids llama.cpp listed at each prompt position, relative to that position's
// logit range in quill, below `tol`, and llama.cpp's best token within `tol` of quill's best there; then the greedy
// tokens, one decode step each, up to the first step where quill's two best logits are closer than `tie` of the
// range (a near tie either side of which the rounding may fall). Both quantize the activations to 8 bits for the
// quantized matrices, each its own way: against the reference backend (no activation quantization, double sums),
// quill's fast backend was the closer of the two on every position of the chat prompt (worst 0.010 of the range,
// llama.cpp 0.015).
void check_against_llama_cpp(const Model& model, const PromptRef& ref, double tol, double tie) {
    auto b = cpu_backend(model, 512);
    const int64_t nv = model.config.n_vocab;
    const std::vector<float> logits = test::prefill_logits(*b, ref.prompt);
    double worst = 0.0;
    std::vector<float> row;
    for (size_t p = 0; p < ref.prompt.size(); ++p) {
        row = test::rows(logits, nv, static_cast<int64_t>(p), static_cast<int64_t>(p) + 1);
        const auto [lo, hi] = std::minmax_element(row.begin(), row.end());
        const double range = *hi - *lo;
        double d = 0.0;
        for (const auto& [id, value] : ref.top[p]) d = std::max(d, std::fabs(static_cast<double>(row[id]) - value));
        worst = std::max(worst, d / range);
        INFO("position " << p);
        CHECK(d < tol * range);
        CHECK(row[ref.top[p][0].first] >= *hi - tol * range);
    }
    INFO("max |quill - llama.cpp| / logit range over the prompt: " << worst);
    size_t compared = 0;
    for (size_t i = 0; i < ref.greedy.size(); ++i) {
        std::vector<float> sorted = row;
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
        const auto [lo, hi] = std::minmax_element(row.begin(), row.end());
        if (sorted[0] - sorted[1] < tie * (*hi - *lo)) break;
        const auto t = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
        INFO("greedy step " << i);
        REQUIRE(t == ref.greedy[i]);
        ++compared;
        Batch step;
        step.add(t, static_cast<int32_t>(ref.prompt.size() + i), 0, true);
        b->forward(step, row);
    }
    CHECK(compared >= 16);
}

// quill run -m MODEL, greedy, 32 tokens, with these arguments: its stdout.
std::string run_greedy(const fs::path& model, const std::vector<std::string>& args) {
    std::vector<std::string> all{"run", "-m", model.string(), "-t", "2", "-c", "512", "--temp", "0", "-n", "32", "-q"};
    all.insert(all.end(), args.begin(), args.end());
    const auto r = test::run_quill(all);
    INFO(r.err);
    REQUIRE(r.status == 0);
    return r.out;
}

}  // namespace

TEST_CASE("qwen2.5-coder 0.5B: quill's tokens of each prompt are llama.cpp's", "[real][qwen2][tokenizer]") {
    const auto path = real_model(kQwen);
    if (!path) return;
    const GgufFile file = GgufFile::open(path->string());
    const auto tok = Tokenizer::from_gguf(file);
    CHECK(tok->encode(test::read_file(real_data("qwen2.5-coder.code.txt")), true, false) ==
          read_prompt_ref("qwen2.5-coder.code").prompt);
    for (const std::string c : {"chat", "tools"}) {
        INFO(c);
        const std::string text = test::read_file(real_data("qwen2.5-coder." + c + ".txt"));
        CHECK(tok->encode(text, true, true) == read_prompt_ref("qwen2.5-coder." + c).prompt);
    }
}

// (measured: max |diff| / range 0.008, 0.014 and 0.019 on the code, chat and tools prompts; 28, 32 and 32 greedy
// tokens compared before the first near tie, all equal)
TEST_CASE("qwen2.5-coder 0.5B: prompt logits and greedy tokens are llama.cpp's", "[real][qwen2][model]") {
    const auto path = real_model(kQwen);
    if (!path) return;
    auto model = Model::load(path->string());
    for (const std::string c : {"code", "chat", "tools"}) {
        INFO(c);
        check_against_llama_cpp(*model, read_prompt_ref("qwen2.5-coder." + c), 0.03, 0.01);
    }
}

TEST_CASE("qwen2.5-coder 0.5B: quill template renders its chat template as Jinja2 does, tools included",
          "[real][qwen2][template][cli]") {
    const auto path = real_model(kQwen);
    if (!path) return;
    for (const std::string c : {"chat", "tools"}) {
        INFO(c);
        const auto r = test::run_quill(
            {"template", "-m", path->string(), "--messages", real_data("qwen2.5-coder." + c + ".json").string()});
        REQUIRE(r.status == 0);
        CHECK(r.out == test::read_file(real_data("qwen2.5-coder." + c + ".txt")));
    }
}

TEST_CASE("qwen2.5-coder 0.5B: quill run prints llama.cpp's greedy text, raw and through the chat template",
          "[real][qwen2][cli]") {
    const auto path = real_model(kQwen);
    if (!path) return;
    CHECK(run_greedy(*path, {"--raw", "-f", real_data("qwen2.5-coder.code.txt").string()}) ==
          read_prompt_ref("qwen2.5-coder.code").text);
    CHECK(run_greedy(*path, {"--system", "You are a concise Python assistant.",
                             "Write a function that reverses a string."}) ==
          read_prompt_ref("qwen2.5-coder.chat").text);
}

}  // namespace test_real_models
