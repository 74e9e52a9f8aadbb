#include "engine/model/weights.h"

#include "engine/error.h"
#include "engine/model/weight_vectors.h"

#include <fmt/ranges.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <unordered_set>

namespace quill {

namespace {

std::string shape_str(std::span<const int64_t> ne) { return fmt::format("[{}]", fmt::join(ne, ", ")); }

class Loader {
public:
    explicit Loader(const GgufFile& f) : f_(f) {}

    const GgufTensorInfo* find(const std::string& name) const { return f_.find_tensor(name); }

    // A tensor of the file that no get() took: the first in file order, or nullptr.
    const GgufTensorInfo* first_unused() const {
        for (const GgufTensorInfo& t : f_.tensors())
            if (!used_.contains(t.name)) return &t;
        return nullptr;
    }

    // A tensor of exactly the expected shape (innermost first) and a type the engine can compute with.
    TensorView get(const std::string& name, std::vector<int64_t> expected) const {
        const GgufTensorInfo* t = f_.find_tensor(name);
        if (!t) throw FileError(fmt::format("{}: missing tensor '{}' {}", f_.path(), name, shape_str(expected)));
        if (t->ne != expected)
            throw FileError(fmt::format("{}: tensor '{}' has shape {}, expected {}", f_.path(), name,
                                        shape_str(t->ne), shape_str(expected)));
        if (!type_traits(t->type).can_dequantize)
            throw FileError(fmt::format("{}: tensor '{}' has type {}, which quill cannot compute with", f_.path(),
                                        name, type_name(t->type)));
        used_.insert(name);
        TensorView v;
        v.name = name;
        v.type = t->type;
        for (size_t i = 0; i < t->ne.size(); ++i) v.ne[i] = t->ne[i];
        v.data = f_.tensor_data(*t);
        v.n_bytes = t->n_bytes;
        return v;
    }

    // A tensor the file may have that the forward does not read (gemma4's K and V of a shared-KV layer): counted as
    // used, never mapped.
    void skip(const std::string& name) const {
        if (find(name)) used_.insert(name);
    }

    // A small vector (norm weights, rope factors) converted to float.
    std::vector<float> get_vector(const std::string& name, int64_t n) const {
        TensorView v = get(name, {n});
        std::vector<float> out(n);
        dequantize_row(v.type, v.data, out.data(), n);
        return out;
    }

    // A [n, m] tensor (m vectors of n) as n * m floats, innermost first.
    std::vector<float> get_vectors(const std::string& name, int64_t n, int64_t m) const {
        TensorView v = get(name, {n, m});
        std::vector<float> out(static_cast<size_t>(n * m));
        for (int64_t r = 0; r < m; ++r) dequantize_row(v.type, v.row(r), out.data() + r * n, n);
        return out;
    }

    // A vector field's tensor, into its member of o: when the field is required or the file has it.
    template <class Owner>
    void read(const VectorField<Owner>& f, const std::string& name, Owner& o) const {
        if (f.required || find(name))
            o.*f.member = f.rows == 1 ? get_vector(name, f.n) : get_vectors(name, f.n, f.rows);
    }

    // RoPE frequency divisors (rope_freqs, rope_factors_long/short), when the file has them: each finite and positive
    // (a zero or non-finite one would turn every position's angle into NaN, a negative one its direction).
    void check_divisors(const std::string& name, const std::vector<float>& d) const {
        for (size_t i = 0; i < d.size(); ++i)
            if (!(std::isfinite(d[i]) && d[i] > 0.0f))
                throw FileError(fmt::format("{}: tensor '{}' has {} at index {}, expected positive finite RoPE "
                                            "frequency divisors", f_.path(), name, d[i], i));
    }

