#include "engine/model/model_config.h"

#include "engine/error.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>
#include <vector>

namespace quill {

namespace {

// Architectures that run as another (ModelConfig::file_arch): their files carry that architecture's tensors and keys
// under their own name. The text models of vision-language families add M-RoPE's sections; EXAONE 3.x is llama's layers
// with NEOX RoPE pairs; LFM2-MoE (lfm2moe) is lfm2's layers with experts after its leading dense ones; Qwen3-Next is
// qwen35moe's layers with plain NEOX RoPE (no sections) and its delta nets grouped by key head
// (ModelConfig::ssm_grouped); MiniMax-M2 (minimax-m2) is qwen3moe's layers with Q/K norms over the whole projection,
// partial rotary dims and sigmoid routing with a selection bias (read_moe_routing); ERNIE-4.5's mixtures (ernie4_5-moe)
// are ernie4_5's layers with experts after the leading dense ones (read_ernie4_5_moe); OLMoE (olmoe) is qwen3moe's
// layers with Q/K norms over the whole projection and its experts weighted by their shares of the softmax over all of
// them, not renormalized; Mistral Small 4 (mistral4) is deepseek2's, DeepSeek-V3.2 (deepseek32) and GLM-5 (glm-dsa)
// deepseek2's with DeepSeek Sparse Attention (read_dsa); Granite 3.x MoE (granitemoe) is granite's layers with
// experts (and a shared expert where the file gives its width), as granitehybrid's; Nemotron-H MoE
// (nemotron_h_moe: Nemotron 3 Nano) is nemotron_h's layers with experts in its FFN layers; Hunyuan's dense models
// (hunyuan-dense) and Hunyuan-A13B (hunyuan-moe) are qwen3's and qwen3moe's layers with the Q/K norms after RoPE
// (read_hunyuan); Arcee's AFM (arcee) is llama's layers with an ungated ReLU² FFN; Apertus (apertus) is qwen3's layers
// with an ungated xIELU FFN (read_apertus); Ling 2.0 (bailingmoe2), dots.llm1 (dots1) and Arcee Trinity (afmoe) are
// qwen3moe's layers with DeepSeek-V3-style experts beside a shared one (read_shared_expert_moe), Trinity's with
// post-norms, a gated attention output and sliding-window layers; K-EXAONE (exaone-moe) is qwen3moe's layers with
// RoPE on its sliding-window layers only and experts beside a shared one (read_exaone_moe); Cohere's MoE Command models
// (cohere2moe) are cohere2's blocks with experts after leading dense layers (read_cohere2moe); Granite 4 with
// interleaved sliding-window attention (granite_swa) is granite's layers with attention sinks, a window pattern and a
// RoPE pattern a layer, and granitemoe's experts where the file has them (read_granite_swa).
struct ArchVariant {
    const char* file_arch;
    const char* arch;
    enum class Rope { base, neox, mrope, imrope } rope;  // the base's pairs, NEOX ones, M-RoPE (interleaved: IMROPE)
};
constexpr ArchVariant kArchVariants[] = {{"qwen2vl", "qwen2", ArchVariant::Rope::mrope},
                                         {"qwen3vl", "qwen3", ArchVariant::Rope::imrope},
                                         {"qwen3vlmoe", "qwen3moe", ArchVariant::Rope::imrope},
                                         {"exaone", "llama", ArchVariant::Rope::neox},
                                         {"lfm2moe", "lfm2", ArchVariant::Rope::base},
                                         {"qwen3next", "qwen35moe", ArchVariant::Rope::neox},
                                         {"mistral4", "deepseek2", ArchVariant::Rope::base},
                                         {"deepseek32", "deepseek2", ArchVariant::Rope::base},
                                         {"glm-dsa", "deepseek2", ArchVariant::Rope::base},
                                         {"granitemoe", "granite", ArchVariant::Rope::base},
                                         {"minimax-m2", "qwen3moe", ArchVariant::Rope::neox},
                                         {"ernie4_5-moe", "ernie4_5", ArchVariant::Rope::base},
                                         {"olmoe", "qwen3moe", ArchVariant::Rope::neox},
                                         {"nemotron_h_moe", "nemotron_h", ArchVariant::Rope::base},
                                         {"hunyuan-dense", "qwen3", ArchVariant::Rope::neox},
                                         {"hunyuan-moe", "qwen3moe", ArchVariant::Rope::neox},
                                         {"arcee", "llama", ArchVariant::Rope::base},
                                         {"apertus", "qwen3", ArchVariant::Rope::neox},
                                         {"bailingmoe2", "qwen3moe", ArchVariant::Rope::neox},
                                         {"dots1", "qwen3moe", ArchVariant::Rope::neox},
                                         {"afmoe", "qwen3moe", ArchVariant::Rope::neox},
                                         {"exaone-moe", "qwen3moe", ArchVariant::Rope::neox},
                                         {"cohere2moe", "cohere2", ArchVariant::Rope::base},
                                         {"granite_swa", "granite", ArchVariant::Rope::base},
                                         {"step35", "qwen3moe", ArchVariant::Rope::neox},
                                         {"laguna", "qwen3moe", ArchVariant::Rope::neox}};

const ArchVariant* arch_variant(const std::string& file_arch) {
    for (const ArchVariant& v : kArchVariants)
        if (file_arch == v.file_arch) return &v;
    return nullptr;
}

}  // namespace

bool architecture_supported(const std::string& arch) {
    if (arch_variant(arch)) return true;
    return arch == "llama" || arch == "qwen2" || arch == "qwen2moe" || arch == "qwen3" || arch == "qwen3moe" ||
           arch == "qwen35" || arch == "qwen35moe" || arch == "gemma" || arch == "gemma2" ||
           arch == "gemma3" || arch == "gemma3n" || arch == "gemma4" || arch == "phi3" || arch == "smollm3" ||
           arch == "mistral3" || arch == "gpt-oss" || arch == "glm4" || arch == "granite" ||
           arch == "granitehybrid" || arch == "olmo2" ||
           arch == "nemotron_h" || arch == "exaone4" || arch == "ernie4_5" || arch == "seed_oss" || arch == "lfm2" ||
           arch == "glm4moe" || arch == "deepseek2" || arch == "command-r" || arch == "cohere2" ||
           arch == "llama4" || arch == "falcon-h1" || arch == "mamba2" || arch == "mamba";
}

std::string supported_architectures() {
    return "llama, qwen2, qwen2moe, qwen3, qwen3moe, qwen35, qwen35moe, gemma, gemma2, gemma3, gemma3n, gemma4, phi3, "
           "smollm3, mistral3, gpt-oss, glm4, glm4moe, granite, granitehybrid, nemotron_h, olmo2, exaone, exaone4, "
           "ernie4_5, seed_oss, lfm2, lfm2moe, deepseek2, llama4, mistral4, granitemoe, command-r, cohere2, qwen2vl, "
           "qwen3vl, qwen3vlmoe, qwen3next, minimax-m2, ernie4_5-moe, olmoe, nemotron_h_moe, falcon-h1, hunyuan-dense, "
           "hunyuan-moe, arcee, apertus, bailingmoe2, dots1, afmoe, exaone-moe, cohere2moe, granite_swa, deepseek32, "
           "glm-dsa, step35, laguna, mamba2, mamba";
}

namespace {

int64_t required_int(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi) {
    auto v = f.get_int(key);
    if (!v) throw FileError(fmt::format("{}: missing metadata '{}'", f.path(), key));
    if (*v < lo || *v > hi)
        throw FileError(fmt::format("{}: metadata '{}' is {}, expected {}..{}", f.path(), key, *v, lo, hi));
    return *v;
}

int64_t optional_int(const GgufFile& f, const std::string& key, int64_t fallback, int64_t lo, int64_t hi) {
    if (!f.find(key)) return fallback;
    return required_int(f, key, lo, hi);
}

float required_float(const GgufFile& f, const std::string& key, double lo, double hi) {
    auto v = f.get_float(key);
    if (!v) throw FileError(fmt::format("{}: missing metadata '{}'", f.path(), key));
    if (!(*v >= lo && *v <= hi))
        throw FileError(fmt::format("{}: metadata '{}' is {}, expected {}..{}", f.path(), key, *v, lo, hi));
    return static_cast<float>(*v);
}

float optional_float(const GgufFile& f, const std::string& key, float fallback, double lo, double hi) {
    if (!f.find(key)) return fallback;
    return required_float(f, key, lo, hi);
}

// YaRN's settings as llama.cpp reads them: the original context, the betas (mistral3's files carry them; the other
// architectures use 32 and 1) and the magnitude scale, rope.scaling.attn_factor times YaRN's
// 1 + 0.1 ln(factor), or mistral3's ratio of that term with mscale 1 to it with yarn_log_multiplier.
void read_yarn(const GgufFile& f, const std::string& p, ModelConfig& c) {
    const int64_t n_ctx_train = optional_int(f, p + "context_length", 2048, 1, int64_t{1} << 30);
    c.yarn_n_ctx_orig = optional_int(f, p + "rope.scaling.original_context_length", n_ctx_train, 1, int64_t{1} << 30);
    const float attn_factor = optional_float(f, p + "rope.scaling.attn_factor", 1.0f, 1e-6, 1e6);
    c.rope_mscale = attn_factor;
    if (!c.rope_yarn) return;
    float log_mul = 0.0f;
    if (c.arch == "mistral3") {
        c.yarn_beta_fast = optional_float(f, p + "rope.scaling.yarn_beta_fast", 32.0f, 1e-6, 1e6);
        c.yarn_beta_slow = optional_float(f, p + "rope.scaling.yarn_beta_slow", 1.0f, 1e-6, 1e6);
        log_mul = optional_float(f, p + "rope.scaling.yarn_log_multiplier", 0.0f, 0.0, 1e3);
    }
    const double factor = 1.0 / c.rope_freq_scale;
    auto mscale = [&](double m) { return factor <= 1.0 ? 1.0 : 1.0 + 0.1 * m * std::log(factor); };
    c.rope_mscale = static_cast<float>(attn_factor * (log_mul != 0.0f ? mscale(1.0) / mscale(log_mul) : mscale(1.0)));
}

// hunyuan-dense, hunyuan-moe (Hunyuan 0.5B-7B, Hunyuan-A13B) as llama.cpp reads them: each Q and K head normalized
// after RoPE; hunyuan-dense's rope.scaling.alpha folded into the RoPE base (base * alpha^(head_dim / (head_dim - 2)),
// in float); hunyuan-moe's experts feed_forward_length wide (expert_feed_forward_length is required and unread), the
// softmax of the chosen logits as their weights, and beside them a SwiGLU shared expert without a gate of
// expert_shared_feed_forward_length (else feed_forward_length) features.
void read_hunyuan(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.qk_norm_after_rope = true;
    if (c.file_arch == "hunyuan-dense") {
        c.rope_alpha = optional_float(f, p + "rope.scaling.alpha", 0.0f, 0.0, 1e6);
        if (c.rope_alpha > 0.0f) {
            const auto d = static_cast<float>(c.head_dim);
            c.rope_base = c.rope_base_local = c.rope_base * std::pow(c.rope_alpha, d / (d - 2.0f));
        }
        return;
    }
    if (!f.find(p + "expert_feed_forward_length"))
        throw FileError(fmt::format("{}: missing metadata '{}expert_feed_forward_length'", f.path(), p));
    c.n_ff_exp = c.n_ff;
    c.n_ff = optional_int(f, p + "expert_shared_feed_forward_length", c.n_ff, 1, int64_t{1} << 24);
    c.moe_shared_expert = true;
}

// One float a layer from `key`: an array of n_layer numbers, or one number for every layer (llama.cpp's
// get_key_or_arr).
std::vector<float> layer_floats(const GgufFile& f, const std::string& key, int64_t n_layer) {
    const GgufValue* v = f.find(key);
    if (!v) throw FileError(fmt::format("{}: missing metadata '{}'", f.path(), key));
    if (v->type() != GgufType::ARRAY) {
        const float x = required_float(f, key, -1e6, 1e6);
        return std::vector<float>(static_cast<size_t>(n_layer), x);
    }
    const GgufArray& a = v->as_array();
    if (static_cast<int64_t>(a.size()) != n_layer || (a.type() != GgufType::F32 && a.type() != GgufType::F64))
        throw FileError(fmt::format("{}: metadata '{}' is an array of {} {} values, expected {} floats (one a layer)",
                                    f.path(), key, a.size(), gguf_type_name(a.type()), n_layer));
    std::vector<float> out(static_cast<size_t>(n_layer));
    for (size_t l = 0; l < out.size(); ++l) {
        out[l] = static_cast<float>(a.at(l).as_float());
        if (!std::isfinite(out[l]))
            throw FileError(fmt::format("{}: metadata '{}' is not finite at layer {}", f.path(), key, l));
    }
    return out;
}

// apertus (Apertus 8B, 70B): an ungated FFN of xIELU with each layer's parameters (xielu.alpha_n, alpha_p, beta, eps:
// keys without the architecture's prefix, required, as llama.cpp reads them)
void read_apertus(const GgufFile& f, ModelConfig& c) {
    c.ffn_act = ModelConfig::Activation::xielu;
    c.xielu_alpha_n = layer_floats(f, "xielu.alpha_n", c.n_layer);
    c.xielu_alpha_p = layer_floats(f, "xielu.alpha_p", c.n_layer);
    c.xielu_beta = layer_floats(f, "xielu.beta", c.n_layer);
    c.xielu_eps = layer_floats(f, "xielu.eps", c.n_layer);
}

// An array of one integer a layer in lo..hi (FileError naming the key otherwise).
std::vector<int64_t> layer_ints(const GgufFile& f, const std::string& key, int64_t n_layer, int64_t lo, int64_t hi) {
    const GgufArray& a = f.find(key)->as_array();
    if (static_cast<int64_t>(a.size()) != n_layer || a.type() == GgufType::STRING || a.type() == GgufType::ARRAY)
        throw FileError(fmt::format("{}: metadata '{}' is an array of {} {} values, expected {} integers (one a layer)",
                                    f.path(), key, a.size(), gguf_type_name(a.type()), n_layer));
    std::vector<int64_t> v(static_cast<size_t>(n_layer));
    for (int64_t l = 0; l < n_layer; ++l) {
        v[l] = a.at(static_cast<size_t>(l)).as_int();
        if (v[l] < lo || v[l] > hi)
            throw FileError(fmt::format("{}: metadata '{}' is {} at layer {}, expected {}..{}", f.path(), key, v[l], l,
                                        lo, hi));
    }
    return v;
}

// attention.sliding_window_pattern as llama.cpp reads it: N, every Nth layer global and the others local (0: every
// layer local), `fallback` when absent; or one bool a layer (true: local), which must be the pattern of some N.
int64_t read_swa_pattern(const GgufFile& f, const std::string& p, int64_t fallback, int64_t n_layer) {
    const std::string key = p + "attention.sliding_window_pattern";
    const GgufValue* v = f.find(key);
    if (!v || v->type() != GgufType::ARRAY) return optional_int(f, key, fallback, 0, 4096);
    const GgufArray& a = v->as_array();
    if (a.type() != GgufType::BOOL || static_cast<int64_t>(a.size()) != n_layer)
        throw FileError(fmt::format("{}: metadata '{}' is an array of {} {} values, expected an integer or {} "
                                    "bools (one a layer, true: local)",
                                    f.path(), key, a.size(), gguf_type_name(a.type()), n_layer));
    std::vector<bool> local(static_cast<size_t>(n_layer));
    for (int64_t l = 0; l < n_layer; ++l) local[l] = a.at(static_cast<size_t>(l)).as_bool();
    for (int64_t n = 0; n <= n_layer; ++n) {
        bool same = true;
        for (int64_t l = 0; l < n_layer && same; ++l) same = local[l] == (n == 0 || l % n != n - 1);
        if (same) return n;
    }
    throw FileError(fmt::format("{}: metadata '{}' marks the local layers in a pattern quill does not support (every "
                                "Nth layer global, the others local)", f.path(), key));
}

// Sliding-window attention as each architecture's llama.cpp reads it: gemma2 every second layer global (a window of
// 4096 unless the file says), gemma3 every sixth when the file gives a window, gpt-oss every second (the window
// required), gemma4 as its required pattern array says, exaone4 (the 32B's 64 layers only) every fourth (a window of
// 4096 unless the file says); attention.sliding_window_pattern overrides these patterns. llama and qwen2: every layer
// local when the file gives a window. olmo2 (OLMo 3) every fourth when the file gives a window.
// phi3: off, as llama.cpp turns it off (its converted files' window and pattern disagree with the model's), so that
// quill and llama.cpp give the same logits. The other architectures have none: a window there is ignored, as
// llama.cpp ignores it, so that a file llama.cpp runs is run alike rather than refused.
void read_sliding_window(const GgufFile& f, const std::string& p, ModelConfig& c) {
    const std::string key = p + "attention.sliding_window";
    constexpr int64_t kMax = int64_t{1} << 30;
    if (c.arch == "gemma2" || c.arch == "gpt-oss" || c.arch == "gemma4") {
        c.sliding_window = c.arch == "gemma2" ? optional_int(f, key, 4096, 1, kMax) : required_int(f, key, 1, kMax);
        if (c.arch == "gemma4" && !f.find(p + "attention.sliding_window_pattern"))  // (llama.cpp requires it)
            throw FileError(fmt::format("{}: missing metadata '{}attention.sliding_window_pattern'", f.path(), p));
        c.swa_pattern = read_swa_pattern(f, p, 2, c.n_layer);
        return;
    }
    if (c.arch == "gemma3n") {  // (the window required, every fifth layer global unless the file says)
        c.sliding_window = required_int(f, key, 1, kMax);
        c.swa_pattern = read_swa_pattern(f, p, 5, c.n_layer);
        return;
    }
    // (the window required, every fourth layer global unless the file says; cohere2moe's: read_cohere2moe)
    if (c.arch == "cohere2" && c.file_arch != "cohere2moe") {
        c.sliding_window = required_int(f, key, 1, kMax);
        c.swa_pattern = read_swa_pattern(f, p, 4, c.n_layer);
        return;
    }
    if (c.arch == "exaone4") {  // (the 32B's 64 layers only, as llama.cpp reads it; a window elsewhere is ignored)
        c.sliding_window = c.n_layer == 64 ? optional_int(f, key, 4096, 1, kMax) : 0;
        if (c.sliding_window > 0) c.swa_pattern = read_swa_pattern(f, p, 4, c.n_layer);
        return;
    }
    c.sliding_window = optional_int(f, key, 0, 0, kMax);
    if (c.arch == "olmo2") {  // (OLMo 3: every fourth layer global unless the file says)
        if (c.sliding_window > 0) c.swa_pattern = read_swa_pattern(f, p, 4, c.n_layer);
        return;
    }
    if (c.arch == "gemma3") {
        if (c.sliding_window > 0) c.swa_pattern = read_swa_pattern(f, p, 6, c.n_layer);
    } else if (c.arch != "llama" && c.arch != "qwen2") {
        c.sliding_window = 0;
    }
}

// A per-layer key (gemma4's, step35's, laguna's: an integer, or an array of one a layer, or one a block of n_block
// where the file counts NextN blocks too) as its values on the local and the global layers: {local, global}. An array
// must hold one value for every local layer and one for every global layer.
std::pair<int64_t, int64_t> local_global_int(const GgufFile& f, const std::string& key, const ModelConfig& c,
                                             int64_t lo, int64_t hi, int64_t n_block) {
    const GgufValue* v = f.find(key);
    if (!v || v->type() != GgufType::ARRAY) {
        const int64_t x = required_int(f, key, lo, hi);
        return {x, x};
    }
    const GgufArray& a = v->as_array();
    if (static_cast<int64_t>(a.size()) != n_block || a.type() == GgufType::STRING || a.type() == GgufType::ARRAY)
        throw FileError(fmt::format("{}: metadata '{}' is an array of {} {} values, expected an integer or {} of them "
                                    "(one a layer)", f.path(), key, a.size(), gguf_type_name(a.type()), n_block));
    int64_t local = -1, global = -1;
    for (int64_t l = 0; l < n_block; ++l) {
        const int64_t x = a.at(static_cast<size_t>(l)).as_int();
        if (x < lo || x > hi)
            throw FileError(fmt::format("{}: metadata '{}' is {} at layer {}, expected {}..{}", f.path(), key, x, l, lo,
                                        hi));
        int64_t& kind = c.layer_is_local(l) ? local : global;
        if (kind >= 0 && kind != x)
            throw FileError(fmt::format("{}: metadata '{}' differs between two {} layers ({} and {}; quill supports one "
                                        "value for the local layers and one for the global ones)", f.path(), key,
                                        c.layer_is_local(l) ? "local" : "global", kind, x));
        kind = x;
    }
    return {local >= 0 ? local : global, global >= 0 ? global : local};
}

// attention.shared_kv_layers: the last layers that read the cache of ModelConfig::kv_layer. llama.cpp maps a shared
// local layer to the second-to-last layer with a cache and a global one to the last, which must then be of those
// kinds (a file where they are not would attend with another layer's geometry: refused).
void read_gemma4_shared_kv(const GgufFile& f, const std::string& p, ModelConfig& c) {
    const std::string key = p + "attention.shared_kv_layers";
    c.n_kv_shared = optional_int(f, key, 0, 0, std::max<int64_t>(0, c.n_layer - 2));
    if (c.n_kv_shared == 0) return;
    for (int64_t l = c.n_layer - c.n_kv_shared; l < c.n_layer; ++l)
        if (c.layer_is_local(c.kv_layer(l)) != c.layer_is_local(l))
            throw FileError(fmt::format("{}: metadata '{}' {}: shared layer {} ({}) would read the cache of layer {}, "
                                        "which is {} (expected the last layer with a cache global, the one before it "
                                        "local)", f.path(), key, c.n_kv_shared, l,
                                        c.layer_is_local(l) ? "local" : "global", c.kv_layer(l),
                                        c.layer_is_local(c.kv_layer(l)) ? "local" : "global"));
}

// Gemma 4 as llama.cpp's gemma4 reads it: GeGLU, embeddings scaled by sqrt(n_embd), attention scale 1 (the Q and K
// norms stand for it), V heads normalized, the local layers (read_sliding_window) with their own head size, KV heads
// and rotated dims and rope.freq_base_swa (10,000 unless the file says) without scaling, rope_freqs on the global
// layers only, the logits soft-capped when the file says; E2B and E4B's per-layer token embeddings and last layers
// sharing the KV cache of earlier ones (read_gemma4_shared_kv).
void read_gemma4(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.n_embd_per_layer = optional_int(f, p + "embedding_length_per_layer_input", 0, 0, int64_t{1} << 16);
    c.ffn_act = ModelConfig::Activation::gelu_tanh;
    c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
    c.attn_scale = 1.0f;
    c.v_norm = true;
    c.moe_shared_ffn = c.moe();
    c.rope_divisors_global_only = true;
    c.rope_base_local = optional_float(f, p + "rope.freq_base_swa", 10000.0f, 1.0, 1e12);
    c.rope_freq_scale_local = 1.0f;
    const auto [kv_local, kv_global] = local_global_int(f, p + "attention.head_count_kv", c, 1, c.n_head, c.n_layer);
    for (int64_t kv : {kv_local, kv_global})
        if (c.n_head % kv != 0)
            throw FileError(fmt::format("{}: metadata '{}attention.head_count' {} is not a multiple of "
                                        "'{}attention.head_count_kv' {}", f.path(), p, c.n_head, p, kv));
    c.n_head_kv = kv_global;
    c.n_head_kv_local = kv_local;
    c.head_dim_local = required_int(f, p + "attention.key_length_swa", 2, 512);
    if (optional_int(f, p + "attention.value_length_swa", c.head_dim_local, 1, 4096) != c.head_dim_local)
        throw FileError(fmt::format("{}: metadata '{}attention.value_length_swa' differs from "
                                    "'{}attention.key_length_swa' {} (not supported)", f.path(), p, p,
                                    c.head_dim_local));
    c.n_rot_local = optional_int(f, p + "rope.dimension_count_swa", c.n_rot, 2, c.head_dim_local);
    if (c.head_dim_local % 2 != 0 || c.n_rot_local % 2 != 0)
        throw FileError(fmt::format("{}: metadata '{}attention.key_length_swa' {} or '{}rope.dimension_count_swa' {} "
                                    "is odd, expected even numbers", f.path(), p, c.head_dim_local, p, c.n_rot_local));
    read_gemma4_shared_kv(f, p, c);
}

// Gemma 3n as llama.cpp's gemma3n reads it: gemma4's GeGLU, embedding scale, attention scale 1 and V norm, local
// layers (a window required; every fifth layer global unless the pattern says) rotating with rope.freq_base_swa
// (10,000 unless the file says) unscaled, logits soft-capped at 30 (whatever the file says); and as llama.cpp fixes
// them, whatever the file's keys say: 4 AltUp streams with stream 0 active, per-layer inputs of 256, the layers from
// the 21st on sharing the caches of the 19th and 20th, and the gate's sparsity in the first 10 layers at the 95th
// percentile of a normal distribution. A file whose keys say otherwise is refused, rather than run unlike llama.cpp.
void read_gemma3n(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.ffn_act = ModelConfig::Activation::gelu_tanh;
    c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
    c.attn_scale = 1.0f;
    c.v_norm = true;
    c.rope_base_local = optional_float(f, p + "rope.freq_base_swa", 10000.0f, 1.0, 1e12);
    c.rope_freq_scale_local = 1.0f;
    c.final_logit_softcap = 30.0f;
    c.n_altup = 4;
    c.n_embd_per_layer = 256;
    c.n_kv_shared = std::max<int64_t>(0, c.n_layer - 20);
    c.n_sparse_layers = std::min<int64_t>(10, c.n_layer);
    c.sparsity_std_mul = 1.6448533535003662f;  // (the normal distribution's quantile at 0.95, as llama.cpp's)
    auto fixed = [&](const std::string& key, int64_t want) {
        if (const auto v = f.get_int(p + key); v && *v != want)
            throw FileError(fmt::format("{}: metadata '{}{}' is {}, expected {} (llama.cpp's gemma3n fixes it)",
                                        f.path(), p, key, *v, want));
    };
    fixed("altup.num_inputs", c.n_altup);
    fixed("altup.active_idx", 0);
    fixed("embedding_length_per_layer_input", c.n_embd_per_layer);
    fixed("attention.shared_kv_layers", c.n_kv_shared);
    if (c.n_kv_shared > 0 && (c.layer_is_local(19) || !c.layer_is_local(18)))
        throw FileError(fmt::format("{}: gemma3n's shared-KV layers read the caches of layers 18 (local) and 19 "
                                    "(global), but the file's pattern makes them {} and {}", f.path(),
                                    c.layer_is_local(18) ? "local" : "global",
                                    c.layer_is_local(19) ? "local" : "global"));
}

// A feature quill lacks, refused by name when the file has it: `key` (after the architecture's prefix) present and
// not 0 or empty.
void refuse_if_set(const GgufFile& f, const std::string& p, const std::string& key, const std::string& what,
                   const std::string& arch) {
    const GgufValue* v = f.find(p + key);
    if (!v) return;
    bool set = true;
    if (v->type() == GgufType::ARRAY) {
        const GgufArray& a = v->as_array();
        set = false;
        for (size_t i = 0; i < a.size() && !set; ++i) {  // (a value that is not an integer counts as set)
            const GgufValue& x = a.at(i);
            const auto* big = std::get_if<uint64_t>(&x.v);  // (as_int refuses a u64 beyond int64)
            set = !x.is_integer() || (big ? *big != 0 : x.as_int() != 0);
        }
    } else if (auto i = f.get_int(p + key)) {
        set = *i != 0;
    }
    if (set) throw FileError(fmt::format("{}: {} ('{}{}') is not supported for {}", f.path(), what, p, key, arch));
}

// M-RoPE's sections as llama.cpp reads them (an array of up to 4 integers, the missing ones 0; `required`: present,
// with the temporal, height and width ones not all 0, which ggml asserts). `interleaved`: llama.cpp's IMROPE.
void read_rope_sections(const GgufFile& f, const std::string& p, bool interleaved, ModelConfig& c,
                        bool required = true) {
    const std::string key = p + "rope.dimension_sections";
    const GgufValue* v = f.find(key);
    if (!v && !required) return;
    if (!v) throw FileError(fmt::format("{}: missing metadata '{}' (an array of 4 int32)", f.path(), key));
    const GgufArray* a = v->type() == GgufType::ARRAY ? &v->as_array() : nullptr;
    if (!a || (a->type() != GgufType::I32 && a->type() != GgufType::U32) || a->empty() || a->size() > 4)
        throw FileError(fmt::format("{}: metadata '{}' is not an array of 1 to 4 int32", f.path(), key));
    for (size_t i = 0; i < a->size(); ++i) {
        const int64_t x = a->at(i).as_int();
        if (x < 0 || x > 4096) throw FileError(fmt::format("{}: metadata '{}' holds {}", f.path(), key, x));
        c.rope_sections[i] = x;
    }
    if (required && c.rope_sections[0] + c.rope_sections[1] + c.rope_sections[2] == 0)
        throw FileError(fmt::format("{}: metadata '{}' gives no pair to the text position's sections", f.path(), key));
    c.rope_sections_interleaved = interleaved;
}

// GLM-4 (0414, Z1) as llama.cpp's glm4 reads it: partial rotary dims in adjacent pairs (rope.dimension_count), Q, K,
// V biases, gate and up in one matrix, norms after the attention and the FFN (Weights). GLM-4.1V's language model:
// M-RoPE where the temporal and height sections are set (else the sections are ignored), in NEOX pairs. The NextN
// prediction layers (GLM-OCR) are refused by name.
void read_glm4(const GgufFile& f, const std::string& p, ModelConfig& c) {
    read_rope_sections(f, p, false, c, false);
    if (c.rope_sections[0] > 0 && c.rope_sections[1] > 0)
        c.rope = ModelConfig::Rope::neox;
    else
        std::fill(std::begin(c.rope_sections), std::end(c.rope_sections), 0);
    refuse_if_set(f, p, "nextn_predict_layers", "NextN prediction layers", c.arch);
}

// DeepSeek-V3-style routing as llama.cpp's glm4moe and lfm2moe read it: expert_gating_func 1 (softmax) or 2
// (sigmoid; glm4moe: sigmoid when absent or 0), a selection bias in every layer with experts (exp_probs_b),
// leading_dense_block_count dense layers first (0 when absent); glm4moe: the weights normalized when
// expert_weights_norm says so (not when absent), scaled by expert_weights_scale (absent or 0: not), and a shared expert
// of expert_shared_count * n_ff_exp features beside the experts (the leading dense layers' FFN n_ff wide:
// ModelConfig::n_ff_layers); lfm2moe: always normalized, never scaled, no shared expert; minimax-m2: lfm2moe's, with
// experts in every layer (leading_dense_block_count not read) of feed_forward_length features (llama.cpp requires
// expert_feed_forward_length and sizes the experts by feed_forward_length), Q/K norms over the whole projection.
void read_moe_routing(const GgufFile& f, const std::string& p, ModelConfig& c) {
    const bool glm = c.arch == "glm4moe";
    // (minimax-m2: llama.cpp reads the gating as optional but cannot run without it)
    const std::string gating = p + "expert_gating_func";
    const int64_t func = glm ? optional_int(f, gating, 2, 0, 4) : required_int(f, gating, 0, 4);
    if (func != 1 && func != 2 && !(glm && func == 0))
        throw FileError(fmt::format("{}: metadata '{}' is {}, expected 1 (softmax) or 2 (sigmoid): the expert gating "
                                    "functions quill supports for {}", f.path(), gating, func, c.gguf_arch()));
    c.moe_gating_sigmoid = func != 1;
    c.moe_selection_bias = true;
    if (c.file_arch == "minimax-m2") {  // (every layer has experts, feed_forward_length wide; no shared one)
        required_int(f, p + "expert_feed_forward_length", 1, int64_t{1} << 24);  // (required and unused, as llama.cpp)
        c.n_ff_exp = c.n_ff;
        c.qk_norm_whole = true;
        return;
    }
    c.n_leading_dense = optional_int(f, p + "leading_dense_block_count", 0, 0, c.n_layer);
    if (!glm) return;
    c.moe_norm_weights = f.get_bool(p + "expert_weights_norm").value_or(false);
    const float scale = optional_float(f, p + "expert_weights_scale", 0.0f, 0.0, 1e6);
    if (scale != 0.0f) c.moe_weights_scale = scale;
    const int64_t shared = required_int(f, p + "expert_shared_count", 1, 64);
    c.moe_shared_expert = true;
    // (one a block, the MTP blocks' too)
    for (int64_t l = 0; l < c.n_layer + c.n_layer_nextn; ++l)
        c.n_ff_layers.push_back(c.layer_moe(l) ? shared * c.n_ff_exp : c.n_ff);
    c.n_ff = *std::max_element(c.n_ff_layers.begin(), c.n_ff_layers.end());
    refuse_if_set(f, p, "rope.dimension_sections", "multimodal RoPE (M-RoPE, GLM-4.5V)", c.arch);
}

// Expert groups as llama.cpp reads them for every architecture with experts (expert_group_count,
// expert_group_used_count; ModelConfig::moe_n_group): a count above 1 must divide the experts, with groups used.
void read_expert_groups(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.moe_n_group = optional_int(f, p + "expert_group_count", 0, 0, c.n_expert - 1);
    c.moe_n_group_used = optional_int(f, p + "expert_group_used_count", 0, 0, std::max<int64_t>(0, c.moe_n_group - 1));
    if (c.moe_n_group > 1 && (c.n_expert % c.moe_n_group != 0 || c.moe_n_group_used < 1))
        throw FileError(fmt::format("{}: metadata '{}expert_group_count' {} does not divide expert_count {} or "
                                    "expert_group_used_count is 0", f.path(), p, c.moe_n_group, c.n_expert));
}

// expert_gating_func as llama.cpp's mixtures read it: 1 softmax, 2 sigmoid (true); `fallback` where the key is absent
// or 0 (0: the key required and not 0). Any other function is refused naming `arch`.
bool read_gating_sigmoid(const GgufFile& f, const std::string& p, const std::string& arch, int64_t fallback) {
    const std::string gating = p + "expert_gating_func";
    int64_t func = fallback > 0 ? optional_int(f, gating, fallback, 0, 4) : required_int(f, gating, 0, 4);
    if (func == 0 && fallback > 0) func = fallback;
    if (func != 1 && func != 2)
        throw FileError(fmt::format("{}: metadata '{}' is {}, expected 1 (softmax) or 2 (sigmoid): the expert gating "
                                    "functions quill supports for {}", f.path(), gating, func, arch));
    return func == 2;
}

// The chosen experts' weights as llama.cpp's DeepSeek-V3-style mixtures read them: renormalized when
// expert_weights_norm says so (not when absent), times expert_weights_scale (absent or 0: 1), in expert groups where
// the file has them (read_expert_groups).
void read_expert_weighting(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.moe_norm_weights = f.get_bool(p + "expert_weights_norm").value_or(false);
    const float scale = optional_float(f, p + "expert_weights_scale", 0.0f, 0.0, 1e6);
    c.moe_weights_scale = scale == 0.0f ? 1.0f : scale;
    read_expert_groups(f, p, c);
}

// Ling 2.0 / Ring 2.0 (bailingmoe2), dots.llm1 (dots1) and Arcee Trinity (afmoe) as llama.cpp reads them:
// leading_dense_block_count dense layers of feed_forward_length first, then expert_feed_forward_length-wide experts
// chosen by expert_gating_func (1 softmax, 2 sigmoid; required by bailingmoe2, and by dots1, which llama.cpp reads as
// optional but cannot run without; afmoe: sigmoid when absent or 0) plus the selection bias exp_probs_b (required by
// afmoe; the others where the first layer with experts has it), in expert groups where the file has them, weighted by
// the chosen probabilities (renormalized when expert_weights_norm says so) times expert_weights_scale (absent or 0:
// 1); beside them a shared expert of expert_shared_count experts' width (bailingmoe2: of
// expert_shared_feed_forward_length where that is given, times the count all the same, as llama.cpp sizes it; afmoe:
// none when the count is 0). bailingmoe2's multi-token-prediction blocks are skipped (ModelConfig::n_layer_nextn).
// dots1: K and V heads as many as Q's and every dim rotated (llama.cpp sizes and asserts them so). afmoe: embeddings
// scaled by sqrt(n_embd), post-norms, the attention's output gated by sigmoid(attn_gate xn), no RoPE on every fourth
// layer whatever the file says, and where attention.sliding_window is given, local layers
// (attention.sliding_window_pattern, every fourth global unless it says) rotating with rope.freq_base_swa.
void read_shared_expert_moe(const GgufFile& f, const std::string& p, ModelConfig& c) {
    constexpr int64_t kBig = int64_t{1} << 24;
    const std::string arch = c.gguf_arch();
    const bool bailing = arch == "bailingmoe2", afmoe = arch == "afmoe";
    c.moe_gating_sigmoid = read_gating_sigmoid(f, p, arch, afmoe ? 2 : 0);
    c.n_ff_exp = required_int(f, p + "expert_feed_forward_length", 1, kBig);
    c.n_leading_dense = optional_int(f, p + "leading_dense_block_count", 0, 0, c.n_layer);
    read_expert_weighting(f, p, c);
    c.n_expert_shared = required_int(f, p + "expert_shared_count", afmoe ? 0 : 1, 64);
    const int64_t width = bailing ? optional_int(f, p + "expert_shared_feed_forward_length", 0, 0, kBig) : 0;
    c.moe_shared_expert = c.n_expert_shared > 0;
    if (c.moe_shared_expert) {  // (one a block, bailingmoe2's MTP blocks' too)
        for (int64_t l = 0; l < c.n_layer + c.n_layer_nextn; ++l)
            c.n_ff_layers.push_back(c.layer_moe(l) ? (width > 0 ? width : c.n_ff_exp) * c.n_expert_shared : c.n_ff);
        c.n_ff = *std::max_element(c.n_ff_layers.begin(), c.n_ff_layers.end());
    }
    c.moe_selection_bias = afmoe || (c.n_leading_dense < c.n_layer &&
                                     f.find_tensor(fmt::format("blk.{}.exp_probs_b.bias", c.n_leading_dense)));
    if (arch == "dots1" && (c.n_head_kv != c.n_head || c.n_rot != c.head_dim))
        throw FileError(fmt::format("{}: dots1 with {} KV heads for {} heads, {} of {} dims rotated: llama.cpp's dots1 "
                                    "needs as many KV heads as heads and every dim rotated", f.path(), c.n_head_kv,
                                    c.n_head, c.n_rot, c.head_dim));
    if (!bailing) refuse_if_set(f, p, "nextn_predict_layers", "NextN prediction layers", arch);
    if (!afmoe) return;
    c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
    c.attn_gate_proj = true;
    c.no_rope_step = 4;
    c.sliding_window = optional_int(f, p + "attention.sliding_window", 0, 0, int64_t{1} << 30);
    if (c.sliding_window == 0) return;
    c.swa_pattern = read_swa_pattern(f, p, 4, c.n_layer);
    c.rope_base_local = optional_float(f, p + "rope.freq_base_swa", c.rope_base, 1.0, 1e12);
}

// K-EXAONE (exaone-moe) as llama.cpp reads it: qwen3moe's layers with local ones of the required
// attention.sliding_window (attention.sliding_window_pattern; every fourth layer global unless it says) and RoPE on
// the local layers alone, with rope.freq_base whatever rope.freq_base_swa says (as llama.cpp's graph rotates them);
// leading_dense_block_count dense layers of feed_forward_length, then experts of the required
// expert_feed_forward_length chosen by the required expert_gating_func (1 softmax, 2 sigmoid) plus the selection bias
// exp_probs_b where the first layer with experts has it, in expert groups where the file has them, weighted by the
// chosen probabilities (renormalized when expert_weights_norm says so) times expert_weights_scale (absent or 0: 1),
// beside an ungated shared expert of expert_shared_feed_forward_length features (absent or 0: the experts' width).
// Its NextN blocks (nextn_predict_layers, dense ones) are skipped (ModelConfig::n_layer_nextn).
void read_exaone_moe(const GgufFile& f, const std::string& p, ModelConfig& c) {
    constexpr int64_t kBig = int64_t{1} << 24;
    c.moe_gating_sigmoid = read_gating_sigmoid(f, p, "exaone-moe", 0);
    c.n_ff_exp = required_int(f, p + "expert_feed_forward_length", 1, kBig);
    c.n_leading_dense = optional_int(f, p + "leading_dense_block_count", 0, 0, c.n_layer);
    read_expert_weighting(f, p, c);
    const int64_t shared = optional_int(f, p + "expert_shared_feed_forward_length", 0, 0, kBig);
    c.moe_shared_expert = true;
    c.n_ff_layers.clear();
    for (int64_t l = 0; l < c.n_layer + c.n_layer_nextn; ++l)  // (the NextN blocks: dense FFNs, as llama.cpp's)
        c.n_ff_layers.push_back(l < c.n_layer && c.layer_moe(l) ? (shared > 0 ? shared : c.n_ff_exp) : c.n_ff);
    c.n_ff = *std::max_element(c.n_ff_layers.begin(), c.n_ff_layers.end());
    c.moe_selection_bias = c.n_leading_dense < c.n_layer &&
                           f.find_tensor(fmt::format("blk.{}.exp_probs_b.bias", c.n_leading_dense)) != nullptr;
    c.sliding_window = required_int(f, p + "attention.sliding_window", 1, int64_t{1} << 30);
    c.swa_pattern = read_swa_pattern(f, p, 4, c.n_layer);
    c.no_rope_step = c.swa_pattern;  // (l % N == N - 1 global: (l + 1) % N == 0)
}

// Query and KV heads a block (attention.head_count, head_count_kv: one value for the local blocks of c.local_layers,
// one for the global ones; head_count_kv absent: as many as the query heads, as llama.cpp reads it) into n_head,
// n_head_kv and, where the local blocks' differ, n_head_local and n_head_kv_local.
void read_local_global_heads(const GgufFile& f, const std::string& p, int64_t n_block, ModelConfig& c) {
    const auto [heads_local, heads] = local_global_int(f, p + "attention.head_count", c, 1, 4096, n_block);
    const auto [kv_local, kv] = f.find(p + "attention.head_count_kv")
                                    ? local_global_int(f, p + "attention.head_count_kv", c, 1, 4096, n_block)
                                    : std::pair{heads_local, heads};
    if (heads % kv != 0 || heads_local % kv_local != 0)
        throw FileError(fmt::format("{}: metadata '{}attention.head_count' ({} global, {} local) is not a multiple of "
                                    "head_count_kv ({}, {})", f.path(), p, heads, heads_local, kv, kv_local));
    c.n_head = heads;
    c.n_head_kv = kv;
    c.n_head_local = heads_local != heads ? heads_local : 0;
    c.n_head_kv_local = kv_local != kv ? kv_local : 0;
}

// step35's and laguna's experts (after n_leading_dense dense layers of n_ff) as llama.cpp reads them: chosen by
// expert_gating_func (absent or 0: sigmoid; 1 softmax), weighted by the chosen probabilities (renormalized when
// expert_weights_norm says so) times expert_weights_scale (absent or 0: 1), in expert groups where the file has them,
// beside an ungated shared expert of `width` features in every block with experts ([n_block] widths).
void read_shared_sigmoid_moe(const GgufFile& f, const std::string& p, int64_t n_block, int64_t width,
                             ModelConfig& c) {
    c.moe_gating_sigmoid = read_gating_sigmoid(f, p, c.gguf_arch(), 2);
    read_expert_weighting(f, p, c);
    c.n_expert_shared = std::max<int64_t>(c.n_expert_shared, 1);
    c.moe_shared_expert = true;
    for (int64_t l = 0; l < n_block; ++l) c.n_ff_layers.push_back(c.layer_moe(l) ? width : c.n_ff);
    c.n_ff = *std::max_element(c.n_ff_layers.begin(), c.n_ff_layers.end());
}

// Poolside's Laguna (laguna: XS.2, S.2, M.1) as llama.cpp reads it: qwen3moe's layers (Q and K norms required),
// query heads a layer (head_count: one value for the local layers, one for the global ones); with
// attention.sliding_window, local layers by attention.sliding_window_pattern (bools, or every Nth layer global from
// the first, N = 4 unless it says) rotating rope.dimension_count_swa dims (else rope.dimension_count) with
// rope.freq_base_swa (else rope.freq_base) and no scaling at all, the global ones with the file's (YaRN); each head's
// (or, with a gate as wide as the query, each value's) output times softplus(attn_gate xn); the required
// leading_dense_block_count dense layers, then read_shared_sigmoid_moe's experts with the required selection bias
// beside expert_shared_count (else 1) shared experts' expert_shared_feed_forward_length (else their
// expert_feed_forward_length) features.
void read_laguna(const GgufFile& f, const std::string& p, ModelConfig& c) {
    constexpr int64_t kBig = int64_t{1} << 24;
    c.sliding_window = optional_int(f, p + "attention.sliding_window", 0, 0, int64_t{1} << 30);
    const std::string pattern = p + "attention.sliding_window_pattern";
    const GgufValue* v = f.find(pattern);
    if (c.sliding_window > 0 && v && v->type() == GgufType::ARRAY) {
        if (v->as_array().type() != GgufType::BOOL || static_cast<int64_t>(v->as_array().size()) != c.n_layer)
            throw FileError(fmt::format("{}: metadata '{}' is an array of {} {} values, expected {} bools (one a "
                                        "layer, true: local)", f.path(), pattern, v->as_array().size(),
                                        gguf_type_name(v->as_array().type()), c.n_layer));
        for (int64_t l = 0; l < c.n_layer; ++l)
            c.local_layers.push_back(v->as_array().at(static_cast<size_t>(l)).as_bool());
    } else {
        const int64_t n = c.sliding_window > 0 ? optional_int(f, pattern, 4, 0, 4096) : 1;
        for (int64_t l = 0; l < c.n_layer; ++l) c.local_layers.push_back(n == 0 || l % n != 0);
    }
    read_local_global_heads(f, p, c.n_layer, c);
    if (c.sliding_window == 0) c.local_layers.clear();
    if (c.sliding_window > 0) {
        c.n_rot_local = optional_int(f, p + "rope.dimension_count_swa", c.n_rot, 2, c.head_dim);
        if (c.n_rot_local % 2 != 0)
            throw FileError(fmt::format("{}: metadata '{}rope.dimension_count_swa' {} is odd", f.path(), p,
                                        c.n_rot_local));
        c.rope_base_local = optional_float(f, p + "rope.freq_base_swa", c.rope_base, 1.0, 1e12);
        c.rope_freq_scale_local = 1.0f;
        c.rope_local_plain = true;
    }
    const GgufTensorInfo* gate = f.find_tensor("blk.0.attn_gate.weight");
    if (!gate || gate->ne.size() != 2)
        throw FileError(fmt::format("{}: missing tensor 'blk.0.attn_gate.weight'", f.path()));
    c.attn_gate_proj = c.attn_gate_softplus = true;
    c.attn_gate_per_head = gate->ne[1] == c.layer_n_head(0);
    c.n_leading_dense = required_int(f, p + "leading_dense_block_count", 0, c.n_layer);
    c.n_expert_shared = optional_int(f, p + "expert_shared_count", 1, 1, 64);
    const int64_t width =
        optional_int(f, p + "expert_shared_feed_forward_length", c.n_ff_exp * c.n_expert_shared, 1, kBig);
    read_shared_sigmoid_moe(f, p, c.n_layer, width, c);
    c.moe_selection_bias = c.n_leading_dense < c.n_layer;
}

// StepFun Step-3.5-Flash (step35) as llama.cpp reads it: qwen3moe's layers (Q and K norms where the file has them),
// local layers where the required attention.sliding_window_pattern (a bool a block, MTP blocks included) says, with
// the required window; query and KV heads a block (head_count, head_count_kv: one value for the local layers, one for
// the global ones); the global layers rotate half of rope.dimension_count's dims (llama.cpp halves it) with the
// file's base, scaling and rope_freqs, the local ones rope.dimension_count_swa (else rope.dimension_count) with
// rope.freq_base_swa (else 10,000) and neither; each head's output gated by sigmoid(attn_gate xn) where the file has
// attn_gate (one row a head); leading_dense_block_count dense layers, then experts of expert_feed_forward_length
// chosen by expert_gating_func (absent or 0: sigmoid) plus exp_probs_b where the first expert layer has it, weighted
// as read_shared_expert_moe's, beside an ungated shared expert of expert_shared_feed_forward_length; the SwiGLU clamps
// swiglu_clamp_exp and swiglu_clamp_shexp (a value or one a block) where given; the MTP blocks skipped.
void read_step35(const GgufFile& f, const std::string& p, int64_t n_block, ModelConfig& c) {
    constexpr int64_t kBig = int64_t{1} << 24;
    c.sliding_window = required_int(f, p + "attention.sliding_window", 1, int64_t{1} << 30);
    const std::string pattern = p + "attention.sliding_window_pattern";
    const GgufValue* v = f.find(pattern);
    if (!v || v->type() != GgufType::ARRAY || v->as_array().type() != GgufType::BOOL ||
        static_cast<int64_t>(v->as_array().size()) != n_block)
        throw FileError(fmt::format("{}: metadata '{}' is missing or not an array of {} bools (one a block, true: "
                                    "local)", f.path(), pattern, n_block));
    for (int64_t l = 0; l < n_block; ++l) c.local_layers.push_back(v->as_array().at(static_cast<size_t>(l)).as_bool());
    read_local_global_heads(f, p, n_block, c);
    const int64_t dims = c.n_rot;
    if (dims % 4 != 0)
        throw FileError(fmt::format("{}: metadata '{}rope.dimension_count' {} is not a multiple of 4 (the global "
                                    "layers rotate half of it)", f.path(), p, dims));
    c.n_rot = dims / 2;
    c.n_rot_local = optional_int(f, p + "rope.dimension_count_swa", dims, 2, c.head_dim);
    if (c.n_rot_local % 2 != 0)
        throw FileError(fmt::format("{}: metadata '{}rope.dimension_count_swa' {} is odd", f.path(), p, c.n_rot_local));
    c.rope_base_local = optional_float(f, p + "rope.freq_base_swa", 10000.0f, 1.0, 1e12);
    c.rope_freq_scale_local = 1.0f;
    c.rope_divisors_global_only = true;
    if (c.rope_yarn)
        throw FileError(fmt::format("{}: step35 with YaRN RoPE scaling is not supported", f.path()));
    c.attn_gate_proj = c.attn_gate_per_head = f.find_tensor("blk.0.attn_gate.weight") != nullptr;
    c.n_leading_dense = optional_int(f, p + "leading_dense_block_count", 0, 0, c.n_layer);
    read_shared_sigmoid_moe(f, p, n_block, required_int(f, p + "expert_shared_feed_forward_length", 1, kBig), c);
    c.moe_selection_bias = c.n_leading_dense < c.n_layer &&
                           f.find_tensor(fmt::format("blk.{}.exp_probs_b.bias", c.n_leading_dense));
    for (auto [key, limits] : {std::pair{"swiglu_clamp_exp", &c.swiglu_clamp_exp},
                               std::pair{"swiglu_clamp_shexp", &c.swiglu_clamp_shexp}}) {
        if (!f.find(p + key)) continue;
        *limits = layer_floats(f, p + key, n_block);
        if (std::all_of(limits->begin(), limits->end(), [](float x) { return x <= 1e-6f; })) limits->clear();
    }
}

// Cohere's Command R (command-r) and Command R7B / A (cohere2) as llama.cpp reads them: LayerNorms, attention and
// FFN in parallel from one norm, the logits multiplied by logit_scale (cohere2: required; command-r: 0 or absent, no
// scaling). command-r: Q and K norms of a row per head in 64 layers or more (Command R+), as llama.cpp loads them.
// cohere2: the local layers (read_sliding_window) rotate with rope.freq_base, as llama.cpp's graph does whatever
// rope.freq_base_swa says; the global ones have no RoPE.
void read_cohere(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.layer_norm = c.parallel_blocks = true;
    const float s = c.arch == "cohere2" ? required_float(f, p + "logit_scale", 0.0, 1e6)
                                        : optional_float(f, p + "logit_scale", 0.0f, 0.0, 1e6);
    if (s != 0.0f) c.logit_mul = s;
    if (c.arch == "cohere2") c.no_rope_step = c.swa_pattern;  // (l % N == N - 1 global: (l + 1) % N == 0)
}

// The local layers of a pattern array (attention.sliding_window_pattern, one bool a layer, true: local) in
// ModelConfig::local_layers, or (`required` false) false where the key is not an array.
bool read_local_layers(const GgufFile& f, const std::string& p, bool required, ModelConfig& c) {
    const std::string key = p + "attention.sliding_window_pattern";
    const GgufValue* v = f.find(key);
    if (!required && (!v || v->type() != GgufType::ARRAY)) return false;
    const GgufArray* a = v && v->type() == GgufType::ARRAY ? &v->as_array() : nullptr;
    if (!a || a->type() != GgufType::BOOL || static_cast<int64_t>(a->size()) < c.n_layer)
        throw FileError(fmt::format("{}: metadata '{}' is not an array of {} bools (one a layer, true: local)",
                                    f.path(), key, c.n_layer));
    c.local_layers.resize(static_cast<size_t>(c.n_layer));
    for (int64_t l = 0; l < c.n_layer; ++l)
        c.local_layers[static_cast<size_t>(l)] = a->at(static_cast<size_t>(l)).as_bool();
    return true;
}

// Cohere's MoE Command models (cohere2moe) as llama.cpp reads them: cohere2's parallel blocks (read_cohere) with
// RMSNorm where the file gives attention.layer_norm_rms_epsilon (else LayerNorm, attention.layer_norm_epsilon);
// the required attention.sliding_window, the local layers as the pattern array says, or by a pattern N (4 unless the
// file says) the first layer of every N global; RoPE on the local layers and the leading dense ones (with
// rope.freq_base whatever rope.freq_base_swa says); the required leading_dense_block_count dense layers of
// feed_forward_length, then experts of the required expert_feed_forward_length (0: feed_forward_length) chosen by
// expert_gating_func (absent or 0: sigmoid; 1 softmax) without a selection bias, in expert groups where the file has
// them, weighted by the chosen probabilities (renormalized when expert_weights_norm says so) times
// expert_weights_scale (absent or 0: 1); beside them, where expert_shared_count > 0, a shared expert of
// expert_shared_feed_forward_length (absent or 0: the count times the experts' width), the two averaged. Its NextN
// blocks (nextn_predict_layers) are skipped (ModelConfig::n_layer_nextn).
void read_cohere2moe(const GgufFile& f, const std::string& p, ModelConfig& c) {
    constexpr int64_t kBig = int64_t{1} << 24;
    if (f.find(p + "attention.layer_norm_rms_epsilon")) {
        c.rms_eps = required_float(f, p + "attention.layer_norm_rms_epsilon", 0.0, 1.0);
        c.layer_norm = c.rms_eps == 0.0f;  // (llama.cpp's LayerNorm where the RMS epsilon is 0)
        if (c.layer_norm) c.rms_eps = optional_float(f, p + "attention.layer_norm_epsilon", 0.0f, 0.0, 1.0);
    }
    c.sliding_window = required_int(f, p + "attention.sliding_window", 1, int64_t{1} << 30);
    if (!read_local_layers(f, p, false, c)) {
        const int64_t n = optional_int(f, p + "attention.sliding_window_pattern", 4, 0, 4096);
        for (int64_t l = 0; l < c.n_layer; ++l) c.local_layers.push_back(n == 0 || l % n != 0);
    }
    c.moe_gating_sigmoid = read_gating_sigmoid(f, p, "cohere2moe", 2);
    c.n_leading_dense = required_int(f, p + "leading_dense_block_count", 0, c.n_layer);
    for (int64_t l = 0; l < c.n_layer; ++l)
        c.rope_layers.push_back(c.local_layers[static_cast<size_t>(l)] || l < c.n_leading_dense);
    c.no_rope_step = 0;
    const int64_t n_ff_exp = required_int(f, p + "expert_feed_forward_length", 0, kBig);
    c.n_ff_exp = n_ff_exp > 0 ? n_ff_exp : c.n_ff;
    read_expert_weighting(f, p, c);
    c.n_expert_shared = optional_int(f, p + "expert_shared_count", 0, 0, 64);
    c.moe_shared_expert = c.n_expert_shared > 0;
    if (!c.moe_shared_expert) return;
    c.moe_shared_scale = 0.5f;
    const int64_t width = optional_int(f, p + "expert_shared_feed_forward_length", 0, 0, kBig);
    for (int64_t l = 0; l < c.n_layer + c.n_layer_nextn; ++l)  // (one a block, the NextN blocks' too)
        c.n_ff_layers.push_back(c.layer_moe(l) ? (width > 0 ? width : c.n_ff_exp * c.n_expert_shared) : c.n_ff);
    c.n_ff = *std::max_element(c.n_ff_layers.begin(), c.n_ff_layers.end());
}

// Granite 4 with interleaved sliding-window attention (granite_swa) as llama.cpp reads it: granite's multipliers
// (read_granite: embedding, residual and attention scales optional, logit_scale required; rope.scaling.finetuned not
// read), the required attention.sliding_window and pattern array, attention sinks in every layer (Weights), RoPE
// where the optional attention.rope_pattern array says (every layer when absent); granitemoe's experts where the file
// has them (softmax of the chosen logits), their gate and up in one tensor where the file has them so, and the shared
// expert's always in one (ffn_up_shexp, gate first). Granite Vision's deepstack_mapping is accepted and has no effect
// on text: llama.cpp adds each mapped layer's slot of the input embedding, which a token's embedding pads with zeros.
void read_granite_swa(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.sliding_window = required_int(f, p + "attention.sliding_window", 1, int64_t{1} << 30);
    read_local_layers(f, p, true, c);
    c.no_rope_step = 0;
    const std::string key = p + "attention.rope_pattern";
    if (const GgufValue* v = f.find(key)) {
        const GgufArray* a = v->type() == GgufType::ARRAY ? &v->as_array() : nullptr;
        if (!a || a->type() != GgufType::BOOL || static_cast<int64_t>(a->size()) < c.n_layer)
            throw FileError(fmt::format("{}: metadata '{}' is not an array of {} bools (one a layer, true: RoPE)",
                                        f.path(), key, c.n_layer));
        for (int64_t l = 0; l < c.n_layer; ++l) c.rope_layers.push_back(a->at(static_cast<size_t>(l)).as_bool());
    }
}

// ERNIE-4.5's mixtures (21B-A3B, 300B-A47B) as llama.cpp's ernie4_5-moe reads them: the experts'
// expert_feed_forward_length required, leading_dense_block_count dense layers of feed_forward_length first, the others
// with experts chosen by the softmax of their logits (plus the selection bias exp_probs_b where the file has it:
// moe_statics.e_score_correction_bias) and weighted by the chosen probabilities renormalized, beside an ungated
// shared expert of expert_shared_feed_forward_length features where that is > 0. interleave_moe_layer_step is
// required and must be 1 (every layer after the dense ones with experts: llama.cpp loads the experts so and routes
// only every step-th layer through them, which no converted model does otherwise).
void read_ernie4_5_moe(const GgufFile& f, const std::string& p, ModelConfig& c) {
    constexpr int64_t kBig = int64_t{1} << 24;
    c.n_ff_exp = required_int(f, p + "expert_feed_forward_length", 1, kBig);
    const std::string step = p + "interleave_moe_layer_step";
    if (const int64_t s = required_int(f, step, 1, c.n_layer); s != 1)
        throw FileError(fmt::format("{}: metadata '{}' is {}, expected 1 (experts in every layer after the leading "
                                    "dense ones: the ERNIE-4.5 mixtures quill supports)", f.path(), step, s));
    c.n_leading_dense = optional_int(f, p + "leading_dense_block_count", 0, 0, c.n_layer);
    const int64_t shared = optional_int(f, p + "expert_shared_feed_forward_length", 0, 0, kBig);
    c.moe_shared_expert = shared > 0;
    if (shared > 0) {
        for (int64_t l = 0; l < c.n_layer; ++l) c.n_ff_layers.push_back(c.layer_moe(l) ? shared : c.n_ff);
        c.n_ff = *std::max_element(c.n_ff_layers.begin(), c.n_ff_layers.end());
    }
    // (the first layer with experts says whether they all have the bias; Weights then requires it in each)
    c.moe_selection_bias = c.n_leading_dense < c.n_layer &&
                           f.find_tensor(fmt::format("blk.{}.exp_probs_b.bias", c.n_leading_dense)) != nullptr;
}

// IBM Granite (3.x dense) as llama.cpp's granite reads it: embeddings multiplied by embedding_scale, each block's
// output by residual_scale, the logits divided by the required logit_scale (attention.scale, read for every
// architecture, is its attention multiplier); rope.scaling.finetuned false turns RoPE off (not granite_swa's).
// Granite Vision's deepstack layers are refused by name (but granite_swa's, read_granite_swa).
void read_granite(const GgufFile& f, const std::string& p, ModelConfig& c) {
    const bool swa = c.file_arch == "granite_swa";  // (its deepstack layers: read_granite_swa)
    if (!swa) refuse_if_set(f, p, "deepstack_mapping", "Granite Vision's deepstack layers", c.arch);
    // (granitehybrid's is optional, as llama.cpp reads it: 0 or absent, no scaling)
    if (c.arch == "granite") c.logit_scale = required_float(f, p + "logit_scale", 1e-6, 1e6);
    else if (const float s = optional_float(f, p + "logit_scale", 0.0f, 0.0, 1e6); s != 0.0f) c.logit_scale = s;
    // (0, as llama.cpp defaults them: no scaling)
    const float residual = optional_float(f, p + "residual_scale", 0.0f, 0.0, 1e6);
    const float embedding = optional_float(f, p + "embedding_scale", 0.0f, 0.0, 1e6);
    if (residual != 0.0f) c.residual_scale = residual;
    if (embedding != 0.0f) c.embd_scale = embedding;
    if (auto finetuned = f.get_bool(p + "rope.scaling.finetuned"); finetuned && !*finetuned && !swa)
        c.no_rope_step = 1;
}

// Mamba-2's sizes (ssm.*) in ModelConfig's terms: conv taps, d_state as ssm_head_k, groups as ssm_n_k_heads, heads as
// ssm_n_v_heads of inner_size / heads channels.
void read_mamba2_sizes(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.ssm_conv = required_int(f, p + "ssm.conv_kernel", 1, 64);
    c.ssm_head_k = required_int(f, p + "ssm.state_size", 1, 1024);
    c.ssm_n_k_heads = required_int(f, p + "ssm.group_count", 1, 4096);
    c.ssm_n_v_heads = required_int(f, p + "ssm.time_step_rank", 1, 4096);
    const int64_t inner = required_int(f, p + "ssm.inner_size", 1, int64_t{1} << 24);
    if (inner % c.ssm_n_v_heads != 0 || c.ssm_n_v_heads % c.ssm_n_k_heads != 0)
        throw FileError(fmt::format("{}: metadata '{}ssm.inner_size' {} is not a multiple of '{}ssm.time_step_rank' "
                                    "{}, or that of '{}ssm.group_count' {}", f.path(), p, inner, p, c.ssm_n_v_heads,
                                    p, c.ssm_n_k_heads));
    c.ssm_head_v = inner / c.ssm_n_v_heads;
}

// Granite 4.0 H as llama.cpp's granitehybrid reads it: granite's multipliers (read_granite; its files turn RoPE off
// with rope.scaling.finetuned false), the Mamba-2 layers where the array attention.head_count_kv holds 0 (the
// attention layers' entries must be one value: n_head_kv), the ssm.* sizes in ModelConfig's terms (conv taps,
// d_state as ssm_head_k, groups as ssm_n_k_heads, heads as ssm_n_v_heads of inner_size / heads channels), with the
// inner size twice n_embd (as llama.cpp requires).
void read_granite_hybrid(const GgufFile& f, const std::string& p, ModelConfig& c) {
    read_granite(f, p, c);
    const std::string kv_key = p + "attention.head_count_kv";
    const GgufValue* kv = f.find(kv_key);
    c.mamba2_layers.assign(static_cast<size_t>(c.n_layer), 0);
    if (kv && kv->type() == GgufType::ARRAY) {
        const std::vector<int64_t> heads = layer_ints(f, kv_key, c.n_layer, 0, c.n_head);
        int64_t n_head_kv = 0;
        for (int64_t l = 0; l < c.n_layer; ++l) {
            const int64_t h = heads[static_cast<size_t>(l)];
            c.mamba2_layers[static_cast<size_t>(l)] = h == 0;
            if (h == 0) continue;
            if (n_head_kv != 0 && h != n_head_kv)
                throw FileError(fmt::format("{}: metadata '{}' differs between two attention layers ({} and {}; quill "
                                            "supports one value)", f.path(), kv_key, n_head_kv, h));
            if (c.n_head % h != 0)
                throw FileError(fmt::format("{}: metadata '{}attention.head_count' {} is not a multiple of '{}' {}",
                                            f.path(), p, c.n_head, kv_key, h));
            n_head_kv = h;
        }
        c.n_head_kv = n_head_kv > 0 ? n_head_kv : c.n_head;  // (no attention layer: no KV heads to read)
    }
    read_mamba2_sizes(f, p, c);
    if (c.ssm_d_inner() != 2 * c.n_embd)
        throw FileError(fmt::format("{}: metadata '{}ssm.inner_size' is {}, expected twice embedding_length {} (as "
                                    "llama.cpp requires)", f.path(), p, c.ssm_d_inner(), c.n_embd));
}

// Nemotron-H's experts (nemotron_h_moe, Nemotron 3 Nano) as llama.cpp reads them: in each FFN layer, n_expert
// ReLU-squared experts without a gate (expert_feed_forward_length wide), routed by sigmoid(logit) with the selection
// bias exp_probs_b, weighted by those probabilities (divided by their sum with expert_weights_norm) times
// expert_weights_scale, in expert groups where expert_group_count > 1; beside them a shared expert of the same kind,
// expert_shared_feed_forward_length wide. Nemotron 3 Super's latent projections (moe_latent_size) are refused.
void read_nemotron_h_moe(const GgufFile& f, const std::string& p, ModelConfig& c) {
    refuse_if_set(f, p, "moe_latent_size", "the experts' latent projections (Nemotron 3 Super)", c.gguf_arch());
    c.moe_gating_sigmoid = c.moe_selection_bias = true;
    c.moe_norm_weights = f.get_bool(p + "expert_weights_norm").value_or(false);
    const float scale = optional_float(f, p + "expert_weights_scale", 0.0f, 0.0, 1e3);
    if (scale != 0.0f) c.moe_weights_scale = scale;
    read_expert_groups(f, p, c);
    const int64_t shared = required_int(f, p + "expert_shared_feed_forward_length", 1, int64_t{1} << 24);
    c.moe_shared_expert = true;
    for (int64_t l = 0; l < c.n_layer; ++l)  // (the shared expert's width where a layer has experts)
        c.n_ff_layers[static_cast<size_t>(l)] = c.layer_has_ffn(l) ? shared : 0;
    c.n_ff = shared;
}

// Nemotron-H as llama.cpp's nemotron_h reads it: each layer one block, by its entries of the arrays
// attention.head_count_kv and feed_forward_length: an FFN where its width is not 0, else attention where its KV heads
// are not 0 (one value: n_head_kv), else Mamba-2 (the ssm.* sizes; the inner size free); the FFN ReLU squared without
// a gate; no RoPE; attention.layer_norm_epsilon, the RMS norms' epsilon unless layer_norm_rms_epsilon is given (read
// by from_gguf).
void read_nemotron_h(const GgufFile& f, const std::string& p, int64_t n_block, ModelConfig& c) {
    constexpr int64_t kBig = int64_t{1} << 24;
    const std::string kv_key = p + "attention.head_count_kv", ff_key = p + "feed_forward_length";
    auto per_layer = [&](const std::string& key, int64_t hi) {  // (one a block; the MTP blocks' dropped)
        const GgufValue* v = f.find(key);
        std::vector<int64_t> a = v && v->type() == GgufType::ARRAY
                                     ? layer_ints(f, key, n_block, 0, hi)
                                     : std::vector<int64_t>(static_cast<size_t>(n_block), required_int(f, key, 0, hi));
        a.resize(static_cast<size_t>(c.n_layer));
        return a;
    };
    const std::vector<int64_t> kv = per_layer(kv_key, c.n_head), ff = per_layer(ff_key, kBig);
    c.mamba2_layers.assign(static_cast<size_t>(c.n_layer), 0);
    c.layer_blocks.assign(static_cast<size_t>(c.n_layer), 0);
    c.n_ff_layers = ff;
    c.n_ff = *std::max_element(ff.begin(), ff.end());
    int64_t n_head_kv = 0;
    for (int64_t l = 0; l < c.n_layer; ++l) {
        const auto i = static_cast<size_t>(l);
        c.layer_blocks[i] = ff[i] > 0 ? ModelConfig::kFfnBlock : ModelConfig::kMixerBlock;
        c.mamba2_layers[i] = ff[i] == 0 && kv[i] == 0;
        if (ff[i] > 0 || kv[i] == 0) continue;
        if (n_head_kv != 0 && kv[i] != n_head_kv)
            throw FileError(fmt::format("{}: metadata '{}' differs between two attention layers ({} and {}; quill "
                                        "supports one value)", f.path(), kv_key, n_head_kv, kv[i]));
        if (c.n_head % kv[i] != 0)
            throw FileError(fmt::format("{}: metadata '{}attention.head_count' {} is not a multiple of '{}' {}",
                                        f.path(), p, c.n_head, kv_key, kv[i]));
        n_head_kv = kv[i];
    }
    c.n_head_kv = n_head_kv > 0 ? n_head_kv : c.n_head;  // (no attention layer: no KV heads to read)
    c.ffn_act = ModelConfig::Activation::relu_sqr;
    c.no_rope_step = 1;
    read_mamba2_sizes(f, p, c);  // (required, as llama.cpp reads them)
    if (c.moe()) read_nemotron_h_moe(f, p, c);
}

// Falcon-H1 as llama.cpp's falcon-h1 reads it: attention (NEOX RoPE pairs; queries scaled by 1 / sqrt(head_dim)
// whatever the file says) and a Mamba-2 mixer side by side in every layer (ModelConfig::ssm_beside_attn), in the
// ssm.* sizes with the inner size free. Its config.json's multipliers (embedding, lm_head, attention in and out, key,
// SSM in and out and each part of in_proj, MLP gate and down) are folded into the weights by the converter: the file
// has no key for them and the forward applies none.
void read_falcon_h1(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.mamba2_layers.assign(static_cast<size_t>(c.n_layer), 1);
    c.ssm_beside_attn = true;
    read_mamba2_sizes(f, p, c);
}

// Mamba-2 as llama.cpp's mamba2 reads it (Mamba-Codestral, state-spaces' mamba2-*): every layer its Mamba-2 mixer
// alone, x = x + mamba2(rms_norm(x) * attn_norm), in the ssm.* sizes (the inner size free); no attention, no FFN
// (the file's head_count and feed_forward_length are 0: from_gguf leaves one placeholder head no layer reads).
void read_mamba2(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.mamba2_layers.assign(static_cast<size_t>(c.n_layer), 1);
    c.layer_blocks.assign(static_cast<size_t>(c.n_layer), ModelConfig::kMixerBlock);
    c.no_rope_step = 1;
    read_mamba2_sizes(f, p, c);
}

// Mamba-1's sizes (ssm.*) in ModelConfig's terms (ModelConfig::mamba1): conv taps, inner_size channels (twice n_embd,
// as llama.cpp requires) as ssm_n_v_heads heads of one, state_size as ssm_head_k, time_step_rank as ssm_dt_rank;
// ssm.dt_b_c_rms (falcon-mamba's files) the RMS norms of dt, B and C.
void read_mamba1_sizes(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.ssm_conv = required_int(f, p + "ssm.conv_kernel", 1, 64);
    c.ssm_head_k = required_int(f, p + "ssm.state_size", 1, 1024);
    c.ssm_dt_rank = required_int(f, p + "ssm.time_step_rank", 1, 65536);
    const int64_t inner = required_int(f, p + "ssm.inner_size", 1, int64_t{1} << 24);
    if (inner != 2 * c.n_embd)
        throw FileError(fmt::format("{}: metadata '{}ssm.inner_size' is {}, expected twice embedding_length {} (as "
                                    "llama.cpp requires)", f.path(), p, inner, c.n_embd));
    c.ssm_n_v_heads = inner;
    c.ssm_head_v = c.ssm_n_k_heads = 1;
    c.ssm_dt_b_c_rms = f.get_bool(p + "ssm.dt_b_c_rms").value_or(false);
}

// Mamba-1 as llama.cpp's mamba reads it (state-spaces' mamba-*, falcon-mamba): every layer its Mamba-1 mixer alone,
// x = x + mamba1(rms_norm(x) * attn_norm); no attention, no FFN (head_count and feed_forward_length 0, as for mamba2).
void read_mamba(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.mamba1_layers.assign(static_cast<size_t>(c.n_layer), 1);
    c.layer_blocks.assign(static_cast<size_t>(c.n_layer), ModelConfig::kMixerBlock);
    c.no_rope_step = 1;
    read_mamba1_sizes(f, p, c);
}

// Which of the first n_layer layers are recurrent, as llama.cpp's qwen35 reads it: attention.recurrent_layers (one
// bool a block, true: recurrent), which must be the pattern of some interval N (every Nth layer full attention),
// else full_attention_interval (4 when absent). The interval, n_layer + 1 when every layer is recurrent.
int64_t read_full_attn_interval(const GgufFile& f, const std::string& p, int64_t n_layer, int64_t n_block) {
    const std::string key = p + "attention.recurrent_layers";
    const GgufValue* v = f.find(key);
    if (!v) return optional_int(f, p + "full_attention_interval", 4, 1, 4096);
    const GgufArray* a = v->type() == GgufType::ARRAY ? &v->as_array() : nullptr;
    if (!a || a->type() != GgufType::BOOL || static_cast<int64_t>(a->size()) != n_block)
        throw FileError(fmt::format("{}: metadata '{}' is not an array of {} bools (one a block, true: recurrent)",
                                    f.path(), key, n_block));
    for (int64_t n = 1; n <= n_layer + 1; ++n) {
        bool same = true;
        for (int64_t l = 0; l < n_layer && same; ++l) same = a->at(static_cast<size_t>(l)).as_bool() == (l % n != n - 1);
        if (same) return n;
    }
    throw FileError(fmt::format("{}: metadata '{}' marks the recurrent layers in a pattern quill does not support "
                                "(every Nth layer full attention, the others recurrent)", f.path(), key));
}

// Qwen3.5 as llama.cpp's qwen35 reads it: the gated delta net's sizes (ssm.*: conv taps, the keys' head size and
// heads, the values' heads, their total width), which layers are recurrent, the gated queries of the full layers
// and their multi-section RoPE (rope.dimension_sections, interleaved). Qwen3-Next (qwen3next) as llama.cpp reads
// it: the same, but plain NEOX RoPE and the delta nets grouped by key head.
void read_qwen35(const GgufFile& f, const std::string& p, int64_t n_block, ModelConfig& c) {
    c.attn_out_gate = true;
    c.ssm_conv = required_int(f, p + "ssm.conv_kernel", 1, 64);
    c.ssm_head_k = required_int(f, p + "ssm.state_size", 1, 1024);
    c.ssm_n_k_heads = required_int(f, p + "ssm.group_count", 1, 4096);
    c.ssm_n_v_heads = required_int(f, p + "ssm.time_step_rank", 1, 4096);
    const int64_t inner = required_int(f, p + "ssm.inner_size", 1, int64_t{1} << 24);
    if (inner != c.ssm_n_v_heads * c.ssm_head_k)
        throw FileError(fmt::format("{}: metadata '{}ssm.inner_size' is {}, expected ssm.time_step_rank {} * "
                                    "ssm.state_size {} (value heads of the keys' size, as llama.cpp requires)",
                                    f.path(), p, inner, c.ssm_n_v_heads, c.ssm_head_k));
    if (c.ssm_n_v_heads % c.ssm_n_k_heads != 0)
        throw FileError(fmt::format("{}: metadata '{}ssm.time_step_rank' {} is not a multiple of '{}ssm.group_count' "
                                    "{}", f.path(), p, c.ssm_n_v_heads, p, c.ssm_n_k_heads));
    c.ssm_head_v = c.ssm_head_k;
    c.full_attn_interval = read_full_attn_interval(f, p, c.n_layer, n_block);
    c.ssm_grouped = c.file_arch == "qwen3next";
    if (!c.ssm_grouped) read_rope_sections(f, p, true, c);
}

// LFM2 as llama.cpp's lfm2 reads it: the short convs' taps (shortconv.l_cache), the layers whose
// attention.head_count_kv is 0 short convs (an array of one a layer, as the converter writes it; an integer: every
// layer attention), the others GQA with Q and K norms and NEOX RoPE. The attention layers must share one KV head
// count. A sliding window (llama.cpp makes every attention layer local) and bidirectional attention (the embedding
// models) are refused by name.
void read_lfm2(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.ssm_conv = required_int(f, p + "shortconv.l_cache", 2, 64);
    if (optional_int(f, p + "attention.sliding_window", 0, 0, int64_t{1} << 30) > 0)
        throw FileError(fmt::format("{}: sliding-window attention ('{}attention.sliding_window') is not supported for "
                                    "lfm2", f.path(), p));
    if (const GgufValue* causal = f.find(p + "attention.causal");
        causal && causal->type() == GgufType::BOOL && !causal->as_bool())
        throw FileError(fmt::format("{}: bidirectional attention ('{}attention.causal' false: an embedding model) is "
                                    "not supported for lfm2", f.path(), p));
    const std::string key = p + "attention.head_count_kv";
    const GgufValue* v = f.find(key);
    if (!v || v->type() != GgufType::ARRAY) return;
    const std::vector<int64_t> kv = layer_ints(f, key, c.n_layer, 0, c.n_head);
    int64_t heads = 0;
    for (int64_t l = 0; l < c.n_layer; ++l) {
        if (kv[l] == 0) continue;
        if (heads > 0 && kv[l] != heads)
            throw FileError(fmt::format("{}: metadata '{}' differs between two attention layers ({} and {}; quill "
                                        "supports one KV head count)", f.path(), key, heads, kv[l]));
        heads = kv[l];
    }
    if (heads == 0)
        throw FileError(fmt::format("{}: metadata '{}' is 0 at every layer, expected at least one attention layer",
                                    f.path(), key));
    if (c.n_head % heads != 0)
        throw FileError(fmt::format("{}: metadata '{}attention.head_count' {} is not a multiple of '{}' {}", f.path(),
                                    p, c.n_head, key, heads));
    c.n_head_kv = heads;
    if (std::find(kv.begin(), kv.end(), 0) == kv.end()) return;
    for (int64_t x : kv) c.short_conv_layers.push_back(x == 0);
}

// deepseek2's attention geometry as llama.cpp reads it (MLA; ModelConfig::kv_lora_rank): the query heads' size
// attention.key_length_mla and the value heads' attention.value_length_mla, the latent's attention.kv_lora_rank
// (attention.key_length and value_length, the cache's row and the latent, must agree with them), the query's
// low rank attention.q_lora_rank (0 or absent: a plain Wq). Files converted before llama.cpp split attn_kv_b into
// attn_k_b and attn_v_b have no *_mla keys: their key_length and value_length are the heads' sizes
// (ModelConfig::mla_fused_kv_b).
void read_deepseek2_heads(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.kv_lora_rank = required_int(f, p + "attention.kv_lora_rank", 1, 4096);
    c.q_lora_rank = optional_int(f, p + "attention.q_lora_rank", 0, 0, 1 << 16);
    c.mla_fused_kv_b = !f.find(p + "attention.key_length_mla");
    const std::string mla = c.mla_fused_kv_b ? "" : "_mla";  // (older files: the heads' sizes in the plain keys)
    c.head_dim = required_int(f, p + "attention.key_length" + mla, 2, 1024);
    c.head_dim_v = required_int(f, p + "attention.value_length" + mla, 1, 1024);
    const int64_t n_rot = optional_int(f, p + "rope.dimension_count", 0, 2, c.head_dim - 1);
    if (n_rot % 2 != 0)
        throw FileError(fmt::format("{}: metadata '{}rope.dimension_count' {} is odd, expected an even number",
                                    f.path(), p, n_rot));
    if (c.mla_fused_kv_b) return;
    const int64_t k_len = optional_int(f, p + "attention.key_length", c.kv_lora_rank + n_rot, 1, 1 << 16);
    const int64_t v_len = optional_int(f, p + "attention.value_length", c.kv_lora_rank, 1, 1 << 16);
    if (k_len != c.kv_lora_rank + n_rot || v_len != c.kv_lora_rank)
        throw FileError(fmt::format("{}: metadata '{}attention.key_length' {} and value_length {} are not "
                                    "kv_lora_rank + rope.dimension_count ({}) and kv_lora_rank ({}) (MLA)", f.path(), p,
                                    k_len, v_len, c.kv_lora_rank + n_rot, c.kv_lora_rank));
}

// deepseek2's routing, shared experts and attention scale as llama.cpp reads them: the first
// leading_dense_block_count layers dense (feed_forward_length), the others with expert_shared_count ungated shared
// experts of expert_feed_forward_length each beside the routed ones; the gating expert_gating_func (1 softmax, 2
// sigmoid; absent: softmax, but sigmoid for GLM-4.7-Flash's 47 or 48 layers of a 154,880-token vocabulary, as
// llama.cpp guesses), the chosen weights renormalized when expert_weights_norm and scaled by expert_weights_scale,
// the expert groups expert_group_count and expert_group_used_count. The scores are scaled by mscale^2 /
// sqrt(key_length_mla), with mscale = attn_factor (1 + 0.1 ln(1 / freq_scale)) (1 + 0.1 log_mul
// ln(1 / freq_scale)), log_mul = rope.scaling.yarn_log_multiplier / 0.1, and RoPE's cosines and sines by the
// attn_factor of llama.cpp's context (YaRN's mscale cancelled where the file gives log_mul). Mistral Large 3's files
// add Llama 4's attention temperature: attention.temperature_scale, over steps of attention.temperature_length
// positions (which llama.cpp reads without a default: a file with the one and not the other is refused).
void read_deepseek2(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.n_leading_dense = optional_int(f, p + "leading_dense_block_count", 0, 0, c.n_layer);
    c.n_expert_shared = required_int(f, p + "expert_shared_count", 0, 64);
    c.moe_shared_expert = c.n_expert_shared > 0;
    const float scale = optional_float(f, p + "expert_weights_scale", 0.0f, 0.0, 1e3);
    c.moe_weights_scale = scale == 0.0f ? 1.0f : scale;
    c.moe_norm_weights = f.find(p + "expert_weights_norm") && f.find(p + "expert_weights_norm")->as_bool();
    const int64_t gating = optional_int(f, p + "expert_gating_func", 0, 0, 2);
    const bool glm47_flash = (c.n_layer == 47 || c.n_layer == 48) && c.n_vocab == 154880;
    // (glm-dsa: sigmoid unless the file says)
    c.moe_gating_sigmoid = gating == 2 || (gating == 0 && (glm47_flash || c.file_arch == "glm-dsa"));
    read_expert_groups(f, p, c);
    c.n_ff_layers.assign(static_cast<size_t>(c.n_layer), c.n_expert_shared * c.n_ff_exp);
    std::fill_n(c.n_ff_layers.begin(), c.n_leading_dense, c.n_ff);
    c.n_ff = *std::max_element(c.n_ff_layers.begin(), c.n_ff_layers.end());
    c.yarn_log_mul = optional_float(f, p + "rope.scaling.yarn_log_multiplier", 0.0f, 0.0, 1e3);
    c.set_mla_scales(optional_float(f, p + "rope.scaling.attn_factor", 1.0f, 1e-6, 1e6));
    if (c.file_arch == "deepseek32" || c.file_arch == "glm-dsa") return;  // (llama.cpp's read no temperature)
    c.attn_temp_scale = optional_float(f, p + "attention.temperature_scale", 0.0f, 0.0, 1e3);
    if (c.attn_temp_scale != 0.0f) c.attn_temp_floor = required_int(f, p + "attention.temperature_length", 1, 1 << 30);
}

// deepseek32 (DeepSeek-V3.2) as llama.cpp reads it: deepseek2's layers with a low-rank query and the split attn_k_b
// and attn_v_b (its loader has no other form), expert_gating_func required, and DeepSeek Sparse Attention's lightning
// indexer: attention.indexer.head_count heads of attention.indexer.key_length, top_k positions kept. llama.cpp
// rotates the indexer's queries and keys by one Walsh-Hadamard matrix of key_length, which it builds for powers of
// two from 64 up: another key_length is refused. glm-dsa (GLM-5) as llama.cpp's reads it: the same with the
// gating optional (sigmoid), the indexer's RoPE on adjacent pairs, and (GLM-5.2) the layers with an indexer of their
// own in attention.indexer.types (one bool a layer, or one for all), by default every layer where context_length is
// under 2^20 (GLM-5, 5.1) and else GLM-5.2's pattern (layers 0 and 1, then every fourth from 2, of its 78); the
// first layer must have one.
void read_dsa(const GgufFile& f, const std::string& p, ModelConfig& c) {
    if (c.q_lora_rank == 0 || c.mla_fused_kv_b)
        throw FileError(fmt::format("{}: {} without '{}attention.q_lora_rank' or with a fused attn_kv_b (no "
                                    "'{}attention.key_length_mla') is not supported, as llama.cpp's loader requires "
                                    "both", f.path(), c.file_arch, p, p));
    const bool glm = c.file_arch == "glm-dsa";
    if (!glm) required_int(f, p + "expert_gating_func", 0, 2);
    if (glm) {
        c.indexer_neox = false;
        c.indexer_layers.assign(static_cast<size_t>(c.n_layer), 1);
        if (c.n_ctx_train >= (int64_t{1} << 20))
            for (int64_t l = 0; l < c.n_layer; ++l)
                c.indexer_layers[static_cast<size_t>(l)] = l < 2 || (l < 78 && (l - 2) % 4 == 0);
        const std::string key = p + "attention.indexer.types";
        const GgufValue* v = f.find(key);
        if (v && v->type() == GgufType::ARRAY && v->as_array().type() == GgufType::BOOL) {
            const GgufArray& a = v->as_array();
            if (static_cast<int64_t>(a.size()) != c.n_layer)
                throw FileError(fmt::format("{}: metadata '{}' has {} values, expected {} (one a layer)", f.path(), key,
                                            a.size(), c.n_layer));
            for (int64_t l = 0; l < c.n_layer; ++l)
                c.indexer_layers[static_cast<size_t>(l)] = a.at(static_cast<size_t>(l)).as_bool();
        } else if (v && v->type() == GgufType::ARRAY) {
            const std::vector<int64_t> t = layer_ints(f, key, c.n_layer, 0, 1);
            for (int64_t l = 0; l < c.n_layer; ++l) c.indexer_layers[static_cast<size_t>(l)] = t[l] != 0;
        } else if (v) {
            std::fill(c.indexer_layers.begin(), c.indexer_layers.end(), required_int(f, key, 0, 1) != 0);
        }
        if (!c.indexer_layers[0])
            throw FileError(fmt::format("{}: metadata '{}' leaves layer 0 without an indexer of its own (llama.cpp's "
                                        "later layers reuse an earlier one's choice)", f.path(), key));
    }
    c.indexer_n_head = required_int(f, p + "attention.indexer.head_count", 1, 1024);
    c.indexer_head_dim = required_int(f, p + "attention.indexer.key_length", 1, 1024);
    c.indexer_top_k = required_int(f, p + "attention.indexer.top_k", 1, int64_t{1} << 30);
    const int64_t d = c.indexer_head_dim;
    if (d < 64 || (d & (d - 1)) != 0 || d < c.n_rot)
        throw FileError(fmt::format("{}: metadata '{}attention.indexer.key_length' {} is not a power of two from 64 "
                                    "up and at least rope.dimension_count {} (the indexer's Hadamard rotation)",
                                    f.path(), p, d, c.n_rot));
}

// Llama 4 (Scout, Maverick) as llama.cpp's llama4 reads it: every interleave_moe_layer_step-th layer with experts
// (sigmoid of the chosen logit applied to the expert's input, an ungated shared expert of expert_feed_forward_length
// beside them), a dense FFN of feed_forward_length in the others; chunked attention over chunks of 8192 positions on
// the layers attention.sliding_window_pattern marks local (every fourth global unless it says), no RoPE on every
// fourth layer, whose queries take the temperature 1 + 0.1 log(floor((pos + 1) / 8192) + 1); Q and K of the RoPE
// layers divided by their rms after RoPE, but for the 128-expert Maverick. llama.cpp fixes the chunk, the temperature
// and the no-RoPE step whatever the file says; a file with attention.sliding_window 0 (MobileLLM-R1: no chunks), which
// llama.cpp's temperature input aborts on, and one whose chunked layers rotate with another base are refused.
void read_llama4(const GgufFile& f, const std::string& p, ModelConfig& c) {
    c.moe_layer_step = required_int(f, p + "interleave_moe_layer_step", 1, c.n_layer);
    c.moe_shared_expert = c.moe_gating_sigmoid = c.moe_weight_input = true;
    c.moe_norm_weights = false;
    c.n_ff_layers.resize(static_cast<size_t>(c.n_layer));
    for (int64_t l = 0; l < c.n_layer; ++l)
        c.n_ff_layers[static_cast<size_t>(l)] = c.layer_moe(l) ? c.n_ff_exp : c.n_ff;
    c.n_ff = std::max(c.n_ff, c.n_ff_exp);
    if (f.find(p + "attention.sliding_window") && optional_int(f, p + "attention.sliding_window", 0, 0, 1 << 30) == 0)
        throw FileError(fmt::format("{}: llama4 without chunked attention ('{}attention.sliding_window' 0: "
                                    "MobileLLM-R1) is not supported", f.path(), p));
    if (optional_float(f, p + "rope.freq_base_swa", c.rope_base, 1.0, 1e12) != c.rope_base)
        throw FileError(fmt::format("{}: metadata '{}rope.freq_base_swa' differs from rope.freq_base (a RoPE base of "
                                    "the chunked layers of their own is not supported for llama4)", f.path(), p));
    c.attn_chunk = 8192;
    c.attn_chunk_pattern = read_swa_pattern(f, p, 4, c.n_layer);
    c.no_rope_step = 4;
    c.attn_temp_scale = 0.1f;
    c.attn_temp_floor = 8192;
    c.attn_temp_offset = 1;
    c.attn_temp_nope_only = true;
    c.qk_l2_norm = c.n_expert != 128;
}

}  // namespace

bool ModelConfig::rope_pair_still(int64_t pair) const {
    const int64_t* s = rope_sections;
    const int64_t sum = s[0] + s[1] + s[2] + s[3];
    if (sum == 0) return false;
    const int64_t sector = pair % sum;
    if (rope_sections_interleaved)  // t, h, w in turn while each lasts, then the extra section
        return !(sector % 3 == 0 && sector < 3 * s[0]) && !(sector % 3 == 1 && sector < 3 * s[1]) &&
               !(sector % 3 == 2 && sector < 3 * s[2]);
    return sector >= s[0] + s[1] + s[2];  // t, h, w, extra one after the other
}

// (in float, as llama.cpp computes them)
void ModelConfig::set_mla_scales(float attn_factor) {
    const float log_mul = yarn_log_mul / 0.1f, ln = std::log(1.0f / rope_freq_scale);
    float yarn_attn = attn_factor;  // llama.cpp's cparams.yarn_attn_factor
    if (rope_yarn) {
        // (get_mscale(factor, m) / get_mscale(factor, log_mul) with the file's log_mul, m = log_mul for deepseek2's
        // own files and 1 for the others', as llama.cpp special-cases deepseek2; without it get_mscale(factor, 1))
        auto get_mscale = [&](float m) { return rope_freq_scale >= 1.0f ? 1.0f : 1.0f + 0.1f * m * ln; };
        const float m = gguf_arch() == "deepseek2" && log_mul != 1.0f ? log_mul : 1.0f;
        const float ratio = yarn_log_mul != 0.0f ? get_mscale(m) / get_mscale(log_mul) : get_mscale(1.0f);
        yarn_attn = ratio / (1.0f + 0.1f * ln) * attn_factor;
        rope_mscale = yarn_attn * (1.0f + 0.1f * ln);  // (ggml's YaRN RoPE multiplies its 1 + 0.1 ln(factor) back)
    } else {
        rope_mscale = yarn_attn;
    }
    const float mscale = yarn_attn * (1.0f + 0.1f * ln) * (1.0f + 0.1f * log_mul * ln);
    attn_scale = mscale * mscale / std::sqrt(static_cast<float>(head_dim));
}

double ModelConfig::yarn_ramp(int64_t i) const {
    if (!rope_yarn) return 0.0;
    // The pair whose wavelength fits `rotations` times in the original context: n_rot ln(n_ctx / (2 pi rotations))
    // / (2 ln base); pairs below the fast one keep their frequency, pairs above the slow one are scaled fully.
    auto corr_dim = [&](double rotations) {
        return static_cast<double>(n_rot) * std::log(static_cast<double>(yarn_n_ctx_orig) / (rotations * 2.0 * M_PI)) /
               (2.0 * std::log(static_cast<double>(rope_base)));
    };
    const double low = std::max(0.0, std::floor(corr_dim(yarn_beta_fast)));
    const double high = std::min(static_cast<double>(n_rot - 1), std::ceil(corr_dim(yarn_beta_slow)));
    const double y = (static_cast<double>(i) - low) / std::max(0.001, high - low);
    return 1.0 - std::clamp(y, 0.0, 1.0);
}

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
    ModelConfig c;
    auto arch = f.get_string("general.architecture");
    if (!arch) throw FileError(fmt::format("{}: missing metadata 'general.architecture'", f.path()));
    c.arch = *arch;
    if (!architecture_supported(c.arch))
        throw FileError(fmt::format("{}: architecture '{}' is not supported (supported: {})", f.path(), c.arch,
                                    supported_architectures()));
    const ArchVariant* variant = arch_variant(c.arch);
    if (variant) {
        c.file_arch = c.arch;
        c.arch = variant->arch;
    }
    const bool qwen35 = c.arch == "qwen35" || c.arch == "qwen35moe";
    if (c.arch == "qwen2" || c.arch == "qwen2moe" || c.arch == "qwen3" || c.arch == "qwen3moe" || qwen35 ||
        c.arch == "glm4moe" ||
        c.arch == "gemma" || c.arch == "gemma2" ||
        c.arch == "gemma3" || c.arch == "gemma3n" || c.arch == "gemma4" || c.arch == "phi3" || c.arch == "gpt-oss" ||
        c.arch == "olmo2" || c.arch == "exaone4" || c.arch == "seed_oss" || c.arch == "lfm2" || c.arch == "falcon-h1" ||
        (variant && variant->rope != ArchVariant::Rope::base))
        c.rope = Rope::neox;
    c.name = f.get_string("general.name").value_or(std::filesystem::path(f.path()).stem().string());
    const std::string p = c.gguf_arch() + ".";

