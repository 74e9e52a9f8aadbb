// The CPU matmul front end: activation caching, the one place that picks a kernel per weight type and ISA, the
// parallel split of all jobs' rows, the scalar oracle, and run-time ISA selection.
#include "engine/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <sys/mman.h>
#if defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "engine/cpu/kernels.h"
#include "engine/error.h"

namespace quill::cpu {

// The converted forms of the current input: int8 blocks (see kernels.h), made on first use after set().
struct Activations::Cache {
    bool int8_ready = false;
    bool int8_rows = false;  // the int8 form has its row-major arrays (not the tile layout alone)
    bool f16_ready = false;
    std::vector<float> x_f16;           // [n_tokens, n_in] the input rounded to fp16, for F16 weights
    std::vector<int8_t> qs_storage;     // [n_tokens, qs_stride] plus room to align to 64 bytes
    std::vector<uint8_t> qs_u_storage;  // [n_tokens, qs_stride] plus alignment room, when n_tokens > 1
    std::vector<float> d;               // [n_tokens, blk_stride]
    std::vector<float> ds;              // [n_tokens, blk_stride]
    std::vector<float> ds16;            // [n_tokens, 2 * blk_stride]
    std::vector<int32_t> isum;          // [n_tokens, blk_stride]
    std::vector<int8_t> tile_qs_storage;  // the tile layout (QuantizedActs::tile_qs), when used
    std::vector<float> tile_d, tile_ds;
    std::vector<int32_t> tile_isum;
    std::vector<uint8_t> lanes_storage;     // the lane layout (QuantizedActs::lanes), when used, plus alignment room
    Isa isa = Isa::generic;                 // the family reserve_int8 laid the int8 form out for
    bool pairs_ready[2] = {};                // PairActs of the input: [0] as floats (BF16), [1] fp16-rounded (F16)
    std::vector<uint16_t> pairs_storage[2];  // their tiles plus alignment room
    PairActs pairs[2];
    std::vector<float> scratch;         // [n_threads, scratch_floats(n_in, n_tokens)] plus alignment room
    QuantizedActs view;
};

Activations::Activations() : cache_(std::make_unique<Cache>()) {}
Activations::~Activations() = default;

void Activations::set(const float* x, int64_t n_tokens, int64_t n_in, int64_t n_decode) {
    QUILL_CHECK(x != nullptr && n_tokens > 0 && n_in > 0, "activations need data, got {} x {}", n_tokens, n_in);
    QUILL_CHECK(n_decode >= 0 && n_decode <= n_tokens, "{} decode tokens of {}", n_decode, n_tokens);
    x_ = x;
    n_tokens_ = n_tokens;
    n_in_ = n_in;
    n_decode_ = n_decode;
    cache_->int8_ready = false;
    cache_->f16_ready = false;
    cache_->pairs_ready[0] = cache_->pairs_ready[1] = false;
}

namespace {

// Below this many input elements the quantization runs on the calling thread: a parallel section costs more.
constexpr int64_t kParallelQuantizeElements = 1 << 13;

template <typename T>
T* align64(T* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return p + ((64 - a % 64) % 64) / sizeof(T);
}

// Zeros the tile layout's padding tokens (past n_tokens, in the last group; see QuantizedActs::tile_qs).
void zero_tile_padding(const QuantizedActs& q) {
    const int64_t nb = q.n_in / 32, n_groups = (q.n_tokens + kAmxGroup - 1) / kAmxGroup;
    for (int64_t t = q.n_tokens; t < n_groups * kAmxGroup; ++t) {
        for (int64_t b = 0; b < nb; ++b) {
            std::memset(q.tile_qs + tile_entry(q, t, b) * 32, 0, 32);
            const int64_t at = tile_scale_entry(q, t, b);
            q.tile_d[at] = q.tile_ds[at] = 0.0f;
            q.tile_isum[at] = 0;
        }
    }
}

// Sizes the int8 buffers for x's tokens and sets the view (the tile layout too where the AVX-512 kernels read it;
// without the row-major arrays when !rows and the AVX-512 quantizer writes it).
void reserve_int8(Activations& x, Isa isa, bool rows) {
    Activations::Cache& c = x.cache();
    const int64_t n_tokens = x.n_tokens(), n_in = x.n_in();
    QUILL_CHECK(n_in % 32 == 0, "int8 activations need a row length that is a multiple of 32, got {}", n_in);
    const int64_t qs_stride = (n_in + 63) / 64 * 64;
    const int64_t blk_stride = qs_stride / 32;
    c.qs_storage.resize(static_cast<size_t>(n_tokens * qs_stride + 64));
    c.d.resize(static_cast<size_t>(n_tokens * blk_stride));
    c.ds.resize(static_cast<size_t>(n_tokens * blk_stride));
    c.ds16.resize(static_cast<size_t>(2 * n_tokens * blk_stride));
    c.isum.resize(static_cast<size_t>(n_tokens * blk_stride));
    int8_t* qs = align64(c.qs_storage.data());
    uint8_t* qs_u = nullptr;  // the unsigned copy serves the many-token kernels
    if (n_tokens > 1) {
        c.qs_u_storage.resize(c.qs_storage.size());
        qs_u = align64(c.qs_u_storage.data());
    }
    c.view = {qs,      c.d.data(), c.ds.data(), c.ds16.data(), c.isum.data(), qs_u,          nullptr,   nullptr,
              nullptr, nullptr,    nullptr,     n_tokens,      n_in,          qs_stride, blk_stride};
    c.isa = isa;
    if (isa >= Isa::avx512 && n_tokens >= kAmxMinTokens) {  // the tile layout too (quantize writes tokens)
        const int64_t n_groups = (n_tokens + kAmxGroup - 1) / kAmxGroup, nb = n_in / 32;
        c.tile_qs_storage.resize(static_cast<size_t>(n_groups * nb * kAmxGroup * 32 + 64));
        c.tile_d.resize(static_cast<size_t>(n_groups * nb * kAmxGroup));
        c.tile_ds.resize(c.tile_d.size());
        c.tile_isum.resize(c.tile_d.size());
        c.view.tile_qs = align64(c.tile_qs_storage.data());
        c.view.tile_d = c.tile_d.data();
        c.view.tile_ds = c.tile_ds.data();
        c.view.tile_isum = c.tile_isum.data();
        zero_tile_padding(c.view);
    }
    c.int8_rows = rows || c.view.tile_qs == nullptr || avx512_emulated();
    if (!c.int8_rows) {
        QuantizedActs& v = c.view;
        v.qs = nullptr, v.qs_u = nullptr, v.d = v.ds = v.ds16 = nullptr, v.isum = nullptr;
    }
    if (isa == Isa::avx2 && n_tokens >= kLaneTokens) {  // the AVX2 lane kernels' layout (quantize writes tokens)
        c.lanes_storage.resize(static_cast<size_t>(n_tokens / kLaneTokens * (n_in / 32)) * sizeof(LaneActs) + 64);
        // (aligned to a line: two threads writing blocks [b0, b1) with b0 even never write one line)
        c.view.lanes = reinterpret_cast<LaneActs*>(align64(c.lanes_storage.data()));
    }
}

// Token rows [t0, t1) of x into the int8 buffers reserve_int8 set up.
void quantize_tokens(Activations& x, int64_t t0, int64_t t1) {
    Activations::Cache& c = x.cache();
    const Isa isa = c.isa;
    const bool wide = isa >= Isa::avx512 && !avx512_emulated();
    // (eight blocks at a time with AVX2, sixteen with AVX-512: the same results)
    const bool done = isa != Isa::generic && (wide ? avx512::quantize_rows : avx2::quantize_rows)(x.data(), x.n_in(),
                                                                                                 t0, t1, c.view);
    if (!done)
        quantize_activations(x.data(), x.n_in(), t0, t1, c.view,
                             isa == Isa::generic ? generic::quantize_block : avx2::quantize_block);
    if (c.view.lanes != nullptr) avx2::lay_out_lanes(c.view, t0, t1, 0, x.n_in() / 32);
}

// Blocks [b0, b1) of every token, and the rows' padding with the last block.
void quantize_blocks(Activations& x, int64_t b0, int64_t b1) {
    Activations::Cache& c = x.cache();
    const Isa isa = c.isa;
    const bool wide = isa >= Isa::avx512 && !avx512_emulated();
    const bool done = isa != Isa::generic && (wide ? avx512::quantize_blocks : avx2::quantize_blocks)(
                                                 x.data(), x.n_in(), 0, x.n_tokens(), b0, b1, c.view);
    if (!done)
        quantize_activation_blocks(x.data(), x.n_in(), 0, x.n_tokens(), b0, b1, c.view,
                                   isa == Isa::generic ? generic::quantize_block : avx2::quantize_block);
    if (c.view.lanes != nullptr) avx2::lay_out_lanes(c.view, 0, x.n_tokens(), b0, b1);
    if (b1 == x.n_in() / 32)
        for (int64_t t = 0; t < x.n_tokens(); ++t) write_row_padding(c.view, t, b1);
}

void prepare_int8(Activations& x, ThreadPool& pool, Isa isa, bool rows) {
    Activations::Cache& c = x.cache();
    if (c.int8_ready && (c.int8_rows || !rows)) return;
    reserve_int8(x, isa, rows);
    const int64_t n_tokens = x.n_tokens();
    // Ranges of whole half groups with the tile layout: a half group's scales fill lines of their own
    // (tile_scale_entry), so two cores never write one line; whole groups with the lane layout (one writer each).
    const int64_t unit = c.view.tile_qs != nullptr || c.view.lanes != nullptr ? Activations::kInt8PartTokens : 1;
    const int64_t n_units = (n_tokens + unit - 1) / unit;
    if (n_units < 2 || n_tokens * x.n_in() < kParallelQuantizeElements || pool.size() == 1) {
        quantize_tokens(x, 0, n_tokens);
    } else {
        pool.run([&](int ith, int nth) {
            const Range r = split_range(n_units, ith, nth);
            quantize_tokens(x, r.begin * unit, std::min(r.end * unit, n_tokens));
        });
    }
    c.int8_ready = true;
}

}  // namespace

void Activations::begin_int8(Isa isa, bool rows) {
    QUILL_CHECK(x_ != nullptr, "begin_int8 before Activations::set");
    reserve_int8(*this, isa, rows);
}

void Activations::quantize_int8_blocks(int64_t b0, int64_t b1) {
    QUILL_CHECK(0 <= b0 && b0 <= b1 && b1 <= n_in_ / 32, "int8 blocks [{}, {}) of {}", b0, b1, n_in_ / 32);
    if (b0 < b1) quantize_blocks(*this, b0, b1);
}

void Activations::quantize_int8(int64_t t0, int64_t t1) {
    QUILL_CHECK(0 <= t0 && t0 <= t1 && t1 <= n_tokens_ && (t0 % kInt8PartTokens == 0 || t0 == t1),
                "int8 part [{}, {}) of {} tokens", t0, t1, n_tokens_);
    if (t0 < t1) quantize_tokens(*this, t0, t1);
}

void Activations::end_int8() { cache_->int8_ready = true; }

bool Activations::has_int8_rows() const { return cache_->int8_rows; }

namespace {

// F16 weights meet the input rounded to fp16 (F16 x F16 products with float accumulation), as in ggml and on GPUs.
const float* prepare_f16(Activations& x) {
    Activations::Cache& c = x.cache();
    if (!c.f16_ready) {
        const auto n = static_cast<size_t>(x.n_tokens() * x.n_in());
        c.x_f16.resize(n);
        for (size_t i = 0; i < n; ++i) c.x_f16[i] = fp16_to_fp32(fp32_to_fp16(x.data()[i]));
        c.f16_ready = true;
    }
    return c.x_f16.data();
}

// The input's tokens past the decode steps as AMX-BF16 B tiles (see PairActs), rounded to fp16 first for F16
// weights.
const PairActs* prepare_pairs(Activations& x, ThreadPool& pool, bool f16) {
    Activations::Cache& c = x.cache();
    const int i = f16 ? 1 : 0;
    if (!c.pairs_ready[i]) {
        const int64_t n_tokens = x.n_tokens() - x.n_decode(), n_in = x.n_in();
        const float* data = x.data() + x.n_decode() * n_in;
        PairActs& s = c.pairs[i];
        s.width = static_cast<int>(std::min<int64_t>(kAmxGroup, n_tokens));
        s.n_groups = (n_tokens + s.width - 1) / s.width;
        s.nb = (n_in + 31) / 32;
        s.parts = f16 ? 2 : 3;
        c.pairs_storage[i].resize(static_cast<size_t>(s.n_groups * s.nb * s.parts * 32 * s.width + 32));
        uint16_t* tiles = align64(c.pairs_storage[i].data());
        s.tiles = tiles;
        auto fill = [&](int64_t g0, int64_t g1) {
            QUILL_CHECK(avx512::pair_tiles(data, n_tokens, n_in, f16, s, tiles, g0, g1),
                        "bf16 tile activations need the AMX kernels");
        };
        if (s.n_groups < 2 || n_tokens * n_in < kParallelQuantizeElements || pool.size() == 1) {
            fill(0, s.n_groups);
        } else {
            pool.run([&](int ith, int nth) {
                const Range r = split_range(s.n_groups, ith, nth);
                fill(r.begin, r.end);
            });
        }
        c.pairs_ready[i] = true;
    }
    return &c.pairs[i];
}

std::atomic<const KernelTable*> g_avx512_kernels{nullptr};  // see set_avx512_kernels

// A table's kernel for `type` (kernels: one of KernelTable's arrays); {} for a type id past the tables.
Kernel kernel_for(const Kernel (&kernels)[kKernelTypes], GgmlType type) {
    const auto i = static_cast<uint32_t>(type);
    return i < kKernelTypes ? kernels[i] : Kernel{};
}

// The one dispatch over weight types: the ISA's kernel (for the packed weights when there are some), else the
// portable one, else dequantize-and-dot, each a look-up in its family's KernelTable. An ISA's table is asked for
// only where the CPU has the ISA (its code is built for it).
Kernel select_kernel(const WeightMatrix& w, Isa isa) {
    if (w.kernels != nullptr) return w.kernels[static_cast<int>(isa)];
    const GgmlType type = w.type;
    Kernel k;
    // The packed form only for the family it was packed for (its layout: PackedWeights).
    const bool packed = w.packed != nullptr && w.packed_isa != Isa::generic &&
                        (isa == Isa::avx2 || (isa >= Isa::avx512 && !avx512_emulated())) &&
                        (w.packed_isa == Isa::avx2) == (isa == Isa::avx2);
    if (packed && isa >= Isa::avx512) {
        const KernelTable& t = avx512::kernel_table();
        k = kernel_for(isa == Isa::amx ? t.packed_amx : t.packed, type);
    }
    // (the AVX2 ones also for the AVX-512 families where those have no packed kernel of the type and the layout is
    // one for both: Q3_K, Q2_K)
    if (!k.fn && packed) k = kernel_for(avx2::kernel_table().packed, type);
    if (!k.fn && isa == Isa::amx) k = kernel_for(avx512::kernel_table().amx, type);
    if (!k.fn && isa >= Isa::avx512) {
        const KernelTable* emulated = g_avx512_kernels.load(std::memory_order_relaxed);
        k = kernel_for(emulated != nullptr ? emulated->rows : avx512::kernel_table().rows, type);
    }
    if (!k.fn && isa >= Isa::avx2) k = kernel_for(avx2::kernel_table().rows, type);
    if (!k.fn) k = kernel_for(generic::kernel_table().rows, type);
    if (!k.fn && type_traits(type).can_dequantize) k = generic::fallback_kernel();
    return k;
}

void check_job(const MatmulJob& job, const Activations& x) {
    const WeightMatrix& w = job.w;
    QUILL_CHECK(w.data != nullptr && job.y != nullptr, "matmul job without weights or output");
    QUILL_CHECK(w.n_in == x.n_in(), "weight rows of {} elements against activations of {}", w.n_in, x.n_in());
    QUILL_CHECK(w.n_out > 0, "weight matrix with {} rows", w.n_out);
    QUILL_CHECK(w.row_bytes >= row_size(w.type, w.n_in), "{} rows of {} elements need {} bytes, stride is {}",
                type_name(w.type), w.n_in, row_size(w.type, w.n_in), w.row_bytes);
    if (!matmul_supports(w.type))
        throw Error(fmt::format("matmul: weight type {} is not supported", type_name(w.type)));
}

// Scratch for n_threads kernels, each part `stride` floats (a multiple of 16) and 64-byte aligned; kept in the cache
// so that the calls of a forward pass do not allocate.
float* thread_scratch(Activations::Cache& c, int n_threads, int64_t stride) {
    const auto floats = static_cast<size_t>(n_threads * stride + 16);
    if (c.scratch.size() < floats) c.scratch.resize(floats);
    return align64(c.scratch.data());
}

// One job's share of the split: its kernel, arguments, and first unit in the concatenated unit space.
struct PlannedJob {
    Kernel kernel;
    KernelArgs args;
    int64_t first_unit = 0, n_units = 0;
};

}  // namespace

namespace {

// Every job's kernels and arguments, with the activation forms they read made ready; the jobs' units (kRowTile rows)
// numbered one after another.
std::vector<PlannedJob> plan_jobs(std::span<const MatmulJob> jobs, Activations& x, ThreadPool& pool, Isa isa,
                                  int64_t* total_units) {
    QUILL_CHECK(x.data() != nullptr, "matmul before Activations::set");
    std::vector<PlannedJob> plan;
    plan.reserve(2 * jobs.size());
    *total_units = 0;
    bool need_int8 = false, need_rows = false;
    // Tokens [t0, t1) of job j on kernel k.
    auto add = [&](const MatmulJob& job, Kernel k, int64_t t0, int64_t t1) {
        PlannedJob& p = plan.emplace_back();
        p.kernel = k;
        const bool f16 = job.w.type == GgmlType::F16;
        const float* xf = f16 && !k.pair_acts ? prepare_f16(x) : x.data();
        p.args = {&job.w, xf + t0 * x.n_in(), nullptr, nullptr, t1 - t0, job.y + t0 * job.w.n_out};
        if (k.pair_acts) p.args.pairs = prepare_pairs(x, pool, f16);
        p.first_unit = *total_units;
        p.n_units = (job.w.n_out + kRowTile - 1) / kRowTile;
        *total_units += p.n_units;
        need_int8 = need_int8 || k.int8_acts;
        need_rows = need_rows || (k.int8_acts && !(k.tiles_alone && t1 - t0 >= kAmxMinTokens));
    };
    for (const MatmulJob& job : jobs) {
        check_job(job, x);
        const Kernel k = select_kernel(job.w, isa);
        const int64_t n_decode = k.pair_acts ? x.n_decode() : 0;  // the decode steps stay on the vector units
        if (n_decode > 0) add(job, select_kernel(job.w, Isa::avx512), 0, n_decode);
        if (n_decode < x.n_tokens()) add(job, k, n_decode, x.n_tokens());
    }
    if (need_int8 && *total_units > 0) {
        prepare_int8(x, pool, isa, need_rows);
        for (PlannedJob& p : plan) p.args.q = &x.cache().view;
    }
    return plan;
}

// Units handed out a range per thread, a quarter at a time (UnitRanges; one thread takes all at once); ranges and
// chunks in whole multiples of `align` units (but for the end).
UnitRanges thread_ranges(int64_t n_units, int nth, int64_t align = 1) {
    QUILL_CHECK(n_units < (int64_t{1} << 31), "{} row tiles in one product", n_units);
    const int64_t chunk = nth == 1 ? n_units : (n_units + 4 * nth - 1) / (4 * nth);
    return UnitRanges(n_units, nth, (chunk + align - 1) / align * align, align);
}

}  // namespace

void matmul(std::span<const MatmulJob> jobs, Activations& x, ThreadPool& pool, Isa isa) {
    int64_t total_units = 0;
    const std::vector<PlannedJob> plan = plan_jobs(jobs, x, pool, isa, &total_units);
    if (total_units == 0) return;
    // Units of kRowTile rows (tiles stay whole).
    const int nth = pool.size();
    UnitRanges ranges = thread_ranges(total_units, nth);
    const int64_t scratch_stride = (scratch_floats(x.n_in(), x.n_tokens()) + 15) / 16 * 16;
    float* scratch_base = thread_scratch(x.cache(), nth, scratch_stride);
    auto run_units = [&](int64_t u0, int64_t u1, float* thread_scratch) {
        for (const PlannedJob& p : plan) {
            const int64_t b = std::max(u0, p.first_unit), e = std::min(u1, p.first_unit + p.n_units);
            if (b >= e) continue;
            const int64_t n_out = p.args.w->n_out;
            p.kernel.fn(p.args, (b - p.first_unit) * kRowTile, std::min(n_out, (e - p.first_unit) * kRowTile),
                        thread_scratch);
        }
    };
    pool.run([&](int ith, int) {
        float* thread_scratch = scratch_base + ith * scratch_stride;
        for (Range r; ranges.next(ith, &r);) run_units(r.begin, r.end, thread_scratch);
    });
}

void matmul_pair(const MatmulJob& a, const MatmulJob& b, Activations& x, ThreadPool& pool, Isa isa, int64_t unit_rows,
                 const std::function<void(int64_t, int64_t)>& done) {
    QUILL_CHECK(a.w.n_out == b.w.n_out && unit_rows > 0 && unit_rows % kRowTile == 0,
                "matmul_pair of {} and {} rows in units of {}", a.w.n_out, b.w.n_out, unit_rows);
    const MatmulJob jobs[] = {a, b};
    int64_t total_units = 0;
    const std::vector<PlannedJob> plan = plan_jobs(jobs, x, pool, isa, &total_units);
    const int64_t n_out = a.w.n_out, n_units = (n_out + unit_rows - 1) / unit_rows;
    const int nth = pool.size();
    // done() gets whole groups of eight 32-blocks where the units allow and the threads' shares stay as even (the
    // largest no larger): AVX2 quantizes eight blocks at once, and the FFN's 1536 rows in units of 64 on two threads
    // came in ranges of six, every one through the masked tail path.
    constexpr int64_t kGroupRows = 8 * 32;
    int64_t group_units = kGroupRows % unit_rows == 0 ? kGroupRows / unit_rows : 1;
    const auto largest_share = [&](int64_t align) { return ((n_units + align - 1) / align + nth - 1) / nth * align; };
    if (largest_share(group_units) > largest_share(1)) group_units = 1;
    UnitRanges ranges = thread_ranges(n_units, nth, group_units);
    const int64_t scratch_stride = (scratch_floats(x.n_in(), x.n_tokens()) + 15) / 16 * 16;
    float* scratch_base = thread_scratch(x.cache(), nth, scratch_stride);
    pool.run([&](int ith, int) {
        float* thread_scratch = scratch_base + ith * scratch_stride;
        for (Range r; ranges.next(ith, &r);) {
            const int64_t r0 = r.begin * unit_rows, r1 = std::min(n_out, r.end * unit_rows);
            for (const PlannedJob& p : plan) p.kernel.fn(p.args, r0, r1, thread_scratch);
            done(r0, r1);
        }
    });
}

bool reads_int8(const WeightMatrix& w, Isa isa) { return select_kernel(w, isa).int8_acts; }

bool reads_tiles_alone(const WeightMatrix& w, Isa isa, int64_t n_tokens) {
    const Kernel k = select_kernel(w, isa);
    return k.int8_acts && k.tiles_alone && n_tokens >= kAmxMinTokens;
}

bool PackedWeights::supports(GgmlType type, Isa isa) {
    if (isa == Isa::avx2) return isa_available(isa) && kernel_for(avx2::kernel_table().packed, type).fn != nullptr;
    return isa >= Isa::avx512 && isa_available(isa) && !avx512_emulated() &&
           (kernel_for(avx512::kernel_table().packed, type).fn != nullptr ||
            kernel_for(avx2::kernel_table().packed, type).fn != nullptr);
}

size_t PackedWeights::bytes_for(const WeightMatrix& w) {
    const int64_t record = packed_record_bytes(w.type);
    QUILL_CHECK(record > 0 && w.n_in % 32 == 0, "no packed form for {} rows of {}", type_name(w.type), w.n_in);
    return static_cast<size_t>((w.n_out + 15) / 16 * (w.n_in / 32) * record);
}

PackedWeights::PackedWeights(const WeightMatrix& w, Isa isa, ThreadPool* pool,
                             const std::function<void(int64_t, int64_t)>& packed, void* into)
    : bytes_(bytes_for(w)), isa_(isa) {
    QUILL_CHECK(supports(w.type, isa), "no packed form of {} for {}", type_name(w.type), isa_name(isa));
    if (into == nullptr) {
        auto memory = std::make_shared<HugeMemory>(bytes_);
        into = memory->data();
        own_ = std::shared_ptr<void>(memory, into);
    }
    data_ = into;
    const int64_t n_tiles = (w.n_out + 15) / 16;
    // The AVX-512 packer transposes the tiles where it can run; elsewhere they are written a value at a time.
    const bool transposes = isa_available(Isa::avx512) && !avx512_emulated();
    auto pack = [&](int64_t tile0, int64_t tile1) {
        if (isa == Isa::avx2 && generic::pack_avx2_tiles(w, data_, tile0, tile1)) return;
        if (!transposes || !avx512::pack_tiles(w, data_, tile0, tile1)) generic::pack_tiles(w, data_, tile0, tile1);
    };
    // In chunks of about 8 MiB of the file's rows, each reported when done.
    const int64_t chunk = std::max<int64_t>(1, (int64_t{8} << 20) / (16 * static_cast<int64_t>(w.row_bytes)));
    run_chunks(pool, n_tiles, chunk, pack, [&](int64_t c0, int64_t c1) {
        if (packed) packed(c0 * 16, std::min(w.n_out, c1 * 16));
    });
}

HugeMemory::HugeMemory(size_t bytes) : bytes_(std::max<size_t>(bytes, 1)) {
    constexpr size_t kHuge = size_t{2} << 20;
    // Over-allocated by 2 MiB and started at its first 2 MiB boundary (mmap aligns to pages only); the pages beyond
    // bytes_ are never touched, so they cost address space only.
    map_bytes_ = (bytes_ + kHuge - 1) / kHuge * kHuge + kHuge;
    map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map_ == MAP_FAILED) {
        map_ = nullptr;
        throw Error(fmt::format("out of memory allocating {} MiB of packed weights", bytes_ >> 20));
    }
    const auto at = (reinterpret_cast<uintptr_t>(map_) + kHuge - 1) / kHuge * kHuge;
    data_ = reinterpret_cast<void*>(at);
#ifdef MADV_HUGEPAGE
    madvise(data_, (bytes_ + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);
#endif
}

HugeMemory::HugeMemory(HugeMemory&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)) {}

