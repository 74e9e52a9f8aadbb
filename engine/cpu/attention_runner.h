// The attention of a batch on the CPU backend: every (token, head) row attends over its slot's KV cache, the work
// handed to the threads in units (attend_all), or a long cache's key blocks spread over them when the units are too
// few (attend_split). The kernels themselves are attention.h's.
#pragma once

#include "engine/cpu/attention.h"
#include "engine/cpu/kv_cache.h"
#include "engine/cpu/thread_pool.h"
#include "engine/model/model_config.h"
#include "engine/runtime/backend.h"

#include <functional>
#include <vector>

namespace quill::cpu {

class AttentionRunner {
public:
    // config, kv, ops and pool must outlive the runner.
    AttentionRunner(const ModelConfig& config, const KvCache& kv, const KvOps& ops, ThreadPool& pool);
    // Sizes the threads' scratch for the cache's context.
    void resize_scratch();
    // att [n, n_head * head_dim] = each row of q [n, n_head * head_dim] attending over its slot's cache in `layer`
    // (head_dim and the KV heads the layer's: ModelConfig::layer_head_dim, layer_n_head_kv),
    // with head h's sink sinks[h] where sinks is not null ([n_head]: gpt-oss).
    // prepare(t0, t1): RoPE and the K/V stores of tokens [t0, t1), run inside the attention section, each tile's by
    // the thread that attends it, where no tile reads what another tile's tokens store; before it otherwise.
    void attend_all(const Batch& batch, int64_t layer, const float* q, float* att,
                    const std::function<void(int64_t, int64_t)>& prepare, const float* sinks = nullptr);

private:
    int attention_unit(const Batch& batch, int64_t layer, int64_t unit, AttnRow* rows, KvHead* kv);
    void tile_lines(const Batch& batch, int64_t layer, int64_t i, int64_t per_tile, KvPrefetch* ahead);
    bool attend_split(const Batch& batch, int64_t layer, int64_t n_units);

    const ModelConfig& config_;
    const KvCache& kv_;
    const KvOps& kv_ops_;
    ThreadPool& pool_;
    const float* q_ = nullptr;  // attend_all's q, att and sinks
    float* att_ = nullptr;
    const float* sinks_ = nullptr;
    int64_t n_head_ = 0, n_head_kv_ = 0, head_dim_ = 0;  // the layer's, for attend_all's units
    std::vector<float> attn_scratch_;  // [n_threads, attend_scratch_floats(n_ctx)]
    // Attention units of a batch (attend_all): runs of tokens [t0, t1) of one slot, times the KV heads, times chunks
    // of unit_heads_ of the query heads on a KV head.
    struct Tile {
        int64_t t0, t1;
    };
    std::vector<Tile> tiles_;
    std::vector<int32_t> tile_slots_;  // attend_all's scratch
    int64_t unit_heads_ = 1;
    // attend_split: each unit's first key block, block count, and offsets of its scores and its blocks' outputs.
    struct Split {
        int b_first, n_blocks;
        size_t scores, parts;
        KvHead kv;  // the unit's cache (attention_unit)
    };
    std::vector<Split> splits_;
    std::vector<float> split_scores_, split_parts_;
};

}  // namespace quill::cpu
