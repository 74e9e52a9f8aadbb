// Micro-benchmark of the CPU matmuls (not a test; build with `--target bench_matmul`).
//
// Times the per-token matmul set of real model shapes with random weights (quantize_row), the way the forward pass
// calls it: per layer wq|wk|wv on one input, wo, w1|w3 on one input, w2, then the output matrix. Every layer has its
// own weights, so decode streams them from memory as a real model does. Also measures plain memory read bandwidth,
// the ceiling for decode.
//
// The matrices of a type with a packed form are packed (PackedWeights) for each ISA as the backend packs them, unless
// --packed 0.
//
//   bench_matmul [--shape stories110m|tinyllama|smollm2|phi-4-mini] [--types q4_0,q8_0]
//                [--isa generic|avx2|avx512|amx] [--threads 1,2] [--tokens 1,64] [--reps N] [--packed 1]
//                [--all-logits 0] [--breakdown 0]
//
// --breakdown 1 also prints each product's share (wq|wk|wv, wo, w1|w3, w2, output): its median time per pass and
// its rate in weights times tokens per nanosecond, where the sections' fixed costs show against the kernels'.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cpu/matmul.h"
#include "engine/format/quant.h"

using namespace quill;
using namespace quill::cpu;

namespace {

using Clock = std::chrono::steady_clock;

bool g_packed = true;         // --packed
bool g_all_logits = false;    // --all-logits: the output matrix for every token (a batched decode step)
bool g_breakdown = false;     // --breakdown

// The products of a pass, for --breakdown: each one's seconds in the pass timed last.
enum Product { kQkv, kO, kGateUp, kDown, kOutput, kProducts };
constexpr const char* kProductNames[kProducts] = {"wq|wk|wv", "wo", "w1|w3", "w2", "output"};
double g_product_s[kProducts];

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct ModelShape {
    std::string name;
    int64_t n_embd, n_ff, n_layer, n_vocab, n_embd_kv;
};

const ModelShape kShapes[] = {
    {"stories110m", 768, 2048, 12, 32000, 768},
    {"tinyllama", 2048, 5632, 22, 32000, 256},
    {"smollm2", 576, 1536, 30, 49152, 192},
    // phi3's fused QKV and gate/up tensors, which the backend multiplies as row views of their parts (the same
    // products as these separate matrices); its 200,064-token output is a sixth of a token's bytes
    {"phi-4-mini", 3072, 8192, 32, 200064, 1024},
};

struct Matrix {
    GgmlType type;
    int64_t n_out, n_in;
    std::vector<uint8_t> data;  // [n_out, row_bytes]
    PackedWeights packed;       // when packing is on and the type has a packed form, as the backend packs it for isa
    WeightMatrix view(Isa isa) const {
        const WeightMatrix w{type, data.data(), n_in, n_out, row_size(type, n_in)};
        return packed.data() != nullptr && packed.isa() == isa ? packed.reading(w) : w;
    }
    // Packs the matrix for isa's kernels where packing is on and it has a packed form there.
    void pack_for(Isa isa) {
        const WeightMatrix w{type, data.data(), n_in, n_out, row_size(type, n_in)};
        packed = {};
        if (g_packed && PackedWeights::supports(type, isa) && n_in % 32 == 0) packed = PackedWeights(w, isa, nullptr);
    }
};

// Random rows quantized once (quantizing a billion weights with the scalar reference would take minutes), then
// repeated at an offset that differs per matrix, so every matrix is its own memory.
Matrix make_matrix(GgmlType type, int64_t n_out, int64_t n_in, std::mt19937& rng) {
    constexpr int64_t kDistinctRows = 64;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const size_t rb = row_size(type, n_in);
    std::vector<uint8_t> distinct(rb * kDistinctRows);
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < kDistinctRows; ++r) {
        for (float& v : row) v = 0.05f * normal(rng);
        quantize_row(type, row.data(), distinct.data() + rb * static_cast<size_t>(r), n_in);
    }
    Matrix m{type, n_out, n_in, std::vector<uint8_t>(rb * static_cast<size_t>(n_out))};
    const int64_t shift = rng() % kDistinctRows;
    for (int64_t r = 0; r < n_out; ++r) {
        std::memcpy(m.data.data() + rb * static_cast<size_t>(r),
                    distinct.data() + rb * static_cast<size_t>((r + shift) % kDistinctRows), rb);
    }
    return m;
}

struct Layer {
    Matrix wq, wk, wv, wo, w1, w3, w2;
};

struct Model {
    std::vector<Layer> layers;
    Matrix output;
    void pack_for(Isa isa) {
        for (Layer& l : layers) {
            for (Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w3, &l.w2}) m->pack_for(isa);
        }
        output.pack_for(isa);
    }
    size_t bytes(bool with_output) const {
        size_t total = with_output ? output.data.size() : 0;
        for (const Layer& l : layers) {
            for (const Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w3, &l.w2}) total += m->data.size();
        }
        return total;
    }
    double flops_per_token(bool with_output) const {
        double total = with_output ? 2.0 * static_cast<double>(output.n_out * output.n_in) : 0.0;
        for (const Layer& l : layers) {
            for (const Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w3, &l.w2}) {
                total += 2.0 * static_cast<double>(m->n_out * m->n_in);
            }
        }
        return total;
    }
};

