#include "cuda/cuda_backend.h"

#include "cuda/buffer.h"
#include "cuda/check.h"
#include "cuda/dequant.h"
#include "cuda/device_weights.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "cuda/moe.h"
#include "cuda/profile.h"
#include "engine/error.h"
#include "engine/io/escape.h"
#include "engine/runtime/kv_size.h"
#include "engine/runtime/sampler.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

namespace quill::cuda {

static_assert(kGemmMinTokens > kMaxGraphTokens, "a captured decode step must not call cuBLAS");

struct CudaBackend::Impl {
    cudaStream_t stream = nullptr;
    std::unique_ptr<DeviceWeights> weights;
    DeviceBuffer k_cache, v_cache;
    std::map<int64_t, cudaGraphExec_t> graphs;  // decode steps by token count

    // Prefill products (more than kMaxGraphTokens tokens, never in a graph) through cuBLAS, when it loaded.
    std::unique_ptr<Gemm> gemm;
    GemmMode gemm_mode = GemmMode::off;
    std::string gemm_why;  // why gemm_mode is off when the option was not
    DeviceBuffer gemm_scratch;
    MoeFfn moe;  // a mixture of experts' FFN and its workspace

    // Workspace for a batch of up to cap_tokens tokens and cap_logits logit rows.
    int64_t cap_tokens = 0, cap_logits = 0;
    DeviceBuffer floats, ints;
    float *x = nullptr, *xn = nullptr, *q = nullptr, *att = nullptr, *k = nullptr, *v = nullptr, *gate = nullptr,
          *up = nullptr, *cs = nullptr, *cs_local = nullptr, *logits = nullptr;
    int8_t* xq = nullptr;    // [n, 32 q8_blocks] a matmul input quantized (matmul_q8)
    float* xds = nullptr;    // [n, q8_blocks, 2] its blocks' (d, d * sum)
    bool int8 = true;        // Tuning::int8_products
    bool flash = true;       // Tuning::flash_attention
    bool fuse = false;       // Tuning::fused_kernels
    bool chain = false;      // Tuning::programmatic_chain on sm_90 or later (off while profiling)
    // How the int8 products launch (the options' stages, programmatic launch likewise, mma kernels); `stream` is
    // set per product from stream_types.
    Q8Launch q8;
    std::vector<GgmlType> stream_types;  // Tuning::stream_types
    bool stream_type(GgmlType t) const {
        return std::find(stream_types.begin(), stream_types.end(), t) != stream_types.end();
    }
    // The current call's leading decode tokens (BatchToken::decode) and their logit rows: they always take the
    // decode kernels, so that a sequence's arithmetic does not depend on the prompt chunks batched with it.
    int64_t n_dec = 0, m_dec = 0;
    int32_t* tokens = nullptr;
    DeviceBuffer picked_buffer;  // [cap_logits] tokens picked on the device (forward_sample)
    int32_t* picked = nullptr;
    // forward_sample's candidates (top_candidates): per logit row how many, then their ids and logits
    DeviceBuffer top_buffer;
    int32_t* top_need = nullptr;  // [cap_logits]
    int32_t* top_ids = nullptr;   // [cap_logits, kMaxTopCandidates]
    float* top_vals = nullptr;    // [cap_logits, kMaxTopCandidates]
    PinnedBuffer host_in;   // what a forward call uploads: the batch's ints (then forward_sample's candidate counts)
    PinnedBuffer host_out;  // the flag, then the logits (or forward_sample's candidates)

    Profile profile;  // Tuning::profile
    void mark(const char* phase) { profile.mark(phase, stream); }

    explicit Impl(bool profiling) : profile(profiling) {}

    ~Impl() {
        drop_graphs();
        if (stream) cudaStreamDestroy(stream);
    }

    void drop_graphs() {
        for (auto& [n, exec] : graphs)
            if (exec) cudaGraphExecDestroy(exec);
        graphs.clear();
    }

    // The work `enqueue` puts on the stream, captured as an executable graph (nothing runs). A failure during the
    // capture ends it before the error propagates, leaving the stream usable.
    template <class F>
    cudaGraphExec_t capture(F&& enqueue) {
        check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        cudaGraph_t graph = nullptr;
        try {
            enqueue();
        } catch (...) {
            cudaStreamEndCapture(stream, &graph);
            if (graph) cudaGraphDestroy(graph);
            throw;
        }
        check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
        cudaGraphExec_t exec = nullptr;
        const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        check(e, "cudaGraphInstantiate");
        return exec;
    }

