#include "engine/reference/reference_backend.h"

#include "engine/error.h"
#include "engine/format/quant.h"
#include "engine/model/delta_net_layout.h"
#include "engine/model/moe_route.h"
#include "engine/runtime/kv_size.h"

#include <algorithm>
#include <cmath>

namespace quill {

namespace {

// sum_i a[i] b[i] in double, in four interleaved partial sums (independent additions run about 3x faster than
// one chain; in double the order is immaterial at the precision the tests need).
double dot(const float* a, const double* b, int64_t n) {
    double s[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int u = 0; u < 4; ++u) s[u] += static_cast<double>(a[i + u]) * b[i + u];
    for (; i < n; ++i) s[0] += static_cast<double>(a[i]) * b[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

// y = W x for W [n_out rows, n_in] of any type the file holds: each row dequantized to float, the dot in double.
void matvec(const TensorView& w, const std::vector<double>& x, std::vector<double>& y, std::vector<float>& row) {
    const int64_t n_in = w.ne[0], n_out = w.n_rows();
    QUILL_CHECK(static_cast<int64_t>(x.size()) == n_in, "{}: input has {} values, rows have {}", w.name, x.size(), n_in);
    row.resize(n_in);
    y.resize(n_out);
    for (int64_t r = 0; r < n_out; ++r) {
        dequantize_row(w.type, w.row(r), row.data(), n_in);
        y[r] = dot(row.data(), x.data(), n_in);
    }
}

// out = x / sqrt(mean(x^2) + eps) * w
void rms_norm(const std::vector<double>& x, const std::vector<float>& w, double eps, std::vector<double>& out) {
    double ss = 0.0;
    for (double v : x) ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
    out.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * scale * w[i];
}

// y = (x - mean(x)) / sqrt(var(x) + eps) * w over d values (y may be x): LayerNorm without bias (command-r, cohere2)
void layer_norm(const double* x, const float* w, double eps, size_t d, double* y) {
    double mean = 0.0, var = 0.0;
    for (size_t i = 0; i < d; ++i) mean += x[i];
    mean /= static_cast<double>(d);
    for (size_t i = 0; i < d; ++i) var += (x[i] - mean) * (x[i] - mean);
    const double scale = 1.0 / std::sqrt(var / static_cast<double>(d) + eps);
    for (size_t i = 0; i < d; ++i) y[i] = (x[i] - mean) * scale * w[i];
}

// out = the model's norm of x times w: RMSNorm, or LayerNorm (ModelConfig::layer_norm)
void model_norm(const ModelConfig& c, const std::vector<double>& x, const std::vector<float>& w,
                std::vector<double>& out) {
    if (!c.layer_norm) return rms_norm(x, w, c.rms_eps, out);
    out.resize(x.size());
    layer_norm(x.data(), w.data(), c.rms_eps, x.size(), out.data());
}

// The same over each of the rows of d values in x, in place, times w where given (else 1): gemma3's Q and K norms
// per head, gemma4's V norm.
void rms_norm_rows(std::vector<double>& x, size_t d, const float* w, double eps) {
    for (size_t r = 0; r * d < x.size(); ++r) {
        double ss = 0.0;
        for (size_t i = 0; i < d; ++i) ss += x[r * d + i] * x[r * d + i];
        const double scale = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
        for (size_t i = 0; i < d; ++i) x[r * d + i] *= scale * (w ? w[i] : 1.0f);
    }
}
void rms_norm_rows(std::vector<double>& x, const std::vector<float>& w, double eps) {
    rms_norm_rows(x, w.size(), w.data(), eps);
}

// A recurrent layer's causal conv for one token: out_c = silu(sum_i window_c[i] w_c[i] + x_c w_c[taps - 1] + b_c)
// (b: nullptr, none); each channel's window [taps - 1] then moves on by x_c. window [nch, taps - 1], w [nch, taps].
void conv_silu(double* window, const float* w, const float* b, const double* x, int64_t nch, int64_t taps,
               std::vector<double>& out) {
    out.resize(static_cast<size_t>(nch));
    for (int64_t ch = 0; ch < nch; ++ch) {
        double* win = window + ch * (taps - 1);
        const float* tap = w + ch * taps;
        double s = x[ch] * tap[taps - 1] + (b ? b[ch] : 0.0);
        for (int64_t i = 0; i < taps - 1; ++i) s += win[i] * tap[i];
        out[ch] = s / (1.0 + std::exp(-s));
        for (int64_t i = 0; i + 1 < taps - 1; ++i) win[i] = win[i + 1];
        if (taps > 1) win[taps - 2] = x[ch];
    }
}

// A recurrent layer's state (the gated delta net's, Mamba-2's, Mamba-1's) at a sequence's position 0: the conv's window
// [ssm_conv_channels, ssm_conv - 1] and S [ssm_n_v_heads, ssm_head_v, ssm_head_k] zero.
void start_afresh(const ModelConfig& c, double* window, double* state) {
    std::fill_n(window, c.ssm_conv_channels() * (c.ssm_conv - 1), 0.0);
    std::fill_n(state, c.ssm_n_v_heads * c.ssm_head_v * c.ssm_head_k, 0.0);
}

// Rotates, in each head of x [n_heads, head_dim], the pairs of its first n_rot dims by the angles pos * inv_freq[i]:
// pair i is (2i, 2i+1) in llama's layout, (i, i + n_rot/2) in qwen2's (NEOX); the rotated pairs scaled by
// rope_mscale (a local layer's: ModelConfig::layer_rope_mscale). head_dim and n_rot are the layer's
// (ModelConfig::layer_head_dim, layer_n_rot).
// (neox: NEOX pairs whatever the model's; deepseek32's indexer)
void rope(std::vector<double>& x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const ModelConfig& c,
          const std::vector<double>& inv_freq, int32_t pos, bool local = false, bool neox = false) {
    const int64_t half = n_rot / 2;
    const double m = c.layer_rope_mscale(local);
    neox = neox || c.rope == ModelConfig::Rope::neox;
    for (int64_t i = 0; i < half; ++i) {
        const double theta = static_cast<double>(pos) * inv_freq[i];
        const double cos_t = std::cos(theta) * m, sin_t = std::sin(theta) * m;
        const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        for (int64_t h = 0; h < n_heads; ++h) {
            double& a = x[h * head_dim + i0];
            double& b = x[h * head_dim + i1];
            const double a0 = a, b0 = b;
            a = a0 * cos_t - b0 * sin_t;
            b = a0 * sin_t + b0 * cos_t;
        }
    }
}

// p = exp(s - m) / (sum exp(s - m) + exp(sink - m)), m = max(max s, sink), in place over the first n values: a
// softmax whose denominator also counts a value-less logit `sink` (gpt-oss's attention sinks; -inf: none)
void softmax(std::vector<double>& s, int64_t n, double sink = -INFINITY) {
    const double m = std::max(*std::max_element(s.begin(), s.begin() + n), sink);
    double sum = std::exp(sink - m);
    for (int64_t j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - m);
        sum += s[j];
    }
    for (int64_t j = 0; j < n; ++j) s[j] /= sum;
}

// gelu(g) = g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), the tanh form
double gelu(double g) {
    const double k = std::sqrt(2.0 / 3.14159265358979323846);
    return 0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g)));
}

// v as the nearest fp16 value (through float, as a cache of halves stores it)
double round_to_fp16(double v) { return fp16_to_fp32(fp32_to_fp16(static_cast<float>(v))); }

}  // namespace

