// The CPU backend: fast path against its scalar path (CpuBackendOptions::reference, the oracle of the kernels: the
// same forward with plain products of the same int8/fp16 inputs) on random tiny models of every weight type, prefill
// against step-by-step decode, multi-sequence batches, model files the tests write, and the real stories260K model
// against llama.cpp's logits and greedy tokens. The model maths is checked against the independent reference backend
// in test_reference.cpp.
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/runtime/sampler.h"
#include "tests/support/arch_checks.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

namespace test_cpu_backend {

using namespace quill;
using quill::cpu::CpuBackend;
using quill::cpu::CpuBackendOptions;
using quill::cpu::Isa;
using quill::test::available_isas;
using quill::test::model_test_isas;
using quill::test::max_abs;
using quill::test::max_diff;
using quill::test::prefill_logits;
using quill::test::some_tokens;
using quill::test::stepwise_logits;

namespace {

std::unique_ptr<CpuBackend> make(const Model& m, bool reference, int threads = 1, std::optional<Isa> isa = {},
                                 int64_t n_slots = 1, KvType kv = KvType::f16, int64_t n_ctx = 128) {
    CpuBackendOptions o;
    o.n_threads = threads;
    o.n_ctx = n_ctx;
    o.n_slots = n_slots;
    o.kv_type = kv;
    o.reference = reference;
    o.isa = isa;
    return std::make_unique<CpuBackend>(m.config, m.weights, o);
}

// Tolerances: max |fast - scalar reference path| over max |reference|, by weight type. The scalar path computes in
// double exactly what the fast path computes in float (weights dequantized; inputs as the kernels see them: int8
// blocks with fp16 scales for quantized weights, fp16 for F16 weights), so the two differ by float summation order
// (~1e-7 of the logit range) until an intermediate value sits within that distance of a rounding boundary of the
// int8 or fp16 quantization and lands on the other side: one quantization step (1/127 of a block's range) then
// moves through the layers. F32 and BF16 weights see such flips only in the fp16 K/V/Q rounding (measured up to
// 2.9e-5, on the qwen2 MQA case with the generic kernels, where eight query heads read each flipped K/V element:
// 1e-4), F16 weights also in their fp16 inputs (1e-3); int8 types see them in every matmul input, and on these
// small random models one flip can move the logits by a few per mille to ~1.5% of their range: 3e-2.
// The kernels themselves are checked one product at a time, tightly, in test_matmul.cpp; the model maths against
// the independent reference forward pass in test_reference.cpp.
double kernel_tol(GgmlType t) {
    if (t == GgmlType::F32 || t == GgmlType::BF16) return 1e-4;
    if (t == GgmlType::F16) return 1e-3;
    return 3e-2;
}


}  // namespace

TEST_CASE("fast path equals the scalar reference on random models of every weight type", "[cpu]") {
    for (const test::TinyCase& c : test::tiny_cases()) {
        const double tol = kernel_tol(c.spec.type);
        auto model = test::make_tiny_model(c.spec);
        const auto tokens = some_tokens(9, static_cast<int>(c.spec.n_vocab), 1);
        auto ref_backend = make(*model, true);
        const std::vector<float> ref = prefill_logits(*ref_backend, tokens);
        const double scale = max_abs(ref);
        REQUIRE(scale > 0.1);
        for (Isa isa : model_test_isas()) {
            for (int threads : {1, 2, 3}) {
                INFO(c.label << ", " << cpu::isa_name(isa) << ", " << threads << " threads");
                auto fast = make(*model, false, threads, isa);
                const double d = max_diff(prefill_logits(*fast, tokens), ref);
                CHECK(d <= tol * scale);
            }
        }
    }
}

// The kernels are batch invariant (a row's products, and a query row's attention, never depend on the other rows
// of the batch), so a token's logits have the same bits however the prompt is cut into forward calls.
TEST_CASE("prefill logits equal step-by-step decode logits bit for bit", "[cpu]") {
    for (const test::TinyCase& c : test::tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const auto tokens = some_tokens(12, static_cast<int>(c.spec.n_vocab), 2);
        std::vector<std::optional<Isa>> isas{std::nullopt};  // the reference path, then each kernel family
        for (Isa isa : model_test_isas()) isas.push_back(isa);
        for (const auto& isa : isas) {
            INFO(c.label << ", " << (isa ? cpu::isa_name(*isa) : "reference path"));
            auto b1 = make(*model, !isa, 2, isa);
            auto b2 = make(*model, !isa, 2, isa);
            const std::vector<float> batched = prefill_logits(*b1, tokens);
            const std::vector<float> stepped = stepwise_logits(*b2, tokens);
            CHECK(max_diff(batched, stepped) == 0.0);
        }
    }
}

TEST_CASE("a prompt continuing a filled cache equals the whole prompt at once, bit for bit", "[cpu]") {
    // 100 positions: two key blocks of the tiled attention, several tiles, and past every sliding window.
    for (const test::TinyCase& c : test::tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const int64_t nv = c.spec.n_vocab;
        const auto tokens = some_tokens(100, static_cast<int>(nv), 6);
        for (Isa isa : model_test_isas()) {
            INFO(c.label << ", " << cpu::isa_name(isa));
            auto whole = make(*model, false, 2, isa);
            const std::vector<float> want = prefill_logits(*whole, tokens);
            auto parts = make(*model, false, 2, isa);
            std::vector<float> got(want.size());
            for (auto [p0, p1] : {std::pair{0, 37}, std::pair{37, 41}, std::pair{41, 100}}) {
                Batch batch;
                for (int p = p0; p < p1; ++p) batch.add(tokens[p], p, 0, true);
                parts->forward(batch, std::span<float>(got.data() + p0 * nv, (p1 - p0) * nv));
            }
            CHECK(max_diff(got, want) == 0.0);
        }
    }
}

TEST_CASE("decode over a long cache spread over many threads equals the prefill bit for bit", "[cpu]") {
    // 8 threads against a decode's few attention units: each step's key blocks go to different threads once the
    // cache spans four blocks (from 192 positions on), then are summed in order (attend_split).
    for (const test::TinyCase& c : test::tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const auto tokens = some_tokens(250, static_cast<int>(c.spec.n_vocab), 7);
        INFO(c.label);
        auto b1 = make(*model, false, 2, {}, 1, KvType::f16, 256);
        auto b8 = make(*model, false, 8, {}, 1, KvType::f16, 256);
        CHECK(max_diff(prefill_logits(*b1, tokens), stepwise_logits(*b8, tokens)) == 0.0);
    }
}

TEST_CASE("decode steps of sequences of different lengths spread over many threads equal each alone", "[cpu]") {
    // Fewer tiles than threads: the key blocks go to the threads (attend_split), job by job in the units' order when
    // the units span different blocks (here 130, 200 and 250 positions: three blocks and four), each thread's range
    // first.
    for (const test::TinyCase& c : test::tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const int64_t nv = c.spec.n_vocab;
        const int lengths[3] = {130, 200, 250};
        std::vector<std::vector<int32_t>> seqs;
        for (int s = 0; s < 3; ++s) seqs.push_back(some_tokens(lengths[s] + 1, static_cast<int>(nv), 30 + s));
        INFO(c.label);
        std::vector<float> want(3 * nv);
        for (int s = 0; s < 3; ++s) {
            auto alone = make(*model, false, 2, {}, 1, KvType::f16, 256);
            prefill_logits(*alone, std::vector<int32_t>(seqs[s].begin(), seqs[s].begin() + lengths[s]));
            Batch step;
            step.add(seqs[s][lengths[s]], lengths[s], 0, true, true);
            alone->forward(step, std::span<float>(want.data() + s * nv, nv));
        }
        auto spread = make(*model, false, 8, {}, 3, KvType::f16, 256);
        for (int s = 0; s < 3; ++s)
            prefill_logits(*spread, std::vector<int32_t>(seqs[s].begin(), seqs[s].begin() + lengths[s]), s);
        Batch step;
        for (int s = 0; s < 3; ++s) step.add(seqs[s][lengths[s]], lengths[s], s, true, true);
        std::vector<float> got(3 * nv);
        spread->forward(step, got);
        CHECK(max_diff(got, want) == 0.0);
    }
}

TEST_CASE("one batch with tokens of several sequences equals running them apart", "[cpu]") {
    test::TinySpec spec;
    spec.type = spec.ffn_down_type = GgmlType::Q8_0;
    auto model = test::make_tiny_model(spec);
    const int64_t nv = model->config.n_vocab;
    const auto a = some_tokens(7, static_cast<int>(nv), 3), b = some_tokens(4, static_cast<int>(nv), 4);

    // Apart: each sequence alone in slot 0 of its own backend.
    auto alone_a = make(*model, false, 2), alone_b = make(*model, false, 2);
    const std::vector<float> la = prefill_logits(*alone_a, a), lb = prefill_logits(*alone_b, b);

    // Together: a's first 5 tokens into slot 1, then one batch with a's last 2 and all of b (slot 0), mixed.
    auto both = make(*model, false, 2, {}, 2);
    prefill_logits(*both, std::vector<int32_t>(a.begin(), a.begin() + 5), 1);
    Batch batch;
    batch.add(b[0], 0, 0, true);
    batch.add(a[5], 5, 1, true);
    batch.add(b[1], 1, 0, true);
    batch.add(b[2], 2, 0, false);
    batch.add(a[6], 6, 1, true);
    batch.add(b[3], 3, 0, true);
    std::vector<float> out(5 * nv);
    both->forward(batch, out);
    auto row = [&](const std::vector<float>& v, int64_t r) { return test::rows(v, nv, r, r + 1); };
    const double tol = 2e-4 * max_abs(la);
    CHECK(max_diff(row(out, 0), row(lb, 0)) <= tol);
    CHECK(max_diff(row(out, 1), row(la, 5)) <= tol);
    CHECK(max_diff(row(out, 2), row(lb, 1)) <= tol);
    CHECK(max_diff(row(out, 3), row(la, 6)) <= tol);
    CHECK(max_diff(row(out, 4), row(lb, 3)) <= tol);
}

TEST_CASE("a sequence's decode steps have the same bits alone and in mixed batches", "[cpu]") {
    // What a scheduler step holds: decode steps of running sequences first (BatchToken::decode), then prompt chunks.
    // A decode step's logits must not depend on its company (with AMX, F16 and BF16 weights run decode steps on the
    // vector units and prompt tokens on tiles: by role, never by batch).
    for (const test::TinyCase& c : test::tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const int64_t nv = c.spec.n_vocab;
        const auto a = some_tokens(8, static_cast<int>(nv), 21), b = some_tokens(6, static_cast<int>(nv), 22),
                   p = some_tokens(20, static_cast<int>(nv), 23);
        for (Isa isa : model_test_isas()) {
            INFO(c.label << ", " << cpu::isa_name(isa));
            const test::MixedDecode r = test::mixed_decode_steps(
                [&](int64_t n_slots) { return make(*model, false, 2, isa, n_slots); }, a, b, p);
            CHECK(max_diff(r.mixed, r.alone) == 0.0);
        }
    }
}

TEST_CASE("sliding-window layers keeping a ring of recent positions give the bits of the whole cache", "[cpu]") {
    // A context of 2048 and windows of 4 to 6: the local layers keep rings of 640 positions (window + 512 + a key
    // block, in whole blocks), which 1500 positions wrap twice (past the doubled mapping's 1280). A 1400-token prompt
    // in one batch (split into parts: a ring holds window + 512 positions), then decode steps, two sequences side by
    // side in mixed batches; every logit row against a backend that keeps every position.
    for (const test::TinyCase& c : test::tiny_cases()) {
        if (c.spec.sliding_window == 0) continue;
        auto model = test::make_tiny_model(c.spec);
        const int64_t nv = c.spec.n_vocab;
        auto make_ctx = [&](bool window_cache) {
            CpuBackendOptions o;
            o.n_threads = 2;
            o.n_ctx = 2048;
            o.n_slots = 2;
            o.window_cache = window_cache;
            return std::make_unique<CpuBackend>(model->config, model->weights, o);
        };
        auto ring = make_ctx(true), whole = make_ctx(false);
        INFO(c.label);
        REQUIRE(whole->window_ring() == 0);
        REQUIRE(ring->window_ring() == 640);
        CHECK(ring->max_rewind() == 640 - c.spec.sliding_window);
        const auto a = some_tokens(1500, static_cast<int>(nv), 31), b = some_tokens(400, static_cast<int>(nv), 32);
        auto both = [&](Backend& be, const Batch& batch) {
            std::vector<float> out(static_cast<size_t>(batch.n_logits() * nv));
            be.forward(batch, out);
            return out;
        };
        // a's prompt alone (every logit row), then b's prompt of 300 with a's decode steps, then both decoding.
        Batch batch;
        for (int i = 0; i < 1400; ++i) batch.add(a[i], i, 0, true);
        CHECK(max_diff(both(*ring, batch), both(*whole, batch)) == 0.0);
        for (int step = 0; step < 100; ++step) {
            batch.tokens.clear();
            batch.add(a[1400 + step], 1400 + step, 0, true, true);  // decode steps first
            if (step == 2)
                for (int i = 0; i < 300; ++i) batch.add(b[i], i, 1, i == 299);
            if (step >= 3) batch.add(b[300 + step - 3], 300 + step - 3, 1, true, true);
            INFO("step " << step);
            CHECK(max_diff(both(*ring, batch), both(*whole, batch)) == 0.0);
        }
    }
}

namespace {

// tokens[p0, p1) at positions p0.. of a slot, one batch, logits of every row.
std::vector<float> run_at(Backend& b, const std::vector<int32_t>& tokens, int p0, int p1, int32_t slot) {
    Batch batch;
    for (int p = p0; p < p1; ++p) batch.add(tokens[p], p, slot, true);
    std::vector<float> out(static_cast<size_t>(batch.n_logits() * b.config().n_vocab));
    b.forward(batch, out);
    return out;
}

// Slots 1 and 2 of b, given seq's first `from` positions by copies, go on with seq up to `to`: each must give the
// rows of want (seq run from scratch) to the bit.
void check_continued(Backend& b, const std::vector<int32_t>& seq, const std::vector<float>& want, int from, int to) {
    for (int32_t slot : {1, 2}) {
        INFO("slot " << slot);
        CHECK(max_diff(run_at(b, seq, from, to, slot), test::rows(want, b.config().n_vocab, from, to)) == 0.0);
    }
}

}  // namespace

TEST_CASE("K and V copied from another slot continue a sequence bit for bit", "[cpu]") {
    // Slot 0 runs a; slot 1, holding another sequence, takes a's first 61 positions whole (0..61: partial key
    // blocks at the end); slot 2, holding a's first 13 positions and then other tokens, takes 13..61 (partial blocks
    // at both ends). Both go on with other tokens from position 61 and must give the logits of that sequence run
    // from scratch, to the bit; f16 caches, and an f32 one on the first model.
    bool first = true;
    for (const test::TinyCase& c : test::tiny_cases()) {
        auto model = test::make_tiny_model(c.spec);
        const int nv = static_cast<int>(c.spec.n_vocab);
        const auto a = some_tokens(100, nv, 7), other = some_tokens(100, nv, 8);
        std::vector<int32_t> seq(a.begin(), a.begin() + 61);  // a's prefix, then other's tokens
        seq.insert(seq.end(), other.begin() + 61, other.begin() + 90);
        for (KvType kv : {KvType::f16, KvType::f32}) {
            if (kv == KvType::f32 && !first) continue;
            INFO(c.label << ", " << kv_type_name(kv) << " cache");
            auto fresh = make(*model, false, 2, {}, 1, kv);
            const std::vector<float> want = run_at(*fresh, seq, 0, 90, 0);
            auto b = make(*model, false, 2, {}, 3, kv);
            run_at(*b, a, 0, 100, 0);
            run_at(*b, other, 0, 90, 1);
            run_at(*b, a, 0, 13, 2);
            run_at(*b, other, 13, 70, 2);
            b->copy_kv(0, 1, 0, 61);
            b->copy_kv(0, 2, 13, 61);
            check_continued(*b, seq, want, 61, 90);
        }
        first = false;
    }
    auto model = test::make_tiny_model({});
    auto b = make(*model, false, 1, {}, 2);
    CHECK_THROWS_WITH(b->copy_kv(0, 0, 0, 4), Catch::Contains("onto itself"));
    CHECK_THROWS_WITH(b->copy_kv(0, 2, 0, 4), Catch::Contains("slot 2"));
    CHECK_THROWS_WITH(b->copy_kv(0, 1, 5, 4), Catch::Contains("[5, 4)"));
    CHECK_THROWS_WITH(b->copy_kv(0, 1, 0, 129), Catch::Contains("context of 128"));
    CHECK_NOTHROW(b->copy_kv(0, 1, 0, 128));
}

// Slots that copied one prompt prefix read its key blocks from one copy (CpuBackend::shared_prefix): the slot
// copied from, or the one it reads from itself. That holds only while no slot involved writes below the shared
// length: rewritten there, the source ends the sharing (its readers would see the new values), and a reader that
// goes on past a position it rewrote reads its own values from there. Each case must still give the logits of the
// sequence run from scratch, to the bit.
TEST_CASE("slots that copied a prefix read it from one copy until either side rewrites it", "[cpu]") {
    for (const test::TinyCase& c : test::tiny_cases()) {
        INFO(c.label);
        auto model = test::make_tiny_model(c.spec);
        const int nv = static_cast<int>(c.spec.n_vocab);
        const auto a = some_tokens(128, nv, 11), other = some_tokens(128, nv, 12);
        std::vector<int32_t> fork(a.begin(), a.begin() + 70);  // a's first 70 positions, then other's tokens
        fork.insert(fork.end(), other.begin() + 70, other.end());
        auto fresh = make(*model, false, 2, {}, 1);
        const std::vector<float> want_a = run_at(*fresh, a, 0, 120, 0);
        auto fresh_fork = make(*model, false, 2, {}, 1);
        const std::vector<float> want_fork = run_at(*fresh_fork, fork, 0, 120, 0);
        auto b = make(*model, false, 2, {}, 4);
        using Shared = std::pair<int32_t, int64_t>;
        run_at(*b, a, 0, 100, 0);
        b->copy_kv(0, 1, 0, 100);
        b->copy_kv(1, 2, 0, 90);  // slot 1 reads from 0: so does slot 2
        run_at(*b, a, 0, 30, 3);
        b->copy_kv(1, 3, 30, 100);  // slot 3's first 30 positions are its own, not known to equal slot 0's
        CHECK(b->shared_prefix(1) == Shared{0, 100});
        CHECK(b->shared_prefix(2) == Shared{0, 90});
        CHECK(b->shared_prefix(3) == Shared{-1, 0});
        CHECK(b->shared_prefix(0) == Shared{-1, 0});
        // Slot 2 forks at 70: it reads positions below 70 from slot 0 and the rest from its own cache.
        CHECK(max_diff(run_at(*b, fork, 70, 120, 2), test::rows(want_fork, nv, 70, 120)) == 0.0);
        CHECK(b->shared_prefix(2) == Shared{0, 70});
        // Slot 0 runs another sequence over its first positions: slot 1 reads its own copy from then on.
        run_at(*b, other, 0, 100, 0);
        CHECK(b->shared_prefix(1) == Shared{-1, 0});
        CHECK(b->shared_prefix(2) == Shared{-1, 0});
        CHECK(max_diff(run_at(*b, a, 100, 120, 1), test::rows(want_a, nv, 100, 120)) == 0.0);
        CHECK(max_diff(run_at(*b, a, 100, 120, 3), test::rows(want_a, nv, 100, 120)) == 0.0);
    }
}

TEST_CASE("K and V copied between sliding-window rings continue a sequence bit for bit", "[cpu]") {
    // Rings of 640 positions: slot 0 runs 1400 tokens, slot 1 (another sequence) takes positions 0..1300 (of which
    // a ring keeps only the last 640), slot 2 (a's first 1000 of its own) takes 1000..1300; both go on past 1300
    // with other tokens and must equal that sequence on a backend that keeps every position.
    for (const test::TinyCase& c : test::tiny_cases()) {
        if (c.spec.sliding_window == 0) continue;
        auto model = test::make_tiny_model(c.spec);
        const int nv = static_cast<int>(c.spec.n_vocab);
        auto make_ctx = [&](bool window_cache, int64_t n_slots) {
            CpuBackendOptions o;
            o.n_threads = 2;
            o.n_ctx = 2048;
            o.n_slots = n_slots;
            o.window_cache = window_cache;
            return std::make_unique<CpuBackend>(model->config, model->weights, o);
        };
        const auto a = some_tokens(1400, nv, 41), other = some_tokens(1400, nv, 42);
        std::vector<int32_t> seq(a.begin(), a.begin() + 1300);
        seq.insert(seq.end(), other.begin() + 1300, other.begin() + 1340);
        INFO(c.label);
        auto whole = make_ctx(false, 1);
        const std::vector<float> want = run_at(*whole, seq, 0, 1340, 0);
        auto ring = make_ctx(true, 3);
        REQUIRE(ring->window_ring() == 640);
        run_at(*ring, a, 0, 1400, 0);
        run_at(*ring, other, 0, 1330, 1);
        run_at(*ring, a, 0, 1000, 2);
        ring->copy_kv(0, 1, 0, 1300);
        ring->copy_kv(0, 2, 1000, 1300);
        check_continued(*ring, seq, want, 1300, 1340);
    }
}

TEST_CASE("past the rings, a model with sliding-window layers adds cache only for its global layers", "[cpu]") {
    test::TinySpec spec;
    spec.arch = "gemma3";
    spec.sliding_window = 8;
    spec.n_layer = 7;  // six local layers, one global (layer 5)
    auto model = test::make_tiny_model(spec);
    const ModelConfig& c = model->config;
    REQUIRE(c.layer_is_local(0));
    REQUIRE_FALSE(c.layer_is_local(5));
    const int64_t ring = cpu::window_ring_for(c, KvType::f16, 1 << 20);
    REQUIRE(ring >= 8 + 512);
    const auto row = static_cast<size_t>(2 * c.n_embd_kv() * 2);  // K and V, f16
    // Within the ring every layer keeps every position; past it only the global layer grows.
    CHECK(cpu::window_ring_for(c, KvType::f16, ring) == 0);
    CHECK(cpu::kv_cache_bytes(c, KvType::f16, ring, 1) == 7 * ring * row);
    CHECK(cpu::kv_cache_bytes(c, KvType::f16, 100000, 3) == 3 * (6 * ring + 100000) * row);
    CpuBackendOptions o;
    o.n_ctx = 100000;
    CpuBackend b(c, model->weights, o);
    CHECK(b.window_ring() == ring);
}

TEST_CASE("a batch out of position order is refused where rings need order", "[cpu]") {
    test::TinySpec spec;
    spec.sliding_window = 8;
    auto model = test::make_tiny_model(spec);
    CpuBackendOptions o;
    o.n_ctx = 2048;
    CpuBackend b(model->config, model->weights, o);
    REQUIRE(b.window_ring() > 0);
    Batch batch;
    batch.add(1, 1, 0, false);
    batch.add(2, 0, 0, true);
    std::vector<float> logits(model->config.n_vocab);
    CHECK_THROWS_WITH(b.forward(batch, logits), Catch::Contains("positions of a sequence must increase"));
}

TEST_CASE("f32 and f16 KV caches agree", "[cpu]") {
    test::TinySpec spec;
    auto model = test::make_tiny_model(spec);
    const auto tokens = some_tokens(10, static_cast<int>(spec.n_vocab), 5);
    auto b16 = make(*model, false, 1, {}, 1, KvType::f16);
    auto b32 = make(*model, false, 1, {}, 1, KvType::f32);
    const auto l32 = prefill_logits(*b32, tokens);
    CHECK(max_diff(prefill_logits(*b16, tokens), l32) <= 5e-3 * max_abs(l32));  // f16 rounding of K and V
}

namespace {
// The line of /proc/self/smaps starting with `key` ("Rss:", "VmFlags:") in the entry of the mapping holding
// address a ("" when there is none).
std::string smaps_line(const void* a, const char* key) {
    const auto at = reinterpret_cast<uintptr_t>(a);
    std::ifstream smaps("/proc/self/smaps");
    bool inside = false;
    for (std::string line; std::getline(smaps, line);) {
        unsigned long lo = 0, hi = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
            inside = lo <= at && at < hi;  // a mapping's first line ("lo-hi perms ..."), not a "Key: value"
        } else if (inside && line.rfind(key, 0) == 0) {
            return line;
        }
    }
    return {};
}
}  // namespace