Model make_model(const ModelShape& s, GgmlType type, std::mt19937& rng) {
    Model m;
    for (int64_t l = 0; l < s.n_layer; ++l) {
        m.layers.push_back({make_matrix(type, s.n_embd, s.n_embd, rng), make_matrix(type, s.n_embd_kv, s.n_embd, rng),
                            make_matrix(type, s.n_embd_kv, s.n_embd, rng), make_matrix(type, s.n_embd, s.n_embd, rng),
                            make_matrix(type, s.n_ff, s.n_embd, rng), make_matrix(type, s.n_ff, s.n_embd, rng),
                            make_matrix(type, s.n_embd, s.n_ff, rng)});
    }
    m.output = make_matrix(type, s.n_vocab, s.n_embd, rng);
    return m;
}

// One forward pass's matmuls for n_tokens tokens (inputs are fixed random data; only the time matters).
struct Buffers {
    std::vector<float> x_embd, x_ff;        // [n_tokens, n_embd], [n_tokens, n_ff]
    std::vector<float> q, k, v, o, h1, h3;  // outputs
    std::vector<float> logits;              // [n_tokens, n_vocab]
};

void forward_matmuls(const Model& m, Buffers& b, int64_t n_tokens, Activations& act, ThreadPool& pool, Isa isa,
                     bool with_output) {
    const int64_t n_embd = m.layers[0].wq.n_in, n_ff = m.layers[0].w2.n_in;
    std::fill(std::begin(g_product_s), std::end(g_product_s), 0.0);
    auto timed = [](Product p, auto&& f) {
        const auto start = Clock::now();
        f();
        g_product_s[p] += seconds_since(start);
    };
    for (const Layer& l : m.layers) {
        act.set(b.x_embd.data(), n_tokens, n_embd);
        const MatmulJob qkv[] = {
            {l.wq.view(isa), b.q.data()}, {l.wk.view(isa), b.k.data()}, {l.wv.view(isa), b.v.data()}};
        timed(kQkv, [&] { matmul(qkv, act, pool, isa); });
        act.set(b.x_embd.data() + 1, n_tokens, n_embd);  // a different pointer: a new input
        timed(kO, [&] { matmul(l.wo.view(isa), act, b.o.data(), pool, isa); });
        act.set(b.x_embd.data(), n_tokens, n_embd);
        const MatmulJob ffn[] = {{l.w1.view(isa), b.h1.data()}, {l.w3.view(isa), b.h3.data()}};
        timed(kGateUp, [&] { matmul(ffn, act, pool, isa); });
        act.set(b.x_ff.data(), n_tokens, n_ff);
        timed(kDown, [&] { matmul(l.w2.view(isa), act, b.o.data(), pool, isa); });
    }
    if (with_output) {
        if (g_all_logits) {
            act.set(b.x_embd.data(), n_tokens, n_embd);
        } else {
            act.set(b.x_embd.data() + (n_tokens - 1) * n_embd, 1, n_embd);  // logits of the last token only
        }
        timed(kOutput, [&] { matmul(m.output.view(isa), act, b.logits.data(), pool, isa); });
    }
}

// Plain read bandwidth: every thread sums its share of a buffer much larger than the caches.
double read_bandwidth(ThreadPool& pool, int reps) {
    const size_t n = size_t{1} << 27;  // 1 GiB of uint64
    std::vector<uint64_t> buf(n);
    for (size_t i = 0; i < n; ++i) buf[i] = i;
    std::vector<uint64_t> sums(static_cast<size_t>(pool.size()) * 8);
    double best = 0.0;
    for (int rep = 0; rep < reps; ++rep) {
        const auto start = Clock::now();
        pool.run([&](int ith, int nth) {
            const Range r = split_range(static_cast<int64_t>(n), ith, nth, 8);
            uint64_t acc[8] = {};
            for (int64_t i = r.begin; i < r.end; i += 8) {
                for (int k = 0; k < 8; ++k) acc[k] += buf[static_cast<size_t>(i + k)];
            }
            for (int k = 0; k < 8; ++k) sums[static_cast<size_t>(ith * 8 + k)] = acc[k];
        });
        best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / seconds_since(start) / 1e9);
    }
    return best;
}

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
    return out;
}

struct Options {
    std::vector<std::string> shapes = {"stories110m", "tinyllama"};
    std::vector<std::string> types = {"q4_0", "q8_0"};
    std::vector<Isa> isas;
    std::vector<int> threads = {1, 2};
    std::vector<int64_t> tokens = {1, 64};
    int reps = 5;
};