ReferenceBackend::ReferenceBackend(const ModelConfig& config, const Weights& weights,
                                   const ReferenceBackendOptions& options)
    : config_(config),
      weights_(weights),
      layers_(options.layers.size() > 0 ? options.layers : LayerRange{0, config.n_layer}),
      kv_shape_{kv_cache_layers(config, layers_), options.n_slots, options.n_ctx, config.kv_heads(),
                config.kv_head_dim(), options.kv_type} {
    check_kv_size(options.n_ctx, options.n_slots);
    for (int64_t l = 0; l < config.n_layer; ++l)
        kv_entry_.push_back(config.kv_index(l) - config.kv_layers_before(layers_.begin));
    QUILL_CHECK(layers_.begin >= 0 && layers_.end <= config.n_layer && layers_.size() > 0, "layers {}-{} of {}",
                layers_.begin, layers_.end - 1, config.n_layer);
    if (config.dsa() && !config.layer_indexer(layers_.begin))  // (glm-dsa: as the CPU backend refuses it)
        throw UsageError(fmt::format("layers split at layer {}, which takes the positions it attends to from an "
                                     "earlier layer's indexer: split at a layer with an indexer of its own",
                                     layers_.begin));
    // theta_i(pos) = pos * freq_scale * base^(-2i / n_rot) / rope_freqs[i] (or phi3's long or short factors, by the
    // context; gemma4: on the global layers only); YaRN leaves the share yarn_ramp(i) of each frequency unscaled; a
    // pair of M-RoPE's extra section sits at position 0 for text (0)
    const std::vector<float>& divisors = weights.rope_divisors(config, options.n_ctx);
    auto inv_freq = [&](double base, double scale, int64_t n_rot, bool divide) {
        std::vector<double> f(n_rot / 2);
        for (size_t i = 0; i < f.size(); ++i) {
            const double exponent = -2.0 * static_cast<double>(i) / static_cast<double>(n_rot);
            const double ramp = config.yarn_ramp(static_cast<int64_t>(i));
            f[i] = (scale * (1.0 - ramp) + ramp) * std::pow(base, exponent);
            if (divide && !divisors.empty()) f[i] /= divisors[i];
            if (config.rope_pair_still(static_cast<int64_t>(i))) f[i] = 0.0;
        }
        return f;
    };
    inv_freq_ = inv_freq(config.rope_base, config.rope_freq_scale, config.n_rot, true);
    inv_freq_local_ = inv_freq(config.rope_base_local, config.rope_freq_scale_local,
                               config.n_rot_local > 0 ? config.n_rot_local : config.n_rot,
                               !config.rope_divisors_global_only);
    const size_t cache =
        static_cast<size_t>(kv_shape_.n_layer * options.n_slots * options.n_ctx * config.n_embd_kv());
    k_cache_.assign(cache, 0.0);
    v_cache_.assign(cache, 0.0);
    written_.assign(static_cast<size_t>(options.n_slots * options.n_ctx), 0);
    score_.resize(options.n_ctx);
    if (config.recurrent()) {  // (qwen35: a state for every held layer, the full-attention ones' unused)
        const auto held = static_cast<size_t>(layers_.size() * options.n_slots);
        conv_state_.assign(held * config.ssm_conv_channels() * (config.ssm_conv - 1), 0.0);
        ssm_state_.assign(held * config.ssm_n_v_heads * config.ssm_head_v * config.ssm_head_k, 0.0);
        state_pos_.assign(static_cast<size_t>(options.n_slots), 0);
    }
}

// (a shared-KV layer's are those of the layer it shares: ModelConfig::kv_layer)
double* ReferenceBackend::cache_row(std::vector<double>& cache, int64_t layer, int64_t slot, int64_t pos) {
    return cache.data() + kv_shape_.offset(kv_entry_[static_cast<size_t>(layer)], slot, pos);
}

void ReferenceBackend::copy_kv(int32_t src, int32_t dst, int64_t begin, int64_t end) {
    check_copy(kv_shape_, src, dst, begin, end);
    const auto n = static_cast<std::ptrdiff_t>((end - begin) * config_.n_embd_kv());
    for (int64_t l = layers_.begin; l < layers_.end; ++l) {
        if (!config_.layer_has_kv(l)) continue;
        for (std::vector<double>* cache : {&k_cache_, &v_cache_})
            std::copy_n(cache_row(*cache, l, src, begin), n, cache_row(*cache, l, dst, begin));
    }
    const auto at = [&](int32_t slot) { return written_.begin() + slot * kv_shape_.n_ctx + begin; };
    std::copy_n(at(src), end - begin, at(dst));
}

void ReferenceBackend::forward(const Batch& batch, std::span<float> logits) {
    QUILL_CHECK(layers_.size() == config_.n_layer, "forward() on a backend holding layers {}-{} of {}", layers_.begin,
                layers_.end - 1, config_.n_layer);
    check_batch(batch, config_, kv_shape_, logits);
    if (config_.recurrent()) advance_recurrent_positions(batch, state_pos_);  // (first: a refusal changes nothing)
    mark_written(batch);
    float* out = logits.data();
    for (const BatchToken& t : batch.tokens) {
        forward_token(t, t.logits ? out : nullptr);
        if (t.logits) out += config_.n_vocab;
    }
}

void ReferenceBackend::embed_tokens(const Batch& batch, std::span<float> hidden) {
    check_batch(batch, config_, kv_shape_);
    QUILL_CHECK(hidden.size() >= batch.tokens.size() * config_.n_embd, "embed: {} floats", hidden.size());
    for (size_t i = 0; i < batch.tokens.size(); ++i) {
        embed_token(batch.tokens[i]);
        std::copy(x_.begin(), x_.end(), hidden.begin() + static_cast<std::ptrdiff_t>(i * config_.n_embd));
    }
}

void ReferenceBackend::forward_layers(const Batch& batch, std::span<float> hidden) {
    QUILL_CHECK(!config_.altup(), "forward_layers: gemma3n's AltUp streams do not pass between ranges of layers");
    check_batch(batch, config_, kv_shape_);
    QUILL_CHECK(hidden.size() >= batch.tokens.size() * config_.n_embd, "forward_layers: {} floats", hidden.size());
    if (config_.recurrent()) advance_recurrent_positions(batch, state_pos_);  // (first: a refusal changes nothing)
    mark_written(batch);
    for (size_t i = 0; i < batch.tokens.size(); ++i) {
        float* h = hidden.data() + i * config_.n_embd;
        x_.assign(h, h + config_.n_embd);
        per_layer_inputs(batch.tokens[i]);
        for (int64_t l = layers_.begin; l < layers_.end; ++l) layer_token(batch.tokens[i], l);
        std::copy(x_.begin(), x_.end(), h);
    }
}

void ReferenceBackend::output_logits(const Batch& batch, std::span<const float> hidden, std::span<float> logits) {
    QUILL_CHECK(layers_.end == config_.n_layer, "output_logits on a backend holding layers {}-{} of {}",
                layers_.begin, layers_.end - 1, config_.n_layer);
    check_batch(batch, config_, kv_shape_, logits);
    float* out = logits.data();
    for (size_t i = 0; i < batch.tokens.size(); ++i) {
        if (!batch.tokens[i].logits) continue;
        const float* h = hidden.data() + i * config_.n_embd;
        x_.assign(h, h + config_.n_embd);
        output_token(out);
        out += config_.n_vocab;
    }
}

void ReferenceBackend::mark_written(const Batch& batch) {
    // Every position a token attends to is filled by an earlier call or an earlier token of this batch.
    std::vector<uint8_t> written = written_;
    for (const BatchToken& t : batch.tokens) {
        const auto row = written.begin() + static_cast<std::ptrdiff_t>(t.slot) * kv_shape_.n_ctx;
        const auto gap = std::find(row, row + t.pos, uint8_t{0});
        if (gap != row + t.pos)
            throw UsageError(fmt::format("the token at position {} of slot {} would attend to position {}, which no "
                                         "token has filled", t.pos, t.slot, gap - row));
        row[t.pos] = 1;
    }
    written_ = std::move(written);
}

void ReferenceBackend::forward_token(const BatchToken& t, float* logits) {
    embed_token(t);
    per_layer_inputs(t);
    const bool altup = config_.altup();
    if (altup) altup_embed();
    for (int64_t l = 0; l < config_.n_layer; ++l) {
        if (altup) altup_predict(l);
        layer_token(t, l);
        if (altup) altup_correct(l);
    }
    if (altup) altup_merge();
    if (logits) output_token(logits);
}

namespace {

// |v|, the Euclidean norm of n values
double magnitude(const double* v, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += v[i] * v[i];
    return std::sqrt(s);
}

// y = W_k x rescaled to |target|: y * |target| / |y| (AltUp's projections between the streams)
void projected_to(const TensorView& w, const std::vector<double>& x, double target, std::vector<double>& y,
                  std::vector<float>& row) {
    matvec(w, x, y, row);
    const double m = magnitude(y.data(), static_cast<int64_t>(y.size()));
    for (double& v : y) v = v * target / m;
}

}  // namespace

// s_0 = x0; s_k = W_altup_proj[k-1] x0 * |x0| / |W_altup_proj[k-1] x0| for k > 0
void ReferenceBackend::altup_embed() {
    const ModelConfig& c = config_;
    const int64_t d = c.n_embd;
    streams_.assign(static_cast<size_t>(c.n_altup * d), 0.0);
    std::copy(x_.begin(), x_.end(), streams_.begin());
    const double target = magnitude(x_.data(), d);
    std::vector<double> y;
    for (int64_t k = 1; k < c.n_altup; ++k) {
        projected_to(weights_.altup_proj_k[static_cast<size_t>(k - 1)], x_, target, y, row_);
        std::copy(y.begin(), y.end(), streams_.begin() + k * d);
    }
}