TEST_CASE("a KV cache in 2 MiB pages gives the same logits, in a mapping the kernel marks for huge pages", "[cpu]") {
    test::TinySpec spec;
    auto model = test::make_tiny_model(spec);
    const auto tokens = some_tokens(40, static_cast<int>(spec.n_vocab), 9);
    CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = 64;
    o.n_slots = 3;
    auto plain = std::make_unique<CpuBackend>(model->config, model->weights, o);
    o.kv_huge_pages = true;
    auto huge = std::make_unique<CpuBackend>(model->config, model->weights, o);
    CHECK_FALSE(plain->kv_huge_pages());
    CHECK(prefill_logits(*huge, tokens) == prefill_logits(*plain, tokens));
    CHECK(stepwise_logits(*huge, tokens) == stepwise_logits(*plain, tokens));
    // A kernel built with transparent huge pages takes the advice (whatever its policy: "never" only stops it from
    // using them) and lists the mapping with the "hg" flag; one without refuses it, and the cache stays as it was.
    if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage")) {
        CHECK_FALSE(huge->kv_huge_pages());
        test::skip("this kernel has no transparent huge pages: the cache keeps 4 KiB pages");
        return;
    }
    CHECK(huge->kv_huge_pages());
    // The VmFlags of the mapping holding address a ("" when none does).
    auto flags_at = [](const void* a) {
        const std::string line = smaps_line(a, "VmFlags:");
        return line.empty() ? line : line + " ";
    };
    for (const auto& [cache, p] : {std::pair{"K", huge->kv_mappings().first}, {"V", huge->kv_mappings().second}}) {
        INFO(cache << " cache: " << flags_at(p));
        CHECK_THAT(flags_at(p), Catch::Contains(" hg "));
    }
    for (const void* p : {plain->kv_mappings().first, plain->kv_mappings().second}) {
        INFO(flags_at(p));
        CHECK_THAT(flags_at(p), Catch::StartsWith("VmFlags:") && !Catch::Contains(" hg "));
    }
}