HugeMemory& HugeMemory::operator=(HugeMemory&& o) noexcept {
    if (this != &o) {
        if (map_ != nullptr) munmap(map_, map_bytes_);
        map_ = std::exchange(o.map_, nullptr);
        map_bytes_ = std::exchange(o.map_bytes_, 0);
        data_ = std::exchange(o.data_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

HugeMemory::~HugeMemory() {
    if (map_ != nullptr) munmap(map_, map_bytes_);
}

void matmul_reference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y) {
    QUILL_CHECK(type_traits(w.type).can_dequantize, "matmul_reference: cannot dequantize {}", type_name(w.type));
    std::vector<float> row(static_cast<size_t>(w.n_in));  // [n_in]
    for (int64_t r = 0; r < w.n_out; ++r) {
        dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + r * static_cast<int64_t>(w.row_bytes), row.data(),
                       w.n_in);
        for (int64_t t = 0; t < n_tokens; ++t) {
            const float* xt = x + t * w.n_in;  // [n_in]
            double sum = 0.0;
            for (int64_t i = 0; i < w.n_in; ++i) sum += static_cast<double>(row[static_cast<size_t>(i)]) * xt[i];
            y[t * w.n_out + r] = static_cast<float>(sum);
        }
    }
}

std::vector<float> reference_activations(GgmlType weight_type, const float* x, int64_t n_tokens, int64_t n_in) {
    std::vector<float> out(x, x + n_tokens * n_in);  // [n_tokens, n_in]
    const Kernel k = kernel_for(generic::kernel_table().rows, weight_type);
    if (k.fn && k.int8_acts) {
        std::vector<uint8_t> blocks(row_size(GgmlType::Q8_0, n_in));
        for (int64_t t = 0; t < n_tokens; ++t) {
            quantize_row(GgmlType::Q8_0, out.data() + t * n_in, blocks.data(), n_in);
            dequantize_row(GgmlType::Q8_0, blocks.data(), out.data() + t * n_in, n_in);
        }
    } else if (weight_type == GgmlType::F16) {
        for (float& v : out) v = fp16_to_fp32(fp32_to_fp16(v));
    }
    return out;
}

bool matmul_supports(GgmlType type) {
    const TypeTraits* t = find_type_traits(static_cast<uint32_t>(type));
    return t != nullptr && t->can_dequantize;
}

// ---- instruction sets ----

void set_avx512_kernels(const KernelTable* table) { g_avx512_kernels.store(table); }

std::array<Kernel, kIsaCount> resolve_kernels(const WeightMatrix& w) {
    WeightMatrix unresolved = w;
    unresolved.kernels = nullptr;
    std::array<Kernel, kIsaCount> out{};
    for (Isa isa : kAllIsas) out[static_cast<size_t>(isa)] = select_kernel(unresolved, isa);
    return out;
}
bool avx512_emulated() { return g_avx512_kernels.load() != nullptr; }

namespace {

#if defined(__x86_64__)
// AMX-TILE, AMX-INT8 and AMX-BF16 in CPUID, tile state enabled by the OS (XCR0 bits 17 and 18), and the kernel's
// permission for this process to use the tile data (Linux 5.16+: arch_prctl(ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA), asked once; a refusal leaves the avx512 kernels).
bool amx_permitted() {
    static const bool permitted = [] {
        if (!avx512::amx_built()) return false;
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_OSXSAVE)) return false;
        if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
        if (!((edx >> 24) & 1) || !((edx >> 25) & 1) || !((edx >> 22) & 1)) return false;  // TILE, INT8, BF16
        uint32_t xcr0 = 0, xcr0_high = 0;
        __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(xcr0_high) : "c"(0));
        if ((xcr0 & (3u << 17)) != (3u << 17)) return false;  // XTILECFG and XTILEDATA
        constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
        return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
    }();
    return permitted;
}
#else
bool amx_permitted() { return false; }
#endif

