#include "cuda/moe.h"

#include "cuda/check.h"
#include "cuda/memory_plan.h"
#include "engine/error.h"

#include <cstring>

namespace quill::cuda {

namespace {

// The workspace's arrays for n tokens: floats the router's logits [n, n_expert], the gathered inputs [n k, n_embd],
// the gate and up products [n k, n_ff_exp], the experts' outputs [n k, n_embd]; ints the routing (rows, slots,
// weights and owners, n k each).
struct MoeSizes {
    size_t logits, xs, ff, down, routing;
    MoeSizes(const ModelConfig& c, int64_t n) {
        const auto nk = static_cast<size_t>(n * c.n_expert_used);
        logits = align_up(static_cast<size_t>(n * c.n_expert) * sizeof(float));
        xs = align_up(nk * static_cast<size_t>(c.n_embd) * sizeof(float));
        ff = align_up(nk * static_cast<size_t>(c.n_ff_exp) * sizeof(float));
        down = xs;
        routing = align_up(4 * nk * sizeof(int32_t));
    }
    size_t floats() const { return logits + xs + 2 * ff + down; }
};

}  // namespace

size_t moe_workspace_bytes(const ModelConfig& c, int64_t n_tokens) {
    if (!c.moe()) return 0;
    const MoeSizes z(c, n_tokens);
    return z.floats() + z.routing;
}

void MoeFfn::reserve(const ModelConfig& c, int64_t n, cudaStream_t s) {
    if (n <= cap_) return;
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize (before growing the experts' workspace)");
    cap_ = 0;  // (a failed allocation below leaves no capacity behind, not pointers into the freed buffers)
    const MoeSizes z(c, n);
    floats_.allocate(z.floats(), "cudaMalloc (experts' workspace)");
    ints_.allocate(z.routing, "cudaMalloc (experts' routing)");
    uint8_t* f = floats_.get();
    auto take = [&](size_t bytes) {
        float* p = reinterpret_cast<float*>(f);
        f += bytes;
        return p;
    };
    logits_ = take(z.logits);
    xs_ = take(z.xs);
    gate_ = take(z.ff);
    up_ = take(z.ff);
    down_ = take(z.down);
    routing_ = reinterpret_cast<int32_t*>(ints_.get());
    host_.reserve(std::max(z.logits, z.routing), "cudaHostAlloc (experts' routing)");
    cap_ = n;
}

// x += sum over each token's experts e (increasing) of w_e W2_e (silu(W1_e xn) * W3_e xn), or gpt-oss's w_e (W2_e
// swiglu_oai(W1_e xn + b1_e, W3_e xn + b3_e) + b2_e), as moe.h says.
void MoeFfn::forward(const ModelConfig& c, const DeviceExperts& E, const float* xn, float* x, int64_t n,
                     int64_t n_lead, const Products& products, cudaStream_t s) {
    reserve(c, n, s);
    const int64_t k = c.n_expert_used, nk = n * k, d = c.n_embd, f = c.n_ff_exp;
    products({{&E.router, logits_}}, xn, n, n_lead);
    auto* host = reinterpret_cast<float*>(host_.get());
    check(cudaMemcpyAsync(host, logits_, sizeof(float) * static_cast<size_t>(n * c.n_expert), cudaMemcpyDeviceToHost,
                          s),
          "cudaMemcpyAsync (router logits)");
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize (router logits)");
    groups_.route(host, n, c.n_expert, k, n_lead, E.router_bias.empty() ? nullptr : E.router_bias.data());
    // The routing up in one copy: rows, slots, weights, owners. The pinned buffer is written again only after the next
    // layer's synchronization, by which this copy is done.
    auto* up_ints = reinterpret_cast<int32_t*>(host_.get());
    const auto nks = static_cast<size_t>(nk);
    std::memcpy(up_ints, groups_.rows().data(), nks * sizeof(int32_t));
    std::memcpy(up_ints + nks, groups_.slots().data(), nks * sizeof(int32_t));
    std::memcpy(up_ints + 2 * nks, groups_.weights().data(), nks * sizeof(float));
    std::memcpy(up_ints + 3 * nks, groups_.owners().data(), nks * sizeof(int32_t));
    check(cudaMemcpyAsync(routing_, up_ints, 4 * nks * sizeof(int32_t), cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync (expert routing)");
    const int32_t* rows = routing_;
    const int32_t* slots = routing_ + nks;
    const auto* weights = reinterpret_cast<const float*>(routing_ + 2 * nks);
    const int32_t* owners = routing_ + 3 * nks;
    gather_rows(xn, rows, nk, d, xs_, s);
    for (int64_t e = 0; e < c.n_expert; ++e) {
        const int64_t b = groups_.begin(e), m = groups_.end(e) - b;
        if (m > 0)
            products({{&E.gate[static_cast<size_t>(e)], gate_ + b * f}, {&E.up[static_cast<size_t>(e)], up_ + b * f}},
                     xs_ + b * d, m, groups_.lead(e));
    }
    if (c.ffn_act == ModelConfig::Activation::swiglu_oai)
        swiglu_oai_rows(gate_, up_, owners, nk, f, E.gate_bias, E.up_bias, c.swiglu_alpha, c.swiglu_limit, s);
    else
        gated_activation(gate_, up_, nk * f, false, s);
    for (int64_t e = 0; e < c.n_expert; ++e) {
        const int64_t b = groups_.begin(e), m = groups_.end(e) - b;
        if (m > 0) products({{&E.down[static_cast<size_t>(e)], down_ + b * d}}, gate_ + b * f, m, groups_.lead(e));
    }
    moe_combine(x, down_, slots, weights, n, k, d, s, E.down_bias, owners);
}

}  // namespace quill::cuda