TEST_CASE("a KV cache fitted to the requests is resident once the backend is made and another only as written",
          "[cpu]") {
    test::TinySpec spec;
    auto model = test::make_tiny_model(spec);
    CpuBackendOptions o;
    o.n_threads = 2;
    o.n_ctx = 256;
    o.n_slots = 4;
    auto plain = std::make_unique<CpuBackend>(model->config, model->weights, o);
    o.kv_huge_pages = true;  // (set for a fitted context)
    auto fitted = std::make_unique<CpuBackend>(model->config, model->weights, o);
    // The resident kB and the size in kB of the mapping holding address a (-1 for what is missing).
    auto rss_at = [](const void* a) {
        long rss = -1, size = -1;
        std::sscanf(smaps_line(a, "Rss:").c_str(), "Rss: %ld kB", &rss);
        std::sscanf(smaps_line(a, "Size:").c_str(), "Size: %ld kB", &size);
        return std::pair{rss, size};
    };
    for (const void* p : {fitted->kv_mappings().first, fitted->kv_mappings().second}) {
        const auto [rss, size] = rss_at(p);
        INFO("fitted: Rss " << rss << " kB of " << size << " kB");
        REQUIRE(size > 0);
        CHECK(rss >= size);  // (a mapping in 2 MiB pages may count its last whole page)
    }
    for (const void* p : {plain->kv_mappings().first, plain->kv_mappings().second}) {
        const auto [rss, size] = rss_at(p);
        INFO("plain: Rss " << rss << " kB of " << size << " kB");
        REQUIRE(size > 0);
        CHECK(rss == 0);
    }
    // Faulted in, not changed: both give the same logits.
    const auto tokens = some_tokens(30, static_cast<int>(spec.n_vocab), 4);
    CHECK(prefill_logits(*fitted, tokens) == prefill_logits(*plain, tokens));
}