bool hardware_has(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c". Read once: under a
    // hypervisor CPUID is a VM exit, and a model's load checks every tensor.
    static const bool f16c = [] {
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    }();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c &&
                      __builtin_cpu_supports("bmi2");
    switch (isa) {
        case Isa::generic:
            return true;
        case Isa::avx2:
            return avx2;
        case Isa::avx512:
            return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512vnni");
        case Isa::amx:
            return hardware_has(Isa::avx512) && amx_permitted();
    }
    return false;
#else
    return isa == Isa::generic;
#endif
}

}  // namespace

bool isa_available(Isa isa) {
    if (isa == Isa::avx512 && avx512_emulated()) return hardware_has(Isa::avx2);
    return hardware_has(isa);
}

std::string_view isa_name(Isa isa) {
    switch (isa) {
        case Isa::generic:
            return "generic";
        case Isa::avx2:
            return "avx2";
        case Isa::avx512:
            return avx512_emulated() ? "avx512-vnni (emulated)" : "avx512-vnni";
        case Isa::amx:
            return "avx512-vnni+amx";
    }
    return "unknown";
}

Isa best_isa() {
    Isa best = Isa::generic;
    for (Isa isa : {Isa::avx2, Isa::avx512, Isa::amx}) {
        if (hardware_has(isa)) best = isa;
    }
    const char* env = std::getenv("QUILL_CPU_ISA");
    if (env == nullptr || *env == '\0') return best;
    const std::string want = env;
    Isa asked;
    if (want == "generic") {
        asked = Isa::generic;
    } else if (want == "avx2") {
        asked = Isa::avx2;
    } else if (want == "avx512" || want == "avx512-vnni") {
        asked = Isa::avx512;
    } else if (want == "amx" || want == "avx512-vnni+amx") {
        asked = Isa::amx;
    } else {
        throw UsageError(fmt::format("QUILL_CPU_ISA={} is not one of generic, avx2, avx512, amx", want));
    }
    return std::min(asked, best);
}

}  // namespace quill::cpu
