// The CPU backend's copies of a model's weight matrices: the forms repacked for the kernels, and the float
// matrices copied out of the file, all in one mapping of 2 MiB pages.
#pragma once

#include "engine/cpu/kernels.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/thread_pool.h"
#include "engine/io/cancel.h"
#include "engine/model/weights.h"
#include "engine/runtime/backend.h"

#include <array>
#include <unordered_map>
#include <vector>

namespace quill::cpu {

// A tensor's rows as the products read them from the file.
inline WeightMatrix as_matrix(const TensorView& t) {
    return {t.type, t.data, t.ne[0], t.n_rows(), t.row_bytes()};
}

class WeightStore {
public:
    WeightStore() = default;  // none: every product reads the file's rows (the reference path)
    // Packs the matrices of weights with a packed form for isa, and copies the float ones (F32, F16, BF16) mapped
    // from a file, with pool's threads: those of the layers in `layers` and, with `output`, the output matrix (a
    // range of a split forward holds only its own). weights must outlive the store. cancel: polled after each chunk
    // of about 8 MiB (Interrupted), as packing a large model takes seconds.
    WeightStore(const Weights& weights, Isa isa, ThreadPool& pool, LayerRange layers, bool output,
                CancelFlag cancel = nullptr);

    // The matrix the products read for t: the file's rows, or their copy in the store, and the packed form where
    // there is one.
    WeightMatrix matrix(const TensorView& t) const {
        WeightMatrix m = as_matrix(t);
        if (auto it = placed_.find(t.data); it != placed_.end()) {
            if (it->second.packed != nullptr) {
                m.packed = it->second.packed;
                m.packed_isa = it->second.packed_isa;
            }
            if (it->second.copy != nullptr) m.data = it->second.copy;
            m.kernels = it->second.kernels.data();
        }
        return m;
    }

private:
    // Fills placed_ for each matrix: its packed form or copy (placed by the constructor) and its kernels.
    void resolve_kernels_of(const std::vector<const TensorView*>& matrices);

    // Weight matrices repacked for the kernels (PackedWeights), by their data in the file, all in memory_
    // (2 MiB pages).
    HugeMemory memory_;
    std::unordered_map<const uint8_t*, PackedWeights> packed_;
    // Where each matrix's products read from, by its data in the file: its packed form or its copy in memory_ (or
    // neither: the file's rows), and its kernel on each Isa, resolved once.
    struct Placement {
        const void* packed = nullptr;
        Isa packed_isa = Isa::generic;
        const uint8_t* copy = nullptr;
        std::array<Kernel, kIsaCount> kernels{};
    };
    std::unordered_map<const uint8_t*, Placement> placed_;
};

}  // namespace quill::cpu
