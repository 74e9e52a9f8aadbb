#include "engine/cpu/attention_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

namespace quill::cpu {

AttentionRunner::AttentionRunner(const ModelConfig& config, const KvCache& kv, const KvOps& ops, ThreadPool& pool)
    : config_(config), kv_(kv), kv_ops_(ops), pool_(pool) {}

void AttentionRunner::resize_scratch() {
    attn_scratch_.resize(static_cast<size_t>(pool_.size()) *
                         attend_scratch_floats(static_cast<int>(kv_.shape().n_ctx)));
}

// The attention work of a batch comes in units: a tile of query rows of one slot on one KV head (consecutive tokens
// of the slot times unit_heads_ of their heads on that KV head). Unit u's rows and cache; returns the row count.
int AttentionRunner::attention_unit(const Batch& batch, int64_t layer, int64_t unit, AttnRow* rows, KvHead* kv) {
    const auto& c = config_;
    const int64_t hd = head_dim_, n_head_kv = n_head_kv_;  // the layer's (attend_all)
    const auto row = static_cast<int64_t>(kv_.shape().row_elems());  // (a narrower layer uses its first values)
    const int64_t group = n_head_ / n_head_kv;
    const int64_t chunks = (group + unit_heads_ - 1) / unit_heads_;
    const Tile tile = tiles_[unit / (n_head_kv * chunks)];
    const int64_t g = unit / chunks % n_head_kv, h0 = g * group + unit % chunks * unit_heads_;
    const int64_t h1 = std::min(h0 + unit_heads_, (g + 1) * group);
    const int64_t slot = batch.tokens[tile.t0].slot;
    const size_t es = kv_.shape().elem_size();
    *kv = KvHead{kv_.k(layer, slot) + k_cache_offset(0, g * hd, row) * es,
                 kv_.v(layer, slot, 0) + static_cast<size_t>(g * hd) * es,
                 kv_.shape().type,
                 static_cast<size_t>(row) * 8,
                 static_cast<size_t>(row),
                 static_cast<int>(hd),
                 c.attn_scale,
                 {}};
    kv->softcap = c.attn_logit_softcap;
    kv->sinks = sinks_ != nullptr;
    const KvCache::Alias& alias = kv_.alias(static_cast<int32_t>(slot));
    if (alias.n >= 8 && !kv_.in_ring(layer))
        kv->share = KvShare{kv_.k(layer, alias.src) + k_cache_offset(0, g * hd, row) * es,
                            kv_.v(layer, alias.src, 0) + static_cast<size_t>(g * hd) * es,
                            static_cast<int>(alias.n / 8 * 8)};
    int m = 0;
    for (int64_t t = tile.t0; t < tile.t1; ++t) {
        const int64_t pos = batch.tokens[t].pos;
        for (int64_t h = h0; h < h1; ++h)
            rows[m++] = AttnRow{q_ + t * n_head_ * hd + h * hd,
                                att_ + t * n_head_ * hd + h * hd,
                                static_cast<int>(c.first_visible(layer, pos)),  // past a local layer's window
                                static_cast<int>(pos),
                                sinks_ ? sinks_[h] : -INFINITY};
    }
    if (kv_.in_ring(layer)) {
        // A ring holds the rows' positions [lo, hi] at rows lo % ring .. in its doubled mapping: positions go to the
        // kernels less a multiple of the ring (and of the key blocks, so that blocks and results are the same).
        int lo = rows[0].first;
        for (int i = 1; i < m; ++i) lo = std::min(lo, rows[i].first);
        const int shift = lo - lo % static_cast<int>(kv_.ring());
        for (int i = 0; i < m; ++i) {
            rows[i].first -= shift;
            rows[i].last -= shift;
        }
    }
    return m;
}

// Every (token, head) pair of the batch attends over its slot's cache, unit by unit (attention_unit): a prefill's
// tokens go in tiles of up to kMaxTileRows rows, which share each K and V block they read. Units are handed out
// a tile at a time (all its KV heads): a KV head's share of a K block or V row lies between the other heads' shares,
// which the hardware prefetchers fetch with it, so a thread that takes all of a tile's heads uses those lines where
// threads taking one head each both fetched all of them.
// Each task takes the tiles of its own contiguous range first, then the last ones of the others' (UnitRanges): it
// keeps its sequences from layer to layer and attends the tokens whose norm and quantization it does (those
// sections split the tokens the same way), where tiles taken from one counter, latest tokens first, went to either
// thread. A prefill's later tokens cost more (a token's cost grows with its position); the stealing evens the tasks
// out to within a tile. With fewer tiles than threads (one sequence's decode) over a long cache, the units' key
// blocks go to the threads (attend_split).
// (An earlier form split a KV head's query heads over more units for a decode instead: once tiles went whole that
// gave no thread more work, read K and V once per unit, and kept one sequence's decode on one thread.) A row's
// result depends on none of this (attention.h).
void AttentionRunner::attend_all(const Batch& batch, int64_t layer, const float* q, float* att,
                                 const std::function<void(int64_t, int64_t)>& prepare, const float* sinks) {
    const auto& c = config_;
    q_ = q;
    att_ = att;
    sinks_ = sinks;
    n_head_ = c.layer_n_head(layer);
    n_head_kv_ = c.layer_n_head_kv(layer);
    head_dim_ = c.layer_head_dim(layer);
    const int64_t n = static_cast<int64_t>(batch.tokens.size());
    const int64_t group = n_head_ / n_head_kv_;
    const int64_t tile_tokens = std::max<int64_t>(1, kMaxTileRows / group);
    tiles_.clear();
    for (int64_t t = 0; t < n;) {
        int64_t t1 = t + 1;
        while (t1 < n && t1 - t < tile_tokens && batch.tokens[t1].slot == batch.tokens[t].slot) ++t1;
        tiles_.push_back({t, t1});
        t = t1;
    }
    unit_heads_ = std::min<int64_t>(group, kMaxTileRows);
    const int64_t per_tile = n_head_kv_ * ((group + unit_heads_ - 1) / unit_heads_);  // units (attention_unit)
    const auto n_tiles = static_cast<int64_t>(tiles_.size());
    const int64_t n_units = n_tiles * per_tile;
    const bool try_split = n_tiles < pool_.size() && pool_.size() > 1;
    // A tile reads its own slot's cache, and other slots' positions below their shared lengths, which this batch does
    // not write (kv_written): when each slot has one tile, its tokens' RoPE and K/V stores go with it, by the thread
    // that attends it, instead of in a parallel section of their own (one section less a layer).
    std::vector<int32_t>& slots = tile_slots_;
    slots.clear();
    for (const Tile& tile : tiles_) slots.push_back(batch.tokens[tile.t0].slot);
    std::sort(slots.begin(), slots.end());
    const bool fused = !try_split && std::adjacent_find(slots.begin(), slots.end()) == slots.end();
    if (!fused) {
        if (n < 8) {  // decode: a parallel section costs more than the work
            prepare(0, n);
        } else {
            pool_.run([&](int ith, int nth) {
                const Range r = split_range(n, ith, nth);
                prepare(r.begin, r.end);
            });
        }
    }
    if (try_split && attend_split(batch, layer, n_units)) return;
    const size_t per_thread = attn_scratch_.size() / pool_.size();
    UnitRanges claims(n_tiles, pool_.size(), 1);
    pool_.run([&](int ith, int) {
        // A thread claims its next tile before it runs the current one, and the kernels prefetch that tile's K and V
        // a few lines at a time as they go (KvPrefetch). After the thread's last tile of the layer, they prefetch the
        // next layer's K and V of the tile it took first in this one, the tile it is likely to take first there.
        AttnRow rows[kMaxTileRows];
        KvHead kv;
        KvPrefetch ahead;
        float* scratch = attn_scratch_.data() + per_thread * ith;
        Range r{};
        auto claim = [&] { return claims.next(ith, &r) ? r.begin : int64_t{-1}; };
        const int64_t first = claim();
        for (int64_t tile = first; tile >= 0;) {
            const int64_t following = claim();
            if (following >= 0)
                tile_lines(batch, layer, following, per_tile, &ahead);
            else if (kv_.serves(layer + 1))
                tile_lines(batch, layer + 1, first, per_tile, &ahead);
            else
                ahead = {};
            if (fused) prepare(tiles_[tile].t0, tiles_[tile].t1);
            for (int64_t u = tile * per_tile; u < (tile + 1) * per_tile; ++u) {
                const int m = attention_unit(batch, layer, u, rows, &kv);
                attend_rows(rows, m, kv, kv_ops_, scratch, &ahead);
            }
            if (following >= 0) ahead.finish();  // what the kernels left of the next tile's lines
            tile = following;
        }
    });
}

// Positions of a tile tile_lines covers at most: a decode's tile whole at the lengths where it pays (a prompt's tile
// over a long cache is a stream the hardware prefetchers follow, and all of it would not stay in L2).
constexpr int kPrefetchPositions = 256;

// Sets `ahead` to the lines of K and V that tile i's units read in `layer` (each K block and V row whole: every KV
// head's share), the first kPrefetchPositions positions at most.
void AttentionRunner::tile_lines(const Batch& batch, int64_t layer, int64_t i, int64_t per_tile, KvPrefetch* ahead) {
    AttnRow rows[kMaxTileRows];
    KvHead kv;
    const int m = attention_unit(batch, layer, i * per_tile, rows, &kv);  // the tile's first unit: KV head 0
    auto [first, last] = visible_span(rows, m);
    first = std::max(first, kv.share.positions);  // (the shared positions are read by the other slots too)
    if (first > last) {
        *ahead = {};
        return;
    }
    last = std::min(last, first + kPrefetchPositions - 1);
    const size_t es = kv_.shape().elem_size();
    const size_t block = kv.k_block_stride * es, row = kv.v_stride * es;  // 8 positions of K, a position of V
    const auto* k = static_cast<const uint8_t*>(kv.k);
    const auto* v = static_cast<const uint8_t*>(kv.v);
    ahead->set(k + static_cast<size_t>(first / 8) * block, static_cast<size_t>(last / 8 - first / 8 + 1) * block,
               v + static_cast<size_t>(first) * row, static_cast<size_t>(last - first + 1) * row);
}

// The key blocks a unit of attend_split spans at least: the split's three more sections a layer cost more than they
// save over a short cache (from two blocks on it slowed short sequences; from four, long ones gain as much as from
// two).
constexpr int kSplitMinBlocks = 4;

// attend_all for units too few to keep the threads busy, when they span kSplitMinBlocks key blocks or more (a decode
// over a long cache): the units' blocks are spread over the threads, phase by phase (attention.h). Returns false,
// having done nothing, when the split does not apply.
bool AttentionRunner::attend_split(const Batch& batch, int64_t layer, int64_t n_units) {
    AttnRow rows[kMaxTileRows];
    KvHead kv;
    splits_.clear();
    size_t score_floats = 0, part_floats = 0;
    int most_blocks = 0;
    for (int64_t u = 0; u < n_units; ++u) {
        const int m = attention_unit(batch, layer, u, rows, &kv);
        if (!attend_tiled(kv_ops_, kv)) return false;
        Split sp{};
        sp.n_blocks = attend_block_span(rows, m, &sp.b_first);
        sp.scores = score_floats;
        sp.parts = part_floats;
        sp.kv = kv;
        score_floats += (attend_score_floats(rows, m, kv_ops_) + 7) / 8 * 8;  // each unit's scores 32-byte aligned
        part_floats += static_cast<size_t>(sp.n_blocks) * m * kv.head_dim;
        most_blocks = std::max(most_blocks, sp.n_blocks);
        splits_.push_back(sp);
    }
    if (most_blocks < kSplitMinBlocks || score_floats + part_floats > (size_t{1} << 26)) return false;
    if (split_scores_.size() < score_floats + 8) split_scores_.resize(score_floats + 8);
    if (split_parts_.size() < part_floats) split_parts_.resize(part_floats);
    auto* base = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(split_scores_.data()) + 31) & ~uintptr_t{31});
    auto scores = [&](int64_t u) { return base + splits_[u].scores; };
    // (unit, block) jobs, numbered unit by unit; or block by block when the units span the same blocks (the KV heads
    // of one tile), so that a range of jobs reads whole groups of K's 8 positions, every head's share, in order.
    std::vector<int64_t> first_job(n_units + 1, 0);
    for (int64_t u = 0; u < n_units; ++u) first_job[u + 1] = first_job[u] + splits_[u].n_blocks;
    const int64_t n_jobs = first_job[n_units];
    bool block_major = true;
    for (int64_t u = 1; u < n_units; ++u)
        block_major &= splits_[u].b_first == splits_[0].b_first && splits_[u].n_blocks == splits_[0].n_blocks;
    // Job j's unit and its block's index among the unit's blocks.
    auto job_at = [&](int64_t j) -> std::pair<int64_t, int> {
        if (block_major) return {j % n_units, static_cast<int>(j / n_units)};
        const int64_t u = std::upper_bound(first_job.begin(), first_job.end(), j) - first_job.begin() - 1;
        return {u, static_cast<int>(j - first_job[u])};
    };
    const size_t es = kv_.shape().elem_size();
    // Job j's lines of K (its key block's groups of 8 positions, this head's share of each) or of V (its rows), in
    // the cache the split form reads that block from (a block wholly below share.positions: the sharing slot's).
    auto prefetch_job = [&](int64_t j, bool k_lines) {
        const auto [u, i] = job_at(j);
        const KvHead& h = splits_[u].kv;
        const int64_t p0 = static_cast<int64_t>(splits_[u].b_first + i) * kKeyBlock;
        const bool shared = p0 + kKeyBlock <= h.share.positions;
        if (k_lines) {
            const auto* k = static_cast<const char*>(shared ? h.share.k : h.k);
            const size_t bytes = static_cast<size_t>(h.head_dim) * 8 * es;
            for (int64_t g = p0 / 8; g < (p0 + kKeyBlock) / 8; ++g)
                for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(k + g * h.k_block_stride * es + o, 0, 2);
        } else {
            const auto* v = static_cast<const char*>(shared ? h.share.v : h.v);
            const size_t bytes = static_cast<size_t>(h.head_dim) * es;
            for (int64_t p = p0; p < p0 + kKeyBlock; ++p)
                for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(v + p * h.v_stride * es + o, 0, 2);
        }
    };
    // The blocks' phases take jobs from each thread's own contiguous range first (UnitRanges), and each job first
    // prefetches the K or V lines of the one after it (usually the thread's own next): jobs from one counter, their
    // lines left to the hardware prefetchers, ran slower.
    auto per_block = [&](auto&& f, bool k_lines) {
        UnitRanges claims(n_jobs, pool_.size(), 1);
        pool_.run([&](int ith, int) {
            AttnRow r[kMaxTileRows];
            KvHead h;
            for (Range jobs{}; claims.next(ith, &jobs);) {
                const int64_t j = jobs.begin;
                if (j + 1 < n_jobs) prefetch_job(j + 1, k_lines);
                const auto [u, i] = job_at(j);
                const int m = attention_unit(batch, layer, u, r, &h);
                f(u, r, m, h, i);
            }
        });
    };
    auto per_unit = [&](auto&& f) {
        pool_.run([&](int ith, int nth) {
            AttnRow r[kMaxTileRows];
            KvHead h;
            const Range range = split_range(n_units, ith, nth);
            for (int64_t u = range.begin; u < range.end; ++u) f(u, r, attention_unit(batch, layer, u, r, &h), h);
        });
    };
    per_block([&](int64_t u, const AttnRow* r, int m, const KvHead& h, int i) {
        attend_split_scores(r, m, h, kv_ops_, splits_[u].b_first + i, scores(u));
    }, true);
    per_unit([&](int64_t u, const AttnRow* r, int m, const KvHead& h) {
        attend_split_softmax(r, m, h, kv_ops_, scores(u));
    });
    per_block([&](int64_t u, const AttnRow* r, int m, const KvHead& h, int i) {
        attend_split_mix(r, m, h, kv_ops_, splits_[u].b_first + i, scores(u),
                         split_parts_.data() + splits_[u].parts + static_cast<size_t>(i) * m * h.head_dim);
    }, false);
    per_unit([&](int64_t u, const AttnRow* r, int m, const KvHead& h) {
        attend_split_sum(r, m, h.head_dim, split_parts_.data() + splits_[u].parts, splits_[u].n_blocks);
    });
    return true;
}

}  // namespace quill::cpu