void ReferenceBackend::altup_router(const LayerWeights& L, const std::vector<double>& v,
                                    std::vector<double>& r) const {
    const ModelConfig& c = config_;
    std::vector<double> xn;
    rms_norm(v, L.altup_router_norm, c.rms_eps, xn);
    for (double& x : xn) x /= static_cast<double>(c.n_embd);
    r.assign(static_cast<size_t>(c.n_altup), 0.0);
    for (int64_t j = 0; j < c.n_altup; ++j)
        r[j] = std::tanh(dot(L.altup_router.data() + j * c.n_embd, xn.data(), c.n_embd));
}

// p_j = s_j + sum_k C[j * n_altup + k] s_k, C = W_predict r(s_act); x = p_act
void ReferenceBackend::altup_predict(int64_t l) {
    const ModelConfig& c = config_;
    const LayerWeights& L = weights_.layers[l];
    const int64_t d = c.n_embd, a = c.n_altup, act = c.altup_active;
    std::vector<double> active(streams_.begin() + act * d, streams_.begin() + (act + 1) * d), r;
    altup_router(L, active, r);
    pred_ = streams_;
    for (int64_t j = 0; j < a; ++j)
        for (int64_t k = 0; k < a; ++k) {
            const double coef = dot(L.altup_predict_coef.data() + (j * a + k) * a, r.data(), a);
            for (int64_t i = 0; i < d; ++i) pred_[j * d + i] += coef * streams_[k * d + i];
        }
    x_.assign(pred_.begin() + act * d, pred_.begin() + (act + 1) * d);
}

// With a = x (the layer's output): s_j = p_j + (a - p_act) ((W_correct r(a))_j + 1); then
// s_k += rms_norm(W_proj (gelu(W_gate (s_act * correct_scale)) * ple[l])) * post_norm for k > 0
void ReferenceBackend::altup_correct(int64_t l) {
    const ModelConfig& c = config_;
    const LayerWeights& L = weights_.layers[l];
    const int64_t d = c.n_embd, a = c.n_altup, act = c.altup_active, dp = c.n_embd_per_layer;
    std::vector<double> r;
    altup_router(L, x_, r);
    streams_ = pred_;
    for (int64_t j = 0; j < a; ++j) {
        const double coef = dot(L.altup_correct_coef.data() + j * a, r.data(), a) + 1.0;
        for (int64_t i = 0; i < d; ++i) streams_[j * d + i] += (x_[i] - pred_[act * d + i]) * coef;
    }
    std::vector<double> first(static_cast<size_t>(d));
    for (int64_t i = 0; i < d; ++i) first[i] = streams_[act * d + i] * L.altup_correct_scale[i];
    matvec(L.per_layer_inp_gate, first, ple_g_, row_);
    for (int64_t i = 0; i < dp; ++i) ple_g_[i] = gelu(ple_g_[i]) * ple_[l * dp + i];
    matvec(L.per_layer_proj, ple_g_, ple_x_, row_);
    rms_norm_rows(ple_x_, L.per_layer_post_norm, c.rms_eps);
    for (int64_t k = 1; k < a; ++k)
        for (int64_t i = 0; i < d; ++i) streams_[k * d + i] += ple_x_[i];
}

// x = (s_0 + sum_{k>0} W_unembd[k-1] s_k * |s_act| / |W_unembd[k-1] s_k|) / n_altup
void ReferenceBackend::altup_merge() {
    const ModelConfig& c = config_;
    const int64_t d = c.n_embd, act = c.altup_active;
    const double target = magnitude(streams_.data() + act * d, d);
    x_.assign(streams_.begin(), streams_.begin() + d);
    std::vector<double> s, y;
    for (int64_t k = 1; k < c.n_altup; ++k) {
        s.assign(streams_.begin() + k * d, streams_.begin() + (k + 1) * d);
        projected_to(weights_.altup_unembd_k[static_cast<size_t>(k - 1)], s, target, y, row_);
        for (int64_t i = 0; i < d; ++i) x_[i] += y[i];
    }
    for (double& v : x_) v /= static_cast<double>(c.n_altup);
}

// x = token_embd[token] * embd_scale (gemma3: sqrt(n_embd))
void ReferenceBackend::embed_token(const BatchToken& t) {
    const ModelConfig& c = config_;
    row_.resize(c.n_embd);
    dequantize_row(weights_.tok_embd.type, weights_.tok_embd.row(t.token), row_.data(), c.n_embd);
    x_.resize(c.n_embd);
    for (int64_t i = 0; i < c.n_embd; ++i) x_[i] = static_cast<double>(row_[i]) * c.embd_scale;
}

// ple[l] = (rms_norm(W_mp[l] x0 / sqrt(n_embd)) * proj_norm + per_layer_token_embd[token][l] * sqrt(n_embd_per_layer))
// / sqrt(2) for the layers held, x0 the token's scaled embedding
void ReferenceBackend::per_layer_inputs(const BatchToken& t) {
    const ModelConfig& c = config_;
    const int64_t d = c.n_embd_per_layer;
    if (d == 0) return;
    const std::vector<double> x = x_;
    embed_token(t);
    ple_x_ = x_;
    x_ = x;
    const TensorView& table = weights_.per_layer_tok_embd;
    std::vector<float> row(static_cast<size_t>(c.n_layer * d));
    dequantize_row(table.type, table.row(t.token), row.data(), c.n_layer * d);
    ple_.assign(static_cast<size_t>(c.n_layer * d), 0.0);
    std::vector<double> p;
    for (int64_t l = layers_.begin; l < layers_.end; ++l) {
        matvec(weights_.per_layer_model_proj.rows(l * d, d, "layer"), ple_x_, p, row_);
        for (double& v : p) v /= std::sqrt(static_cast<double>(c.n_embd));
        rms_norm_rows(p, weights_.per_layer_proj_norm, c.rms_eps);
        for (int64_t i = 0; i < d; ++i)
            ple_[l * d + i] = (p[i] + row[l * d + i] * std::sqrt(static_cast<double>(d))) / std::sqrt(2.0);
    }
}

