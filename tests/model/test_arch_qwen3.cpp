// qwen3 (Q/K norms, NEOX RoPE), smollm3 (every fourth layer without RoPE), mistral3 (YaRN, attention temperature)
// and qwen3 with YaRN RoPE scaling, against llama.cpp: quill's synthetic tiny models of each (`quill bench
// --synthetic SHAPE --dtype f32|f16 --save`, seed 42, regenerated here) gave llama.cpp's logits (the 32 largest of
// each prompt position) and its 24 greedy tokens in tests/data/arch/ (made by /work/oracle/dump_logits of
// llama-cpp-python 0.3.36's llama.cpp, KV cache f32, --tokens as kPrompt, --no-bos, -n 24, --top 32).
#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "engine/reference/reference_backend.h"
#include "tests/support/backend_checks.h"
#include "tests/support/oracle_refs.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace test_arch_qwen3 {

using namespace quill;
namespace fs = std::filesystem;

namespace {

const std::vector<int32_t> kPrompt{1,   300, 17, 412, 99, 260, 450, 33,  501, 7,   288, 123,
                                   64,  399, 270, 5,  311, 480, 42, 256, 190, 77,  333, 2};

// llama.cpp's reference of one file: the largest logits of each prompt position (id, value) and greedy tokens.
struct OracleRef {
    std::vector<std::vector<std::pair<int32_t, float>>> top;  // [position][k]
    std::vector<int32_t> prompt, greedy;
};

fs::path data_dir() { return fs::path(QUILL_SOURCE_DIR) / "tests" / "data" / "arch"; }

std::vector<int32_t> ids_after(const std::string& line, const std::string& key) {
    std::istringstream ss(line.substr(key.size()));
    std::vector<int32_t> v;
    for (int32_t x = 0; ss >> x;) v.push_back(x);
    return v;
}

OracleRef read_oracle(const std::string& stem) {
    OracleRef r;
    r.top = test::read_top_logits(data_dir() / (stem + ".top32.txt"));
    std::ifstream greedy(data_dir() / (stem + ".greedy.txt"));
    REQUIRE(greedy.good());
    for (std::string line; std::getline(greedy, line);) {
        if (line.rfind("prompt_tokens", 0) == 0) r.prompt = ids_after(line, "prompt_tokens");
        if (line.rfind("generated_tokens", 0) == 0) r.greedy = ids_after(line, "generated_tokens");
    }
    REQUIRE(r.top.size() == kPrompt.size());
    REQUIRE(r.prompt == kPrompt);
    REQUIRE(r.greedy.size() == 24);
    return r;
}

// The synthetic model saved and loaded as `quill bench --synthetic shape --dtype type --save` makes it.
std::unique_ptr<Model> saved_synthetic(const std::string& shape, GgmlType type, const fs::path& dir) {
    fs::create_directories(dir);
    const fs::path path = dir / (shape + ".gguf");
    SyntheticModel::make(synthetic_config(shape), type, 42)->save(path.string());
    return Model::load(path.string());
}

// FNV-1a over the name and data of every tensor in name order: which weights a file holds, whatever their order in
// the file (its metadata aside).
uint64_t weights_hash(const GgufFile& f) {
    std::vector<const GgufTensorInfo*> by_name;
    for (const GgufTensorInfo& t : f.tensors()) by_name.push_back(&t);
    std::sort(by_name.begin(), by_name.end(), [](auto* a, auto* b) { return a->name < b->name; });
    uint64_t h = 1469598103934665603ull;
    auto add = [&](const uint8_t* d, size_t n) {
        for (size_t i = 0; i < n; ++i) h = (h ^ d[i]) * 1099511628211ull;
    };
    for (const GgufTensorInfo* t : by_name) {
        add(reinterpret_cast<const uint8_t*>(t->name.data()), t->name.size());
        add(f.tensor_data(*t), t->n_bytes);
    }
    return h;
}

struct ArchCase {
    const char* shape;
    GgmlType type;
};

const ArchCase kCases[] = {
    {"qwen3-tiny", GgmlType::F32},      {"qwen3-tiny", GgmlType::F16},      {"qwen3-tiny-yarn", GgmlType::F32},
    {"qwen3-tiny-yarn", GgmlType::F16}, {"smollm3-tiny", GgmlType::F32},    {"smollm3-tiny", GgmlType::F16},
    {"mistral3-tiny", GgmlType::F32},   {"mistral3-tiny", GgmlType::F16},
};

std::string stem(const ArchCase& c) { return std::string(c.shape) + (c.type == GgmlType::F32 ? "-f32" : "-f16"); }

// quill's prompt logits against llama.cpp's at the ids it listed, within 1e-3 of the row's logit range (F32 and F16
// weights: llama.cpp multiplies F16 weights with fp16 activations as quill does; the rest is summation order), then
// the greedy tokens up to the first step where quill's two best logits are within that tolerance of each other.
void check_against_oracle(Backend& b, const OracleRef& ref) {
    const int64_t nv = b.config().n_vocab;
    std::vector<float> logits;
    const std::vector<int32_t> greedy = test::greedy_tokens(b, kPrompt, 24, &logits);
    for (size_t p = 0; p < kPrompt.size(); ++p) {
        const auto row = test::rows(logits, nv, static_cast<int64_t>(p), static_cast<int64_t>(p) + 1);
        const auto [lo, hi] = std::minmax_element(row.begin(), row.end());
        const double range = *hi - *lo;
        REQUIRE(range > 0.1);
        double worst = 0.0;
        for (const auto& [id, value] : ref.top[p]) worst = std::max(worst, std::fabs(row[id] - value) / range);
        INFO("position " << p);
        CHECK(worst < 1e-3);
    }
    // Replays quill's greedy run to find near-ties: the prompt, then each token it chose.
    std::vector<int32_t> seq = kPrompt;
    size_t compared = 0;
    for (size_t i = 0; i < greedy.size(); ++i) {
        const auto row = test::rows(test::prefill_logits(b, seq, 0), nv, static_cast<int64_t>(seq.size()) - 1,
                                    static_cast<int64_t>(seq.size()));
        std::vector<float> sorted = row;
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
        const auto [lo, hi] = std::minmax_element(row.begin(), row.end());
        if (sorted[0] - sorted[1] < 1e-3 * (*hi - *lo)) break;
        INFO("greedy step " << i);
        CHECK(greedy[i] == ref.greedy[i]);
        if (greedy[i] != ref.greedy[i]) return;
        ++compared;
        seq.push_back(greedy[i]);
    }
    CHECK(compared >= 8);  // (the first near-tie of these models comes at step 10 or later)
}

}  // namespace

