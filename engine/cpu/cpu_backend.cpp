#include "engine/cpu/cpu_backend.h"

#include "engine/cpu/kernels.h"
#include "engine/cpu/layer_norm.h"
#include "engine/error.h"
#include "engine/model/layer_matrices.h"
#include "engine/runtime/sampler.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace quill::cpu {

namespace {

// True when every value is finite. Branch-free over the bits (exponent all ones: inf or NaN), so it vectorizes
// and costs next to nothing beside the matmuls that produced the values.
bool all_finite(const float* x, int64_t n) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, x + i, sizeof bits);
        bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    return bad == 0;
}

}  // namespace

CpuBackend::CpuBackend(const ModelConfig& config, const Weights& weights, const CpuBackendOptions& options)
    : config_(config),
      weights_(weights),
      layers_(options.layers.size() > 0 ? options.layers : LayerRange{0, config.n_layer}),
      reference_(options.reference),
      isa_(options.isa.value_or(best_isa())),
      pool_(options.reference ? 1 : (options.n_threads > 0 ? options.n_threads : ThreadPool::physical_cores())),
      kv_ops_(kv_ops(isa_, options.reference)),
      kv_(config,
          {kv_cache_layers(config, layers_), options.n_slots, options.n_ctx, config.kv_heads(), config.kv_head_dim(),
           options.kv_type},
          options.window_cache, options.kv_huge_pages, pool_, layers_.begin, layers_.end),
      attention_(config, kv_, kv_ops_, pool_) {
    if (config.recurrent()) recurrent_ = RecurrentState(config, layers_, options.n_slots, options.state_snapshots);
    // (glm-dsa: a layer without an indexer of its own reads the choice of the one before, which a range must hold)
    if (config.dsa() && !config.layer_indexer(layers_.begin))
        throw UsageError(fmt::format("layers split at layer {}, which takes the positions it attends to from an "
                                     "earlier layer's indexer: split at a layer with an indexer of its own",
                                     layers_.begin));
    check_weights(weights);
    if (!reference_)
        weight_store_ = WeightStore(weights, isa_, pool_, layers_, layers_.end == config.n_layer, options.cancel);
    rope_inv_freq_ = weights.rope_inv_freq(config, false, options.n_ctx);
    if (config.two_ropes()) rope_inv_freq_local_ = weights.rope_inv_freq(config, true, options.n_ctx);
    if (config.v_norm || config.qk_l2_norm)
        ones_.assign(static_cast<size_t>(std::max(config.head_dim, config.head_dim_local)), 1.0f);
    ple_proj_ = per_layer_proj_rows(weights, layers_.begin, layers_.end);
}

void CpuBackend::check_weights(const Weights& weights) {
    auto check = [](const TensorView& t) {
        if (!matmul_supports(t.type))
            throw FileError(fmt::format("tensor '{}' has type {}, which the CPU backend cannot multiply", t.name,
                                        type_name(t.type)));
    };
    for (const auto& L : weights.layers)
        for (const TensorView* t : layer_matrices(L)) check(*t);
    check(weights.output);
    if (weights.per_layer_model_proj.data) check(weights.per_layer_model_proj);
}

void CpuBackend::resize_scratch(int64_t n) {
    const auto& c = config_;
    x_.resize(n * c.n_embd);
    xn_.resize(n * c.n_embd);
    q_.resize(n * c.n_embd_q());
    k_.resize(n * c.n_embd_kv());
    v_.resize(n * c.n_embd_kv());
    att_.resize(n * c.n_embd_q());
    proj_.resize(n * c.n_embd);
    attn_proj_.resize(c.parallel_blocks || c.ssm_beside_attn ? n * c.n_embd : 0);
    const bool dense = c.dense_ffn();  // (a mixture of experts has its own: moe_block)
    gate_.resize(dense ? n * c.n_ff : 0);
    up_.resize(dense ? n * c.n_ff : 0);
    shared_.resize(c.moe_shared_ffn || c.moe_shared_expert ? n * c.n_embd : 0);
    ple_.resize(n * layers_.size() * c.n_embd_per_layer);
    ple_gate_.resize(n * c.n_embd_per_layer);
    ple_row_.resize(c.n_layer * c.n_embd_per_layer);
    altup_tmp_.resize(c.altup() ? n * c.n_embd : 0);
    attention_.resize_scratch();
}

void CpuBackend::mm(std::span<const MatmulJob> jobs, const float* x, int64_t n_tokens, int64_t n_in,
                    int64_t n_decode, bool x_ready) {
    if (reference_) {
        for (const auto& j : jobs)
            matmul_reference(j.w, reference_activations(j.w.type, x, n_tokens, n_in).data(), n_tokens, j.y);
        return;
    }
    if (!x_ready) act_.set(x, n_tokens, n_in, n_decode);
    matmul(jobs, act_, pool_, isa_);
}

// From a half group of tokens on, with a second thread: the section that writes the rows quantizes them too, each
// thread its own rows while they are in its cache, instead of one thread quantizing them in the matmul while the
// others wait. With one thread (or a few tokens, whose sections run on the calling thread) nothing changes. The
// rows still cross to the other core, in int8 now.
bool CpuBackend::int8_in_section(const WeightMatrix& w, int64_t n) const {
    return !reference_ && pool_.size() > 1 && n >= Activations::kInt8PartTokens && reads_int8(w, isa_);
}

// rows(t0, t1) for token ranges of a parallel section (whole half groups), and when `next` reads int8 activations
// (int8_in_section), y's int8 form for it quantized in the same section, each task its own rows; true then, with
// act_ holding y [n, n_embd].
bool CpuBackend::rows_section(int64_t n, float* y, int64_t n_decode, const WeightMatrix* next,
                              const std::function<void(int64_t, int64_t)>& rows) {
    const bool int8 = next != nullptr && int8_in_section(*next, n);
    if (int8) {
        act_.set(y, n, config_.n_embd, n_decode);
        act_.begin_int8(isa_, !reads_tiles_alone(*next, isa_, n));  // (next's fellow products: matmul checks)
    }
    pool_.run([&](int ith, int nth) {
        const Range r = split_range(n, ith, nth, Activations::kInt8PartTokens);
        rows(r.begin, r.end);
        if (int8) act_.quantize_int8(r.begin, r.end);
    });
    if (int8) act_.end_int8();
    return int8;
}

