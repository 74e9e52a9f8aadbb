#include "engine/cpu/kv_cache.h"

#include "engine/error.h"
#include "engine/runtime/kv_size.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <sys/mman.h>
#include <unistd.h>

namespace quill::cpu {

namespace {

const KvCacheShape& checked(const KvCacheShape& shape) {
    check_kv_size(shape.n_ctx, shape.n_slots);
    return shape;
}

}  // namespace

KvCache::CacheMemory::CacheMemory(size_t bytes, bool huge_pages) : n(std::max<size_t>(bytes, 1)) {
    p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        p = nullptr;
        throw Error(fmt::format("cannot allocate a {:.1f} MiB KV cache: {}", n / 1048576.0, std::strerror(errno)));
    }
#ifdef MADV_HUGEPAGE
    if (huge_pages) huge = madvise(p, n, MADV_HUGEPAGE) == 0;  // (a kernel without THP refuses: 4 KiB pages then)
#else
    (void)huge_pages;
#endif
}

KvCache::CacheMemory::~CacheMemory() {
    if (p) munmap(p, n);
}

KvCache::RingMemory::RingMemory(size_t n_rings, size_t ring_bytes) : span(2 * n_rings * ring_bytes) {
    auto fail = [&](const char* what) {
        const int err = errno;
        release();
        throw Error(fmt::format("cannot allocate the sliding-window KV cache ({:.1f} MiB): {}: {}",
                                n_rings * ring_bytes / 1048576.0, what, std::strerror(err)));
    };
    fd = memfd_create("quill-kv-window", MFD_CLOEXEC);
    if (fd < 0) fail("memfd_create");
    if (ftruncate(fd, static_cast<off_t>(n_rings * ring_bytes)) != 0) fail("ftruncate");
    base = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        base = nullptr;
        fail("mmap");
    }
    for (size_t i = 0; i < n_rings; ++i) {
        for (size_t half = 0; half < 2; ++half) {
            void* at = static_cast<uint8_t*>(base) + (2 * i + half) * ring_bytes;
            if (mmap(at, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                     static_cast<off_t>(i * ring_bytes)) == MAP_FAILED)
                fail("mmap");
        }
    }
}

void KvCache::RingMemory::release() {
    if (base) munmap(base, span);
    if (fd >= 0) close(fd);
    base = nullptr;
    fd = -1;
}

KvCache::KvCache(const ModelConfig& config, const KvCacheShape& shape, bool window_cache, bool huge_pages,
                 ThreadPool& pool, int64_t first_layer, int64_t end_layer)
    : config_(config),
      shape_(checked(shape)),
      first_layer_(first_layer),
      end_layer_(end_layer >= 0 ? end_layer : first_layer + shape.n_layer),
      k_(static_cast<size_t>(shape_.n_layer * shape_.n_slots * ctx8()) * shape_.row_elems() * shape_.elem_size(),
         huge_pages),
      v_(config.mla() ? 0 : shape_.bytes() / 2, huge_pages) {  // (MLA: the latent in K is the values too)
    // A context fitted to the requests (huge_pages) fills: its pages are faulted in here, by all the threads at
    // once, instead of one at a time by the first prompt's K and V stores on one thread (a page's first touch is
    // slow in a VM, and the first prompt's forward would pay for every page of the cache).
    if (huge_pages) {
        for (const CacheMemory* m : {&k_, &v_}) {
            // a 2 MiB page at a time, claimed in turn (run_claimed: one thread's pages can come slower)
            constexpr int64_t kPage = int64_t{2} << 20;
            run_claimed(pool, (static_cast<int64_t>(m->n) + kPage - 1) / kPage, 1, [&](int64_t p0, int64_t p1) {
                auto* bytes = static_cast<volatile char*>(m->p);
                for (int64_t i = p0 * kPage; i < std::min(p1 * kPage, static_cast<int64_t>(m->n)); i += 4096)
                    bytes[i] = 0;
            });
        }
    }
    QUILL_CHECK(first_layer >= 0 && end_layer_ <= config.n_layer &&
                    shape_.n_layer == kv_cache_layers(config, {first_layer, end_layer_}),
                "KV cache of {} layers for layers {}-{} of {}", shape_.n_layer, first_layer, end_layer_ - 1,
                config.n_layer);
    const int64_t before = config.kv_layers_before(first_layer);
    for (int64_t l = 0; l < config.n_layer; ++l)
        entry_.push_back(!config.layer_has_attention(l) ? -1  // (a recurrent layer; nemotron_h: an FFN alone)
                                                        : config.kv_index(l) - before);
    local_index_.assign(static_cast<size_t>(shape_.n_layer), -1);
    alias_.resize(static_cast<size_t>(shape_.n_slots));
    if (window_cache) ring_ = window_ring_for(config, shape_.type, shape_.n_ctx);
    if (ring_ > 0) {
        int64_t n_local = 0;
        for (int64_t l = first_layer; l < end_layer_; ++l)
            if (config.layer_has_kv(l) && config.layer_is_local(l))
                local_index_[static_cast<size_t>(index(l))] = n_local++;
        const size_t row_bytes = shape_.row_elems() * shape_.elem_size();
        // (a range of a split forward may hold none of the ring layers: ring_ stays, so that every range splits a
        // batch into the same parts)
        if (n_local > 0)
            rings_ = std::make_unique<RingMemory>(static_cast<size_t>(2 * n_local * shape_.n_slots),
                                                  static_cast<size_t>(ring_) * row_bytes);
    }
}