TEST_CASE("synthetic qwen3 smollm3 and mistral3 models hold the same weights on every run", "[arch]") {
    const fs::path dir = test::temp_dir("arch-same");
    // The weights the oracle's references were made from (quill bench --synthetic SHAPE --dtype f32 --save).
    const std::map<std::string, uint64_t> expected{
        {"qwen3-tiny", 0xa0ecc7703db31e14},
        {"qwen3-tiny-yarn", 0xa0ecc7703db31e14},  // (the same weights; YaRN is in the metadata)
        {"smollm3-tiny", 0x81c60a99b2e511ca},
        {"mistral3-tiny", 0x4b2a1dd2f24c89de}};
    for (const auto& [shape, hash] : expected) {
        INFO(shape);
        auto a = saved_synthetic(shape, GgmlType::F32, dir / "a");
        auto b = saved_synthetic(shape, GgmlType::F32, dir / "b");
        CHECK(weights_hash(a->file) == weights_hash(b->file));
        CHECK(weights_hash(a->file) == hash);
    }
}

TEST_CASE("the synthetic configs are what their saved files read back as", "[arch]") {
    const fs::path dir = test::temp_dir("arch-config");
    for (const char* shape : {"qwen3-tiny", "qwen3-tiny-yarn", "smollm3-tiny", "mistral3-tiny", "qwen3-0.6b"}) {
        INFO(shape);
        const ModelConfig made = synthetic_config(shape);
        std::unique_ptr<Model> m;
        if (made.n_embd > 512) {  // (the real shape: its metadata alone, with tiny weights, is what is checked)
            ModelConfig small = made;
            small.n_layer = 1;
            small.n_vocab = 512;
            SyntheticModel::make(small, GgmlType::Q8_0, 1)->save((dir / "real.gguf").string());
            m = Model::load((dir / "real.gguf").string());
            m->config.n_layer = made.n_layer;
            m->config.n_vocab = made.n_vocab;
        } else {
            m = saved_synthetic(shape, GgmlType::Q8_0, dir);
        }
        const ModelConfig& c = m->config;
        CHECK(c.arch == made.arch);
        CHECK(c.head_dim == made.head_dim);
        CHECK(c.n_rot == made.n_rot);
        CHECK(c.rope == made.rope);
        CHECK(c.rope_base == made.rope_base);
        CHECK(c.rope_freq_scale == made.rope_freq_scale);
        CHECK(c.rope_yarn == made.rope_yarn);
        CHECK(c.yarn_n_ctx_orig == made.yarn_n_ctx_orig);
        CHECK(c.rope_mscale == Approx(made.rope_mscale).epsilon(1e-6));
        CHECK(c.no_rope_step == made.no_rope_step);
        CHECK(c.attn_temp_scale == made.attn_temp_scale);
        CHECK(c.attn_temp_floor == made.attn_temp_floor);
        CHECK(c.attn_scale == made.attn_scale);
        CHECK(c.rms_eps == made.rms_eps);
        CHECK(m->weights.layers[0].attn_q_norm.size() == (c.arch == "qwen3" ? size_t(c.head_dim) : 0));
    }
}