// rms_norm (command-r, cohere2: layer_norm) of n rows, split across the pool from 8 rows on (each row computed
// alone, as in decode).
bool CpuBackend::norm(const float* x, const float* w, float* y, int64_t n, const WeightMatrix* next,
                      int64_t n_decode) {
    const int64_t d = config_.n_embd;
    const auto row_norm = config_.layer_norm ? layer_norm : kv_ops_.rms_norm;
    if (n < 8) {
        row_norm(x, w, y, n, d, config_.rms_eps);
        return false;
    }
    return rows_section(n, y, n_decode, next, [&](int64_t t0, int64_t t1) {
        row_norm(x + t0 * d, w, y + t0 * d, t1 - t0, d, config_.rms_eps);
    });
}

// The sum in the norm's section, each thread adding the rows it norms, instead of on the calling thread after each
// block while the others wait.
bool CpuBackend::residual_norm(int64_t layer, const float* w, const WeightMatrix* next, int64_t n, float scale) {
    const int64_t d = config_.n_embd;
    std::atomic<bool> finite{true};
    // (command-r, cohere2: LayerNorm, after the sum alone)
    const auto row_norm = config_.layer_norm ? layer_norm : kv_ops_.rms_norm;
    const float* sum_w = config_.layer_norm ? nullptr : w;
    // Rows [t0, t1): the sum, its check (corrupt or out-of-range weights show up here first), the norm.
    auto rows = [&](int64_t t0, int64_t t1) {
        float* x = x_.data() + t0 * d;
        if (scale != 1.0f) {  // (gemma4: x = (x + proj) * layer_output_scale, then the norm)
            const float* p = proj_.data() + t0 * d;
            for (int64_t i = 0; i < (t1 - t0) * d; ++i) x[i] = (x[i] + p[i]) * scale;
            if (!all_finite(x, (t1 - t0) * d)) finite.store(false, std::memory_order_relaxed);
            if (w) row_norm(x, w, xn_.data() + t0 * d, t1 - t0, d, config_.rms_eps);
            return;
        }
        if (!kv_ops_.add_norm(x, proj_.data() + t0 * d, sum_w, xn_.data() + t0 * d, t1 - t0, d, config_.rms_eps))
            finite.store(false, std::memory_order_relaxed);
        if (config_.layer_norm && w) layer_norm(x, w, xn_.data() + t0 * d, t1 - t0, d, config_.rms_eps);
    };
    bool int8 = false;
    if (n < 8) {  // decode: a parallel section costs more than the work
        rows(0, n);
    } else {
        int8 = rows_section(n, xn_.data(), n_decode_, next, rows);
    }
    if (!finite.load(std::memory_order_relaxed))
        throw Error(fmt::format("layer {} (blk.{}.*) produced non-finite values (inf or NaN) in the residual "
                                "stream: the model's weights are corrupt or out of range",
                                layer, layer));
    return int8;
}

BackendInfo CpuBackend::describe() const {
    return {std::string(name()), n_threads(), std::string(isa_name(isa_)),
            fmt::format("{} backend, {} threads, {} kernels", name(), n_threads(), isa_name(isa_))};
}

int64_t CpuBackend::max_rewind() const {
    if (config_.recurrent()) return 0;  // (a recurrent state holds every token before: it cannot go back)
    return kv_.ring() > 0 ? kv_.ring() - config_.sliding_window : std::numeric_limits<int64_t>::max();
}

namespace {
constexpr const char* kNonFiniteLogits =
    "the output layer (output_norm, output) produced non-finite logits (inf or NaN): the model's weights are corrupt "
    "or out of range";
}  // namespace

void CpuBackend::forward(const Batch& batch, std::span<float> logits) {
    QUILL_CHECK(layers_.size() == config_.n_layer, "forward() on a backend holding layers {}-{} of {}", layers_.begin,
                layers_.end - 1, config_.n_layer);
    check_batch(batch, config_, kv_.shape(), logits);
    forward_logits(batch, logits);
    if (!all_finite(logits.data(), batch.n_logits() * config_.n_vocab)) throw Error(kNonFiniteLogits);
}