TEST_CASE("RoPE scaling: rope_freqs divisors and linear scaling rotate by the same smaller angles", "[cpu]") {
    // Dividing every frequency by 2 (rope_freqs.weight, Llama 3 style) or every position by 2 (linear scaling,
    // factor 2) gives the same angles; both must change the result against plain RoPE.
    test::TinySpec plain;
    test::TinySpec freqs = plain;
    freqs.rope_freqs = true;
    freqs.rope_freqs_value = 2.0f;
    test::TinySpec linear = plain;
    linear.rope_linear_factor = 2.0f;
    const auto tokens = some_tokens(8, static_cast<int>(plain.n_vocab), 6);
    auto run = [&](const test::TinySpec& s) {
        auto m = test::make_tiny_model(s);
        auto b = make(*m, true);
        return prefill_logits(*b, tokens);
    };
    const auto a = run(plain), f = run(freqs), l = run(linear);
    CHECK(max_diff(f, l) <= 1e-6 * max_abs(f));
    CHECK(max_diff(a, f) > 1e-3 * max_abs(a));
}

TEST_CASE("bad batches are rejected with a clear error", "[cpu]") {
    auto model = test::make_tiny_model({});
    auto b = make(*model, false);
    std::vector<float> logits(model->config.n_vocab);
    Batch batch;
    CHECK_THROWS_AS(b->forward(batch, logits), UsageError);
    batch.add(static_cast<int32_t>(model->config.n_vocab), 0, 0, true);
    CHECK_THROWS_WITH(b->forward(batch, logits), Catch::Contains("outside the vocabulary"));
    batch.tokens = {{1, 128, 0, true}};
    CHECK_THROWS_WITH(b->forward(batch, logits), Catch::Contains("outside the context of 128"));
    batch.tokens = {{1, 0, 1, true}};
    CHECK_THROWS_WITH(b->forward(batch, logits), Catch::Contains("slot 1"));
    // Two tokens at one (slot, pos), even apart in the batch: both would write the same cache row.
    auto two = make(*model, false, 1, {}, 2);
    batch.tokens = {{1, 3, 1, false}, {2, 3, 0, false}, {4, 4, 1, false}, {5, 3, 1, true}};
    CHECK_THROWS_WITH(two->forward(batch, logits), Catch::Contains("two tokens at slot 1 position 3"));
    batch.tokens.pop_back();
    batch.tokens.back().logits = true;
    CHECK_NOTHROW(two->forward(batch, logits));
    // Decode steps lead the batch (the backends pick their kernels by role; see BatchToken::decode).
    std::vector<float> two_logits(2 * model->config.n_vocab);
    batch.tokens = {{1, 5, 0, true, false}, {2, 5, 1, true, true}};
    CHECK_THROWS_WITH(two->forward(batch, two_logits), Catch::Contains("decode steps come first"));
    std::swap(batch.tokens[0], batch.tokens[1]);
    CHECK_NOTHROW(two->forward(batch, two_logits));
}

