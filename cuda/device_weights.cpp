#include "cuda/device_weights.h"

#include "cuda/check.h"
#include "cuda/dequant.h"
#include "cuda/memory_plan.h"
#include "engine/error.h"
#include "engine/model/weight_vectors.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace quill::cuda {

DeviceWeights::DeviceWeights(const ModelConfig& config, const Weights& weights, size_t bytes, int64_t n_ctx,
                             cudaStream_t s) {
    buffer_.allocate(bytes, "cudaMalloc (weights)");
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
        check(cudaEventRecord(done[i], s), "cudaEventRecord");
    }
    int turn = 0;
    uint8_t* next = buffer_.get();
    auto upload = [&](const void* src, size_t n) {
        uint8_t* dst = next;
        next += align_up(n);
        QUILL_CHECK(next <= buffer_.get() + buffer_.size(), "weight upload overruns its plan");
        for (size_t off = 0; off < n; off += kChunk) {
            const size_t len = std::min(kChunk, n - off);
            check(cudaEventSynchronize(done[turn]), "cudaEventSynchronize (weight staging)");
            std::memcpy(stage[turn].get(), static_cast<const uint8_t*>(src) + off, len);
            check(cudaMemcpyAsync(dst + off, stage[turn].get(), len, cudaMemcpyHostToDevice, s),
                  "cudaMemcpyAsync (weights)");
            check(cudaEventRecord(done[turn], s), "cudaEventRecord");
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
        QUILL_CHECK(next <= buffer_.get() + buffer_.size(), "weight upload overruns its plan");
        const int64_t per_chunk = static_cast<int64_t>(kChunk) / (qb + sb);
        for (int64_t b0 = 0; b0 < blocks; b0 += per_chunk) {
            const int64_t nb = std::min(per_chunk, blocks - b0);
            check(cudaEventSynchronize(done[turn]), "cudaEventSynchronize (weight staging)");
            uint8_t* st = stage[turn].get();
            pack_blocks(t.type, t.data + b0 * (qb + sb), nb, st, st + nb * qb);
            check(cudaMemcpyAsync(quants + b0 * qb, st, static_cast<size_t>(nb * qb), cudaMemcpyHostToDevice,
                                  s),
                  "cudaMemcpyAsync (weights)");
            check(cudaMemcpyAsync(scales + b0 * sb, st + nb * qb, static_cast<size_t>(nb * sb),
                                  cudaMemcpyHostToDevice, s),
                  "cudaMemcpyAsync (weights)");
            check(cudaEventRecord(done[turn], s), "cudaEventRecord");
            turn ^= 1;
        }
        return DeviceMatrix{t.type, quants, t.ne[0], t.n_rows(), t.row_bytes(), scales};
    };
    std::map<const uint8_t*, DeviceMatrix> uploaded;  // a tied output matrix is the embedding: uploaded once
    auto matrix = [&](const TensorView& t) {
        auto it = uploaded.find(t.data);
        if (it != uploaded.end()) return it->second;
        const bool pack = packed_quant_bytes(t.type) > 0 && t.ne[0] % 32 == 0;
        const DeviceMatrix m = pack ? upload_packed(t)
                                    : DeviceMatrix{t.type, upload(t.data, t.n_bytes), t.ne[0], t.n_rows(),
                                                   t.row_bytes()};
        uploaded[t.data] = m;
        return m;
    };
    auto vec = [&](const std::vector<float>& v) {
        return v.empty() ? nullptr : reinterpret_cast<const float*>(upload(v.data(), v.size() * sizeof(float)));
    };
    tok_embd = matrix(weights.tok_embd);
    for (const LayerWeights& L : weights.layers) {
        DeviceLayer l;
        l.wq = matrix(L.wq);
        l.wk = matrix(L.wk);
        l.wv = matrix(L.wv);
        l.wo = matrix(L.wo);
        if (L.experts.empty()) {
            l.gate = matrix(L.ffn_gate);
            l.up = matrix(L.ffn_up);
            l.down = matrix(L.ffn_down);
        } else {  // each expert's matrices in turn: the file's 3-D tensors, uploaded once, an expert's view at a time
            l.experts.router = matrix(L.ffn_gate_inp);
            for (const ExpertWeights& e : L.experts) {
                l.experts.gate.push_back(matrix(e.gate));
                l.experts.up.push_back(matrix(e.up));
                l.experts.down.push_back(matrix(e.down));
            }
        }
        layers.push_back(l);
    }
    output = matrix(weights.output);
    // Every vector of every layer (layer_vectors: those weight_bytes plans for), then each where the kernels take it;
    // the router's bias too, though the routing reads the host's copy.
    std::map<const std::vector<float>*, const float*> on_device;
    for (size_t i = 0; i < weights.layers.size(); ++i)
        for (const NamedVector& v : layer_vectors(config, weights.layers[i], static_cast<int64_t>(i)))
            on_device[v.values] = vec(*v.values);
    auto at = [&](const std::vector<float>& v) -> const float* {
        if (v.empty()) return nullptr;
        const auto it = on_device.find(&v);
        QUILL_CHECK(it != on_device.end(), "a layer's vector of {} floats is not in layer_vectors", v.size());
        return it->second;
    };
    for (size_t i = 0; i < weights.layers.size(); ++i) {
        const LayerWeights& L = weights.layers[i];
        DeviceLayer& l = layers[i];
        l.attn_norm = at(L.attn_norm);
        l.ffn_norm = at(L.ffn_norm);
        l.bq = at(L.bq);
        l.bk = at(L.bk);
        l.bv = at(L.bv);
        l.bo = at(L.bo);
        l.sinks = at(L.attn_sinks);
        l.experts.router_bias = L.ffn_gate_inp_b;
        l.experts.gate_bias = at(L.ffn_gate_exps_b);
        l.experts.up_bias = at(L.ffn_up_exps_b);
        l.experts.down_bias = at(L.ffn_down_exps_b);
        l.q_norm = at(L.attn_q_norm);
        l.k_norm = at(L.attn_k_norm);
        l.attn_post_norm = at(L.attn_post_norm);
        l.ffn_post_norm = at(L.ffn_post_norm);
    }
    output_norm = vec(weights.output_norm);
    QUILL_CHECK(next == buffer_.get() + bytes, "weight upload took {} bytes of a plan of {}", next - buffer_.get(),
                bytes);
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize (weight upload)");

    // RoPE inverse frequencies for the angle kernel: the global ones, then the local layers' (the same unless
    // two_ropes).
    std::vector<double> freq = weights.rope_inv_freq(config, false, n_ctx);
    const std::vector<double> local = weights.rope_inv_freq(config, true, n_ctx);
    freq.insert(freq.end(), local.begin(), local.end());
    rope_freq_.allocate(freq.size() * sizeof(double), "cudaMalloc (RoPE frequencies)");
    check(cudaMemcpy(rope_freq_.get(), freq.data(), freq.size() * sizeof(double), cudaMemcpyHostToDevice),
          "cudaMemcpy (RoPE frequencies)");
    inv_freq = reinterpret_cast<const double*>(rope_freq_.get());
}

}  // namespace quill::cuda