// Plain greedy rows (a batch with --temp 0): each task checks and searches the vocabulary range that the same task
// of the output product computed (the matmul's first split: ranges of 16-row units), so the logits are read once,
// mostly from the core that wrote them, instead of twice by the calling thread while the others wait.
void CpuBackend::forward_sample(const Batch& batch, std::span<Sampler* const> samplers, int64_t n_token_ids,
                                std::span<int32_t> tokens) {
    const int64_t m = batch.n_logits();
    QUILL_CHECK(layers_.size() == config_.n_layer, "forward_sample() on a backend holding layers {}-{} of {}",
                layers_.begin, layers_.end - 1, config_.n_layer);
    const bool greedy = m > 0 && std::all_of(samplers.begin(), samplers.end(),
                                             [](const Sampler* s) { return s->plain_greedy(); });
    if (!greedy) return forward_sample_on_host(batch, samplers, n_token_ids, tokens);
    const int64_t nv = config_.n_vocab;
    QUILL_CHECK(static_cast<int64_t>(samplers.size()) == m && static_cast<int64_t>(tokens.size()) >= m &&
                    n_token_ids > 0 && n_token_ids <= nv,
                "forward_sample: {} samplers, room for {} tokens, {} token ids, for {} rows of {}", samplers.size(),
                tokens.size(), n_token_ids, m, nv);
    greedy_logits_.resize(static_cast<size_t>(m * nv));
    check_batch(batch, config_, kv_.shape(), greedy_logits_);
    forward_logits(batch, greedy_logits_);
    const int parts = pool_.size();
    const bool wide = isa_ >= Isa::avx512 && !avx512_emulated();  // (the one-pass search of greedy_search)
    picks_.assign(static_cast<size_t>(parts * m), {-INFINITY, -1});
    std::atomic<bool> finite{true};
    pool_.run([&](int ith, int nth) {
        const Range v = split_range(nv, ith, nth, 16);
        const int64_t e = std::min(v.end, n_token_ids);
        for (int64_t r = 0; r < m; ++r) {
            const float* row = greedy_logits_.data() + r * nv;
            int64_t i = 0;
            bool ok = true;
            if (wide && avx512::greedy_search(row + v.begin, std::max<int64_t>(e - v.begin, 0), v.end - v.begin, &i,
                                              &ok)) {
                i += v.begin;
            } else {
                ok = all_finite(row + v.begin, v.end - v.begin);
                if (v.begin < e)
                    i = v.begin + static_cast<int64_t>(first_max({row + v.begin, static_cast<size_t>(e - v.begin)}));
            }
            if (!ok) finite.store(false, std::memory_order_relaxed);
            if (v.begin >= e) continue;
            picks_[static_cast<size_t>(ith * m + r)] = {row[i], static_cast<int32_t>(i)};
        }
    });
    if (!finite.load(std::memory_order_relaxed)) throw Error(kNonFiniteLogits);
    for (int64_t r = 0; r < m; ++r) {
        Pick best{-INFINITY, -1};
        for (int p = 0; p < parts; ++p) {  // ranges in vocabulary order: a later one wins only with a larger logit
            const Pick& c = picks_[static_cast<size_t>(p * m + r)];
            if (c.id >= 0 && (best.id < 0 || c.value > best.value)) best = c;
        }
        tokens[static_cast<size_t>(r)] = best.id;
    }
}

void CpuBackend::embed_tokens(const Batch& batch, std::span<float> hidden) {
    check_batch(batch, config_, kv_.shape());
    QUILL_CHECK(hidden.size() >= batch.tokens.size() * config_.n_embd, "embed: {} floats for {} tokens",
                hidden.size(), batch.tokens.size());
    embed_rows(batch, hidden.data());
}

void CpuBackend::forward_layers(const Batch& batch, std::span<float> hidden) {
    QUILL_CHECK(!config_.altup(), "forward_layers: gemma3n's AltUp streams do not pass between ranges of layers");
    check_batch(batch, config_, kv_.shape());
    QUILL_CHECK(hidden.size() >= batch.tokens.size() * config_.n_embd, "forward_layers: {} floats for {} tokens",
                hidden.size(), batch.tokens.size());
    forward_logits(batch, {}, hidden.data(), hidden.data());
}

void CpuBackend::output_logits(const Batch& batch, std::span<const float> hidden, std::span<float> logits) {
    QUILL_CHECK(layers_.end == config_.n_layer, "output_logits on a backend holding layers {}-{} of {}", layers_.begin,
                layers_.end - 1, config_.n_layer);
    check_batch(batch, config_, kv_.shape(), logits);
    const auto n = static_cast<int64_t>(batch.tokens.size());
    QUILL_CHECK(static_cast<int64_t>(hidden.size()) >= n * config_.n_embd, "output_logits: {} floats for {} tokens",
                hidden.size(), n);
    resize_scratch(n);
    std::copy_n(hidden.data(), n * config_.n_embd, x_.data());
    output_block(batch, logits);
    if (!all_finite(logits.data(), batch.n_logits() * config_.n_vocab)) throw Error(kNonFiniteLogits);
}

void CpuBackend::forward_logits(const Batch& batch, std::span<float> logits, const float* in, float* out) {
    const bool snapshots = config_.recurrent() && recurrent_.n_snapshots() > 0;
    if (kv_.ring() == 0 && !snapshots) return forward_part(batch, logits, in, out);
    // Rings keep window + kRingChunk positions: a sequence's tokens go in parts spanning fewer than kRingChunk
    // positions, in increasing order (each part's K and V are all stored before its attention). A part also ends
    // where a slot's state is to be kept (RecurrentState::wanted), which forward_part takes after it.
    std::unordered_map<int32_t, std::pair<int32_t, int32_t>> seen;  // slot -> (first position in the part, last)
    Batch part;
    size_t row = 0, token = 0;  // the part's first logits row, its first token
    const auto nv = static_cast<size_t>(config_.n_vocab);
    const auto d = static_cast<size_t>(config_.n_embd);
    auto flush = [&] {
        const size_t rows = out ? 0 : static_cast<size_t>(part.n_logits());
        forward_part(part, logits.subspan(row * nv, rows * nv), in ? in + token * d : nullptr,
                     out ? out + token * d : nullptr);
        row += rows;
        token += part.tokens.size();
        part.tokens.clear();
        for (auto& [slot, s] : seen) s.first = -1;
    };
    for (const BatchToken& t : batch.tokens) {
        auto [it, fresh] = seen.try_emplace(t.slot, -1, -1);
        auto& [first, last] = it->second;
        if (kv_.ring() > 0 && !fresh && t.pos <= last)
            throw UsageError(fmt::format("slot {}: position {} after {} in one batch (positions of a sequence must "
                                         "increase within a batch on a model with sliding-window layers)",
                                         t.slot, t.pos, last));
        if (first >= 0 && ((kv_.ring() > 0 && t.pos - first >= kRingChunk) ||
                           (snapshots && recurrent_.wanted(t.slot, t.pos))))
            flush();
        if (first < 0) first = t.pos;
        last = t.pos;
        part.tokens.push_back(t);
    }
    flush();
}

