#include "cuda/cuda_backend.h"

#include "cuda/check.h"
#include "cuda/dequant.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "engine/error.h"
#include "engine/io/escape.h"
#include "engine/io/output.h"
#include "engine/runtime/sampler.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>
#include <vector>

namespace quill::cuda {

static_assert(kGemmMinTokens > kMaxGraphTokens, "a captured decode step must not call cuBLAS");

namespace {

constexpr size_t kAlign = 256;
constexpr size_t kRuntimeMargin = size_t{256} << 20;  // cuBLAS-free, but the runtime and fragmentation take some

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

double gib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

// Device memory owned by one object; freed without checking (the context may already be gone at exit).
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(size_t bytes, const char* what) { allocate(bytes, what); }
    ~DeviceBuffer() { release(); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void allocate(size_t bytes, const char* what) {
        release();
        check(cudaMalloc(&p_, std::max<size_t>(bytes, 1)), what);
        n_ = bytes;
    }
    void release() {
        if (p_) cudaFree(p_);
        p_ = nullptr;
        n_ = 0;
    }
    uint8_t* get() const { return static_cast<uint8_t*>(p_); }
    size_t size() const { return n_; }

private:
    void* p_ = nullptr;
    size_t n_ = 0;
};

// Page-locked host memory, for copies the GPU can do by DMA while the CPU goes on.
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    ~PinnedBuffer() {
        if (p_) cudaFreeHost(p_);
    }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;

    void reserve(size_t bytes, const char* what) {
        if (bytes <= n_) return;
        if (p_) cudaFreeHost(p_);
        p_ = nullptr;
        n_ = 0;
        check(cudaHostAlloc(&p_, bytes, cudaHostAllocDefault), what);
        n_ = bytes;
    }
    uint8_t* get() const { return static_cast<uint8_t*>(p_); }
    size_t size() const { return n_; }

private:
    void* p_ = nullptr;
    size_t n_ = 0;
};

template <class F>
void for_each_matrix(const Weights& w, F&& f) {
    f(w.tok_embd);
    for (const LayerWeights& L : w.layers)
        for (const TensorView* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) f(*t);
    f(w.output);
}

// Every float vector of the model, the optional ones (biases, gemma3's norms) included; an absent one is empty.
template <class F>
void for_each_vector(const Weights& w, F&& f) {
    for (const LayerWeights& L : w.layers)
        for (const std::vector<float>* v : {&L.attn_norm, &L.ffn_norm, &L.bq, &L.bk, &L.bv, &L.bo, &L.attn_q_norm,
                                            &L.attn_k_norm, &L.attn_post_norm, &L.ffn_post_norm})
            f(*v);
    f(w.output_norm);
}

// Blocks of 32 in the widest matmul input of a token.
int64_t q8_blocks(const ModelConfig& c) { return (std::max({c.n_embd, c.n_embd_q(), c.n_ff}) + 31) / 32; }

int64_t workspace_tokens_floats(const ModelConfig& c) {
    // x, xn [n_embd]; q, att [n_embd_q]; k, v [n_embd_kv]; gate, up [n_ff]; rope cos/sin, and the local layers'
    // [n_rot each]; an input quantized for matmul_q8: int8 values and a (d, d * sum) pair per block of 32
    return 2 * c.n_embd + 2 * c.n_embd_q() + 2 * c.n_embd_kv() + 2 * c.n_ff + 2 * c.n_rot + q8_blocks(c) * 10;
}

}  // namespace

size_t MemoryPlan::needed() const { return weights + kv + workspace + kRuntimeMargin; }

std::string MemoryPlan::describe() const {
    return fmt::format("weights {:.2f} GiB, KV cache {:.2f} GiB, workspace {:.2f} GiB of {:.1f} GiB ({:.1f} GiB free)",
                       gib(weights), gib(kv), gib(workspace), gib(total), gib(free));
}