void ReferenceBackend::layer_token(const BatchToken& t, int64_t l) {
    const ModelConfig& c = config_;
    // this layer's geometry (gemma4's local layers have their own)
    const int64_t hd = c.layer_head_dim(l), n_head_kv = c.layer_n_head_kv(l), kv_dim = c.layer_n_embd_kv(l);
    const int64_t n_head = c.layer_n_head(l);  // (step35's local layers have their own)
    const int64_t group = n_head / n_head_kv;  // query heads per KV head
    const LayerWeights& L = weights_.layers[l];
    if (!c.layer_has_mixer(l)) return ffn_token(L, l);  // (nemotron_h: a layer of an FFN alone)

    // xn = x / sqrt(mean(x^2) + eps) * attn_norm (olmo2, exaone4: xn = x; command-r, cohere2: LayerNorm)
    if (c.input_norms)
        model_norm(c, x_, L.attn_norm, xn_);
    else
        xn_ = x_;
    // gemma3n: laurel = xn + rms_norm(W_r W_l xn) * laurel_post_norm
    if (L.laurel_l.data) {
        std::vector<double> low;
        matvec(L.laurel_l, xn_, low, row_);
        matvec(L.laurel_r, low, laurel_, row_);
        rms_norm_rows(laurel_, L.laurel_post_norm, c.rms_eps);
        for (int64_t i = 0; i < c.n_embd; ++i) laurel_[i] += xn_[i];
    }
    // qwen35: x = x + the gated delta net's output over xn, then the FFN (granitehybrid: its Mamba-2 layer's, times
    // residual_scale; lfm2: the short conv's; falcon-h1: the Mamba-2 layer's waits for the attention's beside it)
    if (c.layer_is_recurrent(l)) {
        if (c.layer_is_short_conv(l))
            short_conv_token(t, l);
        else if (c.mamba2())
            mamba2_token(t, l);
        else if (c.mamba1())
            mamba1_token(t, l);
        else
            delta_net_token(t, l);
        if (c.ssm_beside_attn) {
            ssm_out_ = out_;
        } else {
            for (int64_t i = 0; i < c.n_embd; ++i) x_[i] += out_[i] * c.residual_scale;
            return ffn_token(L, l);
        }
    }
    if (L.mla()) {  // (deepseek2)
        mla_token(t, l);
        for (int64_t i = 0; i < c.n_embd; ++i) x_[i] += out_[i];
        return ffn_token(L, l);
    }
    // q = Wq xn, k = Wk xn, v = Wv xn (gemma4 without Wv: v = k; a shared-KV layer: q only, K and V those its
    // cache layer stored)
    const bool own_kv = c.layer_has_kv(l);
    matvec(L.wq, xn_, q_, row_);
    // qwen35: Wq xn holds each head's query and then its output gate
    if (c.attn_out_gate) {
        attn_gate_.resize(c.layer_n_embd_q(l));
        for (int64_t h = 0; h < c.n_head; ++h)
            for (int64_t i = 0; i < hd; ++i) {
                attn_gate_[h * hd + i] = q_[(2 * h + 1) * hd + i];
                q_[h * hd + i] = q_[2 * h * hd + i];
            }
        q_.resize(c.layer_n_embd_q(l));
    }
    // afmoe: gate = W_gate xn, a projection of its own
    if (c.attn_gate_proj) matvec(L.wgate, xn_, attn_gate_, row_);
    k_.assign(static_cast<size_t>(kv_dim), 0.0);
    if (own_kv) matvec(L.wk, xn_, k_, row_);
    if (L.v_from_k())
        v_ = k_;
    else if (own_kv)
        matvec(L.wv, xn_, v_, row_);
    // + the biases the file has (qwen2: Q, K, V)
    for (size_t i = 0; i < L.bq.size(); ++i) q_[i] += L.bq[i];
    for (size_t i = 0; i < L.bk.size(); ++i) k_[i] += L.bk[i];
    for (size_t i = 0; i < L.bv.size(); ++i) v_[i] += L.bv[i];
    // gemma3, qwen3: q_h, k_h = rms_norm(q_h) * attn_q_norm, rms_norm(k_h) * attn_k_norm for every head (olmo2: the
    // norm's length is the whole q's and k's; command-r's R+: LayerNorm, each head with its own row of the weights)
    if (c.layer_norm) {
        for (auto [x, w] : {std::pair{&q_, &L.attn_q_norm}, std::pair{&k_, &L.attn_k_norm}})
            for (size_t i = 0; !w->empty() && i < x->size(); i += static_cast<size_t>(hd))
                layer_norm(x->data() + i, w->data() + i % w->size(), c.rms_eps, static_cast<size_t>(hd),
                           x->data() + i);
    } else if (!c.qk_norm_after_rope) {
        if (!L.attn_q_norm.empty()) rms_norm_rows(q_, L.attn_q_norm, c.rms_eps);
        if (!L.attn_k_norm.empty()) rms_norm_rows(k_, L.attn_k_norm, c.rms_eps);
    }
    // gemma4: v_h = rms_norm(v_h) for every head (no weight)
    if (c.v_norm) rms_norm_rows(v_, static_cast<size_t>(hd), nullptr, c.rms_eps);
    // q, k = RoPE(q, pos), RoPE(k, pos), with the local layers' frequencies (and gemma4's rotated dims) on a local
    // layer (smollm3: not on its no-RoPE layers)
    const bool local = c.layer_is_local(l);
    const std::vector<double>& inv_freq = local ? inv_freq_local_ : inv_freq_;
    if (c.layer_has_rope(l)) {
        rope(q_, n_head, hd, c.layer_n_rot(l), c, inv_freq, t.pos, local);
        rope(k_, n_head_kv, hd, c.layer_n_rot(l), c, inv_freq, t.pos, local);
        // llama4: q_h, k_h = rms_norm(q_h), rms_norm(k_h) (no weight) after RoPE
        if (c.qk_l2_norm) {
            rms_norm_rows(q_, static_cast<size_t>(hd), nullptr, c.rms_eps);
            rms_norm_rows(k_, static_cast<size_t>(hd), nullptr, c.rms_eps);
        }
    }
    // hunyuan: q_h, k_h = rms_norm(q_h) * attn_q_norm, rms_norm(k_h) * attn_k_norm after RoPE
    if (c.qk_norm_after_rope) {
        rms_norm_rows(q_, L.attn_q_norm, c.rms_eps);
        rms_norm_rows(k_, L.attn_k_norm, c.rms_eps);
    }
    // mistral3: q = q * (1 + attn_temp_scale * log(floor((pos + attn_temp_offset) / attn_temp_floor) + 1)) (llama4:
    // on the layers without RoPE only)
    if (c.layer_attn_temp(l)) {
        const double temp = c.attn_temp(t.pos);
        for (double& v : q_) v *= temp;
    }
    // K[l, slot, pos] = k, V[l, slot, pos] = v
    const bool f16 = kv_shape_.type == KvType::f16;
    double* k_row = cache_row(k_cache_, l, t.slot, t.pos);
    double* v_row = cache_row(v_cache_, l, t.slot, t.pos);
    for (int64_t i = 0; i < kv_dim && own_kv; ++i) {
        k_row[i] = f16 ? round_to_fp16(k_[i]) : k_[i];
        v_row[i] = f16 ? round_to_fp16(v_[i]) : v_[i];
    }

    // att_h = sum_j softmax_j(q_h . K_j * attn_scale) V_j over j = first..pos (first = 0, or the start of the
    // sliding window on a local layer, of the chunk on a chunked one); head h reads KV head h / group. gpt-oss: the
    // softmax's denominator also counts exp(sink_h).
    // With an f16 cache q_h and the probabilities are rounded to fp16 too, as half-precision attention (the
    // CPU backend's, llama.cpp's) feeds its products with K and V.
    // (llama4's chunked layers: the start of the token's chunk)
    const int64_t first = c.first_visible(l, t.pos);
    const int64_t n_kv = t.pos + 1 - first;
    att_.assign(c.layer_n_embd_q(l), 0.0);
    for (int64_t h = 0; h < n_head; ++h) {
        double* qh = q_.data() + h * hd;
        if (f16) std::transform(qh, qh + hd, qh, round_to_fp16);
        const int64_t kv_off = (h / group) * hd;
        for (int64_t j = 0; j < n_kv; ++j) {
            const double* kj = cache_row(k_cache_, l, t.slot, first + j) + kv_off;
            double s = 0.0;
            for (int64_t i = 0; i < hd; ++i) s += qh[i] * kj[i];
            score_[j] = s * c.attn_scale;
            // gemma2: soft-capped, cap * tanh(score / cap)
            if (c.attn_logit_softcap > 0.0f)
                score_[j] = c.attn_logit_softcap * std::tanh(score_[j] / c.attn_logit_softcap);
        }
        // (gpt-oss: head h's sink joins the denominator)
        softmax(score_, n_kv, L.attn_sinks.empty() ? -INFINITY : L.attn_sinks[h]);
        if (f16) std::transform(score_.begin(), score_.begin() + n_kv, score_.begin(), round_to_fp16);
        double* ah = att_.data() + h * hd;
        for (int64_t j = 0; j < n_kv; ++j) {
            const double* vj = cache_row(v_cache_, l, t.slot, first + j) + kv_off;
            for (int64_t i = 0; i < hd; ++i) ah[i] += score_[j] * vj[i];
        }
    }
    // qwen35, afmoe: att_h = att_h * sigmoid(gate_h) (step35: one gate a head, att_h * sigmoid(gate[h]); laguna:
    // softplus instead)
    if (c.attn_out_gate || c.attn_gate_proj)
        for (size_t i = 0; i < att_.size(); ++i)
            att_[i] *= c.attn_gate_value(attn_gate_[c.attn_gate_per_head ? i / static_cast<size_t>(hd) : i]);
    // x = x + Wo att (gemma3: x + rms_norm(Wo att) * attn_post_norm; granite: x + Wo att * residual_scale)
    matvec(L.wo, att_, out_, row_);
    for (size_t i = 0; i < L.bo.size(); ++i) out_[i] += L.bo[i];
    if (!L.attn_post_norm.empty()) rms_norm_rows(out_, L.attn_post_norm, c.rms_eps);
    // command-r, cohere2: x = (x + ffn(xn)) + Wo att, the FFN reading the attention's input xn
    if (c.parallel_blocks) {
        attn_out_ = out_;
        ffn_token(L, l);
        for (int64_t i = 0; i < c.n_embd; ++i) x_[i] += attn_out_[i];
        return;
    }
    // falcon-h1: x = x + (Wo att + the Mamba-2 mixer's output over the same xn)
    if (c.ssm_beside_attn)
        for (int64_t i = 0; i < c.n_embd; ++i) out_[i] += ssm_out_[i];
    for (int64_t i = 0; i < c.n_embd; ++i) x_[i] += out_[i] * c.residual_scale;
    // gemma3n: x = (x + laurel) / sqrt(2)
    if (L.laurel_l.data)
        for (int64_t i = 0; i < c.n_embd; ++i) x_[i] = (x_[i] + laurel_[i]) / std::sqrt(2.0);
    ffn_token(L, l);
}

