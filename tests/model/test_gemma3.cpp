// Gemma 3 270M (models/gemma-3-270m-q4_k_m.gguf, fetched by models/fetch_gemma3.sh), quill's real gemma3 model,
// against Hugging Face transformers on the same GGUF (tests/data/gemma3-270m.ref.txt, made by
// tests/ref/gemma3_reference.py): tokenizer ids on multilingual text, logits and greedy tokens of a short prompt
// and of one longer than the 512-token sliding window; then the CLI (run, chat, batch) and damaged files.
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/backend_checks.h"
#include "tests/support/test_util.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace test_gemma3 {

using namespace quill;
namespace fs = std::filesystem;

namespace {

std::optional<fs::path> gemma3_model() {
    fs::path p = fs::path(QUILL_SOURCE_DIR) / "models" / "gemma-3-270m-q4_k_m.gguf";
    if (fs::exists(p)) return p;
    test::skip("Gemma 3 270M is absent: run models/fetch_gemma3.sh");
    return std::nullopt;
}

// tests/data/gemma3-270m.ref.txt (see tests/ref/gemma3_reference.py for the format).
struct HfReference {
    std::vector<std::pair<std::string, std::vector<int32_t>>> tokens;  // text, ids with BOS
    std::map<std::string, std::vector<int32_t>> prompt, greedy;
    // name -> position -> the 10 largest logits (id, value), largest first
    std::map<std::string, std::map<int64_t, std::vector<std::pair<int32_t, float>>>> top;
};

HfReference read_reference() {
    std::ifstream in(fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "gemma3-270m.ref.txt");
    REQUIRE(in.good());
    HfReference r;
    std::string line;
    auto ids = [](std::istringstream& ss) {
        std::vector<int32_t> v;
        int32_t x = 0;
        while (ss >> x) v.push_back(x);
        return v;
    };
    while (std::getline(in, line)) {
        const size_t colon = line.rfind(" : ");
        REQUIRE(colon != std::string::npos);
        std::istringstream head(line.substr(0, colon)), body(line.substr(colon + 3));
        std::string kind;
        head >> kind;
        if (kind == "tokens") {
            const std::string json = line.substr(kind.size() + 1, colon - kind.size() - 1);
            r.tokens.emplace_back(nlohmann::json::parse(json).get<std::string>(), ids(body));
            continue;
        }
        std::string name;
        head >> name;
        if (kind == "prompt") r.prompt[name] = ids(body);
        if (kind == "greedy") r.greedy[name] = ids(body);
        if (kind == "top") {
            int64_t pos = 0;
            head >> pos;
            std::string item;
            auto& v = r.top[name][pos];
            while (body >> item) {
                const size_t eq = item.find('=');
                v.emplace_back(std::stoi(item.substr(0, eq)), std::stof(item.substr(eq + 1)));
            }
        }
    }
    REQUIRE(r.tokens.size() >= 10);
    REQUIRE(r.greedy["capital"].size() == 32);
    REQUIRE(r.greedy["long"].size() == 32);
    return r;
}

std::unique_ptr<cpu::CpuBackend> fast(const Model& m, int threads, int64_t n_ctx, KvType kv = KvType::f16) {
    cpu::CpuBackendOptions o;
    o.n_threads = threads;
    o.n_ctx = n_ctx;
    o.kv_type = kv;
    return std::make_unique<cpu::CpuBackend>(m.config, m.weights, o);
}

// max over the reference's top-10 ids at `pos` of |ours - theirs|.
double top_diff(const std::vector<float>& logits, int64_t n_vocab, int64_t row,
                const std::vector<std::pair<int32_t, float>>& top) {
    double d = 0;
    for (const auto& [id, value] : top)
        d = std::max(d, std::fabs(static_cast<double>(logits[row * n_vocab + id]) - value));
    return d;
}

int32_t argmax_row(const std::vector<float>& logits, int64_t n_vocab, int64_t row) {
    const auto begin = logits.begin() + row * n_vocab;
    return static_cast<int32_t>(std::max_element(begin, begin + n_vocab) - begin);
}

}  // namespace

TEST_CASE("gemma3 270M: tokenizer ids equal Hugging Face's on multilingual text, and decode back to it",
          "[gemma3][tokenizer]") {
    const auto path = gemma3_model();
    if (!path) return;
    const HfReference ref = read_reference();
    const GgufFile file = GgufFile::open(path->string());
    const auto tok = Tokenizer::from_gguf(file);
    for (const auto& [text, want] : ref.tokens) {
        INFO(text);
        const std::vector<int32_t> got = tok->encode(text, true, false);
        CHECK(got == want);
        CHECK(decode(*tok, std::span<const int32_t>(got).subspan(1)) == text);
    }
}