void CpuBackend::forward_part(const Batch& batch, std::span<float> logits, const float* in, float* out) {
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    if (config_.recurrent()) recurrent_.advance(batch);  // (first: a refused batch changes nothing)
    for (const BatchToken& t : batch.tokens) kv_.written(t.slot, t.pos);  // (before any of the part's attention)
    n_decode_ = 0;  // the leading decode steps (check_batch: they come first)
    while (n_decode_ < n && batch.tokens[n_decode_].decode) ++n_decode_;
    resize_scratch(n);
    if (in) {
        std::copy_n(in, n * config_.n_embd, x_.data());
    } else {
        embed_rows(batch, x_.data());
    }
    if (config_.n_embd_per_layer > 0) {  // (from the embeddings: in xn_, free until the first norm, after a split)
        if (in) embed_rows(batch, xn_.data());
        per_layer_inputs(batch, in ? xn_.data() : x_.data());
    }
    rope_angles(batch);
    const bool altup = config_.altup();
    if (altup) altup_embed(n);
    for (int64_t l = layers_.begin; l < layers_.end; ++l) {
        const LayerWeights& L = weights_.layers[l];
        if (altup) altup_predict(L, n);
        if (!config_.layer_has_mixer(l)) {  // (nemotron_h: a layer of an FFN alone; the first adds nothing to x)
            if (l == layers_.begin) std::fill_n(proj_.begin(), n * config_.n_embd, 0.0f);
        } else if (L.mla())
            mla_block(batch, L, l);
        else if (!config_.layer_is_recurrent(l))
            attention_block(batch, L, l);
        else if (config_.layer_is_short_conv(l))
            short_conv_block(batch, L, l);
        else if (config_.mamba1())
            mamba1_block(batch, L, l);
        else if (config_.mamba2()) {
            if (config_.ssm_beside_attn) attention_block(batch, L, l);  // (falcon-h1: on the same xn, mamba2_block)
            mamba2_block(batch, L, l);
        }
        else
            delta_net_block(batch, L, l);
        if (L.laurel_l.data) laurel_join(n);
        if (config_.layer_has_ffn(l)) ffn_block(L, l, n);  // (nemotron_h: not in a layer of a mixer alone)
        if (altup)
            altup_correct(L, l, n);
        else if (L.per_layer_proj.data)
            per_layer_block(L, l, n);
    }
    if (altup) altup_merge(n);
    if (config_.recurrent()) recurrent_.take_wanted();  // (the states that now stand where they are to be kept)
    residual_norm(layers_.end - 1, nullptr, nullptr, n, out_scale(layers_.end - 1));
    if (out) {
        std::copy_n(x_.data(), n * config_.n_embd, out);
    } else {
        output_block(batch, logits);
    }
}

// x[t] += b for the n rows of x (b's length); nothing when b is empty.
void CpuBackend::add_bias(float* x, const std::vector<float>& b, int64_t n) {
    const int64_t d = static_cast<int64_t>(b.size());
    for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < d; ++i) x[t * d + i] += b[i];
}

// x[t] = token_embd[token_t] * embd_scale
void CpuBackend::embed_rows(const Batch& batch, float* x_rows) {
    const TensorView& emb = weights_.tok_embd;
    const int64_t d = config_.n_embd;
    for (size_t t = 0; t < batch.tokens.size(); ++t) {
        float* x = x_rows + t * d;
        dequantize_row(emb.type, emb.row(batch.tokens[t].token), x, d);
        if (config_.embd_scale != 1.0f)
            for (int64_t i = 0; i < d; ++i) x[i] *= config_.embd_scale;
    }
}

// rope_cs_[t] = the cosines and sines of theta_i(pos_t) as rope() reads them (cpu_backend.h), times rope_mscale
// (ModelConfig::layer_rope_mscale), for every layer of this batch (and rope_cs_local_ for the local layers when their
// RoPE differs).
void CpuBackend::rope_angles(const Batch& batch) {
    const bool neox = config_.rope == ModelConfig::Rope::neox;
    auto fill = [&](const std::vector<double>& inv_freq, std::vector<float>& cs, double m) {
        const auto half = static_cast<int64_t>(inv_freq.size()), n_rot = 2 * half;  // (the layers' n_rot)
        cs.resize(batch.tokens.size() * n_rot * 2);
        for (size_t t = 0; t < batch.tokens.size(); ++t) {
            float* c = cs.data() + t * n_rot * 2;  // [n_rot]
            float* s = c + n_rot;                  // [n_rot]
            for (int64_t i = 0; i < half; ++i) {
                const double theta = static_cast<double>(batch.tokens[t].pos) * inv_freq[i];
                const auto ci = static_cast<float>(std::cos(theta) * m), si = static_cast<float>(std::sin(theta) * m);
                if (neox) {  // pair i: dims i and i + half
                    c[i] = ci;
                    s[i] = si;
                } else {  // pair i: dims 2i and 2i + 1, each with its angle's cosine, the sine signed for the sum
                    c[2 * i] = c[2 * i + 1] = ci;
                    s[2 * i] = -si;
                    s[2 * i + 1] = si;
                }
            }
        }
    };
    fill(rope_inv_freq_, rope_cs_, config_.layer_rope_mscale(false));
    if (!rope_inv_freq_local_.empty()) fill(rope_inv_freq_local_, rope_cs_local_, config_.layer_rope_mscale(true));
}