// ---- stories260K against the reference implementation ----

TEST_CASE("stories260K logits match the reference at every prompt position", "[cpu][model]") {
    auto path = test::require_testdata("models/stories260K.gguf");
    if (!path) return;
    const test::RefLogits ref = test::read_ref_logits(path->parent_path() / "ref/stories260K-f32.prompt_logits.txt");
    REQUIRE(ref.tokens == std::vector<int32_t>{1, 403, 407, 261, 378});
    auto model = Model::load(path->string());
    for (bool reference : {true, false}) {
        INFO((reference ? "reference path" : "fast path"));
        auto b = make(*model, reference, 2);
        const std::vector<float> logits = prefill_logits(*b, ref.tokens);
        for (size_t p = 0; p < ref.tokens.size(); ++p) {
            REQUIRE(ref.logits[p].size() == 512);
            double d = 0;
            for (size_t i = 0; i < 512; ++i) d = std::max(d, std::fabs(static_cast<double>(logits[p * 512 + i]) - ref.logits[p][i]));
            INFO("position " << p);
            CHECK(d <= 1e-3);
        }
    }
}

TEST_CASE("stories260K Q8_0 mix logits are close to the reference and greedy tokens match", "[cpu][model]") {
    auto path = test::require_testdata("models/stories260K-Q8_0mix.gguf");
    if (!path) return;
    const test::RefLogits ref = test::read_ref_logits(path->parent_path() / "ref/stories260K-Q8_0mix.prompt_logits.txt");
    auto model = Model::load(path->string());
    auto b = make(*model, false, 2);
    const std::vector<float> logits = prefill_logits(*b, ref.tokens);
    // The reference quantized its activations to int8 blocks with fp16 scales (F16 weights: fp16 inputs), as
    // quill does, so the products are the same; only float summation order differs.
    for (size_t p = 0; p < ref.tokens.size(); ++p) {
        double d = 0;
        for (size_t i = 0; i < 512; ++i) d = std::max(d, std::fabs(static_cast<double>(logits[p * 512 + i]) - ref.logits[p][i]));
        INFO("position " << p);
        CHECK(d <= 1e-3);
    }
    const auto want = test::read_ref_ids(path->parent_path() / "ref/stories260K-Q8_0mix.greedy.txt", "generated_tokens");
    REQUIRE(want.size() == 64);
    auto g = make(*model, false, 2);
    CHECK(test::greedy_tokens(*g, ref.tokens, 64) == want);
}

