#include "engine/model/synthetic.h"

#include "engine/error.h"
#include "engine/rng.h"

#include <cmath>
#include <cstring>

namespace quill {

namespace {

struct Preset {
    const char* name;
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    float rope_base;
};

constexpr Preset kPresets[] = {
    {"stories15m", 288, 6, 6, 6, 768, 32000, 256, 10000.0f},
    {"stories110m", 768, 12, 12, 12, 2048, 32000, 1024, 10000.0f},
    {"smollm2-135m", 576, 30, 9, 3, 1536, 49152, 8192, 100000.0f},
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f},
    {"llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f},
    {"llama3-8b", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f},
};

// A pool of valid blocks made by quantizing random floats once; tensors are filled by copying pool blocks in a
// random order, which is as fast as memcpy and gives data with the statistics of real quantized weights.
class BlockPool {
public:
    BlockPool(GgmlType type, Rng& rng) : block_bytes_(type_traits(type).type_size) {
        const int64_t bs = type_traits(type).block_size;
        const int64_t n = kBlocks * bs;
        std::vector<float> x(n);
        for (auto& v : x) v = static_cast<float>((rng.uniform() * 2.0 - 1.0) * 0.05);
        bytes_.resize(kBlocks * block_bytes_);
        quantize_row(type, x.data(), bytes_.data(), n);
    }
    void fill(uint8_t* dst, size_t n_blocks, Rng& rng) const {
        for (size_t i = 0; i < n_blocks;) {
            size_t start = rng.next() % kBlocks, run = std::min<size_t>(kBlocks - start, n_blocks - i);
            run = std::min<size_t>(run, 64);
            std::memcpy(dst + i * block_bytes_, bytes_.data() + start * block_bytes_, run * block_bytes_);
            i += run;
        }
    }

private:
    static constexpr size_t kBlocks = 4096;
    size_t block_bytes_;
    std::vector<uint8_t> bytes_;
};

}  // namespace

std::vector<std::string> synthetic_shape_names() {
    std::vector<std::string> names;
    for (const auto& p : kPresets) names.emplace_back(p.name);
    return names;
}

ModelConfig synthetic_config(const std::string& shape) {
    for (const auto& p : kPresets) {
        if (shape != p.name) continue;
        ModelConfig c;
        c.arch = "llama";
        c.name = std::string("synthetic-") + p.name;
        c.n_vocab = p.n_vocab;
        c.n_embd = p.n_embd;
        c.n_layer = p.n_layer;
        c.n_head = p.n_head;
        c.n_head_kv = p.n_head_kv;
        c.head_dim = p.n_embd / p.n_head;
        c.n_ff = p.n_ff;
        c.n_ctx_train = p.n_ctx;
        c.n_rot = c.head_dim;
        c.rms_eps = 1e-5f;
        c.rope_base = p.rope_base;
        return c;
    }
    std::string known;
    for (const auto& n : synthetic_shape_names()) known += (known.empty() ? "" : ", ") + n;
    throw UsageError(fmt::format("unknown --synthetic shape '{}' (known: {})", shape, known));
}

std::unique_ptr<SyntheticModel> SyntheticModel::make(const ModelConfig& c, GgmlType type, uint64_t seed) {
    if (!type_traits(type).can_quantize)
        throw UsageError(fmt::format("--dtype {}: quill cannot make weights of this type", type_name(type)));
    auto m = std::make_unique<SyntheticModel>();
    m->config = c;
    m->type = type;
    Rng rng(seed);
    BlockPool pool(type, rng);
    auto matrix = [&](const std::string& name, int64_t n_in, int64_t n_out) {
        if (n_in % type_traits(type).block_size != 0)
            throw UsageError(fmt::format("--dtype {}: row length {} is not a multiple of its block size {}",
                                         type_name(type), n_in, type_traits(type).block_size));
        TensorView t;
        t.name = name;
        t.type = type;
        t.ne = {n_in, n_out, 1, 1};
        t.n_bytes = row_size(type, n_in) * n_out;
        m->buffers.emplace_back(t.n_bytes);
        pool.fill(m->buffers.back().data(), t.n_bytes / type_traits(type).type_size, rng);
        t.data = m->buffers.back().data();
        return t;
    };
    auto norm = [&]() {
        std::vector<float> w(c.n_embd);
        for (auto& v : w) v = static_cast<float>(0.8 + 0.4 * rng.uniform());
        return w;
    };
    m->weights.tok_embd = matrix("token_embd.weight", c.n_embd, c.n_vocab);
    m->weights.output_norm = norm();
    m->weights.output = matrix("output.weight", c.n_embd, c.n_vocab);
    for (int64_t i = 0; i < c.n_layer; ++i) {
        const std::string b = fmt::format("blk.{}.", i);
        LayerWeights L;
        L.attn_norm = norm();
        L.wq = matrix(b + "attn_q.weight", c.n_embd, c.n_embd_q());
        L.wk = matrix(b + "attn_k.weight", c.n_embd, c.n_embd_kv());
        L.wv = matrix(b + "attn_v.weight", c.n_embd, c.n_embd_kv());
        L.wo = matrix(b + "attn_output.weight", c.n_embd_q(), c.n_embd);
        L.ffn_norm = norm();
        L.ffn_gate = matrix(b + "ffn_gate.weight", c.n_embd, c.n_ff);
        L.ffn_up = matrix(b + "ffn_up.weight", c.n_embd, c.n_ff);
        L.ffn_down = matrix(b + "ffn_down.weight", c.n_ff, c.n_embd);
        m->weights.layers.push_back(std::move(L));
    }
    return m;
}

size_t SyntheticModel::weight_bytes() const {
    size_t n = 0;
    for (const auto& b : buffers) n += b.size();
    return n;
}

void SyntheticModel::save(const std::string& path) const {
    const ModelConfig& c = config;
    GgufWriter w;
    w.set("general.architecture", "llama");
    w.set("general.name", c.name);
    w.set("general.alignment", uint32_t(32));
    w.set("llama.context_length", uint32_t(c.n_ctx_train));
    w.set("llama.embedding_length", uint32_t(c.n_embd));
    w.set("llama.block_count", uint32_t(c.n_layer));
    w.set("llama.feed_forward_length", uint32_t(c.n_ff));
    w.set("llama.attention.head_count", uint32_t(c.n_head));
    w.set("llama.attention.head_count_kv", uint32_t(c.n_head_kv));
    w.set("llama.rope.dimension_count", uint32_t(c.n_rot));
    w.set("llama.rope.freq_base", c.rope_base);
    w.set("llama.attention.layer_norm_rms_epsilon", c.rms_eps);
    w.set("llama.vocab_size", uint32_t(c.n_vocab));
    // A synthetic SPM vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then filler pieces.
    std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
    std::vector<GgufValue> scores, types;
    for (int i = 0; i < 256; ++i) tokens.push_back(fmt::format("<0x{:02X}>", i));
    for (int64_t i = static_cast<int64_t>(tokens.size()); i < c.n_vocab; ++i) tokens.push_back(fmt::format("▁t{}", i));
    for (size_t i = 0; i < tokens.size(); ++i) {
        scores.emplace_back(i < 259 ? 0.0f : -static_cast<float>(i));
        types.emplace_back(int32_t(i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1));
    }
    w.set("tokenizer.ggml.model", "llama");
    w.set("tokenizer.ggml.tokens", GgufValue::strings(tokens));
    w.set("tokenizer.ggml.scores", GgufValue::array(GgufType::F32, std::move(scores)));
    w.set("tokenizer.ggml.token_type", GgufValue::array(GgufType::I32, std::move(types)));
    w.set("tokenizer.ggml.bos_token_id", uint32_t(1));
    w.set("tokenizer.ggml.eos_token_id", uint32_t(2));
    w.set("tokenizer.ggml.unknown_token_id", uint32_t(0));

    auto view = [&](const TensorView& t) {
        std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + (t.ne[1] > 1 ? 2 : 1));
        w.add_tensor_view(t.name, t.type, ne, {t.data, t.n_bytes});
    };
    auto vec = [&](const std::string& name, const std::vector<float>& v) {
        std::vector<uint8_t> bytes(v.size() * sizeof(float));
        std::memcpy(bytes.data(), v.data(), bytes.size());
        w.add_tensor(name, GgmlType::F32, {static_cast<int64_t>(v.size())}, std::move(bytes));
    };
    view(weights.tok_embd);
    vec("output_norm.weight", weights.output_norm);
    view(weights.output);
    for (int64_t i = 0; i < c.n_layer; ++i) {
        const LayerWeights& L = weights.layers[i];
        const std::string b = fmt::format("blk.{}.", i);
        vec(b + "attn_norm.weight", L.attn_norm);
        for (const TensorView* t : {&L.wq, &L.wk, &L.wv, &L.wo}) view(*t);
        vec(b + "ffn_norm.weight", L.ffn_norm);
        for (const TensorView* t : {&L.ffn_gate, &L.ffn_up, &L.ffn_down}) view(*t);
    }
    w.write(path);
}

}  // namespace quill