void check_model(const ModelConfig& config, const Weights& weights) {
    check_weights(weights);
    // Every architecture setting of ModelConfig has its kernel (forward); the kernels' shape limits remain.
    if (config.head_dim > 512 || config.n_rot > config.head_dim || config.n_rot % 2 != 0 ||
        config.n_head % config.n_head_kv != 0)
        throw FileError(fmt::format("the CUDA backend needs head_dim <= 512, an even rope dimension <= head_dim and "
                                    "n_head a multiple of n_head_kv (got {}, {}, {} and {})",
                                    config.head_dim, config.n_rot, config.n_head, config.n_head_kv));
    // Settings without a CUDA kernel yet: --device auto runs such a model on the CPU.
    if (config.attn_logit_softcap > 0.0f)
        throw FileError(fmt::format("the CUDA backend has no attention logit soft-capping ({}: attn_logit_softcapping "
                                    "{})", config.arch, config.attn_logit_softcap));
    if (config.rope_attn_factor != 1.0f)
        throw FileError(fmt::format("the CUDA backend has no RoPE attention factor ({}: rope.scaling.attn_factor {})",
                                    config.arch, config.rope_attn_factor));
}

void check_weights(const Weights& weights) {
    for_each_matrix(weights, [](const TensorView& t) {
        if (!cuda_supports(t.type))
            throw FileError(fmt::format("tensor '{}' has type {}, which the CUDA backend cannot multiply (types with "
                                        "CUDA kernels: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K)",
                                        t.name, type_name(t.type)));
    });
}

size_t weight_bytes(const Weights& weights) {
    size_t n = 0;
    std::map<const uint8_t*, bool> seen;  // a tied output matrix is the embedding: uploaded once
    for_each_matrix(weights, [&](const TensorView& t) {
        if (seen.emplace(t.data, true).second) n += align_up(t.n_bytes);
    });
    for_each_vector(weights, [&](const std::vector<float>& v) { n += align_up(v.size() * sizeof(float)); });
    return n;
}

size_t workspace_bytes(const ModelConfig& config, int64_t n_tokens, int64_t n_logits) {
    const size_t floats = static_cast<size_t>(n_tokens * workspace_tokens_floats(config) + n_logits * config.n_vocab);
    const size_t ints = static_cast<size_t>(3 * n_tokens + n_logits + 1);
    return align_up(floats * sizeof(float)) * 1 + align_up(ints * sizeof(int32_t)) + 16 * kAlign;
}

size_t gemm_workspace_bytes(const Weights& weights, GemmMode mode, int64_t n_tokens) {
    int64_t max_elems = 0, max_cols = 0;
    for_each_matrix(weights, [&](const TensorView& t) {
        max_elems = std::max(max_elems, t.ne[0] * t.n_rows());
        max_cols = std::max(max_cols, t.ne[0]);
    });
    return gemm_scratch_bytes(mode, max_elems, max_cols, n_tokens);
}

namespace {

size_t kv_bytes(const ModelConfig& c, const CudaBackendOptions& o, int64_t n_ctx) {
    KvCacheShape s{c.n_layer, o.n_slots, n_ctx, c.n_head_kv, c.head_dim, o.kv_type};
    return s.bytes();
}

MemoryPlan plan_for(const ModelConfig& c, const Weights& w, const CudaBackendOptions& o) {
    MemoryPlan p;
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    p.device = prop.name;
    check(cudaMemGetInfo(&p.free, &p.total), "cudaMemGetInfo");
    p.weights = weight_bytes(w);
    p.kv = kv_bytes(c, o, o.n_ctx);
    p.workspace = workspace_bytes(c, o.plan_tokens, o.plan_tokens) + gemm_workspace_bytes(w, o.gemm, o.plan_tokens);
    return p;
}

}  // namespace

int64_t largest_context(const ModelConfig& config, const Weights& weights, const CudaBackendOptions& options) {
    MemoryPlan p = plan_for(config, weights, options);
    const size_t fixed = p.weights + p.workspace + kRuntimeMargin;
    if (fixed >= p.free) return 0;
    return static_cast<int64_t>((p.free - fixed) / std::max<size_t>(1, kv_bytes(config, options, 1)));
}

MemoryPlan plan_memory(const ModelConfig& config, const Weights& weights, const CudaBackendOptions& options) {
    MemoryPlan p = plan_for(config, weights, options);
    if (p.needed() <= p.free) return p;
    const size_t fixed = p.weights + p.workspace + kRuntimeMargin;
    if (fixed >= p.free)
        throw UsageError(fmt::format("the model does not fit on {}: its weights take {:.2f} GiB and the workspace "
                                     "{:.2f} GiB, and {:.2f} GiB are free",
                                     p.device, gib(p.weights), gib(p.workspace), gib(p.free)));
    const int64_t fits = static_cast<int64_t>((p.free - fixed) / std::max<size_t>(1, kv_bytes(config, options, 1)));
    throw UsageError(fmt::format("a context of {} positions ({} sequences) does not fit on {}: it needs {} and {:.2f} "
                                 "GiB are free; the largest context that fits is {} (--ctx)",
                                 options.n_ctx, options.n_slots, p.device, p.describe(), gib(p.free), fits));
}

