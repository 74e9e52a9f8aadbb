#include "tests/support/random_model.h"

#include "engine/error.h"
#include "engine/format/quant_random.h"
#include "engine/rng.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_vocab.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

namespace quill::test {

namespace {

std::vector<uint8_t> quantized(GgmlType type, const std::vector<float>& x) {
    std::vector<uint8_t> out(row_size(type, static_cast<int64_t>(x.size())));
    quantize_row(type, x.data(), out.data(), static_cast<int64_t>(x.size()));
    return out;
}

}  // namespace

std::vector<uint8_t> make_tiny_gguf(const TinySpec& spec) {
    TinySpec s = spec;
    TinyVocab vocab;
    if (s.vocab == "spm" || s.vocab == "spm-chatml") vocab = tiny_spm_vocab(s.vocab == "spm-chatml");
    else if (s.vocab == "bpe-chatml") vocab = tiny_bpe_vocab();
    else QUILL_CHECK(s.vocab.empty(), "unknown tiny vocabulary '{}'", s.vocab);
    for (const std::string& piece : s.control_tokens) {
        QUILL_CHECK(!vocab.pieces.empty(), "control tokens need a tiny vocabulary");
        vocab.pieces.push_back(piece);
        vocab.types.push_back(3);
        if (!vocab.scores.empty()) vocab.scores.push_back(0.0f);
    }
    if (!vocab.pieces.empty()) s.n_vocab = vocab.size();
    Rng rng(s.seed);
    auto uniform = [&](float scale) { return static_cast<float>((rng.uniform() * 2.0 - 1.0) * scale); };
    const int64_t head_dim = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
    GgufWriter w;
    const std::string a = s.arch + ".";
    w.set("general.architecture", s.arch);
    w.set("general.name", "tiny-random");
    w.set(a + "context_length", uint32_t(s.n_ctx_train));
    w.set(a + "embedding_length", uint32_t(s.n_embd));
    w.set(a + "block_count", uint32_t(s.n_layer));
    w.set(a + "feed_forward_length", uint32_t(s.n_ff));
    w.set(a + "attention.head_count", uint32_t(s.n_head));
    w.set(a + "attention.head_count_kv", uint32_t(s.n_head_kv));
    w.set(a + "rope.dimension_count", uint32_t(head_dim));
    w.set(a + "rope.freq_base", s.rope_base);
    w.set(a + "attention.layer_norm_rms_epsilon", 1e-5f);
    if (s.head_dim > 0) {
        w.set(a + "attention.key_length", uint32_t(s.head_dim));
        w.set(a + "attention.value_length", uint32_t(s.head_dim));
    }
    if (s.sliding_window > 0) w.set(a + "attention.sliding_window", uint32_t(s.sliding_window));
    if (s.final_logit_softcap > 0.0f) w.set(a + "final_logit_softcapping", s.final_logit_softcap);
    if (s.rope_linear_factor > 0.0f) {
        w.set(a + "rope.scaling.type", "linear");
        w.set(a + "rope.scaling.factor", s.rope_linear_factor);
    }
    if (!vocab.pieces.empty()) vocab.write(w);
    if (!s.chat_template.empty()) w.set("tokenizer.chat_template", s.chat_template);

    // A matrix of n_out rows of n_in, entries uniform with the variance that keeps activations O(1); the rows
    // where `zero_row` says so are zeros (drawn all the same, so the other weights do not change).
    auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out, GgmlType type, float scale,
                      const std::vector<bool>& zero_row = {}) {
        std::vector<float> x(n_in * n_out);
        for (auto& v : x) v = uniform(scale);
        for (size_t r = 0; r < zero_row.size(); ++r)
            if (zero_row[r]) std::fill_n(x.begin() + static_cast<int64_t>(r) * n_in, n_in, 0.0f);
        if (!type_traits(type).can_quantize) {  // random blocks of the same magnitude (all-zero bytes are zeros)
            std::vector<uint8_t> bytes(row_size(type, n_in) * static_cast<size_t>(n_out));
            random_blocks(type, rng.next(), n_in * n_out / type_traits(type).block_size, scale, bytes.data());
            for (size_t r = 0; r < zero_row.size(); ++r)
                if (zero_row[r]) std::fill_n(bytes.begin() + static_cast<int64_t>(r * row_size(type, n_in)),
                                             row_size(type, n_in), uint8_t{0});
            w.add_tensor(name, type, {n_in, n_out}, std::move(bytes));
            return;
        }
        w.add_tensor(name, type, {n_in, n_out}, quantized(type, x));
    };
    auto vec = [&](const std::string& name, int64_t n, float lo, float hi) {
        std::vector<float> x(n);
        for (auto& v : x) v = lo + static_cast<float>(rng.uniform()) * (hi - lo);
        w.add_tensor(name, GgmlType::F32, {n}, quantized(GgmlType::F32, x));
    };
    const float in_scale = std::sqrt(3.0f / static_cast<float>(s.n_embd));
    matrix("token_embd.weight", s.n_embd, s.n_vocab, s.type, 1.0f);
    vec("output_norm.weight", s.n_embd, 0.5f, 1.5f);
    std::vector<bool> silent;  // byte, control, unknown tokens: a zero row gives logit 0, far below the words' best
    for (int32_t t : vocab.types) silent.push_back(t != 1);
    if (!s.tied_output) matrix("output.weight", s.n_embd, s.n_vocab, s.type, in_scale * 4, silent);
    for (int64_t l = 0; l < s.n_layer; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        vec(b + "attn_norm.weight", s.n_embd, 0.5f, 1.5f);
        matrix(b + "attn_q.weight", s.n_embd, s.n_head * head_dim, s.type, in_scale);
        matrix(b + "attn_k.weight", s.n_embd, s.n_head_kv * head_dim, s.type, in_scale);
        matrix(b + "attn_v.weight", s.n_embd, s.n_head_kv * head_dim, s.type, in_scale);
        matrix(b + "attn_output.weight", s.n_head * head_dim, s.n_embd, s.type, in_scale);
        vec(b + "ffn_norm.weight", s.n_embd, 0.5f, 1.5f);
        matrix(b + "ffn_gate.weight", s.n_embd, s.n_ff, s.type, in_scale);
        matrix(b + "ffn_up.weight", s.n_embd, s.n_ff, s.type, in_scale);
        matrix(b + "ffn_down.weight", s.n_ff, s.n_embd, s.ffn_down_type, std::sqrt(3.0f / static_cast<float>(s.n_ff)));
        if (s.arch == "gemma3") {
            vec(b + "attn_q_norm.weight", head_dim, 0.5f, 1.5f);
            vec(b + "attn_k_norm.weight", head_dim, 0.5f, 1.5f);
            vec(b + "post_attention_norm.weight", s.n_embd, 0.5f, 1.5f);
            vec(b + "post_ffw_norm.weight", s.n_embd, 0.5f, 1.5f);
        }
        if (s.biases) {
            vec(b + "attn_q.bias", s.n_head * head_dim, -0.5f, 0.5f);
            vec(b + "attn_k.bias", s.n_head_kv * head_dim, -0.5f, 0.5f);
            vec(b + "attn_v.bias", s.n_head_kv * head_dim, -0.5f, 0.5f);
            if (s.arch == "llama") vec(b + "attn_output.bias", s.n_embd, -0.5f, 0.5f);
        }
    }
    // Last, so the other weights are the same with and without it.
    if (s.rope_freqs && s.rope_freqs_value > 0.0f)
        vec("rope_freqs.weight", head_dim / 2, s.rope_freqs_value, s.rope_freqs_value);
    else if (s.rope_freqs)
        vec("rope_freqs.weight", head_dim / 2, 1.0f, 8.0f);
    return w.to_bytes();
}