TEST_CASE("stories260K greedy tokens match the reference on every kernel family", "[cpu][model]") {
    auto path = test::require_testdata("models/stories260K.gguf");
    if (!path) return;
    const auto want = test::read_ref_ids(path->parent_path() / "ref/stories260K-f32.greedy.txt", "generated_tokens");
    REQUIRE(want.size() == 64);
    auto model = Model::load(path->string());
    for (Isa isa : available_isas()) {
        INFO(cpu::isa_name(isa));
        auto b = make(*model, false, 2, isa);
        CHECK(test::greedy_tokens(*b, {1, 403, 407, 261, 378}, 64) == want);
    }
}

TEST_CASE("a file's float matrices are read from a copy in huge pages, its packable ones from their packed form",
          "[cpu][model]") {
    // The products read what matrix() gives them: a float matrix of a model file from its copy in the packed
    // weights' mapping (the file's bytes exactly), a packable one (Q8_0 of the mix) from its packed form; a model
    // that is not a file mapping keeps its own rows (nothing to hand back, so no copy).
    for (test::TinyModel which : {test::TinyModel::spm, test::TinyModel::spm_q8_0}) {
        const std::filesystem::path& path = test::tiny_model_file(which);
        INFO(path.filename().string());
        auto model = Model::load(path.string());
        for (Isa isa : available_isas()) {
            INFO(cpu::isa_name(isa));
            auto b = make(*model, false, 2, isa);
            int copies = 0;
            for (const LayerWeights& L : model->weights.layers) {
                for (const TensorView* t : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) {
                    const cpu::WeightMatrix m = b->matrix(*t);
                    const bool is_float =
                        t->type == GgmlType::F32 || t->type == GgmlType::F16 || t->type == GgmlType::BF16;
                    if (is_float) {
                        CHECK(m.data != static_cast<const void*>(t->data));
                        CHECK(std::memcmp(m.data, t->data, t->n_bytes) == 0);
                        CHECK(m.packed == nullptr);
                        copies += 1;
                    } else {
                        CHECK(m.data == static_cast<const void*>(t->data));
                        CHECK((m.packed != nullptr) == cpu::PackedWeights::supports(t->type, isa));
                    }
                }
            }
            CHECK(copies > 0);
        }
    }
    test::TinySpec spec;
    spec.type = spec.ffn_down_type = GgmlType::F16;
    auto tiny = test::make_tiny_model(spec);
    auto b = make(*tiny, false, 2);
    CHECK(b->matrix(tiny->weights.layers[0].wq).data == static_cast<const void*>(tiny->weights.layers[0].wq.data));
}

