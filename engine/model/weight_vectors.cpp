#include "engine/model/weight_vectors.h"

#include "engine/error.h"

namespace quill {

namespace {

template <class Owner>
std::vector<NamedVector> held(const std::vector<VectorField<Owner>>& fields, const Owner& owner,
                              const std::string& prefix) {
    std::vector<NamedVector> out;
    for (const VectorField<Owner>& f : fields) {
        const std::vector<float>& v = owner.*f.member;
        if (v.empty()) continue;
        QUILL_CHECK(static_cast<int64_t>(v.size()) == f.n * f.rows, "{}{} holds {} floats, expected {} rows of {}",
                    prefix, f.name, v.size(), f.rows, f.n);
        out.push_back({prefix + f.name, &v, f.n, f.rows});
    }
    return out;
}

}  // namespace

std::vector<VectorField<LayerWeights>> layer_vector_fields(const ModelConfig& c, int64_t layer) {
    using L = LayerWeights;
    const bool gpt_oss = c.arch == "gpt-oss", gemma4 = c.arch == "gemma4" || c.arch == "gemma3n";
    const bool post_norms = c.arch == "gemma2" || c.arch == "gemma3" || gemma4 || c.arch == "glm4" ||
                            c.arch == "olmo2" || c.arch == "exaone4" || c.file_arch == "afmoe";
    const bool recurrent = c.layer_is_recurrent(layer), qwen35 = c.arch == "qwen35" || c.arch == "qwen35moe";
    // (glm4moe's Q and K norms optional: GLM-4.5's, not GLM-4.5-Air's; step35's, as llama.cpp loads them)
    const bool glm4moe = c.arch == "glm4moe", qk_optional = glm4moe || c.file_arch == "step35";
    const bool qk_norms = glm4moe || c.arch == "gemma3" || c.arch == "qwen3" || c.arch == "qwen3moe" || gemma4 ||
                          c.arch == "olmo2" || c.arch == "exaone4" || ((qwen35 || c.arch == "lfm2") && !recurrent);
    const int64_t hd = c.layer_head_dim(layer);
    const bool whole = c.qk_norm_whole;
    // The biases are optional (qwen2 has Q, K and V ones; llama GGUFs may carry any of them), but gpt-oss requires
    // the output's, as llama.cpp does; ernie4_5's llama.cpp loads and ignores it and seed_oss's has none, so quill
    // refuses a file of theirs that has it (Weights: a tensor it would not use) rather than run it otherwise.
    // (command-r, cohere2, hunyuan-dense, hunyuan-moe, arcee: llama.cpp loads no output bias either)
    const bool no_bo = c.arch == "ernie4_5" || c.arch == "seed_oss" || c.arch == "command-r" || c.arch == "cohere2" ||
                       c.file_arch == "hunyuan-dense" || c.file_arch == "hunyuan-moe" || c.file_arch == "arcee" ||
                       c.file_arch == "step35" || c.file_arch == "laguna";
    std::vector<VectorField<L>> f;
    if (c.input_norms) f.push_back({"attn_norm.weight", &L::attn_norm, c.n_embd});
    f.insert(f.end(), {
        {"attn_q.bias", &L::bq, c.layer_n_embd_q(layer), 1, false},
        {"attn_k.bias", &L::bk, c.layer_n_embd_kv(layer), 1, false},
        {"attn_v.bias", &L::bv, c.layer_n_embd_kv(layer), 1, false},
    });
    if (!no_bo) f.push_back({"attn_output.bias", &L::bo, c.n_embd, 1, gpt_oss});
    if (recurrent) {  // (qwen35's gated delta net: no attention, so no biases either)
        f = {{"attn_norm.weight", &L::attn_norm, c.n_embd},
             {"ssm_conv1d.weight", &L::ssm_conv1d, c.ssm_conv, c.ssm_conv_channels()},
             {"ssm_dt.bias", &L::ssm_dt, c.ssm_n_v_heads},
             {"ssm_a", &L::ssm_a, c.ssm_n_v_heads},
             {"ssm_norm.weight", &L::ssm_norm, c.ssm_head_v}};
    }
    // (granitehybrid's Mamba-2 layer; A and D as [1, heads], the norm by group: optional in falcon-h1's, as llama.cpp
    // reads it; Falcon-H1's files have none)
    if (recurrent && c.mamba2()) {
        const int64_t group = c.ssm_d_inner() / c.ssm_n_k_heads;
        f = {{"attn_norm.weight", &L::attn_norm, c.n_embd},
             {"ssm_conv1d.weight", &L::ssm_conv1d, c.ssm_conv, c.ssm_conv_channels()},
             {"ssm_conv1d.bias", &L::ssm_conv1d_b, c.ssm_conv_channels(), 1, false},
             {"ssm_dt.bias", &L::ssm_dt, c.ssm_n_v_heads},
             {"ssm_a", &L::ssm_a, 1, c.ssm_n_v_heads},
             {"ssm_d", &L::ssm_d, 1, c.ssm_n_v_heads},
             {"ssm_norm.weight", &L::ssm_norm, group, c.ssm_n_k_heads, !c.ssm_beside_attn}};
    }
    if (recurrent && c.mamba1()) {  // (Mamba-1: the conv over x and its bias, dt's bias, A [d_inner, d_state], D)
        const int64_t inner = c.ssm_d_inner();
        f = {{"attn_norm.weight", &L::attn_norm, c.n_embd},
             {"ssm_conv1d.weight", &L::ssm_conv1d, c.ssm_conv, inner},
             {"ssm_conv1d.bias", &L::ssm_conv1d_b, inner},
             {"ssm_dt.bias", &L::ssm_dt, inner},
             {"ssm_a", &L::ssm_a, c.ssm_head_k, inner},
             {"ssm_d", &L::ssm_d, inner}};
    }
    if (c.layer_is_short_conv(layer))  // (lfm2: the conv's taps alone)
        f = {{"attn_norm.weight", &L::attn_norm, c.n_embd},
             {"shortconv.conv.weight", &L::ssm_conv1d, c.ssm_conv, c.n_embd}};
    // (granite_swa: in every layer, as llama.cpp requires them)
    if (gpt_oss || c.file_arch == "granite_swa") f.push_back({"attn_sinks.weight", &L::attn_sinks, c.n_head});
    if (c.mla()) {  // (deepseek2: the low-rank query's norm, the latent's)
        if (c.q_lora_rank > 0) f.push_back({"attn_q_a_norm.weight", &L::attn_q_a_norm, c.q_lora_rank});
        f.push_back({"attn_kv_a_norm.weight", &L::attn_kv_a_norm, c.kv_lora_rank});
    }
    if (c.dsa()) {  // (deepseek32: the lightning indexer's key norm; glm-dsa: where a layer has an indexer)
        f.push_back({"indexer.k_norm.weight", &L::idx_k_norm, c.indexer_head_dim, 1, c.layer_indexer(layer)});
        f.push_back({"indexer.k_norm.bias", &L::idx_k_norm_b, c.indexer_head_dim, 1, c.layer_indexer(layer)});
    }
    if (qk_norms) {
        f.push_back({"attn_q_norm.weight", &L::attn_q_norm, whole ? c.layer_n_embd_q(layer) : hd, 1, !qk_optional});
        // (gemma4: not in a shared-KV layer, which has no K; gemma3n's has one, unread, as llama.cpp requires it;
        // bailingmoe2's and exaone-moe's MTP blocks, never run, have it)
        const bool mtp_k_norm = c.file_arch == "bailingmoe2" || c.file_arch == "exaone-moe";
        if (c.layer_has_kv(layer) || c.arch == "gemma3n" || (layer >= c.n_layer && mtp_k_norm))
            f.push_back({"attn_k_norm.weight", &L::attn_k_norm, whole ? c.layer_n_embd_kv(layer) : hd, 1,
                         !qk_optional});
    }
    if (c.arch == "command-r" && c.n_layer >= 64) {  // (Command R+: a row per head, as llama.cpp requires them)
        f.push_back({"attn_q_norm.weight", &L::attn_q_norm, hd, c.n_head});
        f.push_back({"attn_k_norm.weight", &L::attn_k_norm, hd, c.n_head_kv});
    }
    if (post_norms) f.push_back({"post_attention_norm.weight", &L::attn_post_norm, c.n_embd});
    // (gpt-oss, seed_oss, qwen35: the norm of the FFN's input is the file's post-attention norm, as llama.cpp reads it)
    const bool ffn_norm_post = gpt_oss || c.arch == "seed_oss" || qwen35 || glm4moe;
    // (command-r, cohere2: the FFN reads the attention's input; nemotron_h: a layer of an FFN alone has no mixer's
    // vectors, and its FFN's norm is the file's attn_norm; a layer of a mixer alone no FFN norm)
    const bool ffn_alone = !c.layer_has_mixer(layer);
    // (falcon-h1: "blk.N.ffn_norm" without ".weight", as its converter maps pre_ff_layernorm.weight whole and
    // llama.cpp reads it)
    const bool falcon_h1 = c.arch == "falcon-h1";
    if (ffn_alone) f.clear();
    if (c.input_norms && !c.parallel_blocks && c.layer_has_ffn(layer))
        f.push_back({ffn_alone       ? "attn_norm.weight"
                     : ffn_norm_post ? "post_attention_norm.weight"
                     : falcon_h1     ? "ffn_norm"
                                     : "ffn_norm.weight",
                     &L::ffn_norm, c.n_embd});
    if (gpt_oss) {
        f.push_back({"ffn_gate_inp.bias", &L::ffn_gate_inp_b, c.n_expert});
        f.push_back({"ffn_gate_exps.bias", &L::ffn_gate_exps_b, c.n_ff_exp, c.n_expert});
        f.push_back({"ffn_up_exps.bias", &L::ffn_up_exps_b, c.n_ff_exp, c.n_expert});
        f.push_back({"ffn_down_exps.bias", &L::ffn_down_exps_b, c.n_embd, c.n_expert});
    }
    if (c.moe_shared_ffn) {
        f.push_back({"ffn_gate_inp.scale", &L::ffn_gate_inp_s, c.n_embd});
        f.push_back({"pre_ffw_norm_2.weight", &L::ffn_pre_norm_2, c.n_embd});
        f.push_back({"post_ffw_norm_1.weight", &L::ffn_post_norm_1, c.n_embd});
        f.push_back({"post_ffw_norm_2.weight", &L::ffn_post_norm_2, c.n_embd});
        f.push_back({"ffn_down_exps.scale", &L::ffn_down_exps_s, c.n_expert, 1, false});
    }
    // (glm4moe, lfm2moe, bailingmoe2, dots1, afmoe: moe_selection_bias; DeepSeek-V3's deepseek2 files, where they
    // have it)
    if (c.moe_selection_bias && c.layer_moe(layer)) f.push_back({"exp_probs_b.bias", &L::ffn_exp_probs_b, c.n_expert});
    if (c.arch == "deepseek2" && c.layer_moe(layer))
        f.push_back({"exp_probs_b.bias", &L::ffn_exp_probs_b, c.n_expert, 1, false});
    if (c.moe_shared_gate) f.push_back({"ffn_gate_inp_shexp.weight", &L::ffn_gate_inp_shexp, c.n_embd});
    if (post_norms) f.push_back({"post_ffw_norm.weight", &L::ffn_post_norm, c.n_embd});
    if (c.n_embd_per_layer > 0) f.push_back({"post_norm.weight", &L::per_layer_post_norm, c.n_embd});
    if (c.arch == "gemma4") f.push_back({"layer_output_scale.weight", &L::out_scale, 1, 1, false});
    if (c.altup()) {  // (gemma3n)
        f.insert(f.end(), {{"laurel_post_norm.weight", &L::laurel_post_norm, c.n_embd},
                           {"altup_router.weight", &L::altup_router, c.n_embd, c.n_altup},
                           {"altup_router_norm.weight", &L::altup_router_norm, c.n_embd},
                           {"altup_predict_coef.weight", &L::altup_predict_coef, c.n_altup, c.n_altup * c.n_altup},
                           {"altup_correct_coef.weight", &L::altup_correct_coef, c.n_altup, c.n_altup},
                           {"altup_correct_scale.weight", &L::altup_correct_scale, c.n_embd}});
    }
    return f;
}

std::vector<VectorField<Weights>> model_vector_fields(const ModelConfig& c) {
    using W = Weights;
    // (lfm2: its converter names the final norm token_embd_norm, as llama.cpp reads it)
    std::vector<VectorField<W>> f{
        {c.arch == "lfm2" ? "token_embd_norm.weight" : "output_norm.weight", &W::output_norm, c.n_embd}};
    // The RoPE divisors llama.cpp loads: rope_freqs for llama, llama4, mistral3, granite, exaone4, apertus,
    // exaone-moe (without longrope scaling, which quill refuses), phi3's long and short factors. llama.cpp refuses a
    // file with a tensor it does not load, and so does quill (Weights::from_gguf), rather than run without it.
    if (c.arch == "llama" || c.arch == "llama4" || c.arch == "mistral3" || c.arch == "granite" || c.arch == "exaone4" ||
        c.file_arch == "apertus" || c.file_arch == "exaone-moe")
        f.push_back({"rope_freqs.weight", &W::rope_freqs, c.n_rot / 2, 1, false});
    // (gemma4: required where a layer is global, as llama.cpp requires it)
    bool global = false;
    for (int64_t l = 0; l < c.n_layer; ++l) global = global || !c.layer_is_local(l);
    if (c.arch == "gemma4") f.push_back({"rope_freqs.weight", &W::rope_freqs, c.n_rot / 2, 1, global});
    // (step35: as many as the widest layer rotates, the global layers reading the first of them)
    if (c.file_arch == "step35")
        f.push_back({"rope_freqs.weight", &W::rope_freqs, std::max(c.n_rot, c.n_rot_local) / 2, 1, false});
    if (c.n_embd_per_layer > 0)
        f.push_back({"per_layer_proj_norm.weight", &W::per_layer_proj_norm, c.n_embd_per_layer});
    if (c.arch == "phi3") {
        f.push_back({"rope_factors_long.weight", &W::rope_factors_long, c.n_rot / 2, 1, false});
        f.push_back({"rope_factors_short.weight", &W::rope_factors_short, c.n_rot / 2, 1, false});
    }
    return f;
}

std::vector<NamedVector> layer_vectors(const ModelConfig& c, const LayerWeights& L, int64_t layer) {
    return held(layer_vector_fields(c, layer), L, fmt::format("blk.{}.", layer));
}

std::vector<NamedVector> model_vectors(const ModelConfig& c, const Weights& w) {
    return held(model_vector_fields(c), w, "");
}

}  // namespace quill