// Rotates each head's first n_rot dims of x [n_heads, head_dim] (the layer's: ModelConfig::layer_head_dim,
// layer_n_rot) by the angles of batch token t (a local layer's angles when `local` and they differ):
// x0' = x0 c - x1 s, x1' = x0 s + x1 c for each pair (x0, x1), as products and one sum each (no fused multiply-add:
// this file is built for the baseline ISA), four lanes at a time with SSE2 and the same operations in the scalar rest
// (the same bits as a scalar loop over the pairs).
void CpuBackend::rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int64_t t, bool local) const {
    const int64_t half = n_rot / 2;
    const std::vector<float>& cs = local && !rope_cs_local_.empty() ? rope_cs_local_ : rope_cs_;
    const float* c = cs.data() + t * n_rot * 2;
    const float* s = c + n_rot;
    if (config_.rope == ModelConfig::Rope::neox) {  // dims i and i + half, i < half
        for (int64_t h = 0; h < n_heads; ++h) {
            float* lo = x + h * head_dim;
            float* hi = lo + half;
            int64_t i = 0;
#ifdef __SSE2__
            for (; i + 4 <= half; i += 4) {
                const __m128 x0 = _mm_loadu_ps(lo + i), x1 = _mm_loadu_ps(hi + i);
                const __m128 ci = _mm_loadu_ps(c + i), si = _mm_loadu_ps(s + i);
                _mm_storeu_ps(lo + i, _mm_sub_ps(_mm_mul_ps(x0, ci), _mm_mul_ps(x1, si)));
                _mm_storeu_ps(hi + i, _mm_add_ps(_mm_mul_ps(x0, si), _mm_mul_ps(x1, ci)));
            }
#endif
            for (; i < half; ++i) {
                const float x0 = lo[i], x1 = hi[i];
                lo[i] = x0 * c[i] - x1 * s[i];
                hi[i] = x0 * s[i] + x1 * c[i];
            }
        }
        return;
    }
    for (int64_t h = 0; h < n_heads; ++h) {  // dims 2i and 2i + 1: x' = x c + swap(x) s, s signed per lane
        float* xh = x + h * head_dim;
        int64_t j = 0;
#ifdef __SSE2__
        for (; j + 4 <= n_rot; j += 4) {
            const __m128 v = _mm_loadu_ps(xh + j);
            const __m128 swapped = _mm_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1));
            _mm_storeu_ps(xh + j, _mm_add_ps(_mm_mul_ps(v, _mm_loadu_ps(c + j)), _mm_mul_ps(swapped, _mm_loadu_ps(s + j))));
        }
#endif
        for (; j < n_rot; j += 2) {
            const float x0 = xh[j], x1 = xh[j + 1];
            xh[j] = x0 * c[j] + x1 * s[j];
            xh[j + 1] = x1 * c[j + 1] + x0 * s[j + 1];
        }
    }
}

// V as a row at (slot, pos); K scattered into its block of 8 positions (k_cache_offset). A layer narrower than the
// cache's row (gemma4) fills the first values of it.
void CpuBackend::store_kv(int64_t layer, const BatchToken& t, const float* k, const float* v) {
    const auto n = static_cast<size_t>(config_.layer_n_embd_kv(layer));
    const auto row_elems = static_cast<int64_t>(kv_.shape().row_elems());
    uint8_t* kd = kv_.k(layer, t.slot);
    void* vd = kv_.v(layer, t.slot, t.pos);
    const int64_t row = kv_.row(layer, t.pos);
    const size_t k0 = k_cache_offset(row, 0, row_elems);
    if (kv_.shape().type == KvType::f32) {
        std::memcpy(vd, v, n * sizeof(float));
        auto* kf = reinterpret_cast<float*>(kd) + k0;
        for (size_t e = 0; e < n; ++e) kf[8 * e] = k[e];
    } else {
        kv_ops_.to_f16(v, static_cast<uint16_t*>(vd), static_cast<int>(n));
        auto* kh = reinterpret_cast<uint16_t*>(kd) + k0;
        for (size_t e0 = 0; e0 < n; e0 += 64) {
            const size_t m = std::min<size_t>(64, n - e0);
            uint16_t k16[64];
            kv_ops_.to_f16(k + e0, k16, static_cast<int>(m));
            for (size_t e = 0; e < m; ++e) kh[8 * (e0 + e)] = k16[e];
        }
    }
}