    // Takes the tensors of blocks `first` and later as used (blocks the forward does not run).
    void skip_blocks_from(int64_t first) const {
        for (const GgufTensorInfo& t : f_.tensors()) {
            int64_t block = -1;
            if (std::sscanf(t.name.c_str(), "blk.%" SCNd64 ".", &block) == 1 && block >= first) used_.insert(t.name);
        }
    }

private:
    const GgufFile& f_;
    mutable std::unordered_set<std::string> used_;
};

}  // namespace

TensorView TensorView::rows(int64_t first, int64_t n, const std::string& part) const {
    QUILL_CHECK(first >= 0 && n >= 1 && first + n <= n_rows() && ne[2] == 1 && ne[3] == 1,
                "{}: rows [{}, {}) of a matrix of {}", name, first, first + n, n_rows());
    TensorView v = *this;
    v.name = fmt::format("{} ({})", name, part);
    v.ne[1] = n;
    v.data = row(first);
    v.n_bytes = static_cast<size_t>(n) * row_bytes();
    return v;
}

TensorView TensorView::matrix(int64_t i) const {
    QUILL_CHECK(i >= 0 && i < ne[2] && ne[3] == 1, "{}: matrix {} of a tensor of {}", name, i, ne[2]);
    TensorView v = *this;
    v.name = fmt::format("{} (expert {})", name, i);
    v.ne[2] = 1;
    v.data = row(i * ne[1]);
    v.n_bytes = static_cast<size_t>(ne[1]) * row_bytes();
    return v;
}

void LayerWeights::split_experts() {
    experts.resize(static_cast<size_t>(ffn_down_exps.ne[2]));
    for (size_t e = 0; e < experts.size(); ++e) {
        const auto i = static_cast<int64_t>(e);
        if (ffn_gate_up_exps.data) {
            const TensorView both = ffn_gate_up_exps.matrix(i);
            const int64_t f = both.ne[1] / 2;
            experts[e] = {both.rows(0, f, "gate"), both.rows(f, f, "up"), ffn_down_exps.matrix(i)};
        } else {
            // (nemotron_h_moe: no gate)
            experts[e] = {ffn_gate_exps.data ? ffn_gate_exps.matrix(i) : TensorView{}, ffn_up_exps.matrix(i),
                          ffn_down_exps.matrix(i)};
        }
    }
}

void LayerWeights::split_mla_heads() {
    wk_b_heads.clear();
    wv_b_heads.clear();
    for (int64_t h = 0; h < wk_b.ne[2]; ++h) {
        wk_b_heads.push_back(wk_b.matrix(h));
        wv_b_heads.push_back(wv_b.matrix(h));
        wk_b_heads.back().name = fmt::format("{} (head {})", wk_b.name, h);
        wv_b_heads.back().name = fmt::format("{} (head {})", wv_b.name, h);
    }
}

void LayerWeights::split_kv_b(const ModelConfig& c) {
    const int64_t nope = c.mla_nope(), r = c.kv_lora_rank, per = nope + c.head_dim_v;
    wk_b_t.assign(static_cast<size_t>(c.n_head * r * nope), 0.0f);
    std::vector<float> row(static_cast<size_t>(r));
    wk_b_heads.clear();
    wv_b_heads.clear();
    for (int64_t h = 0; h < c.n_head; ++h) {
        float* kt = wk_b_t.data() + h * r * nope;  // [kv_lora_rank, nope]
        for (int64_t i = 0; i < nope; ++i) {
            dequantize_row(wkv_b.type, wkv_b.row(h * per + i), row.data(), r);
            for (int64_t j = 0; j < r; ++j) kt[j * nope + i] = row[static_cast<size_t>(j)];
        }
        TensorView k;
        k.name = fmt::format("{} (head {} keys, transposed)", wkv_b.name, h);
        k.type = GgmlType::F32;
        k.ne = {nope, r, 1, 1};
        k.data = reinterpret_cast<const uint8_t*>(kt);
        k.n_bytes = static_cast<size_t>(r * nope) * sizeof(float);
        wk_b_heads.push_back(k);
        wv_b_heads.push_back(wkv_b.rows(h * per + nope, c.head_dim_v, fmt::format("head {} values", h)));
    }
}

void Weights::split_altup() {
    altup_proj_k.clear();
    altup_unembd_k.clear();
    for (int64_t k = 0; k < altup_proj.ne[2]; ++k) {
        altup_proj_k.push_back(altup_proj.matrix(k));
        altup_unembd_k.push_back(altup_unembd_proj.matrix(k));
    }
}

void LayerWeights::split_qkv(const TensorView& qkv, const ModelConfig& c, int64_t layer) {
    const int64_t nq = c.layer_n_embd_q(layer), nkv = c.layer_n_embd_kv(layer);
    attn_qkv = qkv;
    wq = qkv.rows(0, nq, "q");
    wk = qkv.rows(nq, nkv, "k");
    wv = qkv.rows(nq + nkv, nkv, "v");
}

void LayerWeights::split_gate_up(const TensorView& gate_up, const ModelConfig& c) {
    ffn_gate_up = gate_up;
    ffn_gate = gate_up.rows(0, c.n_ff, "gate");
    ffn_up = gate_up.rows(c.n_ff, c.n_ff, "up");
}

Weights Weights::from_gguf(const GgufFile& file, const ModelConfig& c) {
    Loader l(file);
    Weights w;
    w.tok_embd = l.get("token_embd.weight", {c.n_embd, c.n_vocab});
    for (const VectorField<Weights>& f : model_vector_fields(c)) l.read(f, f.name, w);
    // (gemma, command-r, cohere2: the output is the embeddings whatever the file holds, as llama.cpp reads it, so an
    // output.weight goes unused and the file is refused, as llama.cpp refuses a tensor too many)
    // (cohere2moe's output is its own where the file has one)
    const bool always_tied =
        c.arch == "gemma" || c.arch == "command-r" || (c.arch == "cohere2" && c.file_arch != "cohere2moe");
    if (!always_tied && l.find("output.weight")) {
        w.output = l.get("output.weight", {c.n_embd, c.n_vocab});
    } else {
        w.output = w.tok_embd;
        w.output_tied = true;
    }
    if (c.n_embd_per_layer > 0) {
        const int64_t n_pl = c.n_layer * c.n_embd_per_layer;
        w.per_layer_tok_embd = l.get("per_layer_token_embd.weight", {n_pl, c.n_vocab});
        w.per_layer_model_proj = l.get("per_layer_model_proj.weight", {c.n_embd, n_pl});
    }
    if (c.altup()) {
        w.altup_proj = l.get("altup_proj.weight", {c.n_embd, c.n_embd, c.n_altup - 1});
        w.altup_unembd_proj = l.get("altup_unembd_proj.weight", {c.n_embd, c.n_embd, c.n_altup - 1});
        w.split_altup();
    }
    l.check_divisors("rope_freqs.weight", w.rope_freqs);
    l.check_divisors("rope_factors_long.weight", w.rope_factors_long);
    l.check_divisors("rope_factors_short.weight", w.rope_factors_short);

    const bool gpt_oss = c.arch == "gpt-oss";
    // (llama.cpp requires output.weight for these)
    if ((gpt_oss || c.arch == "olmo2" || c.arch == "qwen2moe" || c.file_arch == "minimax-m2" ||
         c.file_arch == "olmoe" || c.file_arch == "apertus" ||
         c.file_arch == "bailingmoe2" || c.file_arch == "dots1" || c.file_arch == "exaone-moe" || c.file_arch == "step35") && w.output_tied)
        throw FileError(fmt::format("{}: missing tensor 'output.weight' [{}, {}]", file.path(), c.n_embd, c.n_vocab));
    for (int64_t i = 0; i < c.n_layer; ++i) {
        const std::string b = fmt::format("blk.{}.", i);
        const int64_t nq = c.layer_n_embd_q(i), nkv = c.layer_n_embd_kv(i);
        LayerWeights L;
        for (const VectorField<LayerWeights>& f : layer_vector_fields(c, i)) l.read(f, b + f.name, L);
        if (!c.layer_has_mixer(i)) {  // (nemotron_h: a layer of an FFN alone)
        } else if (c.layer_is_recurrent(i) && c.mamba2()) {  // (granitehybrid: Mamba-2, ssm_in of z, x, B, C, dt)
            const int64_t n_in = 2 * c.ssm_d_inner() + 2 * c.ssm_n_k_heads * c.ssm_head_k + c.ssm_n_v_heads;
            L.ssm_in = l.get(b + "ssm_in.weight", {c.n_embd, n_in});
            L.ssm_out = l.get(b + "ssm_out.weight", {c.ssm_d_inner(), c.n_embd});
        } else if (c.layer_is_recurrent(i) && c.mamba1()) {  // (Mamba-1: x and z; dt, B, C; dt's projection)
            const int64_t inner = c.ssm_d_inner();
            L.ssm_in = l.get(b + "ssm_in.weight", {c.n_embd, 2 * inner});
            L.ssm_x = l.get(b + "ssm_x.weight", {inner, c.ssm_dt_rank + 2 * c.ssm_head_k});
            L.ssm_dt_proj = l.get(b + "ssm_dt.weight", {c.ssm_dt_rank, inner});
            L.ssm_out = l.get(b + "ssm_out.weight", {inner, c.n_embd});
        } else if (c.layer_is_short_conv(i)) {  // (lfm2: a short conv instead of attention)
            L.ssm_in = l.get(b + "shortconv.in_proj.weight", {c.n_embd, 3 * c.n_embd});
            L.ssm_out = l.get(b + "shortconv.out_proj.weight", {c.n_embd, c.n_embd});
        } else if (c.layer_is_recurrent(i)) {  // (qwen35: a gated delta net instead of attention)
            if (c.ssm_grouped && !l.find(b + "attn_qkv.weight")) {  // (qwen3next's older files: q, k, v, z in one)
                L.ssm_in = l.get(b + "ssm_in.weight", {c.n_embd, c.ssm_conv_channels() + c.ssm_d_inner()});
            } else {
                L.ssm_in = l.get(b + "attn_qkv.weight", {c.n_embd, c.ssm_conv_channels()});
                L.ssm_z = l.get(b + "attn_gate.weight", {c.n_embd, c.ssm_d_inner()});
            }
            if (c.ssm_grouped) {  // (qwen3next: beta and alpha in one, grouped by key head)
                L.ssm_beta = l.get(b + "ssm_ba.weight", {c.n_embd, 2 * c.ssm_n_v_heads});
            } else {
                L.ssm_beta = l.get(b + "ssm_beta.weight", {c.n_embd, c.ssm_n_v_heads});
                L.ssm_alpha = l.get(b + "ssm_alpha.weight", {c.n_embd, c.ssm_n_v_heads});
            }
            L.ssm_out = l.get(b + "ssm_out.weight", {c.ssm_d_inner(), c.n_embd});
        } else if (c.mla()) {  // (deepseek2: the query, plain or low-rank, and MLA's latent; wk_b, wv_b per head)
            if (c.q_lora_rank > 0) {
                L.wq_a = l.get(b + "attn_q_a.weight", {c.n_embd, c.q_lora_rank});
                L.wq_b = l.get(b + "attn_q_b.weight", {c.q_lora_rank, nq});
            } else {
                L.wq = l.get(b + "attn_q.weight", {c.n_embd, nq});
            }
            L.wkv_a = l.get(b + "attn_kv_a_mqa.weight", {c.n_embd, c.mla_row()});
            if (c.mla_fused_kv_b) {  // (older files: per head Wk then Wv in one matrix)
                L.wkv_b = l.get(b + "attn_kv_b.weight",
                                {c.kv_lora_rank, c.n_head * (c.mla_nope() + c.head_dim_v)});
                L.split_kv_b(c);
            } else {
                L.wk_b = l.get(b + "attn_k_b.weight", {c.mla_nope(), c.kv_lora_rank, c.n_head});
                L.wv_b = l.get(b + "attn_v_b.weight", {c.kv_lora_rank, c.head_dim_v, c.n_head});
                L.split_mla_heads();
            }
            // (deepseek32: the lightning indexer; glm-dsa's layers without one of their own may hold its tensors,
            // which llama.cpp loads and does not use)
            if (c.dsa() && (c.layer_indexer(i) || l.find(b + "indexer.attn_k.weight"))) {
                L.idx_wq_b = l.get(b + "indexer.attn_q_b.weight",
                                   {c.q_lora_rank, c.indexer_n_head * c.indexer_head_dim});
                L.idx_wk = l.get(b + "indexer.attn_k.weight", {c.n_embd, c.indexer_head_dim});
                L.idx_proj = l.get(b + "indexer.proj.weight", {c.n_embd, c.indexer_n_head});
            }
        } else if (!c.layer_has_kv(i) && c.arch == "gemma3n") {  // (K and V, which llama.cpp requires, unread)
            L.wq = l.get(b + "attn_q.weight", {c.n_embd, nq});
            L.wk = l.get(b + "attn_k.weight", {c.n_embd, nkv});
            L.wv = l.get(b + "attn_v.weight", {c.n_embd, nkv});
        } else if (!c.layer_has_kv(i)) {  // (gemma4: Q only; K and V, which llama.cpp does not require, go unread)
            L.wq = l.get(b + "attn_q.weight", {c.n_embd, nq});
            for (const char* unread : {"attn_k.weight", "attn_v.weight", "attn_k_norm.weight"}) l.skip(b + unread);
        } else if (l.find(b + "attn_qkv.weight")) {  // Q, K and V in one matrix, in that order (phi3, gemma4)
            L.split_qkv(l.get(b + "attn_qkv.weight", {c.n_embd, nq + 2 * nkv}), c, i);
        } else {
            L.wq = l.get(b + "attn_q.weight", {c.n_embd, c.attn_out_gate ? 2 * nq : nq});
            L.wk = l.get(b + "attn_k.weight", {c.n_embd, nkv});
            // (gemma4: optional, V is then K's projection)
            if (c.arch != "gemma4" || l.find(b + "attn_v.weight")) L.wv = l.get(b + "attn_v.weight", {c.n_embd, nkv});
        }
        if (c.ssm_beside_attn) {  // (falcon-h1: attention beside the Mamba-2 mixer)
            L.wq = l.get(b + "attn_q.weight", {c.n_embd, nq});
            L.wk = l.get(b + "attn_k.weight", {c.n_embd, nkv});
            L.wv = l.get(b + "attn_v.weight", {c.n_embd, nkv});
        }
        if (c.attn_gate_proj) L.wgate = l.get(b + "attn_gate.weight", {c.n_embd, c.layer_n_gate(i)});
        const int64_t n_att = c.mla() ? c.n_head * c.head_dim_v : nq;  // (the attention's output per token)
        if (c.layer_has_attention(i)) L.wo = l.get(b + "attn_output.weight", {n_att, c.n_embd});
        // the router and each expert's gate, up and down as one 3-D tensor [n_expert, rows, cols]
        if (c.layer_moe(i)) {
            L.ffn_gate_inp = l.get(b + "ffn_gate_inp.weight", {c.n_embd, c.n_expert});
            // (gate and up in one, gate first: gemma4's, and granite_swa's and cohere2moe's where the file has them so)
            const bool fused = c.arch == "gemma4" || c.file_arch == "granite_swa" || c.file_arch == "cohere2moe";
            if (fused && l.find(b + "ffn_gate_up_exps.weight")) {
                L.ffn_gate_up_exps = l.get(b + "ffn_gate_up_exps.weight", {c.n_embd, 2 * c.n_ff_exp, c.n_expert});
            } else {  // (nemotron_h_moe: no gate)
                if (c.ffn_gated())
                    L.ffn_gate_exps = l.get(b + "ffn_gate_exps.weight", {c.n_embd, c.n_ff_exp, c.n_expert});
                L.ffn_up_exps = l.get(b + "ffn_up_exps.weight", {c.n_embd, c.n_ff_exp, c.n_expert});
            }
            L.ffn_down_exps = l.get(b + "ffn_down_exps.weight", {c.n_ff_exp, c.n_embd, c.n_expert});
            L.split_experts();
        }
        // (gemma4's mixture, the shared expert: a dense FFN beside the experts; a leading dense layer's instead)
        const bool dense = c.layer_dense_ffn(i) && c.layer_has_ffn(i);
        const bool shexp = c.moe_shared_expert && c.layer_moe(i);
        const int64_t n_ff = c.layer_n_ff(i);
        if (shexp && c.file_arch == "granite_swa") {  // (gate and up in one, gate first)
            L.split_gate_up(l.get(b + "ffn_up_shexp.weight", {c.n_embd, 2 * n_ff}), c);
            L.ffn_down = l.get(b + "ffn_down_shexp.weight", {n_ff, c.n_embd});
        } else if (shexp) {  // (its tensors named ffn_*_shexp; nemotron_h_moe's without a gate)
            if (c.ffn_gated()) L.ffn_gate = l.get(b + "ffn_gate_shexp.weight", {c.n_embd, n_ff});
            L.ffn_up = l.get(b + "ffn_up_shexp.weight", {c.n_embd, n_ff});
            L.ffn_down = l.get(b + "ffn_down_shexp.weight", {n_ff, c.n_embd});
        } else if (dense && (c.arch == "phi3" || c.arch == "glm4")) {  // (gate and up in one matrix, gate first)
            L.split_gate_up(l.get(b + "ffn_up.weight", {c.n_embd, 2 * c.n_ff}), c);
        } else if (dense) {  // (nemotron_h: no gate)
            if (c.ffn_gated()) L.ffn_gate = l.get(b + "ffn_gate.weight", {c.n_embd, n_ff});
            L.ffn_up = l.get(b + "ffn_up.weight", {c.n_embd, n_ff});
        }
        if (dense && !shexp) L.ffn_down = l.get(b + "ffn_down.weight", {n_ff, c.n_embd});
        if (c.altup()) {  // (gemma3n: Laurel's low-rank matrices; AltUp's small ones are vectors)
            const GgufTensorInfo* lr = l.find(b + "laurel_l.weight");
            const int64_t rank = lr && lr->ne.size() == 2 ? lr->ne[1] : 64;
            L.laurel_l = l.get(b + "laurel_l.weight", {c.n_embd, rank});
            L.laurel_r = l.get(b + "laurel_r.weight", {rank, c.n_embd});
        }
        if (c.n_embd_per_layer > 0) {
            L.per_layer_inp_gate = l.get(b + "inp_gate.weight", {c.n_embd, c.n_embd_per_layer});
            L.per_layer_proj = l.get(b + "proj.weight", {c.n_embd_per_layer, c.n_embd});
        }
        w.layers.push_back(std::move(L));
    }
    w.n_expert_used = c.n_expert_used;
    // The multi-token-prediction blocks after the last layer (ModelConfig::n_layer_nextn), loaded and not run (as
    // llama.cpp by default)
    if (c.n_layer_nextn > 0) l.skip_blocks_from(c.n_layer);
    // A tensor the forward pass would not use means a model quill does not understand: refuse it rather than run
    // without it.
    if (const GgufTensorInfo* t = l.first_unused())
        throw FileError(fmt::format("{}: tensor '{}' is not used by quill's {} architecture (is this a variant quill "
                                    "does not support?)",
                                    file.path(), t->name, c.arch));
    return w;
}

const std::vector<float>& Weights::rope_divisors(const ModelConfig& c, int64_t n_ctx) const {
    if (!rope_freqs.empty()) return rope_freqs;
    return n_ctx > c.yarn_n_ctx_orig && !rope_factors_long.empty() ? rope_factors_long : rope_factors_short;
}

std::vector<double> Weights::rope_inv_freq(const ModelConfig& c, bool local, int64_t n_ctx) const {
    const double base = local ? c.rope_base_local : c.rope_base;
    const double scale = local ? c.rope_freq_scale_local : c.rope_freq_scale;
    static const std::vector<float> kNone;
    const std::vector<float>& divisors = local && c.rope_divisors_global_only ? kNone : rope_divisors(c, n_ctx);
    const int64_t n_rot = local && c.n_rot_local > 0 ? c.n_rot_local : c.n_rot;
    std::vector<double> f(n_rot / 2);
    for (size_t i = 0; i < f.size(); ++i) {
        f[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
        if (!divisors.empty()) f[i] /= divisors[i];
        f[i] *= scale + (1.0 - scale) * c.yarn_ramp(static_cast<int64_t>(i));  // (YaRN: part of it unscaled)
        if (c.rope_pair_still(static_cast<int64_t>(i))) f[i] = 0.0;  // (M-RoPE's extra section: position 0)
    }
    return f;
}

}  // namespace quill