void ReferenceBackend::ffn_token(const LayerWeights& L, int64_t l) {
    const ModelConfig& c = config_;
    if (!c.layer_has_ffn(l)) return;  // (nemotron_h: a layer of a mixer alone)
    ffn_layer_ = l;
    // xn = x / sqrt(mean(x^2) + eps) * ffn_norm (olmo2, exaone4: xn = x; command-r, cohere2: xn stays the
    // attention's input)
    if (c.input_norms && !c.parallel_blocks)
        rms_norm(x_, L.ffn_norm, c.rms_eps, xn_);
    else if (!c.input_norms)
        xn_ = x_;
    // x = x + W2 (act(W1 xn) * W3 xn), or (mixture of experts) the routed experts' sum of it;
    // gemma3 normalizes the sum's term by ffn_post_norm
    if (c.moe_shared_ffn) {
        // gemma4: out = post_norm_1(W2 (gelu(W1 xn) * W3 xn)) + post_norm_2(the experts' sum over
        // rms_norm(x) * pre_norm_2), routed by W_router (rms_norm(x) / sqrt(n_embd) * router scale)
        ffn(L.ffn_gate, L.ffn_up, L.ffn_down, shared_);
        rms_norm_rows(shared_, L.ffn_post_norm_1, c.rms_eps);
        rms_norm(x_, L.ffn_gate_inp_s, c.rms_eps, router_in_);
        for (double& v : router_in_) v /= std::sqrt(static_cast<double>(c.n_embd));
        rms_norm(x_, L.ffn_pre_norm_2, c.rms_eps, xn_);
        moe_ffn(L, router_in_);
        rms_norm_rows(out_, L.ffn_post_norm_2, c.rms_eps);
        for (int64_t i = 0; i < c.n_embd; ++i) out_[i] += shared_[i];
    } else if (c.layer_moe(l)) {
        moe_ffn(L, xn_);
        // the shared expert (qwen2moe, qwen35moe): out = out + sigmoid(g . xn) * W2 (silu(W1 xn) * W3 xn), the
        // factor 1 without a gate vector g
        if (c.moe_shared_expert) {
            ffn_clamp_ = ModelConfig::layer_clamp(c.swiglu_clamp_shexp, l);  // (step35)
            ffn(L.ffn_gate, L.ffn_up, L.ffn_down, shared_);
            ffn_clamp_ = 0.0;
            double gate = 1.0;
            if (!L.ffn_gate_inp_shexp.empty())
                gate = 1.0 / (1.0 + std::exp(-dot(L.ffn_gate_inp_shexp.data(), xn_.data(), c.n_embd)));
            for (int64_t i = 0; i < c.n_embd; ++i) out_[i] += gate * shared_[i];
            // cohere2moe: out = (the experts' sum + the shared expert's output) * 0.5
            for (int64_t i = 0; i < c.n_embd; ++i) out_[i] *= c.moe_shared_scale;
        }
    } else {
        ffn_sparse_ = c.layer_sparse(l);  // (gemma3n's first layers)
        ffn_clamp_ = ModelConfig::layer_clamp(c.swiglu_clamp_shexp, l);  // (step35's dense layers: the shared clamp)
        ffn(L.ffn_gate, L.ffn_up, L.ffn_down, out_);
        ffn_sparse_ = false;
        ffn_clamp_ = 0.0;
    }
    if (!L.ffn_post_norm.empty()) rms_norm_rows(out_, L.ffn_post_norm, c.rms_eps);
    for (int64_t i = 0; i < c.n_embd; ++i) x_[i] += out_[i] * c.residual_scale;
    // gemma4 E2B/E4B: x = x + rms_norm(W_proj (gelu(W_gate x) * ple[l])) * post_norm (gemma3n: altup_correct)
    if (L.per_layer_proj.data && !c.altup()) {
        const int64_t d = c.n_embd_per_layer;
        matvec(L.per_layer_inp_gate, x_, ple_g_, row_);
        for (int64_t i = 0; i < d; ++i) ple_g_[i] = gelu(ple_g_[i]) * ple_[l * d + i];
        matvec(L.per_layer_proj, ple_g_, ple_x_, row_);
        rms_norm_rows(ple_x_, L.per_layer_post_norm, c.rms_eps);
        for (int64_t i = 0; i < c.n_embd; ++i) x_[i] += ple_x_[i];
    }
    // gemma4: x = x * layer_output_scale
    if (!L.out_scale.empty())
        for (double& v : x_) v *= L.out_scale[0];
}

// qwen35's gated delta net over xn for token t of its slot (out_ = its output):
//   qkv = silu(conv1d(the window of this and the ssm_conv - 1 previous W_in xn of the sequence)), split into q, k
//   (ssm_n_k_heads heads) and v (ssm_n_v_heads), q and k of each head divided by sqrt(sum x^2 + eps);
//   for value head h, with k head ssm_k_head(h): g = exp(softplus(W_alpha xn + dt)_h * a_h),
//   beta = sigmoid(W_beta xn)_h, S = S g; S += (beta (v - S k)) k^T; o = S q / sqrt(head_k)   (S [head_v, head_k])
//   out = W_out (rms_norm(o_h) * ssm_norm * silu(z_h) for each head h), z = W_z xn
void ReferenceBackend::delta_net_token(const BatchToken& t, int64_t l) {
    const ModelConfig& c = config_;
    const LayerWeights& L = weights_.layers[l];
    const int64_t nch = c.ssm_conv_channels(), taps = c.ssm_conv, hk = c.ssm_head_k, hv = c.ssm_head_v;
    if (t.pos == 0) start_afresh(c, conv_state(l, t.slot), ssm_state(l, t.slot));  // (a sequence starting afresh)
    const int64_t group = c.ssm_n_v_heads / c.ssm_n_k_heads;
    if (L.ssm_z.data) {
        matvec(L.ssm_in, xn_, q_, row_);  // [nch]
        matvec(L.ssm_z, xn_, attn_gate_, row_);
    } else {  // (qwen3next's older files: q, k, v and z in one product, grouped by key head)
        matvec(L.ssm_in, xn_, ssm_fused_, row_);
        q_.resize(nch);
        attn_gate_.resize(c.ssm_d_inner());
        ungroup_qkvz(ssm_fused_.data(), c.ssm_n_k_heads, hk, group * hv, q_.data(), attn_gate_.data());
    }
    if (L.ssm_alpha.data) {
        matvec(L.ssm_beta, xn_, gate_, row_);
        matvec(L.ssm_alpha, xn_, up_, row_);
    } else {  // (qwen3next: beta and alpha in one product, grouped by key head)
        matvec(L.ssm_beta, xn_, ssm_fused_, row_);
        gate_.resize(c.ssm_n_v_heads);
        up_.resize(c.ssm_n_v_heads);
        ungroup_ba(ssm_fused_.data(), c.ssm_n_k_heads, group, gate_.data(), up_.data());
    }
    conv_silu(conv_state(l, t.slot), L.ssm_conv1d.data(), nullptr, q_.data(), nch, taps, att_);
    const int64_t nk = c.ssm_n_k_heads * hk;  // q at 0, k at nk, v at 2 nk
    for (int64_t h = 0; h < 2 * c.ssm_n_k_heads; ++h) {
        double ss = 0.0;
        for (int64_t i = 0; i < hk; ++i) ss += att_[h * hk + i] * att_[h * hk + i];
        const double inv = 1.0 / std::sqrt(ss + c.rms_eps);
        for (int64_t i = 0; i < hk; ++i) att_[h * hk + i] *= inv;
    }
    ssm_o_.assign(c.ssm_d_inner(), 0.0);
    for (int64_t h = 0; h < c.ssm_n_v_heads; ++h) {
        const double* q = att_.data() + c.ssm_k_head(h) * hk;
        const double* k = q + nk;
        const double* v = att_.data() + 2 * nk + h * hv;
        const double x = up_[h] + L.ssm_dt[h];
        const double g = std::exp((x > 20.0 ? x : std::log1p(std::exp(x))) * L.ssm_a[h]);
        const double beta = 1.0 / (1.0 + std::exp(-gate_[h]));
        double* S = ssm_state(l, t.slot) + h * hv * hk;  // [hv, hk]
        double* o = ssm_o_.data() + h * hv;
        for (int64_t j = 0; j < hv; ++j) {
            double* Sj = S + j * hk;
            double kv = 0.0;
            for (int64_t i = 0; i < hk; ++i) kv += (Sj[i] *= g) * k[i];
            const double d = (v[j] - kv) * beta;
            double oj = 0.0;
            for (int64_t i = 0; i < hk; ++i) oj += (Sj[i] += k[i] * d) * q[i];
            o[j] = oj / std::sqrt(static_cast<double>(hk));
        }
    }
    rms_norm_rows(ssm_o_, L.ssm_norm, c.rms_eps);
    for (size_t i = 0; i < ssm_o_.size(); ++i) ssm_o_[i] *= attn_gate_[i] / (1.0 + std::exp(-attn_gate_[i]));
    matvec(L.ssm_out, ssm_o_, out_, row_);
}