size_t KvCache::bytes() const {
    int64_t whole = 0, rings = 0;
    for (int64_t i : local_index_) (i >= 0 ? rings : whole) += 1;
    const size_t row_bytes = shape_.row_elems() * shape_.elem_size();
    const int64_t v_rows = config_.mla() ? 0 : shape_.n_ctx;  // (MLA: no V)
    return static_cast<size_t>(whole * shape_.n_slots * (ctx8() + v_rows) + rings * shape_.n_slots * 2 * ring_) *
           row_bytes;
}

int64_t window_ring_for(const ModelConfig& config, KvType kv, int64_t n_ctx) {
    int64_t n_local = 0;
    for (int64_t l = 0; l < config.n_layer; ++l) n_local += config.layer_has_kv(l) && config.layer_is_local(l) ? 1 : 0;
    if (n_local == 0) return 0;
    // Whole key blocks of 64 positions and whole pages per ring.
    const int64_t row_bytes = config.n_embd_kv() * (kv == KvType::f16 ? 2 : 4);
    const auto page = static_cast<int64_t>(sysconf(_SC_PAGESIZE));
    const int64_t step = std::lcm<int64_t>(64, page / std::gcd(row_bytes, page));
    const int64_t ring = (config.sliding_window + kRingChunk + 64 + step - 1) / step * step;
    return ring < (n_ctx + 7) / 8 * 8 ? ring : 0;
}

size_t kv_layer_bytes(const ModelConfig& config, KvType kv, int64_t n_ctx, int64_t n_slots, int64_t layer) {
    if (!config.layer_has_kv(layer)) return 0;  // (gemma4's shared layers, a hybrid's recurrent ones)
    const int64_t ring = window_ring_for(config, kv, n_ctx);
    // per slot, K's and V's: a ring's, or the whole context's (K's in whole key blocks of eight)
    // (MLA: K's alone, the latent and the RoPE key, whose latent is the values too)
    const int64_t whole = (n_ctx + 7) / 8 * 8 + (config.mla() ? 0 : n_ctx);
    const int64_t positions = ring > 0 && config.layer_is_local(layer) ? 2 * ring : whole;
    return static_cast<size_t>(positions * std::max<int64_t>(1, n_slots) * config.n_embd_kv()) *
           (kv == KvType::f16 ? 2 : 4);
}

size_t kv_cache_bytes(const ModelConfig& config, KvType kv, int64_t n_ctx, int64_t n_slots) {
    size_t bytes = 0;
    for (int64_t l = 0; l < config.n_layer; ++l) bytes += kv_layer_bytes(config, kv, n_ctx, n_slots, l);
    return bytes;
}

// Whole key blocks and runs of V rows where they can, position by position in a partial key block at either end
// of the range (the block's other positions keep dst's values). A ring holds the last ring_ positions written, so
// older ones of the range are neither in src nor needed in dst (a sequence attends to a window of them).
void KvCache::copy(int32_t src, int32_t dst, int64_t begin, int64_t end) {
    check_copy(shape_, src, dst, begin, end);
    // dst then holds src's values at [0, end) where it held them (or those of the slot src reads from) below begin:
    // it reads from where src reads, one copy for every slot that took this prefix.
    const Alias before = alias_[static_cast<size_t>(dst)], via = alias_[static_cast<size_t>(src)];
    const int32_t root = via.n >= end ? via.src : src;
    written(dst, begin);
    if (end > begin && (begin == 0 || (before.n >= begin && (before.src == src || before.src == root))))
        alias_[static_cast<size_t>(dst)] = {root, end};
    const size_t es = shape_.elem_size();
    const auto n = static_cast<int64_t>(shape_.row_elems());
    const size_t row_bytes = static_cast<size_t>(n) * es;
    for (int64_t l = first_layer_; l < end_layer_; ++l) {
        if (!config_.layer_has_kv(l)) continue;
        const bool ringed = in_ring(l);
        const int64_t first = ringed ? std::max(begin, end - ring_) : begin;
        const uint8_t* ks = k(l, src);
        uint8_t* kd = k(l, dst);
        for (int64_t p = first; p < end;) {
            const int64_t row = ringed ? p % ring_ : p;  // ring_ is a multiple of 64: a key block never wraps
            if (row % 8 == 0 && p + 8 <= end) {
                const size_t off = k_cache_offset(row, 0, n) * es;
                std::memcpy(kd + off, ks + off, 8 * row_bytes);
                p += 8;
                continue;
            }
            for (int64_t e = 0; e < n; ++e) {
                const size_t off = k_cache_offset(row, e, n) * es;
                std::memcpy(kd + off, ks + off, es);
            }
            ++p;
        }
        if (config_.mla()) continue;  // (no V)
        if (ringed) {
            for (int64_t p = first; p < end; ++p) std::memcpy(v(l, dst, p), v(l, src, p), row_bytes);
        } else if (end > first) {
            std::memcpy(v(l, dst, first), v(l, src, first), static_cast<size_t>(end - first) * row_bytes);
        }
    }
}

void KvCache::written(int32_t slot, int64_t begin) {
    for (size_t s = 0; s < alias_.size(); ++s) {
        Alias& a = alias_[s];
        if ((static_cast<int32_t>(s) == slot || a.src == slot) && a.n > begin) a.n = begin;
        if (a.n == 0) a.src = -1;
    }
}

}  // namespace quill::cpu