struct CudaBackend::Impl {
    cudaStream_t stream = nullptr;
    DeviceBuffer weights;  // every matrix and norm vector, each at a 256-byte boundary
    DeviceBuffer k_cache, v_cache;
    struct Layer {
        DeviceMatrix wq, wk, wv, wo, gate, up, down;
        const float* attn_norm = nullptr;
        const float* ffn_norm = nullptr;
        // nullptr when the model has none (LayerWeights)
        const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
        const float *q_norm = nullptr, *k_norm = nullptr, *attn_post_norm = nullptr, *ffn_post_norm = nullptr;
    };
    std::vector<Layer> layers;
    DeviceMatrix tok_embd, output;
    const float* output_norm = nullptr;
    DeviceBuffer rope_freq;  // [2, n_rot / 2] doubles: RoPE inverse frequencies, global then local (two_ropes)
    const double* inv_freq = nullptr;
    std::map<int64_t, cudaGraphExec_t> graphs;  // decode steps by token count

    // Prefill products (more than kMaxGraphTokens tokens, never in a graph) through cuBLAS, when it loaded.
    std::unique_ptr<Gemm> gemm;
    GemmMode gemm_mode = GemmMode::off;
    std::string gemm_why;  // why gemm_mode is off when the option was not
    DeviceBuffer gemm_scratch;

    // Workspace for a batch of up to cap_tokens tokens and cap_logits logit rows.
    int64_t cap_tokens = 0, cap_logits = 0;
    DeviceBuffer floats, ints;
    float *x = nullptr, *xn = nullptr, *q = nullptr, *att = nullptr, *k = nullptr, *v = nullptr, *gate = nullptr,
          *up = nullptr, *cs = nullptr, *cs_local = nullptr, *logits = nullptr;
    int8_t* xq = nullptr;    // [n, 32 q8_blocks] a matmul input quantized (matmul_q8)
    float* xds = nullptr;    // [n, q8_blocks, 2] its blocks' (d, d * sum)
    bool int8 = true;        // CudaBackendOptions::int8_products
    bool flash = true;       // CudaBackendOptions::flash_attention
    bool fuse = false;       // CudaBackendOptions::fused_kernels
    bool chain = false;      // CudaBackendOptions::programmatic_chain on sm_90 or later (off while profiling)
    // How the int8 products launch (the options' stages, programmatic launch likewise, mma kernels); `stream` is
    // set per product from stream_types.
    Q8Launch q8;
    std::vector<GgmlType> stream_types;  // CudaBackendOptions::stream_types
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

    // QUILL_CUDA_PROFILE=1: the device time between marks of enqueue_forward, by the call's token count and phase,
    // printed to stderr when the backend goes. Graphs are off then, so that every kernel is launched and timed.
    bool profile = false;
    std::vector<cudaEvent_t> marks;
    std::vector<std::string> mark_names;
    size_t n_marks = 0;
    int64_t mark_tokens = 0;
    std::map<std::string, std::pair<double, int64_t>> profile_ms;  // by "<tokens> tokens: <phase>": ms, times
    std::map<int64_t, std::pair<double, int64_t>> profile_calls;    // by token count: ms, calls