Options parse(int argc, char** argv) {
    Options o;
    for (Isa isa : kAllIsas) {
        if (isa_available(isa)) o.isas.push_back(isa);
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string key = argv[i], value = argv[i + 1];
        if (key == "--shape") o.shapes = split_list(value);
        if (key == "--types") o.types = split_list(value);
        if (key == "--reps") o.reps = std::stoi(value);
        if (key == "--packed") g_packed = value != "0";
        if (key == "--all-logits") g_all_logits = value != "0";
        if (key == "--breakdown") g_breakdown = value != "0";
        if (key == "--threads") {
            o.threads.clear();
            for (const auto& t : split_list(value)) o.threads.push_back(std::stoi(t));
        }
        if (key == "--tokens") {
            o.tokens.clear();
            for (const auto& t : split_list(value)) o.tokens.push_back(std::stoll(t));
        }
        if (key == "--isa") {
            o.isas.clear();
            for (const auto& name : split_list(value)) {
                for (Isa isa : kAllIsas) {
                    if (name == isa_name(isa) || (name == "avx512" && isa == Isa::avx512) || (name == "amx" && isa == Isa::amx))
                        o.isas.push_back(isa);
                }
            }
        }
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const Options opt = parse(argc, argv);
    for (int threads : opt.threads) {
        ThreadPool pool(threads);
        fmt::print("memory read bandwidth, {} thread(s): {:.1f} GB/s\n", threads, read_bandwidth(pool, 3));
    }
    std::mt19937 rng(1);
    for (const ModelShape& shape : kShapes) {
        if (std::find(opt.shapes.begin(), opt.shapes.end(), shape.name) == opt.shapes.end()) continue;
        for (const std::string& type_str : opt.types) {
            const GgmlType type = type_from_name(type_str).value();
            Model model = make_model(shape, type, rng);
            for (int64_t n_tokens : opt.tokens) {
                Buffers b;
                std::normal_distribution<float> normal(0.0f, 1.0f);
                b.x_embd.resize(static_cast<size_t>(n_tokens * shape.n_embd + 1));
                b.x_ff.resize(static_cast<size_t>(n_tokens * shape.n_ff));
                for (float& v : b.x_embd) v = normal(rng);
                for (float& v : b.x_ff) v = normal(rng);
                for (auto* out : {&b.q, &b.k, &b.v, &b.o}) out->resize(static_cast<size_t>(n_tokens * shape.n_embd));
                for (auto* out : {&b.h1, &b.h3}) out->resize(static_cast<size_t>(n_tokens * shape.n_ff));
                b.logits.resize(static_cast<size_t>(shape.n_vocab * n_tokens));
                // Decode multiplies the output matrix every token; prefill only for the last one.
                const bool per_token_output = n_tokens == 1 || g_all_logits;
                for (Isa isa : opt.isas) {
                    model.pack_for(isa);  // as the backend packs for the family it runs
                    for (int threads : opt.threads) {
                        ThreadPool pool(threads);
                        Activations act;
                        forward_matmuls(model, b, n_tokens, act, pool, isa, true);  // warm up
                        std::vector<double> times;
                        std::vector<double> product_s[kProducts];
                        for (int rep = 0; rep < opt.reps; ++rep) {
                            const auto start = Clock::now();
                            forward_matmuls(model, b, n_tokens, act, pool, isa, true);
                            times.push_back(seconds_since(start));
                            for (int p = 0; p < kProducts; ++p) product_s[p].push_back(g_product_s[p]);
                        }
                        std::sort(times.begin(), times.end());
                        const double best = times.front(), median = times[times.size() / 2];
                        const double flops =
                            model.flops_per_token(per_token_output) * static_cast<double>(n_tokens) +
                            (per_token_output ? 0.0 : model.flops_per_token(true) - model.flops_per_token(false));
                        fmt::print(
                            "{:12} {:5} {:12} {} thr  tokens {:3}: best {:8.2f} ms  median {:8.2f} ms  "
                            "{:7.1f} tok/s  {:6.1f} GB/s  {:6.1f} GFLOP/s\n",
                            shape.name, type_str, isa_name(isa), threads, n_tokens, best * 1e3, median * 1e3,
                            static_cast<double>(n_tokens) / best, static_cast<double>(model.bytes(true)) / best / 1e9,
                            flops / best / 1e9);
                        if (!g_breakdown) continue;
                        const Layer& l = model.layers[0];
                        const double layers = static_cast<double>(model.layers.size());
                        const double weights[kProducts] = {
                            layers * static_cast<double>((l.wq.n_out + l.wk.n_out + l.wv.n_out) * l.wq.n_in),
                            layers * static_cast<double>(l.wo.n_out * l.wo.n_in),
                            layers * static_cast<double>((l.w1.n_out + l.w3.n_out) * l.w1.n_in),
                            layers * static_cast<double>(l.w2.n_out * l.w2.n_in),
                            static_cast<double>(model.output.n_out * model.output.n_in)};
                        for (int p = 0; p < kProducts; ++p) {
                            std::sort(product_s[p].begin(), product_s[p].end());
                            const double s = product_s[p][product_s[p].size() / 2];
                            const double tokens = p == kOutput && !per_token_output ? 1.0 : static_cast<double>(n_tokens);
                            fmt::print("    {:9} {:8.3f} ms  {:6.2f} weight-tokens/ns\n", kProductNames[p], s * 1e3,
                                       weights[p] * tokens / s * 1e-9);
                        }
                    }
                }
            }
        }
    }
    return 0;
}