// granitehybrid's Mamba-2 layer over xn for token t of its slot (out_ = its output), with W_in xn = [z, xBC, dt]:
//   xBC = silu(conv1d(the window of this and the ssm_conv - 1 previous xBC of the sequence) + conv bias), split into
//   x (ssm_n_v_heads heads of ssm_head_v), B and C (ssm_n_k_heads groups of d_state = ssm_head_k each);
//   for head h, group g = h / (heads / groups): d = softplus(dt_h + dt_bias_h), S = S exp(d a_h) + d x_h B_g^T,
//   y_h = S C_g + D_h x_h   (S [head_dim, d_state])
//   out = W_out (rms_norm(y * silu(z)) over each group's d_inner / groups values, times ssm_norm), without the norm
//   where the layer has none (falcon-h1's files)
void ReferenceBackend::mamba2_token(const BatchToken& t, int64_t l) {
    const ModelConfig& c = config_;
    const LayerWeights& L = weights_.layers[l];
    const int64_t nch = c.ssm_conv_channels(), taps = c.ssm_conv, ds = c.ssm_head_k, hd = c.ssm_head_v;
    const int64_t n_group = c.ssm_n_k_heads, inner = c.ssm_d_inner(), group = inner / n_group;
    if (t.pos == 0) start_afresh(c, conv_state(l, t.slot), ssm_state(l, t.slot));  // (a sequence starting afresh)
    matvec(L.ssm_in, xn_, q_, row_);  // [inner z, nch xBC, heads dt]
    const double* xbc = q_.data() + inner;
    conv_silu(conv_state(l, t.slot), L.ssm_conv1d.data(), L.ssm_conv1d_b.empty() ? nullptr : L.ssm_conv1d_b.data(),
              xbc, nch, taps, att_);
    ssm_o_.assign(static_cast<size_t>(inner), 0.0);
    for (int64_t h = 0; h < c.ssm_n_v_heads; ++h) {
        const int64_t g = h / (c.ssm_n_v_heads / n_group);
        const double* x = att_.data() + h * hd;
        const double* B = att_.data() + inner + g * ds;
        const double* C = B + n_group * ds;
        const double a = xbc[nch + h] + L.ssm_dt[h];
        const double d = a > 20.0 ? a : std::log1p(std::exp(a));
        const double decay = std::exp(d * L.ssm_a[h]);
        double* S = ssm_state(l, t.slot) + h * hd * ds;  // [hd, ds]
        for (int64_t j = 0; j < hd; ++j) {
            double* Sj = S + j * ds;
            double y = 0.0;
            for (int64_t i = 0; i < ds; ++i) y += (Sj[i] = Sj[i] * decay + B[i] * x[j] * d) * C[i];
            ssm_o_[h * hd + j] = y + x[j] * L.ssm_d[h];
        }
    }
    for (int64_t i = 0; i < inner; ++i) ssm_o_[i] *= q_[i] / (1.0 + std::exp(-q_[i]));
    for (int64_t g = 0; g < n_group && !L.ssm_norm.empty(); ++g) {
        double ss = 0.0;
        for (int64_t i = g * group; i < (g + 1) * group; ++i) ss += ssm_o_[i] * ssm_o_[i];
        const double scale = 1.0 / std::sqrt(ss / static_cast<double>(group) + c.rms_eps);
        for (int64_t i = g * group; i < (g + 1) * group; ++i) ssm_o_[i] *= scale * L.ssm_norm[i];
    }
    matvec(L.ssm_out, ssm_o_, out_, row_);
}

// Mamba-1's layer (ModelConfig::mamba1) over xn for token t of its slot (out_ = its output), with [x, z] = W_in xn:
//   x = silu(conv1d(the window of this and the ssm_conv - 1 previous x of the sequence) + conv bias);
//   [dt, B, C] = W_x x (ssm_dt_rank, d_state = ssm_head_k, d_state), each rms-normed (times its weight where the layer
//   has one) where ssm_dt_b_c_rms; for channel i: d = softplus((W_dt dt)_i + dt_bias_i), S_i = S_i exp(d A_i) +
//   d x_i B, y_i = S_i . C + D_i x_i   (S_i, A_i [d_state])
//   out = W_out (y * silu(z))
void ReferenceBackend::mamba1_token(const BatchToken& t, int64_t l) {
    const ModelConfig& c = config_;
    const LayerWeights& L = weights_.layers[l];
    const int64_t inner = c.ssm_d_inner(), taps = c.ssm_conv, ds = c.ssm_head_k, rank = c.ssm_dt_rank;
    if (t.pos == 0) start_afresh(c, conv_state(l, t.slot), ssm_state(l, t.slot));  // (a sequence starting afresh)
    matvec(L.ssm_in, xn_, q_, row_);  // [inner x, inner z]
    conv_silu(conv_state(l, t.slot), L.ssm_conv1d.data(), L.ssm_conv1d_b.empty() ? nullptr : L.ssm_conv1d_b.data(),
              q_.data(), inner, taps, att_);
    matvec(L.ssm_x, att_, k_, row_);  // [rank dt, ds B, ds C]
    std::vector<double> dt(k_.begin(), k_.begin() + rank), B(k_.begin() + rank, k_.begin() + rank + ds),
        C(k_.begin() + rank + ds, k_.end());
    if (c.ssm_dt_b_c_rms) {
        auto weight = [](const std::vector<float>& w) { return w.empty() ? nullptr : w.data(); };
        rms_norm_rows(dt, static_cast<size_t>(rank), weight(L.ssm_dt_norm), c.rms_eps);
        rms_norm_rows(B, static_cast<size_t>(ds), weight(L.ssm_b_norm), c.rms_eps);
        rms_norm_rows(C, static_cast<size_t>(ds), weight(L.ssm_c_norm), c.rms_eps);
    }
    matvec(L.ssm_dt_proj, dt, v_, row_);  // [inner]
    ssm_o_.assign(static_cast<size_t>(inner), 0.0);
    for (int64_t i = 0; i < inner; ++i) {
        const double a = v_[i] + L.ssm_dt[i];
        const double d = a > 20.0 ? a : std::log1p(std::exp(a));
        double* S = ssm_state(l, t.slot) + i * ds;
        const float* A = L.ssm_a.data() + i * ds;
        double y = 0.0;
        for (int64_t s = 0; s < ds; ++s) y += (S[s] = S[s] * std::exp(d * A[s]) + B[s] * att_[i] * d) * C[s];
        const double z = q_[inner + i];
        ssm_o_[i] = (y + att_[i] * L.ssm_d[i]) * z / (1.0 + std::exp(-z));
    }
    matvec(L.ssm_out, ssm_o_, out_, row_);
}

// lfm2's short conv over xn for token t of its slot (out_ = its output):
//   [b, c, x] = W_in xn; conv_ch = sum_i window_ch[i] w_ch[i] over the ssm_conv - 1 values of b * x before in the
//   sequence and this token's (the last tap's); out = W_out (c * conv)
void ReferenceBackend::short_conv_token(const BatchToken& t, int64_t l) {
    const ModelConfig& c = config_;
    const LayerWeights& L = weights_.layers[l];
    const int64_t d = c.n_embd, taps = c.ssm_conv;
    double* window = conv_state(l, t.slot);  // [n_embd, taps - 1]
    if (t.pos == 0) std::fill_n(window, d * (taps - 1), 0.0);  // (a sequence starting afresh)
    matvec(L.ssm_in, xn_, q_, row_);  // [3 n_embd] b, c, x
    att_.resize(d);
    for (int64_t ch = 0; ch < d; ++ch) {
        double* w = window + ch * (taps - 1);
        const float* tap = L.ssm_conv1d.data() + ch * taps;
        const double bx = q_[ch] * q_[2 * d + ch];
        double s = bx * tap[taps - 1];
        for (int64_t i = 0; i < taps - 1; ++i) s += w[i] * tap[i];
        att_[ch] = q_[d + ch] * s;
        for (int64_t i = 0; i + 1 < taps - 1; ++i) w[i] = w[i + 1];
        w[taps - 2] = bx;
    }
    matvec(L.ssm_out, att_, out_, row_);
}

