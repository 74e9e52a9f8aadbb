#include "engine/cpu/weight_store.h"

#include "engine/model/layer_matrices.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>
#include <unordered_set>
#include <utility>
#include <vector>

namespace quill::cpu {

namespace {

// The mappings of files in this process (/proc/self/maps: a nonzero inode), read once for all of a model's tensors
// rather than once a tensor: a model has hundreds of tensors, and each listing is a whole file to read and parse.
class FileMappings {
public:
    FileMappings() {
        std::FILE* maps = std::fopen("/proc/self/maps", "r");
        if (maps == nullptr) return;
        char line[4096];
        while (std::fgets(line, sizeof line, maps) != nullptr) {
            unsigned long lo = 0, hi = 0, inode = 0;
            if (std::sscanf(line, "%lx-%lx %*s %*s %*s %lu", &lo, &hi, &inode) == 3 && inode != 0)
                ranges_.emplace_back(lo, hi);
        }
        std::fclose(maps);
    }
    // Whether [begin, end) lies in one of them.
    bool contain(uintptr_t begin, uintptr_t end) const {
        return std::any_of(ranges_.begin(), ranges_.end(),
                           [&](const auto& r) { return r.first <= begin && end <= r.second; });
    }

private:
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges_;
};

}  // namespace

WeightStore::WeightStore(const Weights& weights, Isa isa, ThreadPool& pool, LayerRange layers, bool output,
                         CancelFlag cancel) {
    std::vector<const TensorView*> matrices;
    if (output) matrices.push_back(&weights.output);
    // (gemma3n: AltUp's projections to the streams before the layers and back after them, with the output)
    if (output)
        for (const auto* k : {&weights.altup_proj_k, &weights.altup_unembd_k})
            for (const TensorView& t : *k) matrices.push_back(&t);
    // (gemma4 E2B/E4B: the projection of each token's embedding to the inputs of these layers)
    const TensorView per_layer_proj = per_layer_proj_rows(weights, layers.begin, layers.end);
    if (per_layer_proj.data) matrices.push_back(&per_layer_proj);
    for (int64_t l = layers.begin; l < layers.end; ++l)
        for (const TensorView* t : layer_matrices(weights.layers[static_cast<size_t>(l)])) matrices.push_back(t);
    // One mapping for all of them, in the order the layers read them (HugeMemory), each at a cache line: the packed
    // forms, and a copy of the file's bytes of each float matrix (F32, F16, BF16), whose products stream them at the
    // memory's speed: from 4 KiB pages of the file they ran slower, while Q6_K's products, bound by their
    // arithmetic, ran the same, so the other types stay where they are and load no slower. Copies only from the file
    // mapping, whose pages are handed back as copied.
    struct Placed {
        const TensorView* t;
        bool pack;
        size_t bytes;
    };
    std::vector<Placed> placed;
    // The data of the matrices placed, so that a matrix read twice (a tied output) is placed once: a set, as a
    // mixture of experts has tens of thousands of matrices.
    std::unordered_set<const uint8_t*> placed_data;
    size_t total = 0;
    const FileMappings files;
    for (const TensorView* t : matrices) {
        if (placed_data.count(t->data) != 0) continue;
        const auto data = reinterpret_cast<uintptr_t>(t->data);
        const bool pack = PackedWeights::supports(t->type, isa) && t->ne[0] % 32 == 0;
        const bool copy = t->type == GgmlType::F32 || t->type == GgmlType::F16 || t->type == GgmlType::BF16;
        if (!pack && !(copy && files.contain(data, data + t->n_bytes))) continue;
        const size_t bytes = pack ? PackedWeights::bytes_for(as_matrix(*t)) : t->n_bytes;
        placed.push_back({t, pack, bytes});
        placed_data.insert(t->data);
        total += (bytes + 63) / 64 * 64;
    }
    if (placed.empty()) {
        resolve_kernels_of(matrices);
        return;
    }
    memory_ = HugeMemory(total);
    auto* into = static_cast<uint8_t*>(memory_.data());
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    for (const Placed& p : placed) {
        const TensorView* t = p.t;
        // The file's copy is not read again (but for the rows of a tied token embedding that a prompt looks up):
        // each chunk of its rows, once packed, leaves this process's pages, so that resident memory stays about
        // the file's size, also while packing. Only for a file mapping (MADV_DONTNEED on other memory would zero
        // it), whose pages stay in the page cache and come back at the cost of a minor fault when read
        // (MADV_PAGEOUT would evict them to disk, and the first prompt of a tied embedding would wait on reading
        // them back).
        const auto data = reinterpret_cast<uintptr_t>(t->data);
        const bool release = files.contain(data, data + t->n_bytes);
        const size_t row_bytes = t->row_bytes();
        auto done = [&](int64_t row0, int64_t row1) {
            const auto begin = (data + static_cast<uintptr_t>(row0) * row_bytes + page - 1) / page * page;
            const auto end = (data + static_cast<uintptr_t>(row1) * row_bytes) / page * page;
            if (release && end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
            check_cancel(cancel, "loading the model");  // on this thread, with the pool idle
        };
        if (p.pack) {
            packed_.emplace(t->data, PackedWeights(as_matrix(*t), isa, &pool, done, into));
        } else {
            // In chunks of about 8 MiB, split over the threads, each handed back when copied.
            const int64_t chunk = std::max<int64_t>(1, (int64_t{8} << 20) / static_cast<int64_t>(row_bytes));
            run_chunks(&pool, t->n_rows(), chunk, [&](int64_t r0, int64_t r1) {
                std::memcpy(into + r0 * row_bytes, t->data + r0 * row_bytes, (r1 - r0) * row_bytes);
            }, done);
            placed_[t->data].copy = into;
        }
        into += (p.bytes + 63) / 64 * 64;
    }
    resolve_kernels_of(matrices);
}

void WeightStore::resolve_kernels_of(const std::vector<const TensorView*>& matrices) {
    for (const TensorView* t : matrices) {
        Placement& p = placed_[t->data];
        WeightMatrix m = as_matrix(*t);
        if (auto it = packed_.find(t->data); it != packed_.end()) {
            p.packed = it->second.data();
            p.packed_isa = it->second.isa();
            m = it->second.reading(m);
        }
        if (p.copy != nullptr) m.data = p.copy;
        p.kernels = resolve_kernels(m);
    }
}

}  // namespace quill::cpu
