// Matrix products of the CPU backend: y = x W^T for a weight matrix W stored in any supported GGUF type.
//
// The fast path works directly on the quantized blocks: activations are quantized once to int8 blocks (or
// converted to the float form a float weight type needs) and reused by every matrix that shares the input;
// kernels for AVX-512 (VNNI), AVX2 and portable C++ are picked at run time. matmul_reference is the plain scalar
// oracle the fast path is tested against.
#pragma once

#include "engine/cpu/thread_pool.h"
#include "engine/format/quant.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace quill::cpu {

// Kernel families, best last. The backend picks one at construction (best_isa()); tests run every available one.
// amx is avx512 with Intel AMX-INT8 tile multiplies for prefill (8 tokens or more) where the CPU has AMX and the
// kernel lets the process use it; its results have the same bits as avx512's.
enum class Isa { generic, avx2, avx512, amx };
inline constexpr Isa kAllIsas[] = {Isa::generic, Isa::avx2, Isa::avx512, Isa::amx};

struct Kernel;  // (kernels.h)

// A weight matrix view into the model file: n_out rows of n_in elements, row r at data + r * row_bytes.
struct WeightMatrix {
    GgmlType type = GgmlType::F32;
    const void* data = nullptr;
    int64_t n_in = 0;   // row length (ne[0])
    int64_t n_out = 0;  // number of rows (ne[1])
    size_t row_bytes = 0;
    // The same weights repacked for the kernels of packed_isa (PackedWeights), or null. The kernels of that family
    // (avx2; or avx512 and amx, which read one layout) use them; the others read data.
    const void* packed = nullptr;
    Isa packed_isa = Isa::generic;
    // The kernel of each Isa (indexed by its value) for these weights, resolved once when the backend placed them
    // (WeightStore); null: resolved at each product.
    const Kernel* kernels = nullptr;
};

// Weights repacked once for the AVX-512 kernels: tiles of sixteen rows (the last one repeating its last row), each
// 32-block of a tile one record holding the sixteen rows' values in the 32-bit lanes the kernels multiply (lane r:
// four consecutive values of row r) followed by their sixteen fp16 scales (and minima), so that decode reads one
// stream with no transposes. The types with a packed form: Q4_0, Q4_1, Q8_0, Q5_0 and Q5_1 (Q4_0's records with
// each row's qh word), IQ4_NL (Q4_0's records, the kernels looking its nibbles up in its levels), Q4_K, Q5_K and
// IQ4_XS (their super-blocks' bytes laid out as the AVX2 kernels' transposes of eight rows make them, which the
// AVX-512 kernels load two halves at a time: generic::pack_tiles), Q6_K (quads of four rows laid out as the
// four-row kernels load them; for the AVX2 kernels eight-row halves: kQ6EightSuperBytes), and Q3_K and Q2_K (eight-row
// halves read by the AVX2 kernels on every family: kQ3SuperBytes, kQ2SuperBytes). The layout is that of the family packed for (avx2,
// or avx512 and amx), whose kernels alone read it. Results have the same bits as from the file's layout.
class PackedWeights {
public:
    static bool supports(GgmlType type, Isa isa);
    // The bytes of w's packed form (on every family).
    static size_t bytes_for(const WeightMatrix& w);
    PackedWeights() = default;
    // Packs w (a type supported on isa) for isa's kernels into `into` (bytes_for(w) bytes, 64-byte aligned, outliving
    // this object) or, when null, into HugeMemory of its own; the tiles split over the pool when one is given;
    // packed(row0, row1) is called as each chunk of w's rows is done (the backend hands their pages back).
    PackedWeights(const WeightMatrix& w, Isa isa, ThreadPool* pool,
                  const std::function<void(int64_t, int64_t)>& packed = {}, void* into = nullptr);
    const void* data() const { return data_; }
    size_t bytes() const { return bytes_; }
    Isa isa() const { return isa_; }
    // w reading this packed form (w the matrix packed).
    WeightMatrix reading(WeightMatrix w) const {
        w.packed = data_;
        w.packed_isa = isa_;
        return w;
    }

private:
    std::shared_ptr<void> own_;  // the memory when not packed into another's
    void* data_ = nullptr;
    size_t bytes_ = 0;
    Isa isa_ = Isa::generic;
};

// Anonymous memory aligned to 2 MiB and in transparent huge pages where the kernel gives them: the packed weights
// of a whole model in one such mapping cost a TLB entry per 2 MiB instead of per 4 KiB page (a matrix of its own
// below 2 MiB, as every layer's of a small model is, gets none).
class HugeMemory {
public:
    HugeMemory() = default;
    explicit HugeMemory(size_t bytes);
    HugeMemory(HugeMemory&& o) noexcept;
    HugeMemory& operator=(HugeMemory&& o) noexcept;
    ~HugeMemory();
    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }

private:
    void* map_ = nullptr;  // the whole mapping, data_ its first 2 MiB boundary
    size_t map_bytes_ = 0;
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

// Input rows x [n_tokens, n_in], with the conversions each weight type needs made on first use and cached until
// the next set(). The pointer given to set() must stay valid until then.
class Activations {
public:
    Activations();
    ~Activations();
    Activations(const Activations&) = delete;
    Activations& operator=(const Activations&) = delete;