    void mark(const char* phase) {
        if (!profile) return;
        if (n_marks == marks.size()) {
            cudaEvent_t e = nullptr;
            check(cudaEventCreate(&e), "cudaEventCreate (profile)");
            marks.push_back(e);
            mark_names.emplace_back();
        }
        mark_names[n_marks] = phase;
        check(cudaEventRecord(marks[n_marks++], stream), "cudaEventRecord (profile)");
    }
    // After the stream has passed every mark (each forward call synchronizes before it returns).
    void collect() {
        if (n_marks >= 2) {
            double total = 0.0;
            for (size_t i = 1; i < n_marks; ++i) {
                float ms = 0.0f;
                check(cudaEventElapsedTime(&ms, marks[i - 1], marks[i]), "cudaEventElapsedTime (profile)");
                auto& [sum, times] = profile_ms[fmt::format("{:>6} tokens: {}", mark_tokens, mark_names[i])];
                sum += ms;
                ++times;
                total += ms;
            }
            profile_calls[mark_tokens].first += total;
            ++profile_calls[mark_tokens].second;
        }
        n_marks = 0;
    }
    void print_profile() {
        if (!profile) return;
        cudaStreamSynchronize(stream);
        try {
            collect();
        } catch (const Error&) {
        }
        print_stderr("quill: CUDA profile (QUILL_CUDA_PROFILE): device ms per forward call, by phase\n");
        for (const auto& [key, v] : profile_ms) {
            const int64_t tokens = std::stoll(key);
            const auto& [call_ms, calls] = profile_calls[tokens];
            print_stderr("  {:<40} {:9.3f} ms {:5.1f}%  ({} calls)\n", key, v.first / static_cast<double>(calls),
                         100.0 * v.first / call_ms, calls);
        }
        for (const auto& [tokens, v] : profile_calls)
            print_stderr("  {:>6} tokens: total {:9.3f} ms a call ({} calls)\n", tokens,
                         v.first / static_cast<double>(v.second), v.second);
    }