// proj = Wo attention(rope(Wq xn), rope(Wk xn), Wv xn), with xn = rms_norm(x) * attn_norm, x the residual stream
// with the block before's proj added (residual_norm). gemma3 also normalizes each Q and K head before RoPE and the
// block's output before the sum; gpt-oss's heads have sinks; gemma4 normalizes each V head (and takes V from K's
// projection where the layer has no Wv), in the layer's own head size and KV heads.
void CpuBackend::attention_block(const Batch& batch, const LayerWeights& L, int64_t layer) {
    const auto& c = config_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    const int64_t hd = c.layer_head_dim(layer), n_head_kv = c.layer_n_head_kv(layer);
    const int64_t nq = c.layer_n_embd_q(layer), nkv = c.layer_n_embd_kv(layer);  // widths per token
    const bool v_from_k = L.v_from_k();
    const bool own_kv = c.layer_has_kv(layer);  // (gemma4: a shared-KV layer has Q only, and stores nothing)
    if (c.attn_out_gate) q_gate_.resize(n * 2 * nq);
    const int64_t n_head = c.layer_n_head(layer), n_gate = c.layer_n_gate(layer);  // (step35: a gate a head)
    if (c.attn_gate_proj) attn_gate_.resize(n * n_gate);
    // (afmoe: its gate's product the fourth, after Q, K and V)
    const MatmulJob qkv[] = {{matrix(L.wq), c.attn_out_gate ? q_gate_.data() : q_.data()},
                             {own_kv ? matrix(L.wk) : matrix(L.wq), k_.data()},
                             {v_from_k || !own_kv ? matrix(L.wk) : matrix(L.wv), v_.data()},
                             {c.attn_gate_proj ? matrix(L.wgate) : matrix(L.wq), attn_gate_.data()}};
    // (the first layer of a range of a split forward starts from the whole residual stream, as layer 0 does;
    // olmo2 and exaone4 have no input norm: the products read x itself)
    bool ready = false;
    if (!c.input_norms) {
        if (layer != layers_.begin) residual_norm(layer - 1, nullptr, nullptr, n, out_scale(layer - 1));
    } else if (layer == layers_.begin) {
        ready = norm(x_.data(), L.attn_norm.data(), xn_.data(), n, &qkv[0].w, n_decode_);
    } else {
        ready = residual_norm(layer - 1, L.attn_norm.data(), &qkv[0].w, n, out_scale(layer - 1));
    }
    const float* in = c.input_norms ? xn_.data() : x_.data();
    const size_t n_jobs = !own_kv ? 1 : v_from_k ? 2 : c.attn_gate_proj ? 4 : 3;
    mm(std::span<const MatmulJob>(qkv, n_jobs), in, n, c.n_embd, n_decode_, ready);
    if (c.attn_out_gate) {  // (qwen35: each head's query, then its gate)
        attn_gate_.resize(n * nq);
        for (int64_t t = 0; t < n; ++t)
            for (int64_t h = 0; h < c.n_head; ++h) {
                const float* qg = q_gate_.data() + (t * c.n_head + h) * 2 * hd;
                std::copy_n(qg, hd, q_.data() + t * nq + h * hd);
                std::copy_n(qg + hd, hd, attn_gate_.data() + t * nq + h * hd);
            }
    }
    if (L.has_bias()) {
        add_bias(q_.data(), L.bq, n);
        add_bias(k_.data(), L.bk, n);
        add_bias(v_.data(), L.bv, n);
    }
    const bool local = c.layer_is_local(layer);
    const bool has_rope = c.layer_has_rope(layer);  // (smollm3: not on every fourth layer)
    const bool temp_layer = c.layer_attn_temp(layer);
    const int64_t n_rot = c.layer_n_rot(layer);
    const auto q_norm = static_cast<int64_t>(L.attn_q_norm.size()), k_norm = static_cast<int64_t>(L.attn_k_norm.size());
    auto rope_store = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            float* q = q_.data() + t * nq;
            float* k = k_.data() + t * nkv;
            float* v = v_.data() + t * nkv;
            if (own_kv && v_from_k) std::copy_n(k, nkv, v);  // (gemma4: K's projection, before K's norm and RoPE)
            // (rows of the norm's length: a head, or olmo2's whole Q and K; command-r's R+: a LayerNorm of each head
            // with its own row of the weights)
            if (c.layer_norm) {
                for (int64_t i = 0; i < nq && q_norm > 0; i += hd)
                    layer_norm(q + i, L.attn_q_norm.data() + i % q_norm, q + i, 1, hd, c.rms_eps);
                for (int64_t i = 0; i < nkv && k_norm > 0; i += hd)
                    layer_norm(k + i, L.attn_k_norm.data() + i % k_norm, k + i, 1, hd, c.rms_eps);
            } else if (!c.qk_norm_after_rope) {
                if (q_norm > 0) kv_ops_.rms_norm(q, L.attn_q_norm.data(), q, nq / q_norm, q_norm, c.rms_eps);
                if (k_norm > 0) kv_ops_.rms_norm(k, L.attn_k_norm.data(), k, nkv / k_norm, k_norm, c.rms_eps);
            }
            if (own_kv && c.v_norm) kv_ops_.rms_norm(v, ones_.data(), v, n_head_kv, hd, c.rms_eps);
            if (has_rope) {
                rope(q, n_head, hd, n_rot, t, local);
                if (own_kv) rope(k, n_head_kv, hd, n_rot, t, local);
                if (c.qk_l2_norm) {  // llama4: each Q and K head divided by its rms after RoPE
                    kv_ops_.rms_norm(q, ones_.data(), q, n_head, hd, c.rms_eps);
                    if (own_kv) kv_ops_.rms_norm(k, ones_.data(), k, n_head_kv, hd, c.rms_eps);
                }
            }
            if (c.qk_norm_after_rope) {  // hunyuan: each Q and K head's weighted norm after RoPE
                kv_ops_.rms_norm(q, L.attn_q_norm.data(), q, nq / q_norm, q_norm, c.rms_eps);
                if (own_kv) kv_ops_.rms_norm(k, L.attn_k_norm.data(), k, nkv / k_norm, k_norm, c.rms_eps);
            }
            // mistral3: q *= 1 + attn_temp_scale * log(floor((pos + offset) / floor) + 1) (llama4: without RoPE only)
            if (temp_layer) {
                const auto temp = static_cast<float>(c.attn_temp(batch.tokens[t].pos));
                for (int64_t i = 0; i < nq; ++i) q[i] *= temp;
            }
            if (own_kv) store_kv(layer, batch.tokens[t], k, v);
        }
    };
    // (rope_store by reference: no std::function copy of the lambda)
    attention_.attend_all(batch, layer, q_.data(), att_.data(), std::ref(rope_store),
                          L.attn_sinks.empty() ? nullptr : L.attn_sinks.data());
    if (c.attn_gate_per_head)  // att_h = att_h * sigmoid(gate_h) (step35; laguna: softplus)
        for (int64_t t = 0; t < n; ++t)
            for (int64_t h = 0; h < n_head; ++h) {
                const float s = c.attn_gate_value(attn_gate_[t * n_gate + h]);
                for (int64_t i = 0; i < hd; ++i) att_[t * nq + h * hd + i] *= s;
            }
    else if (c.attn_out_gate || c.attn_gate_proj)  // att = att * sigmoid(gate) (laguna: softplus)
        for (int64_t i = 0; i < n * nq; ++i) att_[i] *= c.attn_gate_value(attn_gate_[i]);
    const MatmulJob o[] = {{matrix(L.wo), proj_.data()}};
    mm(o, att_.data(), n, nq, n_decode_);
    add_bias(proj_.data(), L.bo, n);
    if (!L.attn_post_norm.empty()) norm(proj_.data(), L.attn_post_norm.data(), proj_.data(), n);
    scale_residual(n);
}

// proj *= residual_scale (granite), before the sum joins the residual stream
void CpuBackend::scale_residual(int64_t n) {
    const float s = config_.residual_scale;
    if (s == 1.0f) return;
    for (int64_t i = 0; i < n * config_.n_embd; ++i) proj_[i] *= s;
}