    // (gemma4: where the file has experts)
    // qwen2moe, qwen35moe: a shared expert beside the routed ones
    const bool shared_expert = c.arch == "qwen2moe" || c.arch == "qwen35moe";
    // (granitehybrid: Granite 4.0 H Tiny and Small; granitemoe; nemotron_h; gemma4: where the file has experts)
    const bool granite_experts =
        c.arch == "granitehybrid" || c.file_arch == "granitemoe" || c.file_arch == "granite_swa";
    const bool experts_if_any = c.arch == "gemma4" || granite_experts || c.arch == "nemotron_h";
    // (glm4moe, lfm2moe: DeepSeek-V3-style routing, read_moe_routing; deepseek2: read_deepseek2)
    const bool routed = c.arch == "glm4moe" || c.file_arch == "lfm2moe" || c.file_arch == "minimax-m2";
    const bool ernie_moe = c.file_arch == "ernie4_5-moe";  // (read_ernie4_5_moe)
    // (bailingmoe2, dots1, afmoe: read_shared_expert_moe)
    const bool shared_moe = c.file_arch == "bailingmoe2" || c.file_arch == "dots1" || c.file_arch == "afmoe";
    const bool moe = c.arch == "qwen3moe" || c.arch == "gpt-oss" || shared_expert || routed || c.arch == "deepseek2" ||
                     ernie_moe || c.arch == "llama4" || c.file_arch == "cohere2moe" ||
                     (experts_if_any && f.get_int(p + "expert_count").value_or(0) > 0);
    // (hunyuan-dense: an expert_count of 1 is none, as llama.cpp reads it)
    if (auto experts = f.get_int(p + "expert_count");
        experts && *experts > (c.file_arch == "hunyuan-dense" ? 1 : 0) && !moe)
        throw FileError(fmt::format("{}: mixture-of-experts models ({} experts) of architecture '{}' are not supported "
                                    "(qwen2moe, qwen3moe, qwen35moe, gpt-oss, gemma4, granitehybrid, granitemoe, "
                                    "glm4moe, lfm2moe, deepseek2, llama4, minimax-m2, ernie4_5-moe, olmoe, "
                                    "nemotron_h_moe, bailingmoe2, dots1 and afmoe are)", f.path(), *experts, c.arch));

