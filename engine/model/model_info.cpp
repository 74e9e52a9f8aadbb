#include "engine/model/model_info.h"

#include "engine/io/escape.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <map>
#include <string>

namespace quill {

namespace {

using nlohmann::json;

// A scalar metadata value as JSON; arrays as their length and element type.
json value_json(const GgufValue& v) {
    switch (v.type()) {
        case GgufType::STRING: return v.as_string();
        case GgufType::BOOL: return v.as_bool();
        case GgufType::F32: return std::stod(fmt::format("{}", std::get<float>(v.v)));  // shortest float form
        case GgufType::F64: return v.as_float();
        case GgufType::U64: return std::get<uint64_t>(v.v);
        case GgufType::ARRAY: {
            const auto& a = v.as_array();
            return json{{"array", gguf_type_name(a.type())}, {"length", a.size()}};
        }
        default: return v.as_int();
    }
}

json tokenizer_json(const GgufFile& f) {
    json t = json::object();
    if (auto model = f.get_string("tokenizer.ggml.model")) t["model"] = *model;
    if (auto pre = f.get_string("tokenizer.ggml.pre")) t["pre"] = *pre;
    if (const GgufValue* tokens = f.find("tokenizer.ggml.tokens"); tokens && tokens->type() == GgufType::ARRAY)
        t["vocab_size"] = tokens->as_array().size();
    for (const char* k : {"bos_token_id", "eos_token_id", "eot_token_id", "unknown_token_id", "padding_token_id"})
        if (const GgufValue* v = f.find(std::string("tokenizer.ggml.") + k); v && v->is_integer())
            t[k] = v->as_int();
    return t;
}

}  // namespace

json describe_model(const GgufFile& f, bool with_tensors) {
    json info;
    info["file"] = f.path();
    uint64_t file_size = 0;
    for (const GgufPart& part : f.parts()) file_size += part.size;
    info["file_size"] = file_size;  // of every part of a split model
    if (f.parts().size() > 1) {
        info["parts"] = json::array();
        for (const GgufPart& part : f.parts()) info["parts"].push_back(part.path);
    }
    info["gguf_version"] = f.version();
    info["alignment"] = f.alignment();
    const std::string arch = f.get_string("general.architecture").value_or("");
    info["architecture"] = arch.empty() ? json(nullptr) : json(arch);
    if (auto name = f.get_string("general.name")) info["name"] = *name;
    if (auto ft = f.get_int("general.file_type")) info["file_type"] = *ft;

    // Hyperparameters: every scalar under the architecture's prefix.
    json hp = json::object();
    if (!arch.empty()) {
        const std::string prefix = arch + ".";
        for (const auto& [k, v] : f.metadata())
            if (k.starts_with(prefix) && v.type() != GgufType::ARRAY) hp[k.substr(prefix.size())] = value_json(v);
    }
    info["hyperparameters"] = hp;
    info["tokenizer"] = tokenizer_json(f);
    if (auto tmpl = f.get_string("tokenizer.chat_template")) {
        info["chat_template"] = json{{"present", true}, {"bytes", tmpl->size()}};
    } else {
        info["chat_template"] = json{{"present", false}};
    }

    size_t total = 0;
    std::map<std::string, std::pair<int, size_t>> mix;  // type -> (count, bytes)
    json table = json::array();
    for (const auto& t : f.tensors()) {
        total += t.n_bytes;
        auto& m = mix[std::string(type_name(t.type))];
        ++m.first;
        m.second += t.n_bytes;
        if (!with_tensors) continue;
        table.push_back({{"name", t.name}, {"type", type_name(t.type)}, {"shape", t.ne}, {"bytes", t.n_bytes},
                         {"offset", f.parts()[t.part].data_offset + t.offset}});  // in the file that holds it
        if (f.parts().size() > 1) table.back()["part"] = t.part + 1;
    }
    info["tensor_count"] = f.tensors().size();
    info["tensor_bytes"] = total;
    json jmix = json::object();
    for (const auto& [type, m] : mix) jmix[type] = {{"count", m.first}, {"bytes", m.second}};
    info["tensor_types"] = jmix;
    if (with_tensors) info["tensors"] = table;

    // A runnable model is validated as `run` would load it.
    if (!f.tensors().empty() && architecture_supported(arch)) {
        ModelConfig c = ModelConfig::from_gguf(f);
        Weights w = Weights::from_gguf(f, c);
        info["model"] = {{"n_vocab", c.n_vocab}, {"n_embd", c.n_embd},     {"n_layer", c.n_layer},
                         {"n_head", c.n_head},   {"n_head_kv", c.n_head_kv}, {"head_dim", c.head_dim},
                         {"n_ff", c.n_ff},       {"n_ctx_train", c.n_ctx_train}, {"n_rot", c.n_rot},
                         {"rope_base", c.rope_base}, {"rms_eps", c.rms_eps}, {"output_tied", w.output_tied}};
        if (c.moe())
            info["model"]["experts"] = {{"n_expert", c.n_expert}, {"n_expert_used", c.n_expert_used},
                                        {"n_ff_exp", c.n_ff_exp}};
        // (the shared expert's width: the FFN of the last layer with experts; nemotron_h_moe's last may have none)
        if (c.moe_shared_expert) {
            int64_t last = c.n_layer - 1;
            while (last > 0 && !c.layer_moe(last)) --last;
            info["model"]["experts"]["n_ff_shexp"] = c.layer_n_ff(last);
        }
        if (c.moe_selection_bias || c.moe_shared_scale != 1.0f) {  // (DeepSeek-V3-style routing; cohere2moe's)
            info["model"]["experts"]["routing"] = {{"gating", c.moe_gating_sigmoid ? "sigmoid" : "softmax"},
                                                   {"selection_bias", c.moe_selection_bias},
                                                   {"normalized", c.moe_norm_weights},
                                                   // (the float's shortest digits, not its double's)
                                                   {"scale", std::stod(fmt::format("{}", c.moe_weights_scale))},
                                                   {"leading_dense", c.n_leading_dense},
                                                   {"groups", c.moe_n_group},
                                                   {"groups_used", c.moe_n_group_used}};
            if (c.moe_shared_scale != 1.0f)  // (cohere2moe: the shared expert averaged with the experts' sum)
                info["model"]["experts"]["routing"]["shared_scale"] = c.moe_shared_scale;
        }
        // (the local layers and those with RoPE, where the file says them a layer; a NextN block past n_layer is not
        // run)
        auto layers_where = [&](const std::vector<bool>& v) {
            std::vector<int64_t> at;
            for (size_t l = 0; l < v.size() && l < static_cast<size_t>(c.n_layer); ++l)
                if (v[l]) at.push_back(static_cast<int64_t>(l));
            return at;
        };
        if (c.sliding_window > 0) {
            info["model"]["sliding_window"] = {{"window", c.sliding_window}, {"swa_pattern", c.swa_pattern}};
            if (!c.local_layers.empty())  // (a pattern of any kind)
                info["model"]["sliding_window"]["local_layers"] = layers_where(c.local_layers);
            if (c.n_head_local > 0) info["model"]["sliding_window"]["n_head_local"] = c.n_head_local;
        }
        if (!c.rope_layers.empty()) info["model"]["rope_layers"] = layers_where(c.rope_layers);
        if (c.altup())  // (gemma3n)
            info["model"]["altup"] = {{"streams", c.n_altup}, {"per_layer_input", c.n_embd_per_layer},
                                      {"shared_kv_layers", c.n_kv_shared}, {"sparse_layers", c.n_sparse_layers}};
        if (c.attn_chunk > 0)  // (llama4)
            info["model"]["chunked_attention"] = {{"chunk", c.attn_chunk}, {"pattern", c.attn_chunk_pattern},
                                                  {"no_rope_step", c.no_rope_step}, {"qk_norm", c.qk_l2_norm},
                                                  {"moe_layer_step", c.moe_layer_step}};
        if (c.mamba2()) {
            int64_t n_mamba = 0;
            for (int64_t l = 0; l < c.n_layer; ++l) n_mamba += c.layer_is_recurrent(l) ? 1 : 0;
            info["model"]["mamba2"] = {{"layers", n_mamba}, {"conv", c.ssm_conv}, {"n_group", c.ssm_n_k_heads},
                                       {"n_head", c.ssm_n_v_heads}, {"head_dim", c.ssm_head_v},
                                       {"d_state", c.ssm_head_k}};
            if (c.ssm_beside_attn) info["model"]["mamba2"]["beside_attention"] = true;  // (falcon-h1)
            if (!c.layer_blocks.empty()) {  // (nemotron_h: a layer one block; the FFNs alone)
                int64_t n_ffn = 0;
                for (int64_t l = 0; l < c.n_layer; ++l) n_ffn += c.layer_has_mixer(l) ? 0 : 1;
                info["model"]["mamba2"]["ffn_layers"] = n_ffn;
                info["model"]["mamba2"]["attention_layers"] = c.n_layer - n_ffn - n_mamba;
            }
        } else if (c.mamba1()) {
            int64_t n_mamba = 0;
            for (int64_t l = 0; l < c.n_layer; ++l) n_mamba += c.layer_is_recurrent(l) ? 1 : 0;
            info["model"]["mamba1"] = {{"layers", n_mamba}, {"conv", c.ssm_conv}, {"d_inner", c.ssm_d_inner()},
                                       {"d_state", c.ssm_head_k}, {"dt_rank", c.ssm_dt_rank},
                                       {"dt_b_c_rms", c.ssm_dt_b_c_rms}};
        } else if (!c.short_conv_layers.empty()) {  // (lfm2)
            std::vector<int64_t> conv;
            for (int64_t l = 0; l < c.n_layer; ++l)
                if (c.layer_is_short_conv(l)) conv.push_back(l);
            info["model"]["short_conv"] = {{"layers", conv}, {"conv", c.ssm_conv}};
        } else if (c.recurrent()) {
            info["model"]["recurrent"] = {{"full_attention_interval", c.full_attn_interval}, {"conv", c.ssm_conv},
                                          {"n_k_heads", c.ssm_n_k_heads}, {"n_v_heads", c.ssm_n_v_heads},
                                          {"head_dim", c.ssm_head_k}};
        }
        if (c.mla())  // (deepseek2)
            info["model"]["mla"] = {{"kv_lora_rank", c.kv_lora_rank}, {"q_lora_rank", c.q_lora_rank},
                                    {"head_dim_v", c.head_dim_v}, {"n_leading_dense", c.n_leading_dense}};
        if (c.dsa()) {  // (deepseek32, glm-dsa: the layers with an indexer of their own)
            int64_t own = 0;
            for (int64_t l = 0; l < c.n_layer; ++l) own += c.layer_indexer(l) ? 1 : 0;
            info["model"]["sparse_attention"] = {{"indexer_heads", c.indexer_n_head},
                                                 {"indexer_head_dim", c.indexer_head_dim},
                                                 {"top_k", c.indexer_top_k}, {"indexer_layers", own}};
        }
        if (!w.layers.empty() && !w.layers[0].attn_sinks.empty()) info["model"]["attn_sinks"] = true;
        if (c.layer_norm || c.parallel_blocks)  // (command-r, cohere2)
            info["model"]["blocks"] = {{"layer_norm", c.layer_norm}, {"parallel", c.parallel_blocks},
                                       {"logit_scale", c.logit_mul}};
        if (!c.ffn_gated())  // (nemotron_h, arcee: ReLU²; apertus: xIELU)
            info["model"]["ffn"] = c.ffn_act == ModelConfig::Activation::xielu ? "xielu, ungated" : "relu_sqr, ungated";
        if (c.qk_norm_after_rope) info["model"]["qk_norm"] = "after RoPE";  // (hunyuan)
        info["runnable"] = true;
    } else {
        info["runnable"] = false;
    }
    return info;
}

namespace {
std::string mib(size_t bytes) { return fmt::format("{:.2f} MiB", bytes / 1048576.0); }
// A string from the file, safe for a terminal (metadata may hold control bytes and escape sequences).
std::string text(const json& v) { return escape_for_terminal(v.get<std::string>()); }
// A JSON value on one line, with invalid UTF-8 replaced and control characters escaped.
std::string dump(const json& v) { return escape_for_terminal(v.dump(-1, ' ', false, json::error_handler_t::replace)); }
}  // namespace

std::string render_model_info(const json& info) {
    std::string out;
    auto line = [&](std::string_view key, const std::string& value) { out += fmt::format("{:<16}{}\n", key, value); };
    const std::string split = info.contains("parts") ? fmt::format(" in {} parts", info["parts"].size()) : "";
    line("file", fmt::format("{} ({}{}, GGUF v{})", text(info["file"]), mib(info["file_size"]), split,
                             info["gguf_version"].get<int>()));
    line("architecture", info["architecture"].is_null() ? "(none)" : text(info["architecture"]));
    if (info.contains("name")) line("name", text(info["name"]));
    if (!info["hyperparameters"].empty()) {
        std::vector<std::string> parts;
        for (const auto& [k, v] : info["hyperparameters"].items())
            parts.push_back(fmt::format("{}={}", escape_for_terminal(k), dump(v)));
        line("hyperparameters", fmt::format("{}", fmt::join(parts, " ")));
    }
    const json& tok = info["tokenizer"];
    if (tok.contains("model")) {
        std::string desc = text(tok["model"]);
        if (tok.contains("pre")) desc += fmt::format(" (pre-tokenizer {})", text(tok["pre"]));
        if (tok.contains("vocab_size")) desc += fmt::format(", {} tokens", tok["vocab_size"].get<size_t>());
        if (tok.contains("bos_token_id")) desc += fmt::format(", bos {}", tok["bos_token_id"].get<int64_t>());
        if (tok.contains("eos_token_id")) desc += fmt::format(", eos {}", tok["eos_token_id"].get<int64_t>());
        line("tokenizer", desc);
    } else {
        line("tokenizer", "(none)");
    }
    line("chat template", info["chat_template"]["present"].get<bool>()
                              ? fmt::format("yes ({} bytes)", info["chat_template"]["bytes"].get<size_t>())
                              : "no");
    std::vector<std::string> mix;
    for (const auto& [type, m] : info["tensor_types"].items())
        mix.push_back(fmt::format("{} x{} ({})", type, m["count"].get<int>(), mib(m["bytes"])));
    line("tensors", fmt::format("{}, {}{}{}", info["tensor_count"].get<size_t>(), mib(info["tensor_bytes"]),
                                mix.empty() ? "" : ": ", fmt::join(mix, ", ")));
    if (info["runnable"].get<bool>()) {
        const json& m = info["model"];
        line("model", fmt::format("n_vocab={} n_embd={} n_layer={} n_head={} n_head_kv={} head_dim={} n_ff={} "
                                  "n_ctx_train={}{}",
                                  m["n_vocab"].dump(), m["n_embd"].dump(), m["n_layer"].dump(), m["n_head"].dump(),
                                  m["n_head_kv"].dump(), m["head_dim"].dump(), m["n_ff"].dump(),
                                  m["n_ctx_train"].dump(), m["output_tied"].get<bool>() ? " (output tied)" : ""));
        if (m.contains("experts"))
            line("experts", fmt::format("n_expert={} n_expert_used={} n_ff_exp={}{}", m["experts"]["n_expert"].dump(),
                                        m["experts"]["n_expert_used"].dump(), m["experts"]["n_ff_exp"].dump(),
                                        m["experts"].contains("n_ff_shexp")
                                            ? " n_ff_shexp=" + m["experts"]["n_ff_shexp"].dump()
                                            : ""));
        if (m.contains("ffn")) line("ffn", m["ffn"].get<std::string>());            // (ungated: ReLU², xIELU)
        if (m.contains("qk_norm")) line("qk norms", m["qk_norm"].get<std::string>());  // (hunyuan: after RoPE)
        if (m.contains("mla"))
            line("attention", fmt::format("multi-head latent (MLA): a latent of {} cached a position, query rank {}, "
                                          "value heads of {}; {} leading dense layers",
                                          m["mla"]["kv_lora_rank"].dump(), m["mla"]["q_lora_rank"].dump(),
                                          m["mla"]["head_dim_v"].dump(), m["mla"]["n_leading_dense"].dump()));
        if (m.contains("sparse_attention"))
            line("sparse attn", fmt::format("DeepSeek Sparse Attention: a lightning indexer of {} heads of {}, the top "
                                            "{} positions attended",
                                            m["sparse_attention"]["indexer_heads"].dump(),
                                            m["sparse_attention"]["indexer_head_dim"].dump(),
                                            m["sparse_attention"]["top_k"].dump()) +
                                (m["sparse_attention"]["indexer_layers"].get<int64_t>() < m["n_layer"].get<int64_t>()
                                     ? fmt::format(" (an indexer in {} of the layers, the others reusing the choice "
                                                   "before)", m["sparse_attention"]["indexer_layers"].dump())
                                     : ""));
        if (m.contains("experts") && m["experts"].contains("routing")) {
            const json& r = m["experts"]["routing"];
            const auto groups = r["groups"].get<int64_t>();  // (expert groups: the used ones of them)
            line("routing", fmt::format("gating={}{}, normalized={} scale={} leading_dense={}{}{}",
                                        r["gating"].get<std::string>(),
                                        r["selection_bias"].get<bool>() ? " with a selection bias" : "",
                                        r["normalized"].dump(), r["scale"].dump(), r["leading_dense"].dump(),
                                        groups > 1 ? fmt::format(" groups={} of {}", r["groups_used"].dump(), groups)
                                                   : "",
                                        r.contains("shared_scale")
                                            ? " shared_scale=" + r["shared_scale"].dump()
                                            : ""));
        }
        if (m.contains("altup")) {
            const json& a = m["altup"];
            line("altup", fmt::format("streams={} per_layer_input={} shared_kv_layers={} sparse_layers={} (Laurel)",
                                      a["streams"].dump(), a["per_layer_input"].dump(), a["shared_kv_layers"].dump(),
                                      a["sparse_layers"].dump()));
        }
        if (m.contains("chunked_attention")) {
            const json& a = m["chunked_attention"];
            const auto pattern = a["pattern"].get<int64_t>();  // (0: every layer chunked)
            const std::string where =
                pattern == 0 ? "every layer" : fmt::format("{} layers of {}", pattern - 1, pattern);
            line("attention", fmt::format("chunks of {} on {} (every {}th without RoPE, with the temperature), "
                                          "qk_norm={}; experts every {} layer(s), the sigmoid of the chosen logit on "
                                          "their input",
                                          a["chunk"].dump(), where, a["no_rope_step"].dump(), a["qk_norm"].dump(),
                                          a["moe_layer_step"].dump()));
        }
        if (m.contains("recurrent"))
            line("recurrent", fmt::format("gated delta nets, every {}th layer full attention: conv={} n_k_heads={} "
                                          "n_v_heads={} head_dim={}",
                                          m["recurrent"]["full_attention_interval"].dump(),
                                          m["recurrent"]["conv"].dump(), m["recurrent"]["n_k_heads"].dump(),
                                          m["recurrent"]["n_v_heads"].dump(), m["recurrent"]["head_dim"].dump()));
        if (m.contains("mamba2")) {
            const auto& r = m["mamba2"];
            const std::string others =
                r["layers"] == m["n_layer"] && !r.contains("beside_attention")
                    ? "no attention, no FFN"  // (mamba2)
                : r.contains("ffn_layers")
                    ? fmt::format("attention in {}, an FFN alone in {}", r["attention_layers"].dump(),
                                  r["ffn_layers"].dump())
                    : r.contains("beside_attention") ? "attention beside it in each"
                                                     : "the others attention";
            line("recurrent", fmt::format("Mamba-2 in {} layers, {}: conv={} n_group={} n_head={} "
                                          "head_dim={} d_state={}", r["layers"].dump(), others, r["conv"].dump(),
                                          r["n_group"].dump(), r["n_head"].dump(), r["head_dim"].dump(),
                                          r["d_state"].dump()));
        }
        if (m.contains("mamba1")) {
            const auto& r = m["mamba1"];
            line("recurrent", fmt::format("Mamba-1 in {} layers{}: conv={} d_inner={} d_state={} dt_rank={}{}",
                                          r["layers"].dump(),
                                          r["layers"] == m["n_layer"] ? ", no attention, no FFN" : "",
                                          r["conv"].dump(), r["d_inner"].dump(), r["d_state"].dump(),
                                          r["dt_rank"].dump(),
                                          r["dt_b_c_rms"].get<bool>() ? ", dt/B/C RMS-normed" : ""));
        }
        if (info.contains("memory")) {
            const json& b = info["memory"];
            const size_t state = b["recurrent_bytes_per_sequence"].get<size_t>();
            line("memory", fmt::format("a sequence's KV cache {:.2f} KiB a position ({} of {} layers, f16), {} at the "
                                       "training context{}", b["kv_bytes_per_position"].get<size_t>() / 1024.0,
                                       b["kv_layers"].dump(), m["n_layer"].dump(),
                                       mib(b["n_ctx_train_bytes"].get<size_t>()),
                                       state > 0 ? fmt::format(" with its recurrent state of {}", mib(state)) : ""));
        }
        if (m.contains("short_conv")) {
            const auto layers = m["short_conv"]["layers"].get<std::vector<int64_t>>();
            line("recurrent", fmt::format("short gated convs at layers {}, the others attention: conv={}",
                                          fmt::join(layers, ","), m["short_conv"]["conv"].dump()));
        }
        if (m.contains("blocks"))
            line("blocks", fmt::format("layer_norm={} parallel={} logit_scale={}", m["blocks"]["layer_norm"].dump(),
                                       m["blocks"]["parallel"].dump(), m["blocks"]["logit_scale"].dump()));
        if (m.contains("sliding_window") || m.contains("attn_sinks")) {
            std::string a;
            const json* sw = m.contains("sliding_window") ? &m["sliding_window"] : nullptr;
            if (sw && sw->contains("local_layers"))
                a = fmt::format("sliding_window={} local_layers={}", (*sw)["window"].dump(),
                                fmt::join((*sw)["local_layers"].get<std::vector<int64_t>>(), ","));
            else if (sw)
                a = fmt::format("sliding_window={} swa_pattern={}", (*sw)["window"].dump(),
                                (*sw)["swa_pattern"].dump());
            if (m.contains("rope_layers"))
                a += fmt::format(" rope_layers={}", fmt::join(m["rope_layers"].get<std::vector<int64_t>>(), ","));
            if (m.contains("sliding_window") && m["sliding_window"].contains("n_head_local"))
                a += fmt::format(" n_head_local={}", m["sliding_window"]["n_head_local"].dump());
            if (m.contains("attn_sinks")) a += a.empty() ? "sinks" : " sinks";
            line("attention", a);
        }
    } else {
        std::string why = "architecture unsupported";
        if (info.contains("not_runnable")) why = text(info["not_runnable"]);
        line("model", info["tensor_count"].get<size_t>() == 0 ? "vocabulary only (no tensors)"
                                                               : fmt::format("not runnable by quill: {}", why));
    }
    if (info.contains("tensors")) {
        out += fmt::format("\n{:<40} {:<6} {:<24} {:>12} {:>12}\n", "name", "type", "shape", "bytes", "offset");
        for (const auto& t : info["tensors"])
            out += fmt::format("{:<40} {:<6} {:<24} {:>12} {:>12}\n", text(t["name"]),
                               t["type"].get<std::string>(),
                               fmt::format("[{}]", fmt::join(t["shape"].get<std::vector<int64_t>>(), ", ")),
                               t["bytes"].get<size_t>(), t["offset"].get<size_t>());
    }
    return out;
}

}  // namespace quill