    // x [n_tokens, n_in]; its first n_decode tokens are decode steps (BatchToken::decode), which F16 and BF16 weights
    // multiply on the vector units even where AMX is used for the others: at one token per sequence the tile
    // multiplies of the exact bf16 split cost more than a memory-bound decode can hide, and a token's path depends
    // only on its role, not on its batch.
    void set(const float* x, int64_t n_tokens, int64_t n_in, int64_t n_decode = 0);
    const float* data() const { return x_; }
    int64_t n_tokens() const { return n_tokens_; }
    int64_t n_in() const { return n_in_; }
    int64_t n_decode() const { return n_decode_; }

    // The int8 form made inside the parallel section that writes x (a norm, an activation function), each thread
    // quantizing the rows it wrote while they are in its cache, instead of by one thread in the matmul while the
    // others wait: begin_int8 on one thread after set(), then quantize_int8 for disjoint token ranges that start
    // at multiples of kInt8PartTokens (a half group of the tile layout's scales: two threads' ranges never write
    // one cache line of scales), then end_int8; the next matmul finds the int8 form ready. The same bytes as the
    // matmul's own quantization.
    // Or by blocks of columns: quantize_int8_blocks(b0, b1) makes 32-blocks [b0, b1) of every token (an even b0:
    // two blocks of a half group's scales share a line), for a section whose threads each write a range of x's
    // columns (matmul_pair).
    // rows = false where the next products all read the tile layout alone (reads_tiles_alone): the AVX-512
    // quantizer then skips the row-major form, which a 16-sequence decode step's AMX kernels never read. A matmul
    // whose kernel needs that form quantizes the input again.
    static constexpr int64_t kInt8PartTokens = 8;
    void begin_int8(Isa isa, bool rows = true);
    void quantize_int8(int64_t t0, int64_t t1);
    void quantize_int8_blocks(int64_t b0, int64_t b1);
    void end_int8();
    // Whether the int8 form made last has its row-major arrays (false: the tile layout alone).
    bool has_int8_rows() const;

    struct Cache;  // the converted forms (kernel-private)
    Cache& cache() { return *cache_; }

private:
    const float* x_ = nullptr;
    int64_t n_tokens_ = 0, n_in_ = 0, n_decode_ = 0;
    std::unique_ptr<Cache> cache_;
};

// One product of a batch that shares an input: y [n_tokens, w.n_out] = x [n_tokens, n_in] W^T.
struct MatmulJob {
    WeightMatrix w;
    float* y;
};

// The best family this CPU runs, lowered by QUILL_CPU_ISA=generic|avx2|avx512|amx when set (asking for one the CPU
// lacks gives the best it has).
Isa best_isa();
// Whether the family can run here: the hardware has it, or (avx512, in the tests) its kernels are emulated.
bool isa_available(Isa isa);
// True when the avx512 family runs emulated kernels (tests/support/avx512_emulated.cpp; see set_avx512_kernels).
bool avx512_emulated();
// "generic", "avx2", "avx512-vnni" (with " (emulated)" when it is), "avx512-vnni+amx"
std::string_view isa_name(Isa isa);

// Fast path: runs every job over the pool in one parallel section (rows split across threads).
void matmul(std::span<const MatmulJob> jobs, Activations& x, ThreadPool& pool, Isa isa);
inline void matmul(const WeightMatrix& w, Activations& x, float* y, ThreadPool& pool, Isa isa) {
    MatmulJob job{w, y};
    matmul(std::span<const MatmulJob>(&job, 1), x, pool, isa);
}

// Two products of one input with the same number of rows (a gated FFN's gate and up), in one parallel section whose
// units are `unit_rows` rows of both (a multiple of 16), so that a thread holds both products' rows [r0, r1) for
// every token when it calls done(r0, r1) for them, in that section: the place for work on those columns alone (the
// activation function and its product's int8 blocks), which then reads nothing another core wrote.
void matmul_pair(const MatmulJob& a, const MatmulJob& b, Activations& x, ThreadPool& pool, Isa isa, int64_t unit_rows,
                 const std::function<void(int64_t r0, int64_t r1)>& done);

// Scalar oracle: each weight row dequantized with dequantize_row, dot products in double, single thread.
void matmul_reference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y);

// The input as the fast path's kernels see it for a weight type, made with the reference quantizer: block-
// quantized weights meet int8 blocks of 32 with an fp16 scale (Q8_0, as quantize_row makes it), F16 weights the
// input rounded to fp16, other types the input itself. matmul_reference over this is the function the fast path
// computes, up to float summation order: x [n_tokens, n_in] in, the same shape out.
std::vector<float> reference_activations(GgmlType weight_type, const float* x, int64_t n_tokens, int64_t n_in);

// Whether the fast path can multiply this weight type.
bool matmul_supports(GgmlType type);

// Whether the fast path multiplies w with int8 activations on this ISA (Activations::begin_int8 pays off).
bool reads_int8(const WeightMatrix& w, Isa isa);
// Whether it reads only their tile layout at n_tokens tokens (Kernel::tiles_alone; begin_int8's rows = false).
bool reads_tiles_alone(const WeightMatrix& w, Isa isa, int64_t n_tokens);

}  // namespace quill::cpu