std::unique_ptr<Model> make_tiny_model(const TinySpec& spec) {
    std::vector<uint8_t> bytes = make_tiny_gguf(spec);
    GgufFile file = GgufFile::parse("tiny-random.gguf", bytes);
    ModelConfig config = ModelConfig::from_gguf(file);
    Weights weights = Weights::from_gguf(file, config);
    return std::unique_ptr<Model>(new Model{std::move(file), std::move(config), std::move(weights)});
}

TinySpec tiny_model_spec(TinyModel which) {
    TinySpec s;
    s.n_embd = 64;
    s.n_layer = 5;
    s.n_head = 8;
    s.n_head_kv = 4;
    s.n_ff = 192;
    s.n_ctx_train = 2048;
    s.vocab = which == TinyModel::bpe_chat ? "bpe-chatml" : which == TinyModel::spm_chat ? "spm-chatml" : "spm";
    if (which == TinyModel::spm_q8_0) {
        s.type = GgmlType::Q8_0;
        s.ffn_down_type = GgmlType::F16;
    }
    if (which == TinyModel::spm_chat || which == TinyModel::bpe_chat) s.chat_template = kTinyChatTemplate;
    return s;
}

namespace {

// The files of one test process, removed with their directory when it exits.
class TinyModelFiles {
public:
    ~TinyModelFiles() {
        std::error_code ignored;
        if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
    }
    const std::filesystem::path& get(TinyModel which) {
        auto at = files_.find(which);
        if (at != files_.end()) return at->second;
        if (dir_.empty()) dir_ = temp_dir("tiny-models");
        static const char* const names[] = {"tiny-spm.gguf", "tiny-spm-q8_0.gguf", "tiny-spm-chat.gguf",
                                            "tiny-bpe-chat.gguf"};
        const std::filesystem::path path = dir_ / names[static_cast<int>(which)];
        const std::vector<uint8_t> bytes = make_tiny_gguf(tiny_model_spec(which));
        std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                    static_cast<std::streamsize>(bytes.size()));
        return files_.emplace(which, path).first->second;
    }

private:
    std::filesystem::path dir_;
    std::map<TinyModel, std::filesystem::path> files_;
};

}  // namespace

const std::filesystem::path& tiny_model_file(TinyModel which) {
    static TinyModelFiles files;
    return files.get(which);
}

}  // namespace quill::test
