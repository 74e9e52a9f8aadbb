// Helpers for the backend tests (test_cpu_backend.cpp, test_reference.cpp): running token sequences through a
// Backend, comparing logits, and reading llama.cpp's reference outputs in ../shared/testdata/models/ref.
#pragma once

#include "engine/cpu/matmul.h"
#include "engine/runtime/backend.h"
#include "tests/support/random_model.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace quill::test {

// All tokens in one batch (one prefill) into a slot, logits for every position: [n, n_vocab].
inline std::vector<float> prefill_logits(Backend& b, const std::vector<int32_t>& tokens, int32_t slot = 0) {
    Batch batch;
    for (size_t i = 0; i < tokens.size(); ++i) batch.add(tokens[i], static_cast<int32_t>(i), slot, true);
    std::vector<float> logits(tokens.size() * b.config().n_vocab);
    b.forward(batch, logits);
    return logits;
}

// One token per forward call into slot 0, as the decode loop does: [n, n_vocab].
inline std::vector<float> stepwise_logits(Backend& b, const std::vector<int32_t>& tokens) {
    const int64_t nv = b.config().n_vocab;
    std::vector<float> all(tokens.size() * nv);
    for (size_t i = 0; i < tokens.size(); ++i) {
        Batch batch;
        batch.add(tokens[i], static_cast<int32_t>(i), 0, true);
        b.forward(batch, std::span<float>(all.data() + i * nv, nv));
    }
    return all;
}

// The prompt in one batch, then n greedy (argmax) tokens one per call, in slot 0. prompt_logits, when given,
// receives the logits of every prompt position [n_prompt, n_vocab].
inline std::vector<int32_t> greedy_tokens(Backend& b, const std::vector<int32_t>& prompt, int n,
                                          std::vector<float>* prompt_logits = nullptr) {
    const int64_t nv = b.config().n_vocab;
    std::vector<float> all;
    Batch batch;
    for (size_t i = 0; i < prompt.size(); ++i)
        batch.add(prompt[i], static_cast<int32_t>(i), 0, prompt_logits || i + 1 == prompt.size());
    all.resize(batch.n_logits() * nv);
    b.forward(batch, all);
    std::vector<float> logits(all.end() - nv, all.end());
    if (prompt_logits) *prompt_logits = std::move(all);
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
        const auto t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        out.push_back(t);
        if (i + 1 == n) break;
        batch.tokens = {{t, static_cast<int32_t>(prompt.size()) + i, 0, true}};
        b.forward(batch, logits);
    }
    return out;
}

inline double max_abs(const std::vector<float>& v) {
    double m = 0;
    for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
    return m;
}

// sqrt(mean(v^2)): the scale the logit errors are measured against.
inline double rms(const std::vector<float>& v) {
    double ss = 0;
    for (float x : v) ss += static_cast<double>(x) * x;
    return std::sqrt(ss / static_cast<double>(v.size()));
}

// max |a - b|; every value of a must be finite.
inline double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double m = 0;
    size_t n_not_finite = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        n_not_finite += !std::isfinite(a[i]);
        m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
    }
    REQUIRE(n_not_finite == 0);
    return m;
}

// Rows [begin, end) of logits [n, n_vocab].
inline std::vector<float> rows(const std::vector<float>& v, int64_t n_vocab, int64_t begin, int64_t end) {
    return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(begin * n_vocab),
                              v.begin() + static_cast<std::ptrdiff_t>(end * n_vocab));
}

// n token ids below n_vocab, varied by salt.
inline std::vector<int32_t> some_tokens(int n, int n_vocab, int salt) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back((i * 37 + salt * 101 + 5) % n_vocab);
    return t;
}

// The random tiny models the backend tests run: every weight type the CPU backend multiplies, with grouped-query
// ratios from MHA to MQA, odd n_ff, a tied output, rope_freqs, linear RoPE scaling, qwen2 (NEOX RoPE, biases),
// llama with attention biases, gemma3 and a sliding window among them.
struct TinyCase {
    const char* label;
    TinySpec spec;
};

