// The CPU backend's K and V cache: its memory (whole-context mappings and sliding-window rings), where a slot's
// K and V of a layer lie, the slots that read another's copy of a prompt prefix, and copies between slots.
#pragma once

#include "engine/cpu/attention.h"
#include "engine/cpu/thread_pool.h"
#include "engine/runtime/backend.h"

#include <memory>
#include <utility>
#include <vector>

namespace quill::cpu {

// With sliding-window rings, the positions of one sequence in one forward part span fewer than this many
// (CpuBackend::forward splits larger batches): a ring keeps window + kRingChunk + a key block's slack.
inline constexpr int64_t kRingChunk = 512;

// The ring a cache with these settings uses (window_cache on), 0 for none.
int64_t window_ring_for(const ModelConfig& config, KvType kv, int64_t n_ctx);
// The bytes of K and V cache (sliding-window rings included) held once every position of every slot is written:
// of one layer (0 for a layer without a cache of its own), and of the whole model.
size_t kv_layer_bytes(const ModelConfig& config, KvType kv, int64_t n_ctx, int64_t n_slots, int64_t layer);
size_t kv_cache_bytes(const ModelConfig& config, KvType kv, int64_t n_ctx, int64_t n_slots);

class KvCache {
public:
    // UsageError for a context or slot count under 1. window_cache: sliding-window layers keep a ring (when it is
    // smaller than the context); huge_pages: 2 MiB pages, every page faulted in now by pool's threads
    // (CpuBackendOptions::kv_huge_pages). The cache serves the layers [first_layer, end_layer) (a range of a split
    // forward; end_layer -1: first_layer + shape.n_layer) and holds the K and V of the shape.n_layer of them with a
    // cache of their own (kv_cache_layers: not a hybrid's recurrent layers; gemma4's shared-KV layers read those of
    // ModelConfig::kv_layer); its methods take model-wide layer numbers of attending layers. config must outlive the
    // cache.
    KvCache(const ModelConfig& config, const KvCacheShape& shape, bool window_cache, bool huge_pages,
            ThreadPool& pool, int64_t first_layer = 0, int64_t end_layer = -1);

    const KvCacheShape& shape() const { return shape_; }
    // Positions a sliding-window layer's ring keeps per slot; 0 when every layer keeps the whole context.
    int64_t ring() const { return ring_; }
    int64_t end_layer() const { return end_layer_; }  // one past the last layer it serves
    // Whether it serves model layer `layer` (one of its range that attends: not a hybrid's recurrent layer).
    bool serves(int64_t layer) const {
        return layer >= first_layer_ && layer < end_layer_ && entry_[static_cast<size_t>(layer)] >= 0;
    }
    bool in_ring(int64_t layer) const { return local_index_[static_cast<size_t>(index(layer))] >= 0; }
    // The row of position pos in layer's K and V (a ring's row for a ring layer).
    int64_t row(int64_t layer, int64_t pos) const { return in_ring(layer) ? pos % ring_ : pos; }
    // A slot's K of a layer (KvHead's layout, every head, positions in blocks of 8), and the V row at pos.
    uint8_t* k(int64_t layer, int64_t slot) const {
        if (in_ring(layer)) return ring_row0(layer, slot, 0);
        const size_t elems = static_cast<size_t>((index(layer) * shape_.n_slots + slot) * ctx8()) * shape_.row_elems();
        return static_cast<uint8_t*>(k_.p) + elems * shape_.elem_size();
    }
    uint8_t* v(int64_t layer, int64_t slot, int64_t pos) const {
        if (in_ring(layer)) {
            return ring_row0(layer, slot, 1) +
                   static_cast<size_t>(pos % ring_) * shape_.row_elems() * shape_.elem_size();
        }
        return static_cast<uint8_t*>(v_.p) + shape_.offset(index(layer), slot, pos) * shape_.elem_size();
    }

