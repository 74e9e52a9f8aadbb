#include "engine/model/model_config.h"

#include "engine/error.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace quill {

bool architecture_supported(const std::string& arch) {
    return arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "qwen3moe" || arch == "gemma2" ||
           arch == "gemma3" || arch == "phi3" || arch == "smollm3" || arch == "mistral3" || arch == "gpt-oss";
}

std::string supported_architectures() {
    return "llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3, smollm3, mistral3, gpt-oss";
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

float optional_float(const GgufFile& f, const std::string& key, float fallback, double lo, double hi) {
    auto v = f.get_float(key);
    if (!v) return fallback;
    if (!(*v >= lo && *v <= hi))
        throw FileError(fmt::format("{}: metadata '{}' is {}, expected {}..{}", f.path(), key, *v, lo, hi));
    return static_cast<float>(*v);
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

}  // namespace

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
    if (c.arch == "qwen2" || c.arch == "qwen3" || c.arch == "qwen3moe" || c.arch == "gemma2" || c.arch == "gemma3" ||
        c.arch == "phi3" || c.arch == "gpt-oss")
        c.rope = Rope::neox;
    c.name = f.get_string("general.name").value_or(std::filesystem::path(f.path()).stem().string());
    const std::string p = c.arch + ".";

    const bool moe = c.arch == "qwen3moe" || c.arch == "gpt-oss";
    if (auto experts = f.get_int(p + "expert_count"); experts && *experts > 0 && !moe)
        throw FileError(fmt::format("{}: mixture-of-experts models ({} experts) of architecture '{}' are not supported "
                                    "(qwen3moe and gpt-oss are)", f.path(), *experts, c.arch));

    constexpr int64_t kBig = int64_t{1} << 24;
    c.n_embd = required_int(f, p + "embedding_length", 1, kBig);
    c.n_layer = required_int(f, p + "block_count", 1, 4096);
    c.n_ff = required_int(f, p + "feed_forward_length", 1, kBig);
    c.n_head = required_int(f, p + "attention.head_count", 1, 4096);
    c.n_head_kv = optional_int(f, p + "attention.head_count_kv", c.n_head, 1, c.n_head);
    if (c.n_head % c.n_head_kv != 0)
        throw FileError(fmt::format("{}: head_count {} is not a multiple of head_count_kv {}", f.path(), c.n_head,
                                    c.n_head_kv));
    int64_t default_head_dim = c.n_embd % c.n_head == 0 ? c.n_embd / c.n_head : 0;
    c.head_dim = optional_int(f, p + "attention.key_length", default_head_dim, 1, 512);
    if (c.head_dim == 0)
        throw FileError(fmt::format("{}: embedding_length {} is not a multiple of head_count {} and no "
                                    "attention.key_length is given", f.path(), c.n_embd, c.n_head));
    int64_t v_len = optional_int(f, p + "attention.value_length", c.head_dim, 1, 4096);
    if (v_len != c.head_dim)
        throw FileError(fmt::format("{}: attention.value_length {} differs from key_length {} (not supported)",
                                    f.path(), v_len, c.head_dim));
    if (c.head_dim > 512)
        throw FileError(fmt::format("{}: head dimension {} is larger than 512 (not supported)", f.path(), c.head_dim));
    if (c.head_dim % 2 != 0) throw FileError(fmt::format("{}: head dimension {} is odd", f.path(), c.head_dim));
    c.n_ctx_train = optional_int(f, p + "context_length", 2048, 1, int64_t{1} << 30);
    if (moe) {  // as llama.cpp reads them: the experts' width, else n_ff split over the used ones
        c.n_expert = required_int(f, p + "expert_count", 1, 4096);
        c.n_expert_used = required_int(f, p + "expert_used_count", 1, c.n_expert);
        c.n_ff_exp = optional_int(f, p + "expert_feed_forward_length", c.n_ff / c.n_expert_used, 1, kBig);
        if (c.n_ff_exp < 1)
            throw FileError(fmt::format("{}: no '{}expert_feed_forward_length' and feed_forward_length {} is less "
                                        "than expert_used_count {}", f.path(), p, c.n_ff, c.n_expert_used));
    }
    c.n_rot = optional_int(f, p + "rope.dimension_count", c.head_dim, 2, c.head_dim);
    if (c.n_rot % 2 != 0) throw FileError(fmt::format("{}: rope.dimension_count {} is odd", f.path(), c.n_rot));
    c.rms_eps = optional_float(f, p + "attention.layer_norm_rms_epsilon", 1e-5f, 0.0, 1.0);
    c.rope_base = optional_float(f, p + "rope.freq_base", 10000.0f, 1.0, 1e12);
    if (auto type = f.get_string(p + "rope.scaling.type"); type && *type != "none") {
        if (*type != "linear" && *type != "yarn")
            throw FileError(fmt::format("{}: rope.scaling.type '{}' is not supported (none, linear, yarn are)",
                                        f.path(), *type));
        float factor = optional_float(f, p + "rope.scaling.factor", 1.0f, 1e-3, 1e3);
        c.rope_freq_scale = 1.0f / factor;
        c.rope_yarn = *type == "yarn";
    } else if (f.find(p + "rope.scale_linear")) {
        c.rope_freq_scale = 1.0f / optional_float(f, p + "rope.scale_linear", 1.0f, 1e-3, 1e3);
    }
    read_yarn(f, p, c);

    c.rope_base_local = c.rope_base;
    c.rope_freq_scale_local = c.rope_freq_scale;
    c.sliding_window = optional_int(f, p + "attention.sliding_window", 0, 0, int64_t{1} << 30);
    c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    if (c.arch == "gemma3") {
        // As Gemma 3 (and llama.cpp) define it: GeGLU, embeddings scaled by sqrt(n_embd), every sixth layer global
        // with the file's RoPE base, the others local over the window with base 10,000 and no RoPE scaling.
        c.ffn_act = Activation::gelu_tanh;
        c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
        c.swa_pattern = 6;
        c.rope_base_local = 10000.0f;
        c.rope_freq_scale_local = 1.0f;
        // Queries are scaled by query_pre_attn_scalar^-1/2, which the GGUF does not carry: head_dim for every size
        // but 27B (62 layers), where it is n_embd / n_head (Gemma's config; llama.cpp does the same).
        if (c.n_layer == 62) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
    }
    if (c.arch == "smollm3") c.no_rope_step = 4;  // SmolLM3's every fourth layer; its files do not say it
    if (c.arch == "gpt-oss") {
        // As llama.cpp's gpt-oss (LLM_ARCH_OPENAI_MOE): every second layer global (unless the file gives
        // attention.sliding_window_pattern), the others local over the file's window, with rope.freq_base_swa when
        // the file has it; queries scaled by 1 / sqrt(n_rot); the experts' clamped SwiGLU.
        c.sliding_window = required_int(f, p + "attention.sliding_window", 1, int64_t{1} << 30);
        c.swa_pattern = optional_int(f, p + "attention.sliding_window_pattern", 2, 0, 4096);
        c.rope_base_local = optional_float(f, p + "rope.freq_base_swa", c.rope_base, 1.0, 1e12);
        c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_rot));
        c.ffn_act = Activation::swiglu_oai;
    }
    if (c.arch == "mistral3") {
        c.attn_temp_scale = optional_float(f, p + "attention.temperature_scale", 0.0f, 0.0, 1e3);
        c.attn_temp_floor = c.yarn_n_ctx_orig;
    }
    if (c.arch == "gemma2") {
        // As Gemma 2 (and llama.cpp) define it: gemma3's GeGLU and embedding scale, every second layer global, the
        // others local over the window (4096 unless the file says), with rope.freq_base_swa when the file has it;
        // attention scores and logits soft-capped (50 and 30 unless the file says).
        c.ffn_act = Activation::gelu_tanh;
        c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
        c.sliding_window = optional_int(f, p + "attention.sliding_window", 4096, 1, int64_t{1} << 30);
        c.swa_pattern = 2;
        c.rope_base_local = optional_float(f, p + "rope.freq_base_swa", c.rope_base, 1.0, 1e12);
        c.attn_logit_softcap = optional_float(f, p + "attn_logit_softcapping", 50.0f, 0.0, 1e6);
        // query_pre_attn_scalar, which the GGUF does not carry: head_dim, but n_embd / n_head for 27B (46 layers)
        if (c.n_layer == 46) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head));
    }
    // llama.cpp turns Phi-3's sliding window off (its converted files' window and pattern disagree with the
    // model's): the same here, so that quill and llama.cpp give the same logits.
    if (c.arch == "phi3") c.sliding_window = 0;
    // A file that states the scale itself wins.
    c.attn_scale = optional_float(f, p + "attention.scale", c.attn_scale, 1e-6, 1e3);
    if (c.arch != "gemma2" && f.find(p + "attn_logit_softcapping"))
        throw FileError(fmt::format("{}: attention logit soft-capping ({}attn_logit_softcapping) is supported for "
                                    "gemma2 only", f.path(), p));
    c.final_logit_softcap =
        optional_float(f, p + "final_logit_softcapping", c.arch == "gemma2" ? 30.0f : 0.0f, 0.0, 1e6);

    // The vocabulary size: the model's own key, else the embedding matrix's rows.
    if (const GgufTensorInfo* emb = f.find_tensor("token_embd.weight"); emb && emb->ne.size() == 2) {
        c.n_vocab = emb->ne[1];
    } else if (const GgufArray* tokens = f.get_array("tokenizer.ggml.tokens", GgufType::STRING)) {
        c.n_vocab = static_cast<int64_t>(tokens->size());
    }
    c.n_vocab = optional_int(f, p + "vocab_size", c.n_vocab, 1, int64_t{1} << 31);
    if (c.n_vocab <= 0) throw FileError(fmt::format("{}: the vocabulary size is unknown", f.path()));
    return c;
}

}  // namespace quill