// proj = W2 (act(W1 xn) * W3 xn), with xn = rms_norm(x + the attention's proj) * ffn_norm, act SiLU or GELU
// (ModelConfig::ffn_act); gemma3 normalizes the output before the sum. gemma4's mixture: proj = post_norm_1(that) +
// post_norm_2(the experts' sum) (moe_block). A mixture with a shared expert: the experts' sum plus its gated output;
// a mixture's leading dense layers: the dense FFN.
void CpuBackend::ffn_block(const LayerWeights& L, int64_t layer, int64_t n) {
    const auto& c = config_;
    if (c.parallel_blocks) {  // command-r, cohere2: x = (x + W2 (silu(W1 xn) * W3 xn)) + attention's proj, same xn
        std::swap(proj_, attn_proj_);  // (the attention's output waits in attn_proj_)
        if (c.layer_moe(layer)) {  // (cohere2moe: the experts and the shared expert over the same xn)
            moe_block(L, layer, n, false, true);
            if (c.moe_shared_expert) shared_expert(L, layer, n);
        } else {
            dense_ffn(L, layer, n, xn_.data(), false, proj_.data());
        }
        residual_norm(layer, nullptr, nullptr, n);
        std::swap(proj_, attn_proj_);  // (added by the next residual_norm)
        return;
    }
    if (c.layer_moe(layer) && !c.moe_shared_ffn) {
        moe_block(L, layer, n);
        if (c.moe_shared_expert) shared_expert(L, layer, n);
        // (afmoe: the experts' and the shared expert's sum normalized before it joins the residual stream)
        if (!L.ffn_post_norm.empty()) norm(proj_.data(), L.ffn_post_norm.data(), proj_.data(), n);
        scale_residual(n);  // (granitehybrid's experts: times residual_scale, as its dense FFN)
        return;
    }
    // (olmo2, exaone4: no input norm, gate and up read x itself)
    const WeightMatrix& gate = matrix(L.ffn_gate.data ? L.ffn_gate : L.ffn_up);  // (the first product; nemotron_h: up)
    const bool ready = residual_norm(layer, c.input_norms ? L.ffn_norm.data() : nullptr,
                                     c.input_norms ? &gate : nullptr, n);
    dense_ffn(L, layer, n, c.input_norms ? xn_.data() : x_.data(), ready, proj_.data());
    if (c.moe_shared_ffn) {
        norm(proj_.data(), L.ffn_post_norm_1.data(), shared_.data(), n);
        moe_block(L, layer, n, true);
        norm(proj_.data(), L.ffn_post_norm_2.data(), proj_.data(), n);
        for (int64_t i = 0; i < n * c.n_embd; ++i) proj_[i] += shared_[i];
    }
    if (!L.ffn_post_norm.empty()) norm(proj_.data(), L.ffn_post_norm.data(), proj_.data(), n);
    scale_residual(n);
}

void CpuBackend::dense_ffn(const LayerWeights& L, int64_t layer, int64_t n, const float* in, bool ready, float* out) {
    const auto& c = config_;
    QUILL_CHECK(c.ffn_act != ModelConfig::Activation::swiglu_oai, "the clamped SwiGLU of a dense FFN");
    if (!c.ffn_gated()) return ungated_ffn(L, layer, n, in, ready, out);
    const MatmulJob gate_up[] = {{matrix(L.ffn_gate), gate_.data()}, {matrix(L.ffn_up), up_.data()}};
    const auto base_act = c.ffn_act == ModelConfig::Activation::silu ? kv_ops_.swiglu : kv_ops_.geglu;
    const float clamp = ModelConfig::layer_clamp(c.swiglu_clamp_shexp, layer);  // (step35's SwiGLU clamp; 0: none)
    auto act = [&](float* g, const float* u, int64_t m) {
        if (clamp > 0.0f)
            swiglu_clamped(g, u, m, clamp);
        else
            base_act(g, u, m);
    };
    const MatmulJob down[] = {{matrix(L.ffn_down), out}};
    const int64_t n_ff = c.layer_n_ff(layer);  // (gemma4 E2B: wider in its shared-KV layers)
    const bool sparse = c.layer_sparse(layer);  // (gemma3n's first layers: the gate cut before the activation)
    if (!sparse && int8_in_section(down[0].w, n)) {
        // Gate and up in one section by units of kFfnUnit features, each thread applying the activation to its
        // units' columns and quantizing their blocks for the down product as soon as it has both products' rows,
        // instead of a section of its own reading rows that the other core wrote.
        if (!ready) act_.set(in, n, c.n_embd, n_decode_);
        ffn_act_.set(gate_.data(), n, n_ff, n_decode_);
        ffn_act_.begin_int8(isa_, !reads_tiles_alone(down[0].w, isa_, n));
        matmul_pair(gate_up[0], gate_up[1], act_, pool_, isa_, kFfnUnit, [&](int64_t f0, int64_t f1) {
            for (int64_t t = 0; t < n; ++t) act(gate_.data() + t * n_ff + f0, up_.data() + t * n_ff + f0, f1 - f0);
            ffn_act_.quantize_int8_blocks(f0 / 32, f1 / 32);
        });
        ffn_act_.end_int8();
        matmul(down, ffn_act_, pool_, isa_);
    } else {
        mm(gate_up, in, n, c.n_embd, n_decode_, ready);
        if (sparse) sparsify_gate(n, n_ff);
        pool_.run([&](int ith, int nth) {
            const Range r = split_range(n * n_ff, ith, nth, 64);
            act(gate_.data() + r.begin, up_.data() + r.begin, r.end - r.begin);
        });
        mm(down, gate_.data(), n, n_ff, n_decode_);
    }
}