TEST_CASE("qwen3 smollm3 and mistral3 match llama.cpp on the CPU kernels of every ISA", "[arch]") {
    const fs::path dir = test::temp_dir("arch-cpu");
    for (const ArchCase& c : kCases) {
        const OracleRef ref = read_oracle(stem(c));
        auto model = saved_synthetic(c.shape, c.type, dir);
        for (cpu::Isa isa : test::model_test_isas()) {
            INFO(stem(c) << ", " << cpu::isa_name(isa));
            cpu::CpuBackendOptions o;
            o.n_threads = 2;
            o.n_ctx = 64;
            o.kv_type = KvType::f32;
            o.isa = isa;
            cpu::CpuBackend b(model->config, model->weights, o);
            check_against_oracle(b, ref);
        }
    }
}

TEST_CASE("qwen3 smollm3 and mistral3 match llama.cpp on the reference backends", "[arch]") {
    const fs::path dir = test::temp_dir("arch-ref");
    for (const ArchCase& c : kCases) {
        const OracleRef ref = read_oracle(stem(c));
        auto model = saved_synthetic(c.shape, c.type, dir);
        {
            INFO(stem(c) << ", the CPU backend's scalar path");
            cpu::CpuBackendOptions o;
            o.n_ctx = 64;
            o.kv_type = KvType::f32;
            o.reference = true;
            cpu::CpuBackend b(model->config, model->weights, o);
            check_against_oracle(b, ref);
        }
        INFO(stem(c) << ", the reference backend");
        ReferenceBackend b(model->config, model->weights, ReferenceBackendOptions{64, 1, KvType::f32});
        check_against_oracle(b, ref);
    }
}

TEST_CASE("quill run and chat work on saved qwen3 smollm3 and mistral3 files", "[arch][cli]") {
    const fs::path dir = test::temp_dir("arch-cli");
    for (const char* shape : {"qwen3-tiny", "qwen3-tiny-yarn", "smollm3-tiny", "mistral3-tiny"}) {
        INFO(shape);
        const std::string path = (dir / (std::string(shape) + ".gguf")).string();
        auto saved = test::run_quill({"bench", "--synthetic", shape, "--dtype", "f16", "--save", path, "-p", "4",
                                      "-n", "2", "-r", "1"});
        REQUIRE(saved.status == 0);
        // run: the file's chat template around the prompt, 6 tokens of the synthetic vocabulary
        auto run = test::run_quill({"run", "-m", path, "-p", "Hello", "-n", "6", "--temp", "0"});
        CHECK(run.status == 0);
        CHECK(run.err.find("6 generated") != std::string::npos);
        // chat, piped: a reply to each line
        auto chat = test::run_quill({"chat", "-m", path, "-n", "4", "--temp", "0"}, "Hi there\nAnd again\n");
        CHECK(chat.status == 0);
        CHECK(!chat.out.empty());
        CHECK(chat.err.find("error") == std::string::npos);
    }
}

}  // namespace test_arch_qwen3