TEST_CASE("gemma3 270M: the reference forward pass matches Hugging Face's logits, the fast CPU backend is close",
          "[gemma3][reference][model]") {
    const auto path = gemma3_model();
    if (!path) return;
    const HfReference ref = read_reference();
    auto model = Model::load(path->string());
    const int64_t nv = model->config.n_vocab;
    const std::vector<int32_t>& prompt = ref.prompt.at("capital");
    REQUIRE(prompt.size() == 6);
    // transformers runs the dequantized float32 weights; the reference dequantizes each row to float as it uses
    // it and computes in double (f32 cache): the same function up to float rounding in transformers.
    // Measured: max |diff| over each position's top 10 below 2e-3, and the same 32 greedy tokens (~11 s).
    ReferenceBackend reference(model->config, model->weights, ReferenceBackendOptions{64, 1, KvType::f32});
    std::vector<float> want;
    CHECK(test::greedy_tokens(reference, prompt, 32, &want) == ref.greedy.at("capital"));
    for (const auto& [pos, top] : ref.top.at("capital")) {
        INFO("position " << pos);
        CHECK(top_diff(want, nv, pos, top) <= 2e-3);
        CHECK(argmax_row(want, nv, pos) == top[0].first);
    }
    // The fast backend multiplies int8-quantized activations (Q4_K, Q5_0, Q6_K and Q8_0 weights) through 18
    // layers, with an f16 cache. Measured: max |diff| over the top 10s 0.1-0.3 (logits up to 22).
    const std::vector<float> got = test::prefill_logits(*fast(*model, 2, 16), prompt);
    for (const auto& [pos, top] : ref.top.at("capital")) {
        INFO("position " << pos);
        CHECK(top_diff(got, nv, pos, top) <= 0.5);
    }
    // "The capital of France is": the base model's greedy choice is " the" (in transformers too), with " Paris"
    // third (0.8 below " the", 0.3 below " a"); on the fast backend within the first four (it and " Paris" part
    // by 0.16 in transformers).
    const auto tok = Tokenizer::from_gguf(model->file);
    const int32_t paris = tok->encode(" Paris", false, false).at(0);
    auto rank = [&](const std::vector<float>& logits) {
        const float p = logits[5 * nv + paris];
        return std::count_if(logits.begin() + 5 * nv, logits.begin() + 6 * nv, [&](float x) { return x > p; });
    };
    CHECK(rank(want) == 2);
    CHECK(rank(got) <= 3);
}

TEST_CASE("gemma3 270M: greedy tokens equal Hugging Face's, within and past the sliding window",
          "[gemma3][model]") {
    const auto path = gemma3_model();
    if (!path) return;
    const HfReference ref = read_reference();
    auto model = Model::load(path->string());
    const int64_t nv = model->config.n_vocab;
    // Along transformers' greedy path (its 32 tokens fed back, teacher forcing), the fast backend picks transformers'
    // token at every position but near ties. Its int8 activations move logits by 0.1-0.3, so a near tie may go either
    // way: the 12th token is " located" by 0.014 over " capital" in the reference backend (which gives all 32 tokens
    // exactly, above), and the fast backend's kernels have picked either. Which way, and by how much, follows the
    // kernels' float rounding: a last-bit change can flip an activation's int8 rounding in the next layer. Measured:
    // 30 of 32 positions agree; at the 12th and the 26th the fast backend prefers the runner-up by 0.03 and 0.04 with
    // the four-row Q4_K kernels, by 0.136 at the 12th with the eight- and sixteen-row ones (the same on AVX2 and
    // AVX-512, whose lanes compute the same operations), while the generic kernels pick " located". Hence a bound of
    // 0.25, inside the int8 noise and far below what a wrong kernel gives. A free-running greedy comparison would
    // test which side of the first tie the rounding falls on, and everything after it.
    {
        const std::vector<int32_t>& want = ref.greedy.at("capital");
        std::vector<int32_t> forced = ref.prompt.at("capital");
        forced.insert(forced.end(), want.begin(), want.end() - 1);
        const std::vector<float> logits = test::prefill_logits(*fast(*model, 2, 1024), forced);
        int agree = 0;
        for (size_t k = 0; k < want.size(); ++k) {
            const int64_t row = static_cast<int64_t>(ref.prompt.at("capital").size() + k) - 1;
            const int32_t pick = argmax_row(logits, nv, row);
            INFO("generated token " << k << ": transformers " << want[k] << ", fast backend " << pick);
            agree += pick == want[k];
            CHECK(logits[row * nv + pick] - logits[row * nv + want[k]] <= 0.25f);
        }
        CHECK(agree >= 28);
    }
    // 640 tokens: the local layers' window of 512 is full and slides; the logits after it are transformers'.
    // Measured: max |diff| over the top 10s 0.21-0.29; 9-17 without the window, 2-3 with a window of 256, 8-15 with
    // the global RoPE base on the local layers.
    const std::vector<int32_t>& prompt = ref.prompt.at("long");
    REQUIRE(prompt.size() == 640);
    std::vector<float> logits;
    auto c = fast(*model, 2, 1024);
    CHECK(test::greedy_tokens(*c, prompt, 32, &logits) == ref.greedy.at("long"));
    for (const auto& [pos, top] : ref.top.at("long")) {
        INFO("position " << pos);
        CHECK(top_diff(logits, nv, pos, top) <= 0.5);
        CHECK(argmax_row(logits, nv, pos) == top[0].first);
    }
}