// deepseek2's Multi-head Latent Attention for token t (ModelConfig::kv_lora_rank):
//   q = Wq xn, or Wq_b (rms_norm(Wq_a xn) * q_a_norm): per head h its dims without RoPE q_nope_h, then q_pe_h
//   [c, k_pe] = Wkv_a xn; c = rms_norm(c) * kv_a_norm (the latent); q_pe_h, k_pe = RoPE(q_pe_h, pos), RoPE(k_pe, pos)
//   cache[pos] = [c, k_pe]
//   score_hj = ((Wk_b[h] q_nope_h) . c_j + q_pe_h . k_pe_j) * attn_temp(pos) * attn_scale   (Wk_b absorbed into the
//   query; the temperature multiplies the absorbed query)
//   o_h = Wv_b[h] sum_j softmax_j(score_hj) c_j;  out_ = Wo [o_0 .. o_{n_head-1}]
// With an f16 cache the stored row, each head's absorbed query and the probabilities are rounded to fp16.
void ReferenceBackend::mla_token(const BatchToken& t, int64_t l) {
    const ModelConfig& c = config_;
    const LayerWeights& L = weights_.layers[l];
    const int64_t hd = c.head_dim, nope = c.mla_nope(), n_rot = c.n_rot, r = c.kv_lora_rank, row = c.mla_row();
    if (L.wq_a.data) {
        matvec(L.wq_a, xn_, gate_, row_);
        rms_norm_rows(gate_, L.attn_q_a_norm, c.rms_eps);
        matvec(L.wq_b, gate_, q_, row_);
        // (deepseek32: the positions this token attends to; glm-dsa's layers without an indexer keep the last one's)
        if (c.dsa() && c.layer_indexer(l)) dsa_select(t, l);
    } else {
        matvec(L.wq, xn_, q_, row_);
    }
    matvec(L.wkv_a, xn_, k_, row_);  // [kv_lora_rank latent, n_rot RoPE key]
    std::vector<double> latent(k_.begin(), k_.begin() + r), k_pe(k_.begin() + r, k_.end());
    rms_norm_rows(latent, L.attn_kv_a_norm, c.rms_eps);
    rope(k_pe, 1, n_rot, n_rot, c, inv_freq_, t.pos);
    std::vector<double> q_pe(static_cast<size_t>(c.n_head * n_rot));
    for (int64_t h = 0; h < c.n_head; ++h)
        std::copy_n(q_.begin() + h * hd + nope, n_rot, q_pe.begin() + h * n_rot);
    rope(q_pe, c.n_head, n_rot, n_rot, c, inv_freq_, t.pos);
    const bool f16 = kv_shape_.type == KvType::f16;
    double* stored = cache_row(k_cache_, l, t.slot, t.pos);
    for (int64_t i = 0; i < row; ++i) {
        const double v = i < r ? latent[i] : k_pe[i - r];
        stored[i] = f16 ? round_to_fp16(v) : v;
    }
    const int64_t n_kv = t.pos + 1;
    const double temp = c.attn_temp(t.pos);  // (Mistral Large 3's Llama 4 attention temperature; 1 without)
    att_.assign(static_cast<size_t>(c.n_head * c.head_dim_v), 0.0);
    std::vector<double> q_nope(static_cast<size_t>(nope)), q_abs, o(static_cast<size_t>(r)), v_h;
    for (int64_t h = 0; h < c.n_head; ++h) {
        std::copy_n(q_.begin() + h * hd, nope, q_nope.begin());
        matvec(L.wk_b_heads[h], q_nope, q_abs, row_);  // [kv_lora_rank]
        q_abs.insert(q_abs.end(), q_pe.begin() + h * n_rot, q_pe.begin() + (h + 1) * n_rot);
        for (double& v : q_abs) v *= temp;
        if (f16) std::transform(q_abs.begin(), q_abs.end(), q_abs.begin(), round_to_fp16);
        for (int64_t j = 0; j < n_kv; ++j) {
            const double* kj = cache_row(k_cache_, l, t.slot, j);
            double s = 0.0;
            for (int64_t i = 0; i < row; ++i) s += q_abs[i] * kj[i];
            score_[j] = c.dsa() && !dsa_keep_[j] ? -INFINITY : s * c.attn_scale;
        }
        softmax(score_, n_kv);
        if (f16) std::transform(score_.begin(), score_.begin() + n_kv, score_.begin(), round_to_fp16);
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < n_kv; ++j) {
            const double* kj = cache_row(k_cache_, l, t.slot, j);
            for (int64_t i = 0; i < r; ++i) o[i] += score_[j] * kj[i];
        }
        matvec(L.wv_b_heads[h], o, v_h, row_);  // [head_dim_v]
        std::copy(v_h.begin(), v_h.end(), att_.begin() + h * c.head_dim_v);
    }
    matvec(L.wo, att_, out_, row_);
}

// DeepSeek Sparse Attention's lightning indexer for token t in layer l (ModelConfig::dsa): dsa_keep_ [n_ctx] = 1 at
// the positions j <= pos the token's MLA attends to, from qr (gate_, the normed low-rank query) and xn_:
//   q_h = H RoPE(Wiq_b qr)_h, k = H RoPE(LayerNorm(Wik xn) * k_norm + k_norm_b): NEOX pairs in the first n_rot dims
//   of a head (glm-dsa: adjacent ones), H the orthonormal Walsh-Hadamard matrix of indexer_head_dim (its Sylvester
//   order); cache[pos] holds k after the latent and the RoPE key (rounded to fp16 with an f16 cache, as llama.cpp's
//   indexer cache of the KV type)
//   w = Wproj xn / sqrt(indexer_head_dim * indexer_n_head)
//   score_j = sum_h max(q_h . k_j, 0) w_h; the indexer_top_k highest kept (of equal ones the earlier position), every
//   position while pos < indexer_top_k.
void ReferenceBackend::dsa_select(const BatchToken& t, int64_t l) {
    const ModelConfig& c = config_;
    const LayerWeights& L = weights_.layers[l];
    const int64_t nh = c.indexer_n_head, d = c.indexer_head_dim;
    auto hadamard = [d](double* x) {  // x = H x
        for (int64_t len = 1; len < d; len *= 2)
            for (int64_t i = 0; i < d; i += 2 * len)
                for (int64_t j = i; j < i + len; ++j) {
                    const double u = x[j], v = x[j + len];
                    x[j] = u + v;
                    x[j + len] = u - v;
                }
        for (int64_t i = 0; i < d; ++i) x[i] /= std::sqrt(static_cast<double>(d));
    };
    std::vector<double> q, k, w;
    matvec(L.idx_wq_b, gate_, q, row_);  // [nh, d]
    rope(q, nh, d, c.n_rot, c, inv_freq_, t.pos, false, c.indexer_neox);
    for (int64_t h = 0; h < nh; ++h) hadamard(q.data() + h * d);
    matvec(L.idx_wk, xn_, k, row_);  // [d]
    layer_norm(k.data(), L.idx_k_norm.data(), ModelConfig::kIndexerNormEps, static_cast<size_t>(d), k.data());
    for (int64_t i = 0; i < d; ++i) k[i] += L.idx_k_norm_b[i];
    rope(k, 1, d, c.n_rot, c, inv_freq_, t.pos, false, c.indexer_neox);
    hadamard(k.data());
    const bool f16 = kv_shape_.type == KvType::f16;
    double* stored = cache_row(k_cache_, l, t.slot, t.pos) + c.mla_row();
    for (int64_t i = 0; i < d; ++i) stored[i] = f16 ? round_to_fp16(k[i]) : k[i];
    matvec(L.idx_proj, xn_, w, row_);  // [nh]
    const double w_scale = 1.0 / std::sqrt(static_cast<double>(d * nh));
    const int64_t n_kv = t.pos + 1;
    dsa_keep_.assign(static_cast<size_t>(n_kv), 1);
    if (n_kv <= c.indexer_top_k) return;
    std::vector<std::pair<double, int64_t>> score(static_cast<size_t>(n_kv));
    for (int64_t j = 0; j < n_kv; ++j) {
        const double* kj = cache_row(k_cache_, l, t.slot, j) + c.mla_row();
        double s = 0.0;
        for (int64_t h = 0; h < nh; ++h) {
            double qk = 0.0;
            for (int64_t i = 0; i < d; ++i) qk += q[h * d + i] * kj[i];
            s += std::max(qk, 0.0) * w[h] * w_scale;
        }
        score[j] = {-s, j};  // (ascending: the highest score first, then the earlier position)
    }
    std::partial_sort(score.begin(), score.begin() + c.indexer_top_k, score.end());
    std::fill(dsa_keep_.begin(), dsa_keep_.end(), 0);
    for (int64_t i = 0; i < c.indexer_top_k; ++i) dsa_keep_[static_cast<size_t>(score[i].second)] = 1;
}

