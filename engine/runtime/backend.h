// The backend interface: one forward call over a batch of tokens from one or many sequences.
//
// Prefill is a batch of many tokens of one sequence; decode is a batch of one token for each of several
// sequences. The backend never knows about requests, prompts or files: the caller (generator, scheduler) decides
// what goes into each batch.
#pragma once

#include "engine/model/model_config.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace quill {

class Sampler;

struct BatchToken {
    int32_t token = 0;
    int32_t pos = 0;      // position in its sequence; K and V land at this cache position
    int32_t slot = 0;     // KV cache slot of its sequence
    bool logits = false;  // whether forward() returns this token's logits
    // A decode step: the token just sampled for its sequence, fed back. Decode tokens come first in a batch. The
    // CPU backend keeps them off the AMX tiles for F16 and BF16 weights (see Activations::set), so a token's
    // arithmetic depends on its role, never on what else is in its batch.
    bool decode = false;
};

struct Batch {
    std::vector<BatchToken> tokens;

    void add(int32_t token, int32_t pos, int32_t slot, bool logits, bool decode = false) {
        tokens.push_back({token, pos, slot, logits, decode});
    }
    int n_logits() const;
};

// Element type of the KV cache.
enum class KvType { f16, f32 };
std::string_view kv_type_name(KvType t);

// The KV cache: K and V for every layer with a cache of its own (ModelConfig::layer_has_kv: gemma4's shared-KV layers
// and a hybrid's recurrent ones have none; n_layer counts the others, in the order of ModelConfig::kv_index), slot
// and position, contiguous per slot: k, v [n_layer, n_slots, n_ctx, n_head_kv, head_dim].
struct KvCacheShape {
    int64_t n_layer = 0, n_slots = 0, n_ctx = 0, n_head_kv = 0, head_dim = 0;
    KvType type = KvType::f16;

    size_t elem_size() const { return type == KvType::f16 ? 2 : 4; }
    size_t row_elems() const { return static_cast<size_t>(n_head_kv * head_dim); }  // one position
    size_t bytes() const {  // K and V together
        return 2 * static_cast<size_t>(n_layer * n_slots * n_ctx) * row_elems() * elem_size();
    }
    // Element offset of (layer, slot, pos).
    size_t offset(int64_t layer, int64_t slot, int64_t pos) const {
        return static_cast<size_t>((layer * n_slots + slot) * n_ctx + pos) * row_elems();
    }
};

// Layers [begin, end) of a model: the part of it that one backend of a split forward (SplitBackend) holds.
struct LayerRange {
    int64_t begin = 0, end = 0;
    int64_t size() const { return end - begin; }
    bool operator==(const LayerRange&) const = default;
};

// What a backend is, as the load line and `quill bench` state it.
struct BackendInfo {
    std::string name;     // Backend::name()
    int n_threads = 0;    // a CPU backend's worker threads; 0 for the others
    std::string kernels;  // a CPU backend's instruction set ("avx2"); empty for the others
    std::string summary;  // the load line's phrase: "cpu backend, 8 threads, avx2 kernels", "reference backend"
};

class Backend {
public:
    virtual ~Backend() = default;

    virtual std::string_view name() const = 0;  // "cpu", "cpu-reference", "reference", "cuda"
    virtual const ModelConfig& config() const = 0;
    virtual const KvCacheShape& kv_shape() const = 0;
    // Here: the name, no threads or kernels, "<name> backend".
    virtual BackendInfo describe() const;

    // Runs the model over the batch. Each token's K and V are stored at (slot, pos) before attention, and each
    // token attends to positions 0..pos of its slot, so positions below pos must already be filled (by this batch
    // or earlier calls). logits [batch.n_logits(), n_vocab] receives the rows of the tokens that ask, in batch
    // order. Throws UsageError for a position outside the context or a slot out of range.
    virtual void forward(const Batch& batch, std::span<float> logits) = 0;

    // Runs the model over the batch as forward() does and picks the next token of each row that asks for logits:
    // tokens[r] = samplers[r]->sample(row r), rows in batch order, over the row's first n_token_ids logits (the
    // tokenizer's vocabulary: a model may pad its output rows past it, and those are no tokens). Here: forward()
    // into host memory, then each sampler. A GPU backend overrides it to pick plain greedy rows on the device and
    // copy back only the ids.
    virtual void forward_sample(const Batch& batch, std::span<Sampler* const> samplers, int64_t n_token_ids,
                                std::span<int32_t> tokens);

    // How far back from the end of what a slot's cache holds (one past the highest position written) a sequence may
    // continue (n_past, for a cached prefix): a backend that keeps only a window of recent positions for its
    // sliding-window layers has overwritten older ones. Further back, a sequence starts again from position 0.
    virtual int64_t max_rewind() const { return INT64_MAX; }

    // How many tokens of `prompt` a sequence may take from a slot whose cache holds `cached` (the token at each
    // position from 0) and was written up to `written` (one past the highest position): their common prefix, but
    // never the prompt's last token (it runs for its logits); where that is further back than max_rewind(), the
    // slot's (when given) resume_position() in it, else 0.
    size_t reusable_prefix(std::span<const int32_t> cached, int64_t written, std::span<const int32_t> prompt,
                           int32_t slot = -1) const;