inline std::vector<TinyCase> tiny_cases() {
    auto spec = [](GgmlType t, int64_t embd, int64_t head, int64_t kv, int64_t ff) {
        TinySpec s;
        s.type = s.ffn_down_type = t;
        s.n_embd = embd;
        s.n_head = head;
        s.n_head_kv = kv;
        s.n_ff = ff;
        return s;
    };
    std::vector<TinyCase> c;
    c.push_back({"f32, odd n_ff, GQA 2", spec(GgmlType::F32, 64, 4, 2, 172)});
    c.push_back({"f16, odd n_ff, MHA", spec(GgmlType::F16, 64, 4, 4, 171)});
    c.push_back({"bf16, MQA", spec(GgmlType::BF16, 64, 8, 1, 100)});
    c.push_back({"q8_0, GQA 2", spec(GgmlType::Q8_0, 64, 2, 1, 96)});
    c.push_back({"q4_0, GQA 4", spec(GgmlType::Q4_0, 128, 8, 2, 96)});
    c.push_back({"q4_1, MHA", spec(GgmlType::Q4_1, 64, 4, 4, 128)});
    c.push_back({"q5_0, GQA 2", spec(GgmlType::Q5_0, 64, 4, 2, 96)});
    c.push_back({"q5_1, GQA 2", spec(GgmlType::Q5_1, 96, 3, 1, 160)});
    c.push_back({"q4_K, GQA 2", spec(GgmlType::Q4_K, 256, 4, 2, 512)});
    c.push_back({"q5_K, MHA", spec(GgmlType::Q5_K, 256, 4, 4, 256)});
    c.push_back({"q6_K, MQA", spec(GgmlType::Q6_K, 256, 4, 1, 512)});
    c.push_back({"q3_K, GQA 2", spec(GgmlType::Q3_K, 256, 4, 2, 256)});
    c.push_back({"q2_K, MHA", spec(GgmlType::Q2_K, 256, 2, 2, 256)});
    c.push_back({"iq4_nl, GQA 2", spec(GgmlType::IQ4_NL, 64, 4, 2, 96)});
    c.push_back({"iq4_xs, MQA", spec(GgmlType::IQ4_XS, 256, 4, 1, 512)});
    c.push_back({"mxfp4, GQA 3", spec(GgmlType::MXFP4, 96, 3, 1, 160)});
    c.push_back({"iq3_xxs, GQA 2", spec(GgmlType::IQ3_XXS, 256, 4, 2, 512)});
    c.push_back({"iq3_s, MHA", spec(GgmlType::IQ3_S, 256, 4, 4, 256)});
    TinyCase mixed{"q8_0 with f16 ffn_down, odd n_ff, tied output, rope_freqs", spec(GgmlType::Q8_0, 64, 8, 4, 172)};
    mixed.spec.ffn_down_type = GgmlType::F16;
    mixed.spec.tied_output = true;
    mixed.spec.rope_freqs = true;
    c.push_back(mixed);
    TinyCase linear{"f32, linear RoPE scaling, tied output, GQA 4", spec(GgmlType::F32, 64, 8, 2, 96)};
    linear.spec.rope_linear_factor = 4.0f;
    linear.spec.tied_output = true;
    c.push_back(linear);
    TinyCase qwen2{"qwen2: NEOX RoPE, Q/K/V biases, GQA 2, q8_0", spec(GgmlType::Q8_0, 64, 4, 2, 96)};
    qwen2.spec.arch = "qwen2";
    qwen2.spec.biases = true;
    c.push_back(qwen2);
    TinyCase qwen2_f32{"qwen2 f32, MQA, odd n_ff", spec(GgmlType::F32, 64, 8, 1, 100)};
    qwen2_f32.spec.arch = "qwen2";
    qwen2_f32.spec.biases = true;
    c.push_back(qwen2_f32);
    TinyCase biased{"llama with Q/K/V/output biases, q4_K", spec(GgmlType::Q4_K, 256, 4, 2, 256)};
    biased.spec.biases = true;
    c.push_back(biased);
    // 7 layers: 0-4 and 6 local (window 4, RoPE base 10,000), 5 global (base 1e6); head_dim 32 with n_embd 64 and 4
    // heads
    TinyCase gemma3{"gemma3: Q/K/post norms, GELU, window 4, head_dim 32 x 4 heads, MQA, q8_0",
                    spec(GgmlType::Q8_0, 64, 4, 1, 96)};
    gemma3.spec.arch = "gemma3";
    gemma3.spec.n_layer = 7;
    gemma3.spec.head_dim = 32;
    gemma3.spec.sliding_window = 4;
    gemma3.spec.rope_base = 1e6f;
    c.push_back(gemma3);
    TinyCase gemma3_cap{"gemma3 f32, logit soft-capping, window 6, GQA 2, tied output", spec(GgmlType::F32, 64, 4, 2, 128)};
    gemma3_cap.spec.arch = "gemma3";
    gemma3_cap.spec.n_layer = 7;
    gemma3_cap.spec.sliding_window = 6;
    gemma3_cap.spec.final_logit_softcap = 30.0f;
    gemma3_cap.spec.tied_output = true;
    c.push_back(gemma3_cap);
    TinyCase window{"llama with a sliding window of 5 on every layer, q4_0", spec(GgmlType::Q4_0, 64, 4, 2, 96)};
    window.spec.sliding_window = 5;
    c.push_back(window);
    return c;
}