    // Slot s's K and V at positions [0, n) hold the values of slot src's (copy made them so, and neither slot has
    // written below n since): attention reads the whole key vectors (eight positions) below n there (KvShare), so
    // that the slots that copied one prompt prefix read one copy of it. n = 0: none. Layers with a ring never share.
    struct Alias {
        int32_t src = -1;
        int64_t n = 0;
    };
    const Alias& alias(int32_t slot) const { return alias_[static_cast<size_t>(slot)]; }
    const std::vector<Alias>& aliases() const { return alias_; }  // [n_slots]
    // Slot `slot`'s positions from `begin` on are about to change: the aliases of it and to it end there.
    void written(int32_t slot, int64_t begin);
    // Backend::copy_kv: src's positions [begin, end) into dst's.
    void copy(int32_t src, int32_t dst, int64_t begin, int64_t end);

    // The bytes the cache's layers can occupy once every position of every slot is written: the whole-context
    // layers' K (in whole key blocks) and V rows and the rings (a ring layer's part of the K and V mappings is never
    // touched). kv_cache_bytes says the same from the model's settings.
    size_t bytes() const;
    // True when the K and V mappings were advised to use 2 MiB pages (and the kernel took the advice).
    bool huge_pages() const { return k_.huge && v_.huge; }
    // Where the K and V mappings lie (the tests find them in /proc/self/smaps).
    std::pair<const void*, const void*> mappings() const { return {k_.p, v_.p}; }

private:
    // The cache's layer that model layer `layer` reads and writes (its own, or for a shared-KV layer the one it
    // shares).
    int64_t index(int64_t layer) const { return entry_[static_cast<size_t>(layer)]; }
    int64_t ctx8() const { return (shape_.n_ctx + 7) / 8 * 8; }  // K's positions per slot, whole blocks
    uint8_t* ring_row0(int64_t layer, int64_t slot, int kind) const {  // kind 0: K, 1: V; row 0
        const auto ring_bytes = static_cast<size_t>(ring_) * shape_.row_elems() * shape_.elem_size();
        const auto i =
            static_cast<size_t>((local_index_[static_cast<size_t>(index(layer))] * shape_.n_slots + slot) * 2 + kind);
        return static_cast<uint8_t*>(rings_->base) + 2 * i * ring_bytes;
    }

    const ModelConfig& config_;
    KvCacheShape shape_;
    int64_t first_layer_ = 0, end_layer_ = 0;
    std::vector<int64_t> entry_;  // [n_layer] the cache layer of each model layer (ModelConfig::kv_index), -1: none

    // K and V, in anonymous memory that the OS backs only as positions are written, so a long context costs
    // memory only when it is used: V [n_layer, n_slots, n_ctx, n_head_kv, head_dim]; K [n_layer, n_slots, n_ctx / 8
    // (rounded up), n_head_kv, head_dim, 8], eight positions innermost (KvHead).
    // With huge pages: in 4 KiB pages, each slot and layer a batched decode step's attention walks is a run of
    // pages, and the hardware prefetchers stop at every page's end.
    struct CacheMemory {
        void* p = nullptr;
        size_t n = 0;
        bool huge = false;  // madvise(MADV_HUGEPAGE) succeeded
        CacheMemory(size_t bytes, bool huge_pages);
        ~CacheMemory();
        CacheMemory(const CacheMemory&) = delete;
        CacheMemory& operator=(const CacheMemory&) = delete;
    };
    CacheMemory k_, v_;

    // The sliding-window layers' K and V when they keep a ring of ring_ positions (a multiple of 64, so that key
    // blocks never wrap, and of whole pages): position p at row p % ring_, K and V laid out as above. Each ring is
    // mapped twice, back to back, so that any ring_ consecutive positions read as one contiguous range from the
    // row of the first (CpuBackend::attention_unit hands the kernels positions relative to a multiple of ring_; the
    // local layers' part of k_ and v_ is then never touched and costs no memory).
    struct RingMemory {
        void* base = nullptr;  // [n_rings][2][ring bytes]: both halves map ring i of the memfd
        size_t span = 0;
        int fd = -1;
        RingMemory(size_t n_rings, size_t ring_bytes);
        ~RingMemory() { release(); }
        void release();
        RingMemory(const RingMemory&) = delete;
        RingMemory& operator=(const RingMemory&) = delete;
    };
    int64_t ring_ = 0;
    std::vector<int64_t> local_index_;  // [shape_.n_layer] a ring layer's index among them, -1 for the others
    std::unique_ptr<RingMemory> rings_;

    std::vector<Alias> alias_;  // [n_slots]
};

}  // namespace quill::cpu