    constexpr int64_t kBig = int64_t{1} << 24;
    c.n_embd = required_int(f, p + "embedding_length", 1, kBig);
    c.n_layer = required_int(f, p + "block_count", 1, 4096);
    const int64_t n_block = c.n_layer;
    // qwen35, glm4moe, deepseek2 (GLM-4.7-Flash): the multi-token-prediction blocks at the end, which the forward
    // does not run (as llama.cpp by default)
    if (qwen35 || c.arch == "glm4moe" || c.arch == "deepseek2" || c.arch == "nemotron_h" ||
        c.file_arch == "bailingmoe2" || c.file_arch == "exaone-moe" || c.file_arch == "cohere2moe" ||
        c.file_arch == "step35") {
        c.n_layer_nextn = optional_int(f, p + "nextn_predict_layers", 0, 0, c.n_layer - 1);
        c.n_layer -= c.n_layer_nextn;
    }
    // (mamba2, mamba: no attention and no FFN; the file's head_count and feed_forward_length are 0, which llama.cpp
    // does not read: one placeholder head of 2 dims that no layer reads)
    const bool attention_free = c.arch == "mamba2" || c.arch == "mamba";
    if (c.arch == "nemotron_h" || attention_free) {  // (its widths a layer, 0 where a layer has no FFN: read_nemotron_h)
        c.n_ff = 0;
    } else if (const GgufValue* ff = f.find(p + "feed_forward_length"); ff && ff->type() == GgufType::ARRAY) {
        if (c.arch != "gemma4" && c.arch != "gemma3n")  // (gemma4 E2B: its shared-KV layers' FFN twice as wide)
            throw FileError(fmt::format("{}: metadata '{}feed_forward_length' is an array (a width a layer), which "
                                        "quill does not support for {}", f.path(), p, c.arch));
        c.n_ff_layers = layer_ints(f, p + "feed_forward_length", c.n_layer, 1, kBig);
        c.n_ff = *std::max_element(c.n_ff_layers.begin(), c.n_ff_layers.end());
    } else if (shared_expert && f.find(p + "expert_feed_forward_length") &&
               f.find(p + "expert_shared_feed_forward_length")) {  // (both widths given: n_ff unused, as llama.cpp)
        c.n_ff = optional_int(f, p + "feed_forward_length", 0, 0, kBig);
    } else {
        c.n_ff = required_int(f, p + "feed_forward_length", 1, kBig);
    }
    // (step35: head_count and head_count_kv a value a block, the first block's here, each kind's by read_step35)
    const bool head_arrays = c.file_arch == "step35" || c.file_arch == "laguna";
    auto first_int = [&](const std::string& key, int64_t fallback) {
        const GgufValue* v = f.find(key);
        if (!head_arrays || !v || v->type() != GgufType::ARRAY) return optional_int(f, key, fallback, 1, 4096);
        return layer_ints(f, key, n_block, 1, 4096)[0];
    };
    c.n_head = head_arrays ? first_int(p + "attention.head_count", 0)
                           : attention_free ? 1 : required_int(f, p + "attention.head_count", 1, 4096);
    if (c.n_head == 0) throw FileError(fmt::format("{}: missing metadata '{}attention.head_count'", f.path(), p));
    // (gemma4's, granitehybrid's and lfm2's may be an array, a value a layer: read_gemma4, read_granite_hybrid and
    // read_lfm2 read it)
    const GgufValue* kv_heads = f.find(p + "attention.head_count_kv");
    const bool kv_array = (c.arch == "gemma4" || c.arch == "granitehybrid" || c.arch == "lfm2" ||
                           c.arch == "nemotron_h") && kv_heads &&
                          kv_heads->type() == GgufType::ARRAY;
    c.n_head_kv = kv_array      ? c.n_head
                  : head_arrays ? first_int(p + "attention.head_count_kv", c.n_head)
                                : optional_int(f, p + "attention.head_count_kv", c.n_head, 1, c.n_head);
    if (c.n_head % c.n_head_kv != 0)
        throw FileError(fmt::format("{}: metadata '{}attention.head_count' {} is not a multiple of "
                                    "'{}attention.head_count_kv' {}", f.path(), p, c.n_head, p, c.n_head_kv));
    int64_t default_head_dim = attention_free ? 2 : c.n_embd % c.n_head == 0 ? c.n_embd / c.n_head : 0;
    if (c.arch == "deepseek2") read_deepseek2_heads(f, p, c);  // (its key_length is the cache's row)
    c.head_dim = c.mla() ? c.head_dim : optional_int(f, p + "attention.key_length", default_head_dim, 1, 512);
    if (c.head_dim == 0)
        throw FileError(fmt::format("{}: embedding_length {} is not a multiple of head_count {} and no "
                                    "attention.key_length is given", f.path(), c.n_embd, c.n_head));
    int64_t v_len = c.mla() ? c.head_dim : optional_int(f, p + "attention.value_length", c.head_dim, 1, 4096);
    if (v_len != c.head_dim)
        throw FileError(fmt::format("{}: metadata '{}attention.value_length' {} differs from the key length {} (not "
                                    "supported)", f.path(), p, v_len, c.head_dim));
    if (c.head_dim > 512)
        throw FileError(fmt::format("{}: head dimension {} is larger than 512 (not supported)", f.path(), c.head_dim));
    if (c.head_dim % 2 != 0)
        throw FileError(fmt::format("{}: the head dimension {} ('{}attention.key_length', else embedding_length / "
                                    "head_count) is odd, expected an even number", f.path(), c.head_dim, p));
    c.n_ctx_train = optional_int(f, p + "context_length", 2048, 1, int64_t{1} << 30);
    if (moe) {  // as llama.cpp reads them: the experts' width, else n_ff split over the used ones
        c.n_expert = required_int(f, p + "expert_count", 1, 4096);
        c.n_expert_used = required_int(f, p + "expert_used_count", 1, c.n_expert);
        // (granitehybrid's and granitemoe's experts are feed_forward_length wide, as llama.cpp reads them)
        c.n_ff_exp = granite_experts
                         ? c.n_ff
                         : optional_int(f, p + "expert_feed_forward_length", c.n_ff / c.n_expert_used, 1, kBig);
        if (c.n_ff_exp < 1)
            throw FileError(fmt::format("{}: no '{}expert_feed_forward_length' and feed_forward_length {} is less "
                                        "than expert_used_count {}", f.path(), p, c.n_ff, c.n_expert_used));
    }
    if (moe && granite_experts) {  // Granite's shared expert, ungated, where the file gives its width
        const int64_t shared = optional_int(f, p + "expert_shared_feed_forward_length", 0, 0, kBig);
        c.moe_shared_expert = shared > 0;
        if (shared > 0) c.n_ff = shared;
    }
    if (shared_expert) {  // the shared expert's width is n_ff from here on; its gate vector is required
        c.n_ff = optional_int(f, p + "expert_shared_feed_forward_length", c.n_ff, 1, kBig);
        c.moe_shared_expert = c.moe_shared_gate = true;
        c.moe_norm_weights = c.arch != "qwen2moe";  // (Qwen1.5-MoE's and Qwen2-MoE's norm_topk_prob false)
    }
    if (routed) read_moe_routing(f, p, c);
    if (ernie_moe) read_ernie4_5_moe(f, p, c);
    if (c.file_arch == "olmoe") {  // (as llama.cpp's olmoe: experts feed_forward_length wide, norm_w off)
        c.n_ff_exp = c.n_ff;
        c.qk_norm_whole = true;
        c.moe_norm_weights = false;
    }
    c.n_rot = optional_int(f, p + "rope.dimension_count", c.head_dim, 2, c.head_dim);
    if (c.n_rot % 2 != 0)
        throw FileError(fmt::format("{}: metadata '{}rope.dimension_count' {} is odd, expected an even number",
                                    f.path(), p, c.n_rot));
    // Required by llama.cpp's loader of every architecture quill supports (it has no default); Cohere's LayerNorm
    // reads attention.layer_norm_epsilon instead (nemotron_h: its layer_norm_epsilon, required, stands in)
    const bool cohere = c.arch == "command-r" || c.arch == "cohere2";
    // (cohere2moe: RMSNorm where the file gives its epsilon, read_cohere2moe)
    const bool layer_norm_eps =
        cohere && !(c.file_arch == "cohere2moe" && f.find(p + "attention.layer_norm_rms_epsilon"));
    if (c.arch == "nemotron_h")
        c.rms_eps = optional_float(f, p + "attention.layer_norm_rms_epsilon",
                                   required_float(f, p + "attention.layer_norm_epsilon", 0.0, 1.0), 0.0, 1.0);
    else
        c.rms_eps = required_float(
            f, p + (layer_norm_eps ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon"), 0.0, 1.0);
    c.rope_base = optional_float(f, p + "rope.freq_base", 10000.0f, 1.0, 1e12);
    // As llama.cpp reads them: no type is linear, and the factor is rope.scaling.factor, else rope.scale_linear.
    const std::string type = f.get_string(p + "rope.scaling.type").value_or("linear");
    if (type != "none" && type != "linear" && type != "yarn")
        throw FileError(fmt::format("{}: metadata '{}rope.scaling.type' is '{}', expected none, linear or yarn (the "
                                    "RoPE scalings quill supports)", f.path(), p, type));
    if (type != "none") {
        const std::string key = p + (f.find(p + "rope.scaling.factor") ? "rope.scaling.factor" : "rope.scale_linear");
        c.rope_freq_scale = 1.0f / optional_float(f, key, 1.0f, 1e-3, 1e3);
        c.rope_yarn = type == "yarn";
    }
    read_yarn(f, p, c);

    c.rope_base_local = c.rope_base;
    c.rope_freq_scale_local = c.rope_freq_scale;
    read_sliding_window(f, p, c);
    c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    if (c.arch == "gemma3") {
        // As Gemma 3 (and llama.cpp) define it: GeGLU, embeddings scaled by sqrt(n_embd), the local layers (see
        // read_sliding_window) with RoPE base 10,000 and no RoPE scaling, the global ones with the file's.
        c.ffn_act = Activation::gelu_tanh;
        c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
        c.rope_base_local = 10000.0f;
        c.rope_freq_scale_local = 1.0f;
        // Queries are scaled by query_pre_attn_scalar^-1/2, which the GGUF does not carry: head_dim for every size
        // but 27B (62 layers), where it is n_embd / n_head (Gemma's config; llama.cpp does the same).
        if (c.n_layer == 62) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
    }
    if (c.arch == "gemma4") read_gemma4(f, p, c);
    if (shared_moe) read_shared_expert_moe(f, p, c);  // (after the RoPE and the window: afmoe's local layers)
    if (c.file_arch == "exaone-moe") read_exaone_moe(f, p, c);
    if (c.file_arch == "step35") read_step35(f, p, n_block, c);
    if (c.file_arch == "laguna") read_laguna(f, p, c);
    if (qwen35) read_qwen35(f, p, n_block, c);
    if (variant && (variant->rope == ArchVariant::Rope::mrope || variant->rope == ArchVariant::Rope::imrope))
        read_rope_sections(f, p, variant->rope == ArchVariant::Rope::imrope, c);  // (deepstack: nothing for text)
    if (c.arch == "lfm2") read_lfm2(f, p, c);
    if (c.arch == "smollm3") c.no_rope_step = 4;  // SmolLM3's every fourth layer; its files do not say it
    if (c.arch == "llama4") read_llama4(f, p, c);
    if (c.arch == "glm4") read_glm4(f, p, c);
    if (c.arch == "ernie4_5")  // (PaddleOCR's M-RoPE files)
        refuse_if_set(f, p, "rope.dimension_sections", "multimodal RoPE (M-RoPE)", c.arch);
    if (cohere) read_cohere(f, p, c);
    if (c.file_arch == "cohere2moe") read_cohere2moe(f, p, c);
    if (c.arch == "granite") read_granite(f, p, c);
    if (c.file_arch == "granite_swa") read_granite_swa(f, p, c);
    const bool hunyuan = c.file_arch == "hunyuan-dense" || c.file_arch == "hunyuan-moe";
    if (hunyuan) read_hunyuan(f, p, c);
    if (c.file_arch == "arcee") c.ffn_act = Activation::relu_sqr;
    if (c.file_arch == "apertus") read_apertus(f, c);
    if (c.arch == "granitehybrid") read_granite_hybrid(f, p, c);
    if (c.arch == "nemotron_h") read_nemotron_h(f, p, n_block, c);
    if (c.arch == "falcon-h1") read_falcon_h1(f, p, c);
    if (c.arch == "mamba2") read_mamba2(f, p, c);
    if (c.arch == "mamba") read_mamba(f, p, c);
    if (c.arch == "olmo2" || c.arch == "exaone4") c.input_norms = false;
    if (c.arch == "olmo2") {
        // OLMo 3's local layers (see read_sliding_window) rotate with rope.freq_base and no scaling, as llama.cpp's
        // olmo2 rotates them (it reads rope.freq_base_swa but does not use it); the global ones with the file's YaRN.
        c.qk_norm_whole = true;
        c.rope_freq_scale_local = 1.0f;
        c.rope_local_plain = c.sliding_window > 0;
    }
    if (c.arch == "exaone4") {
        // With sliding-window layers the global ones have no RoPE (l % N == N - 1: (l + 1) % N == 0); the local ones
        // rotate with rope.freq_base_swa when the file has it. NextN prediction layers are refused by name.
        c.no_rope_step = c.sliding_window > 0 ? c.swa_pattern : 0;
        c.rope_base_local = optional_float(f, p + "rope.freq_base_swa", c.rope_base, 1.0, 1e12);
        refuse_if_set(f, p, "nextn_predict_layers", "NextN prediction layers", c.arch);
    }
    if (c.arch == "gpt-oss") {
        // As llama.cpp's gpt-oss (LLM_ARCH_OPENAI_MOE): the local layers (see read_sliding_window) with
        // rope.freq_base_swa when the file has it; queries scaled by 1 / sqrt(n_rot); the experts' clamped SwiGLU.
        c.rope_base_local = optional_float(f, p + "rope.freq_base_swa", c.rope_base, 1.0, 1e12);
        c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_rot));
        c.ffn_act = Activation::swiglu_oai;
    }
    if (c.arch == "mistral3") {
        c.attn_temp_scale = optional_float(f, p + "attention.temperature_scale", 0.0f, 0.0, 1e3);
        c.attn_temp_floor = c.yarn_n_ctx_orig;
    }
    if (c.arch == "gemma") {  // As Gemma (1) and llama.cpp define it: GeGLU, embeddings scaled by sqrt(n_embd)
        c.ffn_act = Activation::gelu_tanh;
        c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
    }
    if (c.arch == "gemma2") {
        // As Gemma 2 (and llama.cpp) define it: gemma3's GeGLU and embedding scale, the local layers (see
        // read_sliding_window) with rope.freq_base_swa when the file has it; attention scores and logits soft-capped
        // (50 and 30 unless the file says).
        c.ffn_act = Activation::gelu_tanh;
        c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
        c.rope_base_local = optional_float(f, p + "rope.freq_base_swa", c.rope_base, 1.0, 1e12);
        c.attn_logit_softcap = optional_float(f, p + "attn_logit_softcapping", 50.0f, 0.0, 1e6);
        // query_pre_attn_scalar, which the GGUF does not carry: head_dim, but n_embd / n_head for 27B (46 layers)
        if (c.n_layer == 46) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
    }
    // A file that states the scale itself wins (but gemma4's is 1 whatever the file says, as llama.cpp sets it).
    // (nemotron_h, falcon-h1, hunyuan: 1 / sqrt(head_dim) whatever the file says, as llama.cpp's do not read it)
    if (c.arch != "gemma4" && c.arch != "gemma3n" && c.arch != "nemotron_h" && c.arch != "falcon-h1" && !hunyuan)
        c.attn_scale = optional_float(f, p + "attention.scale", c.attn_scale, 1e-6, 1e3);
    if (c.arch != "gemma2" && f.find(p + "attn_logit_softcapping"))
        throw FileError(fmt::format("{}: attention logit soft-capping ({}attn_logit_softcapping) is supported for "
                                    "gemma2 only", f.path(), p));
    c.final_logit_softcap =
        optional_float(f, p + "final_logit_softcapping", c.arch == "gemma2" ? 30.0f : 0.0f, 0.0, 1e6);

    if (c.arch == "gemma3n") read_gemma3n(f, p, c);  // (after the soft-cap and scale: llama.cpp fixes both)

    // The vocabulary size: the model's own key, else the embedding matrix's rows.
    if (const GgufTensorInfo* emb = f.find_tensor("token_embd.weight"); emb && emb->ne.size() == 2) {
        c.n_vocab = emb->ne[1];
    } else if (const GgufArray* tokens = f.get_array("tokenizer.ggml.tokens", GgufType::STRING)) {
        c.n_vocab = static_cast<int64_t>(tokens->size());
    }
    c.n_vocab = optional_int(f, p + "vocab_size", c.n_vocab, 1, int64_t{1} << 31);
    if (c.n_vocab <= 0) throw FileError(fmt::format("{}: the vocabulary size is unknown", f.path()));
    if (c.arch == "deepseek2") read_deepseek2(f, p, c);  // (after the vocabulary: GLM-4.7-Flash's gating guess)
    if (c.file_arch == "deepseek32" || c.file_arch == "glm-dsa") read_dsa(f, p, c);
    return c;
}

}  // namespace quill