TEST_CASE("forward_sample picks each logit row's token with its own sampler, among the tokenizer's ids", "[cpu]") {
    test::TinySpec spec;
    spec.type = spec.ffn_down_type = GgmlType::Q8_0;
    auto model = test::make_tiny_model(spec);
    const int64_t nv = model->config.n_vocab;
    const auto a = some_tokens(5, static_cast<int>(nv), 3), b = some_tokens(3, static_cast<int>(nv), 4);
    // Two sequences' prompts in one batch; rows: a's last token (slot 0), b's last (slot 1).
    Batch batch;
    for (int i = 0; i < 5; ++i) batch.add(a[i], i, 0, i == 4);
    for (int i = 0; i < 3; ++i) batch.add(b[i], i, 1, i == 2);
    auto be = make(*model, false, 2, {}, 2);
    std::vector<float> logits(2 * static_cast<size_t>(nv));
    be->forward(batch, logits);
    for (int64_t n_ids : {nv, nv / 2}) {
        INFO("token ids below " << n_ids);
        SamplingParams greedy;
        greedy.temperature = 0.0f;
        SamplingParams seeded;
        seeded.temperature = 1.5f;
        seeded.top_k = 0;
        seeded.seed = 11;
        // What the samplers pick from forward's rows, past the tokenizer's ids masked.
        std::vector<int32_t> want;
        for (int r = 0; r < 2; ++r) {
            std::vector<float> row(logits.begin() + r * nv, logits.begin() + (r + 1) * nv);
            std::fill(row.begin() + n_ids, row.end(), -INFINITY);
            want.push_back(Sampler(r == 0 ? greedy : seeded).sample(row));
        }
        REQUIRE(want[0] < n_ids);
        REQUIRE(want[1] < n_ids);
        Sampler s0(greedy), s1(seeded);
        Sampler* samplers[] = {&s0, &s1};
        std::vector<int32_t> got(2);
        auto fresh = make(*model, false, 2, {}, 2);
        fresh->forward_sample(batch, samplers, n_ids, got);
        CHECK(got == want);
    }
    // Every row plain greedy: the CPU backend's threads search their ranges of the vocabulary; the picks are the
    // first maxima of the masked rows whatever the number of ranges (17: a range boundary inside the ids).
    for (int threads : {1, 2, 3}) {
        for (int64_t n_ids : {nv, nv / 2, int64_t{17}}) {
            INFO(threads << " threads, token ids below " << n_ids);
            std::vector<int32_t> want;
            for (int r = 0; r < 2; ++r)
                want.push_back(static_cast<int32_t>(
                    first_max(std::span<const float>(logits.data() + r * nv, static_cast<size_t>(n_ids)))));
            SamplingParams greedy;
            greedy.temperature = 0.0f;
            Sampler s0(greedy), s1(greedy);
            Sampler* samplers[] = {&s0, &s1};
            std::vector<int32_t> got(2, -7);
            auto fresh = make(*model, false, threads, {}, 2);
            fresh->forward_sample(batch, samplers, n_ids, got);
            CHECK(got == want);
        }
    }
}

}  // namespace test_cpu_backend