// out = W2 relu_sqr(W3 in), relu_sqr(u) = max(u, 0)^2 (nemotron_h's and arcee's FFN, without a gate), or (apertus)
// W2 xielu(W3 in) with the layer's parameters: the up product into gate_, the activation in place by ranges of
// features, the down product
void CpuBackend::ungated_ffn(const LayerWeights& L, int64_t layer, int64_t n, const float* in, bool ready,
                             float* out) {
    const auto& c = config_;
    const int64_t n_ff = c.layer_n_ff(layer);
    const MatmulJob up[] = {{matrix(L.ffn_up), gate_.data()}};
    mm(up, in, n, c.n_embd, n_decode_, ready);
    const bool xielu = c.ffn_act == ModelConfig::Activation::xielu;
    const ModelConfig::Xielu xi = xielu ? c.xielu_params(layer) : ModelConfig::Xielu{};
    pool_.run([&](int ith, int nth) {
        const Range r = split_range(n * n_ff, ith, nth, 64);
        if (xielu) {  // ap u^2 + beta u for u > 0, else (expm1(min(u, eps)) - u) an + beta u
            for (int64_t i = r.begin; i < r.end; ++i) {
                const float u = gate_[i];
                gate_[i] = u > 0.0f ? xi.ap * u * u + xi.beta * u
                                    : (std::expm1(std::min(u, xi.eps)) - u) * xi.an + xi.beta * u;
            }
            return;
        }
        for (int64_t i = r.begin; i < r.end; ++i) {
            const float u = std::max(gate_[i], 0.0f);
            gate_[i] = u * u;
        }
    });
    const MatmulJob down[] = {{matrix(L.ffn_down), out}};
    mm(down, gate_.data(), n, n_ff, n_decode_);
}

// ple[t, l] = (rms_norm(W_mp[l] x0[t] / sqrt(n_embd)) * proj_norm + per_layer_token_embd[token_t][l] *
// sqrt(n_embd_per_layer)) / sqrt(2) for this backend's layers l, x0 the tokens' scaled embeddings; the table's row
// of each token dequantized as it is read.
void CpuBackend::per_layer_inputs(const Batch& batch, const float* x0) {
    const auto& c = config_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size()), d = c.n_embd_per_layer;
    const int64_t width = layers_.size() * d;  // a token's inputs [layers_.size(), d]
    const MatmulJob proj[] = {{matrix(ple_proj_), ple_.data()}};
    mm(proj, x0, n, c.n_embd, n_decode_);
    const auto proj_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.n_embd)));
    const auto embd_scale = static_cast<float>(std::sqrt(static_cast<double>(d)));
    const auto sum_scale = static_cast<float>(1.0 / std::sqrt(2.0));
    const TensorView& table = weights_.per_layer_tok_embd;
    for (int64_t t = 0; t < n; ++t) {
        float* p = ple_.data() + t * width;
        for (int64_t i = 0; i < width; ++i) p[i] *= proj_scale;
        kv_ops_.rms_norm(p, weights_.per_layer_proj_norm.data(), p, layers_.size(), d, c.rms_eps);
        dequantize_row(table.type, table.row(batch.tokens[t].token), ple_row_.data(), c.n_layer * d);
        const float* e = ple_row_.data() + layers_.begin * d;
        for (int64_t i = 0; i < width; ++i) p[i] = (p[i] + e[i] * embd_scale) * sum_scale;
    }
}

// x = x + proj (the FFN's output); proj = rms_norm(W_proj (gelu(W_gate x) * ple[layer])) * post_norm, added by the
// next residual_norm (with the layer's output scale)
void CpuBackend::per_layer_block(const LayerWeights& L, int64_t layer, int64_t n) {
    const auto& c = config_;
    const int64_t d = c.n_embd_per_layer, width = layers_.size() * d;
    residual_norm(layer, nullptr, nullptr, n);
    const MatmulJob gate[] = {{matrix(L.per_layer_inp_gate), ple_gate_.data()}};
    mm(gate, x_.data(), n, c.n_embd, n_decode_);
    for (int64_t t = 0; t < n; ++t)
        kv_ops_.geglu(ple_gate_.data() + t * d, ple_.data() + t * width + (layer - layers_.begin) * d, d);
    const MatmulJob proj[] = {{matrix(L.per_layer_proj), proj_.data()}};
    mm(proj, ple_gate_.data(), n, d, n_decode_);
    norm(proj_.data(), L.per_layer_post_norm.data(), proj_.data(), n);
}

// logits = W_out rms_norm(x) * output_norm, for the rows that asked; soft-capped when the model says so
void CpuBackend::output_block(const Batch& batch, std::span<float> logits) {
    const auto& c = config_;
    int64_t m = 0, m_decode = 0;  // rows gathered, the decode steps among them (a prefix: they come first)
    for (size_t t = 0; t < batch.tokens.size(); ++t) {
        if (!batch.tokens[t].logits) continue;
        std::copy_n(x_.data() + t * c.n_embd, c.n_embd, xn_.data() + m * c.n_embd);  // gather
        ++m;
        if (batch.tokens[t].decode) ++m_decode;
    }
    if (m == 0) return;
    const MatmulJob out[] = {{matrix(weights_.output), logits.data()}};
    const bool ready = norm(xn_.data(), weights_.output_norm.data(), xn_.data(), m, &out[0].w, m_decode);
    mm(out, xn_.data(), m, c.n_embd, m_decode, ready);
    if (c.final_logit_softcap > 0.0f) {
        const float cap = c.final_logit_softcap;
        for (int64_t i = 0; i < m * c.n_vocab; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
    }
    // granite: logits / logit_scale, as a product by its inverse (llama.cpp's); command-r, cohere2: * logit_mul
    if (c.logit_scale != 1.0f || c.logit_mul != 1.0f) {
        const float s = c.logit_mul != 1.0f ? c.logit_mul : 1.0f / c.logit_scale;
        for (int64_t i = 0; i < m * c.n_vocab; ++i) logits[i] *= s;
    }
}

}  // namespace quill::cpu