    ~Impl() {
        for (cudaEvent_t e : marks) cudaEventDestroy(e);
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
      graphs_(options.graphs) {
    if (options.n_ctx < 1) throw UsageError(fmt::format("context size must be at least 1, got {}", options.n_ctx));
    if (options.n_slots < 1) throw UsageError(fmt::format("slot count must be at least 1, got {}", options.n_slots));
    check_model(config, weights);
    plan_ = plan_memory(config, weights, options);  // before anything is allocated

    impl_ = std::make_unique<Impl>();
    Impl& d = *impl_;
    check(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    d.weights.allocate(plan_.weights, "cudaMalloc (weights)");
    d.k_cache.allocate(kv_shape_.bytes() / 2, "cudaMalloc (K cache)");
    d.v_cache.allocate(kv_shape_.bytes() / 2, "cudaMalloc (V cache)");

    // Upload: through two pinned staging buffers, so that copying the next chunk out of the mapped file overlaps the
    // DMA of the previous one. Weights keep their GGUF block layout: one warp reads 32 consecutive blocks of a row
    // (the matmul kernel), which is already contiguous memory, so no repacking is done yet.
    constexpr size_t kChunk = size_t{16} << 20;
    PinnedBuffer stage[2];
    cudaEvent_t done[2] = {nullptr, nullptr};
    struct EventGuard {
        cudaEvent_t* e;
        ~EventGuard() {
            for (int i = 0; i < 2; ++i)
                if (e[i]) cudaEventDestroy(e[i]);
        }
    } guard{done};
    for (int i = 0; i < 2; ++i) {
        stage[i].reserve(kChunk, "cudaHostAlloc (weight staging)");
        check(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming), "cudaEventCreate");
        check(cudaEventRecord(done[i], d.stream), "cudaEventRecord");
    }
    int turn = 0;
    uint8_t* next = d.weights.get();
    auto upload = [&](const void* src, size_t n) {
        uint8_t* dst = next;
        next += align_up(n);
        QUILL_CHECK(next <= d.weights.get() + d.weights.size(), "weight upload overruns its plan");
        for (size_t off = 0; off < n; off += kChunk) {
            const size_t len = std::min(kChunk, n - off);
            check(cudaEventSynchronize(done[turn]), "cudaEventSynchronize (weight staging)");
            std::memcpy(stage[turn].get(), static_cast<const uint8_t*>(src) + off, len);
            check(cudaMemcpyAsync(dst + off, stage[turn].get(), len, cudaMemcpyHostToDevice, d.stream),
                  "cudaMemcpyAsync (weights)");
            check(cudaEventRecord(done[turn], d.stream), "cudaEventRecord");
            turn ^= 1;
        }
        return dst;
    };
    // Q4_0, Q4_1 and Q8_0 in the packed layout (cuda/dequant.h), split into its two planes in the staging buffers.
    auto upload_packed = [&](const TensorView& t) {
        const int qb = packed_quant_bytes(t.type), sb = packed_scale_bytes(t.type);
        const int64_t blocks = static_cast<int64_t>(t.n_bytes) / (qb + sb);
        uint8_t* quants = next;
        uint8_t* scales = next + blocks * qb;
        next += align_up(t.n_bytes);
        QUILL_CHECK(next <= d.weights.get() + d.weights.size(), "weight upload overruns its plan");
        const int64_t per_chunk = static_cast<int64_t>(kChunk) / (qb + sb);
        for (int64_t b0 = 0; b0 < blocks; b0 += per_chunk) {
            const int64_t nb = std::min(per_chunk, blocks - b0);
            check(cudaEventSynchronize(done[turn]), "cudaEventSynchronize (weight staging)");
            uint8_t* st = stage[turn].get();
            pack_blocks(t.type, t.data + b0 * (qb + sb), nb, st, st + nb * qb);
            check(cudaMemcpyAsync(quants + b0 * qb, st, static_cast<size_t>(nb * qb), cudaMemcpyHostToDevice,
                                  d.stream),
                  "cudaMemcpyAsync (weights)");
            check(cudaMemcpyAsync(scales + b0 * sb, st + nb * qb, static_cast<size_t>(nb * sb),
                                  cudaMemcpyHostToDevice, d.stream),
                  "cudaMemcpyAsync (weights)");
            check(cudaEventRecord(done[turn], d.stream), "cudaEventRecord");
            turn ^= 1;
        }
        return DeviceMatrix{t.type, quants, t.ne[0], t.n_rows(), t.row_bytes(), scales};
    };
    std::map<const uint8_t*, DeviceMatrix> uploaded;  // a tied output matrix is the embedding: uploaded once
    auto matrix = [&](const TensorView& t) {
        auto it = uploaded.find(t.data);
        if (it != uploaded.end()) return it->second;
        const bool pack = options.packed_weights && packed_quant_bytes(t.type) > 0 && t.ne[0] % 32 == 0;
        const DeviceMatrix m = pack ? upload_packed(t)
                                    : DeviceMatrix{t.type, upload(t.data, t.n_bytes), t.ne[0], t.n_rows(),
                                                   t.row_bytes()};
        uploaded[t.data] = m;
        return m;
    };
    auto vec = [&](const std::vector<float>& v) {
        return v.empty() ? nullptr : reinterpret_cast<const float*>(upload(v.data(), v.size() * sizeof(float)));
    };
    d.tok_embd = matrix(weights.tok_embd);
    for (const LayerWeights& L : weights.layers) {
        Impl::Layer l;
        l.wq = matrix(L.wq);
        l.wk = matrix(L.wk);
        l.wv = matrix(L.wv);
        l.wo = matrix(L.wo);
        l.gate = matrix(L.ffn_gate);
        l.up = matrix(L.ffn_up);
        l.down = matrix(L.ffn_down);
        d.layers.push_back(l);
    }
    d.output = matrix(weights.output);
    for (size_t i = 0; i < weights.layers.size(); ++i) {
        const LayerWeights& L = weights.layers[i];
        Impl::Layer& l = d.layers[i];
        l.attn_norm = vec(L.attn_norm);
        l.ffn_norm = vec(L.ffn_norm);
        l.bq = vec(L.bq);
        l.bk = vec(L.bk);
        l.bv = vec(L.bv);
        l.bo = vec(L.bo);
        l.q_norm = vec(L.attn_q_norm);
        l.k_norm = vec(L.attn_k_norm);
        l.attn_post_norm = vec(L.attn_post_norm);
        l.ffn_post_norm = vec(L.ffn_post_norm);
    }
    d.output_norm = vec(weights.output_norm);
    check(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize (weight upload)");

    // RoPE inverse frequencies for the angle kernel: the global ones, then the local layers' (the same unless
    // two_ropes).
    std::vector<double> freq = weights.rope_inv_freq(config, false, options.n_ctx);
    const std::vector<double> local = weights.rope_inv_freq(config, true, options.n_ctx);
    freq.insert(freq.end(), local.begin(), local.end());
    d.rope_freq.allocate(freq.size() * sizeof(double), "cudaMalloc (RoPE frequencies)");
    check(cudaMemcpy(d.rope_freq.get(), freq.data(), freq.size() * sizeof(double), cudaMemcpyHostToDevice),
          "cudaMemcpy (RoPE frequencies)");
    d.inv_freq = reinterpret_cast<const double*>(d.rope_freq.get());
    // Logit rows for a decode step of every slot (up to the largest graph), so that the first multi-sequence step
    // does not grow the workspace and drop the graphs captured before it.
    d.reserve(config, std::min<int64_t>(options.plan_tokens, options.n_ctx * options.n_slots),
              std::min<int64_t>(options.n_slots, kMaxGraphTokens));
    d.int8 = options.int8_products;
    d.flash = options.flash_attention;
    d.fuse = options.fused_kernels;
    d.stream_types = options.stream_types;
    d.q8.rows_kernel = d.fuse;
    d.q8.stream_stages = options.stream_stages;
    if (d.int8 && !d.stream_types.empty()) prepare_stream_products(d.q8.stream_stages);
    if (const char* env = std::getenv("QUILL_CUDA_PROFILE"); env && std::string_view(env) == "1") {
        d.profile = true;
        graphs_ = false;
    }
    d.q8.pdl = options.programmatic_launch && !d.profile && pdl_supported();
    d.chain = options.programmatic_chain && !d.profile && pdl_supported();
    d.q8.mma = options.mma_products;
    d.q8.mma_staged = options.mma_staged;
    if (d.int8 && d.q8.mma) prepare_mma_products();
    if (options.gemm != GemmMode::off) {
        d.gemm = std::make_unique<Gemm>();
        if (d.gemm->available()) {
            d.gemm_mode = options.gemm;
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
    if (impl_) impl_->print_profile();
}

void CudaBackend::launch(const Batch& batch) {
    const ModelConfig& c = config_;
    Impl& d = *impl_;
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    const int64_t m = batch.n_logits();
    d.collect();  // the previous call's marks (it synchronized before returning)
    d.mark_tokens = n;
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

// The kernels of a forward call over the batch uploaded at d.tokens (n tokens, m logit rows): no host work, no
// synchronization, so that a decode step can be captured as a graph.
void CudaBackend::enqueue_forward(int64_t n, int64_t m) {
    const ModelConfig& c = config_;
    Impl& d = *impl_;
    int32_t* slots = d.tokens + n;
    int32_t* pos = slots + n;
    int32_t* rows = pos + n;
    int32_t* flag = rows + m;
    const int64_t half = c.n_rot / 2;
    const bool two_ropes = c.two_ropes();
    d.mark("");
    rope_angles(pos, d.inv_freq, half, n, d.cs, d.stream);
    if (two_ropes) rope_angles(pos, d.inv_freq + half, half, n, d.cs_local, d.stream);
    d.mark("rope angles");

    const Heads heads{static_cast<int>(c.n_head), static_cast<int>(c.n_head_kv), static_cast<int>(c.head_dim),
                      static_cast<int>(c.n_rot), c.rope == ModelConfig::Rope::neox};
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
    auto products = [&](std::initializer_list<std::pair<const DeviceMatrix*, float*>> list, const float* x,
                        int64_t nt, bool accumulate) {
        const std::pair<const DeviceMatrix*, float*>* item = list.begin();
        const DeviceMatrix& w0 = *item->first;
        const int64_t n_lead = nt == n ? d.n_dec : d.m_dec;  // the layers' products, or the output's
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
    auto attend = [&](const LayerCache& cache, int64_t window, const DeviceMatrix& wo) {
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

    embed(d.tok_embd, d.tokens, n, c.embd_scale, d.x, s);
    d.mark("embed");
    for (int64_t l = 0; l < c.n_layer; ++l) {
        const Impl::Layer& L = d.layers[l];
        const LayerCache cache{d.k_cache.get() + l * layer_elems * esize, d.v_cache.get() + l * layer_elems * esize,
                               kv_shape_.type == KvType::f16,
                               static_cast<int64_t>(kv_shape_.n_ctx * kv_shape_.row_elems())};
        const bool local = c.layer_is_local(l);
        // x += Wo attention(rope(Wq xn), rope(Wk xn), Wv xn), xn = rms_norm(x) * attn_norm, with the optional
        // biases, per-head Q/K norms and output norm (ModelConfig, LayerWeights). Fused, the norm checks the
        // previous layer's output.
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
        attend(cache, local ? c.sliding_window : 0, L.wo);
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
        if (!d.fuse || l + 1 == c.n_layer) {
            check_finite(d.x, n * c.n_embd, static_cast<int32_t>(l), flag, s);
            d.mark("finiteness check");
        }
    }
    if (m > 0) {
        gather_rows(d.x, rows, m, c.n_embd, d.xn, s);
        input_norm(d.xn, d.output_norm, m, d.output, -1);
        products({{&d.output, d.logits}}, d.xn, m, false);
        if (c.final_logit_softcap > 0.0f) softcap(d.logits, m * c.n_vocab, c.final_logit_softcap, s);
        d.mark("output product");
    }
}

}  // namespace quill::cuda