double* ReferenceBackend::conv_state(int64_t layer, int64_t slot) {
    const int64_t n = config_.ssm_conv_channels() * (config_.ssm_conv - 1);
    return conv_state_.data() + ((layer - layers_.begin) * kv_shape_.n_slots + slot) * n;
}

double* ReferenceBackend::ssm_state(int64_t layer, int64_t slot) {
    const int64_t n = config_.ssm_n_v_heads * config_.ssm_head_v * config_.ssm_head_k;
    return ssm_state_.data() + ((layer - layers_.begin) * kv_shape_.n_slots + slot) * n;
}

void ReferenceBackend::output_token(float* logits) {
    const ModelConfig& c = config_;
    // logits = W_out (x / sqrt(mean(x^2) + eps) * output_norm); W_out is token_embd itself when the model ties them
    model_norm(c, x_, weights_.output_norm, xn_);
    matvec(weights_.output, xn_, logit_, row_);
    // soft-capped, cap * tanh(logit / cap), when the model sets a cap; granite: divided by logit_scale; command-r,
    // cohere2: multiplied by logit_mul
    const double cap = c.final_logit_softcap, scale = c.logit_mul / c.logit_scale;
    for (int64_t i = 0; i < c.n_vocab; ++i)
        logits[i] = static_cast<float>((cap > 0.0 ? cap * std::tanh(logit_[i] / cap) : logit_[i]) * scale);
}

// out = W2 (act(W1 xn + b1, W3 xn + b3)) + b2 (the biases where given), act(g, u) = silu(g) u = g u / (1 + e^-g), or
// (gemma3) gelu(g) u = g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) u, or (gpt-oss) swiglu_oai(g, u) =
// g' / (1 + e^(-alpha g')) (u' + 1), g' = min(g, limit), u' = clamp(u, -limit, limit), or (nemotron_h, no W1)
// relu_sqr(u) = max(u, 0)^2, or (apertus, no W1) xielu(u) with the layer's parameters (ModelConfig::xielu_params)
void ReferenceBackend::ffn(const TensorView& w1, const TensorView& w3, const TensorView& w2, std::vector<double>& out,
                           const float* b1, const float* b3, const float* b2) {
    matvec(w3, xn_, up_, row_);
    if (w1.data)
        matvec(w1, xn_, gate_, row_);
    else
        gate_.assign(up_.size(), 0.0);
    const ModelConfig& c = config_;
    // gemma3n's sparse layers: g = max(g - (mean(g) + sparsity_std_mul * std(g)), 0), std over n - 1
    if (ffn_sparse_) {
        const auto n = static_cast<double>(gate_.size());
        double mean = 0.0, var = 0.0;
        for (double g : gate_) mean += g;
        mean /= n;
        for (double g : gate_) var += (g - mean) * (g - mean);
        const double cutoff = mean + c.sparsity_std_mul * std::sqrt(var / (n - 1.0));
        for (double& g : gate_) g = std::max(g - cutoff, 0.0);
    }
    const double alpha = c.swiglu_alpha, limit = c.swiglu_limit;
    const ModelConfig::Xielu xi = c.ffn_act == ModelConfig::Activation::xielu ? c.xielu_params(ffn_layer_)
                                                                                : ModelConfig::Xielu{};
    for (size_t i = 0; i < gate_.size(); ++i) {
        const double g = gate_[i] + (b1 ? b1[i] : 0.0), u = up_[i] + (b3 ? b3[i] : 0.0);
        switch (c.ffn_act) {
        case ModelConfig::Activation::silu:  // (step35: min(silu(g), clamp) * clamp(u, -clamp, clamp))
            gate_[i] = ffn_clamp_ > 0.0 ? std::min(g / (1.0 + std::exp(-g)), ffn_clamp_) *
                                              std::clamp(u, -ffn_clamp_, ffn_clamp_)
                                        : g / (1.0 + std::exp(-g)) * u;
            break;
        case ModelConfig::Activation::gelu_tanh: gate_[i] = gelu(g) * u; break;
        case ModelConfig::Activation::relu_sqr: gate_[i] = std::max(u, 0.0) * std::max(u, 0.0); break;
        case ModelConfig::Activation::xielu:
            gate_[i] = u > 0.0 ? xi.ap * u * u + xi.beta * u
                               : (std::expm1(std::min(u, static_cast<double>(xi.eps))) - u) * xi.an + xi.beta * u;
            break;
        case ModelConfig::Activation::swiglu_oai: {
            const double gc = std::min(g, limit);
            gate_[i] = gc / (1.0 + std::exp(-alpha * gc)) * (std::clamp(u, -limit, limit) + 1.0);
            break;
        }
        }
    }
    matvec(w2, gate_, out, row_);
    if (b2)
        for (size_t i = 0; i < out.size(); ++i) out[i] += b2[i];
}

// out = sum over the n_expert_used experts e of the largest logits l_e of softmax_e(those l) * ffn_e(xn) * s_e, with
// l = W_router router_in (+ the router's bias) (a tie goes to the lower expert); gpt-oss's experts add their biases;
// s_e gemma4's output scale of expert e (else 1). qwen2moe (ModelConfig::moe_norm_weights off): softmax_e(all the
// logits) instead, the chosen experts' shares of it. DeepSeek-style routing (ModelConfig::moe_routing_general:
// glm4moe, lfm2moe, deepseek2; sigmoid gating, a selection bias, expert groups, a weights scale): route_experts'
// experts and weights (engine/model/moe_route.h).
void ReferenceBackend::moe_ffn(const LayerWeights& L, const std::vector<double>& router_in) {
    const ModelConfig& c = config_;
    matvec(L.ffn_gate_inp, router_in, router_, row_);
    for (size_t e = 0; e < L.ffn_gate_inp_b.size(); ++e) router_[e] += L.ffn_gate_inp_b[e];
    std::vector<int64_t> order(static_cast<size_t>(c.n_expert));
    std::vector<double> weight(static_cast<size_t>(c.n_expert_used));
    if (c.moe_routing_general()) {  // (DeepSeek-style: gating, selection bias, groups and scale)
        std::vector<int32_t> chosen(static_cast<size_t>(c.n_expert_used));
        route_experts(c, router_.data(), L.ffn_exp_probs_b.empty() ? nullptr : L.ffn_exp_probs_b.data(),
                      chosen.data(), weight.data(), route_scratch_);
        std::copy(chosen.begin(), chosen.end(), order.begin());
    } else {
        for (size_t e = 0; e < order.size(); ++e) order[e] = static_cast<int64_t>(e);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return router_[a] > router_[b]; });
        if (c.moe_norm_weights) {
            for (int64_t i = 0; i < c.n_expert_used; ++i) weight[i] = router_[order[i]];
            softmax(weight, c.n_expert_used);
        } else {
            std::vector<double> all = router_;
            softmax(all, c.n_expert);
            for (int64_t i = 0; i < c.n_expert_used; ++i) weight[i] = all[order[i]];
        }
    }
    out_.assign(c.n_embd, 0.0);
    auto bias = [](const std::vector<float>& b, int64_t e, int64_t n) {
        return b.empty() ? nullptr : b.data() + e * n;
    };
    // llama4 (moe_weight_input): expert e reads weight_e * xn, and its output joins the sum as it is
    const std::vector<double> xn = c.moe_weight_input ? xn_ : std::vector<double>();
    ffn_clamp_ = ModelConfig::layer_clamp(c.swiglu_clamp_exp, ffn_layer_);  // (step35)
    for (int64_t i = 0; i < c.n_expert_used; ++i) {
        const int64_t e = order[i];
        const ExpertWeights& E = L.experts[e];
        if (c.moe_weight_input)
            for (int64_t j = 0; j < c.n_embd; ++j) xn_[j] = xn[j] * weight[i];
        ffn(E.gate, E.up, E.down, expert_out_, bias(L.ffn_gate_exps_b, e, c.n_ff_exp),
            bias(L.ffn_up_exps_b, e, c.n_ff_exp), bias(L.ffn_down_exps_b, e, c.n_embd));
        const double s = L.ffn_down_exps_s.empty() ? 1.0 : L.ffn_down_exps_s[e];
        const double w = c.moe_weight_input ? 1.0 : weight[i];
        for (int64_t j = 0; j < c.n_embd; ++j) out_[j] += w * expert_out_[j] * s;
    }
    ffn_clamp_ = 0.0;
    if (c.moe_weight_input) xn_ = xn;  // (the shared expert's input)
}

}  // namespace quill