    void reserve(const ModelConfig& c, int64_t n, int64_t m) {
        if (n <= cap_tokens && m <= cap_logits) return;
        n = std::max(n, cap_tokens);
        m = std::max(m, cap_logits);
        check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (before growing the workspace)");
        drop_graphs();  // they point into the old workspace
        cap_tokens = cap_logits = 0;  // (a failed allocation below leaves no capacity behind, not freed pointers)
        floats.allocate(sizeof(float) * static_cast<size_t>(n * workspace_tokens_floats(c) + m * c.n_vocab) +
                            16 * kAlign,
                        "cudaMalloc (activation workspace)");
        ints.allocate(sizeof(int32_t) * static_cast<size_t>(3 * n + m) + 8 * kAlign, "cudaMalloc (index workspace)");
        // Carve: every array starts at a 256-byte boundary (the matmul reads activations as float4).
        uint8_t* f = floats.get();
        auto take = [&](int64_t count) {
            float* p = reinterpret_cast<float*>(f);
            f += align_up(static_cast<size_t>(count) * sizeof(float));
            return p;
        };
        x = take(n * c.n_embd);
        xn = take(n * c.n_embd);
        q = take(n * c.n_embd_q());
        att = take(n * c.n_embd_q());
        k = take(n * c.n_embd_kv());
        v = take(n * c.n_embd_kv());
        gate = take(n * c.n_ff);
        up = take(n * c.n_ff);
        cs = take(n * c.n_rot);
        cs_local = take(n * c.n_rot);
        xq = reinterpret_cast<int8_t*>(take(n * q8_blocks(c) * 8));
        xds = take(n * q8_blocks(c) * 2);
        logits = take(m * c.n_vocab);
        QUILL_CHECK(f <= floats.get() + floats.size(), "float workspace overrun");
        tokens = reinterpret_cast<int32_t*>(ints.get());  // then slots, positions, logit rows, the flag (forward)
        picked_buffer.allocate(sizeof(int32_t) * static_cast<size_t>(std::max<int64_t>(m, 1)),
                               "cudaMalloc (picked tokens)");
        picked = reinterpret_cast<int32_t*>(picked_buffer.get());
        const auto top_words = static_cast<size_t>(m) * kMaxTopCandidates;
        top_buffer.allocate(sizeof(int32_t) * (static_cast<size_t>(m) + 2 * top_words) + 2 * kAlign,
                            "cudaMalloc (sampling candidates)");
        top_need = reinterpret_cast<int32_t*>(top_buffer.get());
        top_ids = reinterpret_cast<int32_t*>(top_buffer.get() + align_up(sizeof(int32_t) * static_cast<size_t>(m)));
        top_vals = reinterpret_cast<float*>(top_ids + top_words);
        host_in.reserve(sizeof(int32_t) * static_cast<size_t>(3 * n + 2 * m + 1),
                        "cudaHostAlloc (batch upload buffer)");
        host_out.reserve(sizeof(float) * std::max(static_cast<size_t>(m * c.n_vocab), 2 * top_words) + sizeof(float),
                         "cudaHostAlloc (logits buffer)");
        cap_tokens = n;
        cap_logits = m;
    }
};

CudaBackend::CudaBackend(const ModelConfig& config, const Weights& weights, const CudaBackendOptions& options)
    : config_(config),
      weights_(weights),
      kv_shape_{config.n_layer, options.n_slots, options.n_ctx, config.n_head_kv, config.head_dim, options.kv_type},
      graphs_(options.graphs && !config.moe()) {  // (a mixture of experts reads its routing on the host)
    check_kv_size(options.n_ctx, options.n_slots);
    check_model(config, weights);
    plan_ = plan_memory(config, weights, options);  // before anything is allocated

    impl_ = std::make_unique<Impl>(options.tuning.profile);
    Impl& d = *impl_;
    check(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    d.weights = std::make_unique<DeviceWeights>(config, weights, plan_.weights, options.n_ctx, d.stream);
    d.k_cache.allocate(kv_shape_.bytes() / 2, "cudaMalloc (K cache)");
    d.v_cache.allocate(kv_shape_.bytes() / 2, "cudaMalloc (V cache)");
    // Logit rows for a decode step of every slot (up to the largest graph), so that the first multi-sequence step
    // does not grow the workspace and drop the graphs captured before it.
    d.reserve(config, std::min<int64_t>(options.plan_tokens, options.n_ctx * options.n_slots),
              std::min<int64_t>(options.n_slots, kMaxGraphTokens));
    const Tuning& tuning = options.tuning;
    d.int8 = tuning.int8_products;
    d.flash = tuning.flash_attention;
    d.fuse = tuning.fused_kernels;
    d.stream_types = tuning.stream_types;
    d.q8.rows_kernel = d.fuse;
    d.q8.stream_stages = tuning.stream_stages;
    if (d.int8 && !d.stream_types.empty()) prepare_stream_products(d.q8.stream_stages);
    if (d.profile.on()) graphs_ = false;
    d.q8.pdl = tuning.programmatic_launch && !d.profile.on() && pdl_supported();
    d.chain = tuning.programmatic_chain && !d.profile.on() && pdl_supported();
    d.q8.mma = tuning.mma_products;
    d.q8.mma_staged = tuning.mma_staged;
    if (d.int8 && d.q8.mma) prepare_mma_products();
    if (tuning.gemm != GemmMode::off) {
        d.gemm = std::make_unique<Gemm>(tuning.cublas);
        if (d.gemm->available()) {
            d.gemm_mode = tuning.gemm;
            d.gemm_scratch.allocate(gemm_workspace_bytes(weights, d.gemm_mode, d.cap_tokens),
                                    "cudaMalloc (GEMM scratch)");
        } else {
            d.gemm_why = d.gemm->why();
            d.gemm.reset();
        }
    }
}

BackendInfo CudaBackend::describe() const {
    return {std::string(name()), 0, "",
            fmt::format("cuda backend, {}: {}; prefill GEMM {}{}", escape_for_terminal(plan_.device), plan_.describe(),
                        gemm_mode_name(gemm_mode()), gemm_unavailable().empty() ? "" : " (" + gemm_unavailable() + ")")};
}

GemmMode CudaBackend::gemm_mode() const { return impl_->gemm_mode; }

const std::string& CudaBackend::gemm_unavailable() const { return impl_->gemm_why; }

CudaBackend::~CudaBackend() {
    if (impl_) impl_->profile.print(impl_->stream);
}

void CudaBackend::launch(const Batch& batch) {
    const ModelConfig& c = config_;
    Impl& d = *impl_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    const int64_t m = batch.n_logits();
    d.profile.begin_call(n);
    d.reserve(c, n, m);
    if (d.gemm_mode != GemmMode::off && n >= kGemmMinTokens) {
        const size_t need = gemm_workspace_bytes(weights_, d.gemm_mode, n);
        if (need > d.gemm_scratch.size()) {
            check(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize (before growing the GEMM scratch)");
            d.gemm_scratch.allocate(need, "cudaMalloc (GEMM scratch)");
        }
    }

    // One upload of the batch: tokens, slots, positions, logit rows, the flag (RoPE angles are computed on the
    // device from the positions, so a captured step reads everything that changes from this copy).
    auto* in = reinterpret_cast<int32_t*>(d.host_in.get());
    int64_t r = 0;
    d.n_dec = 0;
    while (d.n_dec < n && batch.tokens[d.n_dec].decode) ++d.n_dec;
    d.m_dec = 0;
    for (int64_t t = 0; t < d.n_dec; ++t) d.m_dec += batch.tokens[t].logits;
    for (int64_t t = 0; t < n; ++t) {
        const BatchToken& bt = batch.tokens[t];
        in[t] = bt.token;
        in[n + t] = bt.slot;
        in[2 * n + t] = bt.pos;
        if (bt.logits) in[3 * n + r++] = static_cast<int32_t>(t);
    }
    in[3 * n + m] = INT_MAX;
    check(cudaMemcpyAsync(d.tokens, in, sizeof(int32_t) * static_cast<size_t>(3 * n + m + 1), cudaMemcpyHostToDevice,
                          d.stream),
          "cudaMemcpyAsync (batch)");

    // A decode step (every token asks for logits): replay its graph, captured on first use. The layout of the
    // upload above depends only on n when m == n, so the graph's pointers stay valid until the workspace grows
    // (reserve then drops every graph).
    if (graphs_ && m == n && n <= kMaxGraphTokens) {
        cudaGraphExec_t& exec = d.graphs[n];
        if (!exec) exec = d.capture([&] { enqueue_forward(n, m); });
        check(cudaGraphLaunch(exec, d.stream), "cudaGraphLaunch (decode step)");
    } else {
        enqueue_forward(n, m);
    }
}

void CudaBackend::raise_flag(int32_t bad_layer) const {
    if (bad_layer == INT_MAX) return;
    if (bad_layer >= config_.n_layer)
        throw Error("the output layer (output_norm, output) produced non-finite logits (inf or NaN): the model's "
                    "weights are corrupt or out of range");
    throw Error(fmt::format("layer {} (blk.{}.*) produced non-finite values (inf or NaN) in the residual stream: the "
                            "model's weights are corrupt or out of range",
                            bad_layer, bad_layer));
}

void CudaBackend::forward(const Batch& batch, std::span<float> logits) {
    check_batch(batch, config_, kv_shape_, logits);
    const ModelConfig& c = config_;
    Impl& d = *impl_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    const int64_t m = batch.n_logits();
    launch(batch);
    int32_t* flag = d.tokens + 3 * n + m;
    auto* out = reinterpret_cast<float*>(d.host_out.get());
    check(cudaMemcpyAsync(out, flag, sizeof(int32_t), cudaMemcpyDeviceToHost, d.stream), "cudaMemcpyAsync (flag)");
    if (m > 0)
        check(cudaMemcpyAsync(out + 1, d.logits, sizeof(float) * static_cast<size_t>(m * c.n_vocab),
                              cudaMemcpyDeviceToHost, d.stream),
              "cudaMemcpyAsync (logits)");
    check(cudaStreamSynchronize(d.stream), "the forward pass (cudaStreamSynchronize)");
    int32_t bad_layer;
    std::memcpy(&bad_layer, out, sizeof bad_layer);
    raise_flag(bad_layer);
    std::copy_n(out + 1, m * c.n_vocab, logits.data());
    for (int64_t i = 0; i < m * c.n_vocab; ++i) {
        if (!std::isfinite(logits[i])) raise_flag(static_cast<int32_t>(c.n_layer));
    }
}

void CudaBackend::forward_sample(const Batch& batch, std::span<Sampler* const> samplers, int64_t n_token_ids,
                                 std::span<int32_t> tokens) {
    const int64_t m = batch.n_logits();
    const bool greedy = m > 0 && std::all_of(samplers.begin(), samplers.end(),
                                             [](const Sampler* s) { return s->plain_greedy(); });
    // Other samplers: the device selects each row's top_needed() largest logits and the host samples from those
    // (Sampler::sample_top: the same token and draw as from the whole row), unless a row has no such bound.
    const bool candidates = !greedy && m > 0 && static_cast<int64_t>(samplers.size()) == m &&
                            std::all_of(samplers.begin(), samplers.end(), [](const Sampler* s) {
                                const int k = s->top_needed();
                                return k > 0 && k <= kMaxTopCandidates;
                            });
    if (candidates) return forward_sample_candidates(batch, samplers, n_token_ids, tokens);
    if (!greedy) return forward_sample_on_host(batch, samplers, n_token_ids, tokens);
    check_batch(batch, config_, kv_shape_);
    const ModelConfig& c = config_;
    QUILL_CHECK(static_cast<int64_t>(samplers.size()) == m && static_cast<int64_t>(tokens.size()) >= m &&
                    n_token_ids > 0 && n_token_ids <= c.n_vocab,
                "forward_sample: {} samplers, room for {} tokens, {} token ids, for {} rows of {}", samplers.size(),
                tokens.size(), n_token_ids, m, c.n_vocab);
    Impl& d = *impl_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    launch(batch);
    int32_t* flag = d.tokens + 3 * n + m;
    // The picks, and a finiteness check of every logit (flag n_layer: the output layer), in place of the copy.
    check_finite(d.logits, m * c.n_vocab, static_cast<int32_t>(c.n_layer), flag, d.stream);
    argmax_rows(d.logits, m, c.n_vocab, n_token_ids, d.picked, d.stream);
    auto* out = reinterpret_cast<int32_t*>(d.host_out.get());
    check(cudaMemcpyAsync(out, flag, sizeof(int32_t), cudaMemcpyDeviceToHost, d.stream), "cudaMemcpyAsync (flag)");
    check(cudaMemcpyAsync(out + 1, d.picked, sizeof(int32_t) * static_cast<size_t>(m), cudaMemcpyDeviceToHost,
                          d.stream),
          "cudaMemcpyAsync (picked tokens)");
    check(cudaStreamSynchronize(d.stream), "the forward pass (cudaStreamSynchronize)");
    raise_flag(out[0]);
    std::copy_n(out + 1, m, tokens.data());
}

void CudaBackend::forward_sample_candidates(const Batch& batch, std::span<Sampler* const> samplers,
                                            int64_t n_token_ids, std::span<int32_t> tokens) {
    check_batch(batch, config_, kv_shape_);
    const ModelConfig& c = config_;
    const int64_t m = batch.n_logits();
    QUILL_CHECK(static_cast<int64_t>(tokens.size()) >= m && n_token_ids > 0 && n_token_ids <= c.n_vocab,
                "forward_sample: room for {} tokens, {} token ids, for {} rows of {}", tokens.size(), n_token_ids, m,
                c.n_vocab);
    Impl& d = *impl_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    launch(batch);
    int32_t* flag = d.tokens + 3 * n + m;
    check_finite(d.logits, m * c.n_vocab, static_cast<int32_t>(c.n_layer), flag, d.stream);
    // The counts go up behind the batch's upload in the pinned buffer (that copy is already enqueued).
    int32_t* need = reinterpret_cast<int32_t*>(d.host_in.get()) + 3 * n + m + 1;
    for (int64_t r = 0; r < m; ++r) need[r] = samplers[r]->top_needed();
    check(cudaMemcpyAsync(d.top_need, need, sizeof(int32_t) * static_cast<size_t>(m), cudaMemcpyHostToDevice,
                          d.stream),
          "cudaMemcpyAsync (candidate counts)");
    top_candidates(d.logits, m, c.n_vocab, c.n_vocab, n_token_ids, d.top_need, d.top_ids, d.top_vals, d.stream);
    auto* out = reinterpret_cast<int32_t*>(d.host_out.get());
    const auto words = static_cast<size_t>(m) * kMaxTopCandidates;
    check(cudaMemcpyAsync(out, flag, sizeof(int32_t), cudaMemcpyDeviceToHost, d.stream), "cudaMemcpyAsync (flag)");
    check(cudaMemcpyAsync(out + 1, d.top_ids, sizeof(int32_t) * words, cudaMemcpyDeviceToHost, d.stream),
          "cudaMemcpyAsync (candidate ids)");
    check(cudaMemcpyAsync(out + 1 + words, d.top_vals, sizeof(float) * words, cudaMemcpyDeviceToHost, d.stream),
          "cudaMemcpyAsync (candidate logits)");
    check(cudaStreamSynchronize(d.stream), "the forward pass (cudaStreamSynchronize)");
    raise_flag(out[0]);
    const auto* vals = reinterpret_cast<const float*>(out + 1 + words);
    std::vector<SampleCandidate> cands;
    for (int64_t r = 0; r < m; ++r) {
        const int64_t count = std::min<int64_t>(need[r], c.n_vocab), at = r * kMaxTopCandidates;
        cands.resize(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) cands[i] = {out[1 + at + i], vals[at + i]};
        tokens[r] = samplers[r]->sample_top(cands);
    }
}

size_t CudaBackend::n_graphs() const { return impl_->graphs.size(); }

void CudaBackend::copy_kv(int32_t src, int32_t dst, int64_t begin, int64_t end) {
    check_copy(kv_shape_, src, dst, begin, end);
    if (begin == end) return;
    const size_t es = kv_shape_.elem_size();
    const size_t bytes = static_cast<size_t>(end - begin) * kv_shape_.row_elems() * es;
    for (int64_t l = 0; l < config_.n_layer; ++l) {
        const size_t from = kv_shape_.offset(l, src, begin) * es, to = kv_shape_.offset(l, dst, begin) * es;
        for (DeviceBuffer* cache : {&impl_->k_cache, &impl_->v_cache})
            check(cudaMemcpyAsync(cache->get() + to, cache->get() + from, bytes, cudaMemcpyDeviceToDevice,
                                  impl_->stream),
                  "cudaMemcpyAsync (K and V between slots)");
    }
}

namespace {

// The fastest of 5 timed runs of `enqueue`'s work on the stream (after one untimed), in milliseconds, by events.
// Throws Error on a CUDA failure.
template <class F>
float fastest_ms(cudaStream_t stream, F&& enqueue) {
    cudaEvent_t start = nullptr, stop = nullptr;
    struct Events {
        cudaEvent_t *a, *b;
        ~Events() {
            if (*a) cudaEventDestroy(*a);
            if (*b) cudaEventDestroy(*b);
        }
    } guard{&start, &stop};
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    float best = 0.0f;
    for (int i = 0; i < 6; ++i) {  // the first is a warm-up
        check(cudaEventRecord(start, stream), "cudaEventRecord");
        enqueue();
        check(cudaEventRecord(stop, stream), "cudaEventRecord");
        check(cudaEventSynchronize(stop), "cudaEventSynchronize (timing)");
        float ms = 0.0f;
        check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        if (i > 0 && (best == 0.0f || ms < best)) best = ms;
    }
    return best;
}

}  // namespace

double CudaBackend::copy_bandwidth_gbs() {
    if (copy_gbs_ > 0.0) return copy_gbs_;
    constexpr size_t kBytes = size_t{256} << 20;
    DeviceBuffer a, b;
    try {  // no room for the two buffers: no measurement (bench prints GB/s without the fraction)
        a.allocate(kBytes, "cudaMalloc (bandwidth test)");
        b.allocate(kBytes, "cudaMalloc (bandwidth test)");
    } catch (const Error&) {
        return 0.0;
    }
    check(cudaMemsetAsync(a.get(), 1, kBytes, impl_->stream), "cudaMemsetAsync");
    const float best_ms = fastest_ms(impl_->stream, [&] {
        check(cudaMemcpyAsync(b.get(), a.get(), kBytes, cudaMemcpyDeviceToDevice, impl_->stream),
              "cudaMemcpyAsync (bandwidth test)");
    });
    copy_gbs_ = best_ms > 0.0f ? 2.0 * kBytes / (best_ms * 1e-3) / 1e9 : 0.0;
    return copy_gbs_;
}

double CudaBackend::matmul_rate_tflops() {
    if (gemm_tflops_ >= 0.0) return gemm_tflops_;
    gemm_tflops_ = 0.0;
    Impl& d = *impl_;
    if (!d.gemm || d.gemm_mode == GemmMode::off) return 0.0;
    constexpr int64_t kN = 8192;
    try {
        // The "weights" stored as the mode multiplies them (F16 rows in f16 mode, F32 rows else: no dequantized
        // slice), the "tokens" as F32 (converted to F16 in f16 mode, as prefill's are: about a twentieth of the
        // time), the product into Y.
        const bool f16 = d.gemm_mode == GemmMode::f16;
        const size_t welem = f16 ? 2 : 4;
        DeviceBuffer w(welem * kN * kN, "cudaMalloc (GEMM rate)"), x(sizeof(float) * kN * kN, "cudaMalloc"),
            y(sizeof(float) * kN * kN, "cudaMalloc (GEMM rate)");
        // Not zeros: 0x3C bytes are 1.06 as F16 and 0.011 as F32, 0x3B bytes 0.0029 as F32.
        check(cudaMemsetAsync(w.get(), 0x3C, w.size(), d.stream), "cudaMemsetAsync");
        check(cudaMemsetAsync(x.get(), 0x3B, x.size(), d.stream), "cudaMemsetAsync");
        const DeviceMatrix m{f16 ? GgmlType::F16 : GgmlType::F32, w.get(), kN, kN, welem * kN};
        const size_t scratch_bytes = gemm_scratch_bytes(d.gemm_mode, kN * kN, kN, kN);
        DeviceBuffer scratch(scratch_bytes, "cudaMalloc (GEMM rate scratch)");
        const float best_ms = fastest_ms(d.stream, [&] {
            d.gemm->gemm(d.gemm_mode, m, reinterpret_cast<const float*>(x.get()), kN,
                         reinterpret_cast<float*>(y.get()), false, scratch.get(), scratch_bytes, d.stream);
        });
        gemm_tflops_ = best_ms > 0.0f ? 2.0 * kN * kN * kN / (best_ms * 1e-3) / 1e12 : 0.0;
    } catch (const Error&) {
        gemm_tflops_ = 0.0;
    }
    return gemm_tflops_;
}

Heads layer_heads(const ModelConfig& c, int64_t layer) {
    Heads h;
    h.n_head = static_cast<int>(c.n_head);
    h.n_head_kv = static_cast<int>(c.n_head_kv);
    h.head_dim = static_cast<int>(c.head_dim);
    h.n_rot = c.layer_has_rope(layer) ? static_cast<int>(c.n_rot) : 0;
    h.neox = c.rope == ModelConfig::Rope::neox;
    h.temp_scale = c.attn_temp_scale;
    h.temp_floor = c.attn_temp_floor;
    h.softcap = c.attn_logit_softcap;
    return h;
}

// The kernels of a forward call over the batch uploaded at d.tokens (n tokens, m logit rows): no host work, no
// synchronization, so that a decode step can be captured as a graph.
void CudaBackend::enqueue_forward(int64_t n, int64_t m) {
    const ModelConfig& c = config_;
    Impl& d = *impl_;
    const DeviceWeights& dw = *d.weights;
    int32_t* slots = d.tokens + n;
    int32_t* pos = slots + n;
    int32_t* rows = pos + n;
    int32_t* flag = rows + m;
    const int64_t half = c.n_rot / 2;
    const bool two_ropes = c.two_ropes();
    d.mark("");
    rope_angles(pos, dw.inv_freq, half, n, c.rope_mscale, d.cs, d.stream);
    if (two_ropes) rope_angles(pos, dw.inv_freq + half, half, n, c.rope_mscale, d.cs_local, d.stream);
    d.mark("rope angles");

    const size_t layer_elems = static_cast<size_t>(kv_shape_.n_slots * kv_shape_.n_ctx) * kv_shape_.row_elems();
    const size_t esize = kv_shape_.elem_size();
    const bool gelu = c.ffn_act == ModelConfig::Activation::gelu_tanh;
    cudaStream_t s = d.stream;
    // The products of a call: the leading decode tokens (n_lead) through the decode kernels, then the prompt tokens
    // through cuBLAS when there are at least kGemmMinTokens of them (never inside a graph: graphs hold at most
    // kMaxGraphTokens tokens), else through the kernels too. The kernels: Q4_0, Q4_1 and Q8_0 weights take int8
    // products with x quantized per block of 32, other types the float kernel; alike matrices that share an input
    // (Q, K, V; gate, up) go in one launch (fused). q8_of names the input whose quantization d.xq holds (for the
    // kernels' rows): a kernel that writes one of the products' inputs resets it, or sets it when it quantized its
    // output too (the fused norms and activation).
    const float* q8_of = nullptr;
    // lead >= 0: the decode tokens leading x (an expert's tokens).
    auto products = [&](std::initializer_list<std::pair<const DeviceMatrix*, float*>> list, const float* x,
                        int64_t nt, bool accumulate, int64_t lead = -1) {
        const std::pair<const DeviceMatrix*, float*>* item = list.begin();
        const DeviceMatrix& w0 = *item->first;
        const int64_t n_lead = lead >= 0 ? lead : nt == n ? d.n_dec : d.m_dec;  // the layers' products, or the output's
        const bool gemm = d.gemm_mode != GemmMode::off && nt - n_lead >= kGemmMinTokens;
        const int64_t nk = gemm ? n_lead : nt;  // tokens through the kernels
        for (size_t i = 0; nk > 0 && i < list.size();) {
            ProductSet ps = product_set(*item[i].first, item[i].second);
            size_t j = i + 1;
            for (; d.fuse && j < list.size() && can_share_launch(*item[i].first, *item[j].first); ++j)
                ps.add(*item[j].first, item[j].second);
            if (d.int8 && uses_q8(ps.w[0].type)) {
                if (q8_of != x) {
                    quantize_q8(x, nk, ps.w[0].cols, d.xq, d.xds, s, d.chain);
                    q8_of = x;
                    d.mark("quantize activations");
                }
                Q8Launch how = d.q8;
                how.stream = d.stream_type(ps.w[0].type);
                matmul_q8(ps, d.xq, d.xds, nk, accumulate, s, how);
            } else {
                cuda::matmul(ps, x, nk, accumulate, s);
            }
            i = j;
        }
        if (gemm)
            for (const auto& [w, y] : list)
                d.gemm->gemm(d.gemm_mode, *w, x + n_lead * w->cols, nt - n_lead, y + n_lead * w->rows, accumulate,
                             d.gemm_scratch.get(), d.gemm_scratch.size(), s);
        d.mark(w0.rows == c.n_vocab ? "output product" : "products");
    };
    // The input norm of products of `w` (written to d.xn): quantized in the same launch when they take int8
    // products, and (check_layer >= 0) the check of the previous layer's output fused in.
    auto input_norm = [&](const float* x, const float* weight, int64_t rows, const DeviceMatrix& w,
                          int32_t check_layer) {
        const bool quantize = d.fuse && d.int8 && uses_q8(w.type) && c.n_embd % 32 == 0;
        rms_norm_q8(x, weight, d.xn, rows, c.n_embd, c.rms_eps, quantize ? d.xq : nullptr, d.xds,
                    check_layer >= 0 ? flag : nullptr, check_layer, s, d.chain);
        q8_of = quantize ? d.xn : nullptr;
        d.mark("norms, adds, biases");
    };
    // Attention likewise: the decode tokens one block per (token, head), a prompt of kGemmMinTokens or more tokens
    // in flash-attention tiles. Fused, the kernel of the decode tokens also quantizes its output for the output
    // projection.
    auto attend = [&](const Heads& heads, const LayerCache& cache, int64_t window, const DeviceMatrix& wo) {
        const int64_t lead = d.n_dec, rest = n - d.n_dec;
        const bool quantize = d.fuse && d.int8 && uses_q8(wo.type) && c.head_dim % 32 == 0;
        int8_t* q_out = quantize ? d.xq : nullptr;
        if (d.flash && rest >= kGemmMinTokens) {
            const int64_t q_row = c.n_head * c.head_dim;
            if (lead > 0) attention(d.q, slots, pos, lead, heads, cache, c.attn_scale, window, d.att, s, false, q_out,
                                    d.xds, d.chain);
            attention(d.q + lead * q_row, slots + lead, pos + lead, rest, heads, cache, c.attn_scale, window,
                      d.att + lead * q_row, s, true);
            // Only the decode tokens' rows are quantized: enough when cuBLAS takes the prompt's products
            q8_of = quantize && d.gemm_mode != GemmMode::off ? d.att : nullptr;
        } else {
            attention(d.q, slots, pos, n, heads, cache, c.attn_scale, window, d.att, s, false, q_out, d.xds, d.chain);
            q8_of = quantize ? d.att : nullptr;
        }
    };

    embed(dw.tok_embd, d.tokens, n, c.embd_scale, d.x, s);
    d.mark("embed");
    for (int64_t l = 0; l < c.n_layer; ++l) {
        const DeviceLayer& L = dw.layers[l];
        const LayerCache cache{d.k_cache.get() + l * layer_elems * esize, d.v_cache.get() + l * layer_elems * esize,
                               kv_shape_.type == KvType::f16,
                               static_cast<int64_t>(kv_shape_.n_ctx * kv_shape_.row_elems())};
        const bool local = c.layer_is_local(l);
        Heads heads = layer_heads(c, l);
        heads.sinks = L.sinks;
        // x += Wo attention(rope(Wq xn), rope(Wk xn), Wv xn), xn = rms_norm(x) * attn_norm, with the optional
        // biases, per-head Q/K norms and output norm (ModelConfig, LayerWeights), the layer's RoPE (or none), the
        // queries' temperature and the scores' soft-cap (layer_heads). Fused, the norm checks the previous layer's
        // output.
        input_norm(d.x, L.attn_norm, n, L.wq, d.fuse && l > 0 ? static_cast<int32_t>(l - 1) : -1);
        products({{&L.wq, d.q}, {&L.wk, d.k}, {&L.wv, d.v}}, d.xn, n, false);
        if (L.bq) add_rows(d.q, L.bq, n, c.n_embd_q(), s);
        if (L.bk) add_rows(d.k, L.bk, n, c.n_embd_kv(), s);
        if (L.bv) add_rows(d.v, L.bv, n, c.n_embd_kv(), s);
        if (L.q_norm) rms_norm(d.q, L.q_norm, d.q, n * c.n_head, c.head_dim, c.rms_eps, s);
        if (L.k_norm) rms_norm(d.k, L.k_norm, d.k, n * c.n_head_kv, c.head_dim, c.rms_eps, s);
        d.mark("norms, adds, biases");
        rope_store(d.q, d.k, d.v, local && two_ropes ? d.cs_local : d.cs, slots, pos, n, heads, cache, s, d.chain);
        d.mark("rope + K/V store");
        attend(heads, cache, local ? c.sliding_window : 0, L.wo);
        d.mark("attention");
        if (L.bo || L.attn_post_norm) {  // through xn (free after the Q/K/V products), then into x
            products({{&L.wo, d.xn}}, d.att, n, false);
            q8_of = nullptr;
            if (L.bo) add_rows(d.xn, L.bo, n, c.n_embd, s);
            if (L.attn_post_norm) rms_norm(d.xn, L.attn_post_norm, d.xn, n, c.n_embd, c.rms_eps, s);
            add(d.x, d.xn, n * c.n_embd, s);
            d.mark("norms, adds, biases");
        } else {
            products({{&L.wo, d.x}}, d.att, n, true);
        }
        if (c.moe()) {  // x += the experts' FFN of xn, xn = rms_norm(x) * ffn_norm (cuda/moe.h)
            input_norm(d.x, L.ffn_norm, n, L.experts.router, -1);
            d.moe.forward(c, L.experts, d.xn, d.x, n, d.n_dec,
                          [&](std::initializer_list<MoeFfn::Product> list, const float* x, int64_t nt, int64_t lead) {
                              if (x != d.xn) q8_of = nullptr;  // the experts' inputs change between their products
                              products(list, x, nt, false, lead);
                          },
                          s);
            q8_of = nullptr;
            d.mark("experts");
        } else {
            // x += W2 (act(W1 xn) * W3 xn), xn = rms_norm(x) * ffn_norm; gemma3 norms the term first
            input_norm(d.x, L.ffn_norm, n, L.gate, -1);
            products({{&L.gate, d.gate}, {&L.up, d.up}}, d.xn, n, false);
            if (d.fuse && d.int8 && uses_q8(L.down.type) && c.n_ff % 32 == 0) {
                gated_activation_q8(d.gate, d.up, n * c.n_ff, gelu, d.xq, d.xds, s, d.chain);
                q8_of = d.gate;
            } else {
                gated_activation(d.gate, d.up, n * c.n_ff, gelu, s);
                q8_of = nullptr;
            }
            d.mark("activation");
            if (L.ffn_post_norm) {
                products({{&L.down, d.xn}}, d.gate, n, false);
                q8_of = nullptr;
                rms_norm(d.xn, L.ffn_post_norm, d.xn, n, c.n_embd, c.rms_eps, s);
                add(d.x, d.xn, n * c.n_embd, s);
                d.mark("norms, adds, biases");
            } else {
                products({{&L.down, d.x}}, d.gate, n, true);
            }
        }
        if (!d.fuse || l + 1 == c.n_layer) {
            check_finite(d.x, n * c.n_embd, static_cast<int32_t>(l), flag, s);
            d.mark("finiteness check");
        }
    }
    if (m > 0) {
        gather_rows(d.x, rows, m, c.n_embd, d.xn, s);
        input_norm(d.xn, dw.output_norm, m, dw.output, -1);
        products({{&dw.output, d.logits}}, d.xn, m, false);
        if (c.final_logit_softcap > 0.0f) softcap(d.logits, m * c.n_vocab, c.final_logit_softcap, s);
        d.mark("output product");
    }
}

}  // namespace quill::cuda