// The CPU kernel families this machine runs.
inline std::vector<cpu::Isa> available_isas() {
    std::vector<cpu::Isa> v;
    for (cpu::Isa i : cpu::kAllIsas)
        if (cpu::isa_available(i)) v.push_back(i);
    return v;
}

// The kernel families a test of a whole forward pass runs: every one here, but under the sanitizers only the widest.
// The sanitizer build looks for memory and undefined-behaviour errors, and a forward takes the same code around its
// products whichever family computes them; the kernels' own tests (matmul, activations, attention, packing, quant)
// still run every family there, and the release build runs every forward-pass test on every family. (CI's time:
// the families are most of such a test's.)
inline std::vector<cpu::Isa> model_test_isas() {
    std::vector<cpu::Isa> v = available_isas();
#ifdef QUILL_SANITIZED_BUILD
    if (v.size() > 1) v.erase(v.begin(), v.end() - 1);
#endif
    return v;
}

// llama.cpp's logits at every prompt position (models/ref/*.prompt_logits.txt).
struct RefLogits {
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> logits;  // [position][n_vocab]
};

inline RefLogits read_ref_logits(const std::filesystem::path& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    RefLogits r;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream ss(line);
        std::string word;
        ss >> word;
        if (word == "pos") {
            int pos = 0, token = 0;
            std::string tk;
            ss >> pos >> tk >> token;
            r.tokens.push_back(token);
            r.logits.emplace_back();
            continue;
        }
        REQUIRE(!r.logits.empty());
        std::istringstream values(line);
        float v = 0;
        while (values >> v) r.logits.back().push_back(v);
    }
    return r;
}

// A line of a models/ref/*.greedy.txt file ("generated_tokens 1 2 3", "prompt_tokens (add_special=true) 1 2")
// read as token ids; empty when absent.
inline std::vector<int32_t> read_ref_ids(const std::filesystem::path& path, const std::string& key) {
    std::ifstream in(path);
    REQUIRE(in.good());
    std::string line;
    while (std::getline(in, line)) {
        if (!line.starts_with(key + " ")) continue;
        std::istringstream ss(line.substr(key.size() + 1));
        std::vector<int32_t> t;
        std::string word;
        while (ss >> word)
            if (!word.empty() && std::isdigit(static_cast<unsigned char>(word[0]))) t.push_back(std::stoi(word));
        return t;
    }
    return {};
}

}  // namespace quill::test