    // A recurrent model's (ModelConfig::recurrent) snapshots: copies of a slot's recurrent state at positions a
    // caller names, from which a sequence can continue the slot again (the attending layers' K and V below them
    // are still in the cache) instead of from 0. keep_state: keep a copy of the slot's state once it stands at pos
    // (now, or when a forward reaches pos; a slot keeps its latest few). A forward whose first token of the slot is
    // at a kept position continues from that copy, until a token of the slot at a position below it is run.
    // resume_position: the furthest position up to n where the slot's sequence can continue (where its state
    // stands, or a copy), else 0. Here: nothing kept, 0.
    virtual void keep_state(int32_t, int64_t) {}
    virtual int64_t resume_position(int32_t, int64_t) const { return 0; }

    // Whether copy_kv() works on this backend.
    virtual bool can_copy_kv() const { return false; }
    // Copies the K and V that slot src holds at positions [begin, end), every layer, into slot dst: a sequence in
    // dst whose tokens at positions 0..end-1 are those of src then continues from end as if it had run them (a
    // token's K and V depend only on the tokens up to it, never on its batch). src must hold them: written, and no
    // further back than max_rewind() from what src has written since. Positions outside [begin, end) keep what dst
    // held. UsageError for a slot or range out of bounds, or src == dst; a backend that cannot copy (can_copy_kv()
    // false) fails QUILL_CHECK.
    virtual void copy_kv(int32_t src, int32_t dst, int64_t begin, int64_t end);

    // The device's measured memory bandwidth in GB/s (a large device-to-device copy, bytes read plus written, over
    // its time), for `quill bench` to state decode's fraction of it; 0 where there is no such measurement (CPU).
    virtual double copy_bandwidth_gbs() { return 0.0; }
    // The rate of the matrix products a prefill runs on, in TFLOP/s, measured on the device (a large square product
    // in the backend's prefill mode), for `quill bench` to state prefill's fraction of it; 0 where there is none.
    virtual double matmul_rate_tflops() { return 0.0; }

    // The split forward's steps, for a backend made to hold only some layers (its weights resident, its KV cache
    // those layers' only; kv_shape().n_layer is their count). hidden [batch.tokens.size(), n_embd] is the residual
    // stream between layers, in batch order; each step checks the batch as forward() does. A backend that cannot
    // run part of a model throws UsageError saying so (here).
    // The layers this backend holds; all of them ({0, n_layer}) here.
    virtual LayerRange layer_range() const { return {0, config().n_layer}; }
    // hidden = token_embd[token] * embd_scale for each token of the batch.
    virtual void embed_tokens(const Batch& batch, std::span<float> hidden);
    // hidden = the layers of layer_range() applied to hidden, each token's K and V stored at (slot, pos) of those
    // layers, attention as forward() runs it.
    virtual void forward_layers(const Batch& batch, std::span<float> hidden);
    // logits [batch.n_logits(), n_vocab] = W_out rms_norm(hidden) * output_norm for the tokens that ask, in batch
    // order (soft-capped where the model says); only the backend holding the last layer has the output.
    virtual void output_logits(const Batch& batch, std::span<const float> hidden, std::span<float> logits);

protected:
    // forward_sample's host path, for backends that override it only for some batches.
    void forward_sample_on_host(const Batch& batch, std::span<Sampler* const> samplers, int64_t n_token_ids,
                                std::span<int32_t> tokens);

private:
    std::vector<float> sample_logits_;  // forward_sample_on_host's logits [n_logits, n_vocab]
};

// The checks every backend's forward() makes first: a non-empty batch, tokens inside the vocabulary, positions
// inside the context and slots in range, no two tokens at one (slot, pos) (UsageError naming the value), and a
// logits buffer of at least [batch.n_logits(), n_vocab] floats (QUILL_CHECK: the caller's bug).
void check_batch(const Batch& batch, const ModelConfig& config, const KvCacheShape& kv, std::span<const float> logits);
// The same but for the logits buffer (forward_sample without one).
void check_batch(const Batch& batch, const ModelConfig& config, const KvCacheShape& kv);
// The tokens `prompt` shares with `cached` from position 0, but never the prompt's last token (it runs for its
// logits): what a sequence could take from a cache holding `cached`, before Backend::reusable_prefix's rewind rule.
size_t shared_prefix(std::span<const int32_t> cached, std::span<const int32_t> prompt);
// A recurrent model's rule (ModelConfig::recurrent): a token at position 0 starts its slot's sequence afresh, any
// other continues the slot's state only from exactly where it stands (state_pos[slot]: one past the last position
// the slot ran), as a recurrent state cannot go back or skip. Checks the batch's tokens in batch order and moves
// each slot's position past its last token; UsageError (and state_pos unchanged) when a token breaks the rule.
void advance_recurrent_positions(const Batch& batch, std::vector<int64_t>& state_pos);
// copy_kv's checks (UsageError naming the value).
void check_copy(const KvCacheShape& kv, int32_t src, int32_t dst, int64_t begin, int64_t end);
// The layers of `layers` with a K and V cache of their own (ModelConfig::layer_has_kv: not a hybrid's recurrent
// ones, nor gemma4's shared-KV layers),
// the KvCacheShape::n_layer of a backend holding them. UsageError when one of them reads the cache of a layer before
// the range (ModelConfig::kv_layer), which a split forward cannot hand over.
int64_t kv_cache_layers(const ModelConfig& config, LayerRange layers);

}  // namespace quill