TEST_CASE("gemma3 270M: run is identical across thread counts, and chat and batch work with the built-in gemma format",
          "[gemma3][cli][slow]") {
    const auto path = gemma3_model();
    if (!path) return;
    const std::string m = path->string();
    const std::vector<std::string> args{"run", "-m", m, "-p", "The capital of France is", "-n", "16", "--temp", "0",
                                        "--raw"};
    auto one = args, two = args;
    one.insert(one.end(), {"-t", "1"});
    two.insert(two.end(), {"-t", "2"});
    auto a = test::run_quill(one), b = test::run_quill(two);
    INFO(a.err);
    REQUIRE(a.status == 0);
    CHECK(a.out == b.out);
    CHECK(a.out.find(" the capital of the country of France.") == 0);  // transformers' greedy text

    // No chat template in this GGUF: the built-in gemma format, chosen from the vocabulary's <start_of_turn>.
    auto t = test::run_quill({"template", "-m", m});
    CHECK(t.status == 0);
    CHECK(t.out == "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n");
    auto chat = test::run_quill({"chat", "-m", m, "--temp", "0", "-n", "24"}, "What is the capital of France?\n");
    INFO(chat.err);
    CHECK(chat.status == 0);
    CHECK(chat.out.size() > 2);

    // batch: the same greedy continuation as run, for each of two prompts run together.
    auto batch = test::run_quill({"batch", "-m", m, "--raw", "--temp", "0", "-n", "16", "--parallel", "2"},
                                 "The capital of France is\nThe capital of France is\n");
    INFO(batch.err);
    REQUIRE(batch.status == 0);
    std::istringstream lines(batch.out);
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
        ++n;
        CHECK(nlohmann::json::parse(line)["text"] == a.out);
    }
    CHECK(n == 2);
}

TEST_CASE("gemma3 270M: a truncated file or a renamed tensor is refused with a clear message", "[gemma3][model]") {
    const auto path = gemma3_model();
    if (!path) return;
    const fs::path dir = test::temp_dir("gemma3-damaged");
    const std::string bytes = test::read_file(*path);
    const fs::path truncated = dir / "truncated.gguf", renamed = dir / "renamed.gguf";
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    auto r = test::run_quill({"run", "-m", truncated.string(), "-p", "Hi", "-n", "1", "--raw"});
    CHECK(r.status != 0);
    CHECK(r.err.find("truncated") != std::string::npos);
    // One letter of a tensor's name in the header: the loader misses post_ffw_norm and names it.
    std::string edited = bytes;
    const std::string name = "blk.3.post_ffw_norm.weight";
    const size_t at = edited.find(name);
    REQUIRE(at != std::string::npos);
    edited[at + name.find("ffw") + 2] = 'x';
    std::ofstream(renamed, std::ios::binary) << edited;
    r = test::run_quill({"run", "-m", renamed.string(), "-p", "Hi", "-n", "1", "--raw"});
    CHECK(r.status != 0);
    CHECK(r.err.find("missing tensor 'blk.3.post_ffw_norm.weight'") != std::string::npos);
    fs::remove_all(dir);
}

}  // namespace test_gemma3
