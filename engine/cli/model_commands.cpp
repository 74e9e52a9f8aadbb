// info, tokenize, bench, perplexity, pull, list and rm.
#include "engine/cli/commands.h"

#include "engine/runtime/bench.h"
#include "engine/runtime/logprobs_json.h"
#include "engine/runtime/perplexity.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/batch/input.h"
#include "engine/cli/progress.h"
#include "engine/batch/records.h"
#include "engine/batch/runner.h"
#include "engine/chat/chat_format.h"
#include "engine/chat/conversation.h"
#include "engine/cli/line_reader.h"
#include "engine/cli/repl.h"
#include "engine/error.h"
#include "engine/io/output.h"
#include "engine/io/signals.h"
#include "engine/session.h"
#include "engine/runtime/generator.h"
#include "engine/format/gguf.h"
#include "engine/format/gguf_split.h"
#include "engine/hub/pull.h"
#include "engine/grammar/constraint.h"
#include "engine/io/escape.h"
#include "engine/io/input.h"
#include "engine/io/output.h"
#include "engine/io/signals.h"
#include "engine/model/model.h"
#include "engine/model/model_info.h"
#include "engine/model/synthetic.h"
#include "tokenizer/tokenizer.h"


#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>


namespace quill::cli {

namespace fs = std::filesystem;

int cmd_info(const InfoOptions& o) {
    quill::GgufFile file = quill::open_model_file(quill::resolve_model_path(o.model));
    nlohmann::json info = quill::describe_model(file, o.tensors);
    if (info["runnable"].get<bool>()) {
        if (std::string why = quill::why_not_runnable(file); !why.empty()) {
            info["runnable"] = false;
            info["not_runnable"] = why;
        } else {
            // what a sequence takes beside the weights, as the memory plan counts it (f16 KV cache)
            const quill::ModelConfig c = quill::ModelConfig::from_gguf(file);
            const int64_t ctx = std::max<int64_t>(1, c.n_ctx_train);
            info["memory"] = {{"kv_layers", c.n_layer_kv()},
                              {"kv_bytes_per_position", quill::cpu::kv_cache_bytes(c, quill::KvType::f16, 8, 1) / 8},
                              {"n_ctx_train_bytes", quill::sequence_bytes(c, quill::KvType::f16, ctx, 1)},
                              {"recurrent_bytes_per_sequence", quill::cpu::recurrent_state_bytes(c, 1, 0)}};
        }
    }
    quill::Output out(stdout, "stdout");
    out.put(o.json ? info.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"
                   : quill::render_model_info(info));
    return 0;
}

namespace {

// The text a token stands for, as llama.cpp's llama-tokenize prints it: its bytes (SPM's '▁' a space and a byte
// token its byte, byte-level BPE's characters the bytes they encode), the vocabulary text of a control or unknown
// token; escaped for the terminal, so a byte of a character the token holds only part of reads \xNN.
std::string token_text(const quill::Tokenizer& tok, int32_t id) {
    const std::string& bytes = tok.token_bytes(id);
    return quill::escape_for_terminal(bytes.empty() ? tok.piece(id) : bytes);
}

}  // namespace

int cmd_tokenize(const TokenizeOptions& o) {
    quill::signals::install();  // Ctrl-C stops the read of stdin and the tokenizer (megabytes take it seconds)
    quill::GgufFile file = quill::open_model_file(quill::resolve_model_path(o.model.model));
    auto tok = load_tokenizer(file, o.model);
    std::string text;
    if (o.prompt) {
        text = *o.prompt;
    } else {
        if (isatty(STDIN_FILENO)) throw UsageError("no text: give -p TEXT or pipe it on stdin");
        text = read_stdin(o.max_input_bytes);
    }
    std::vector<int32_t> ids = tok->encode(text, !o.no_bos, o.parse_special, &quill::signals::stop_flag());
    if (!o.parse_special) warn_if_lossy(*tok, text, ids);
    quill::Output out(stdout, "stdout");
    if (o.json) {
        nlohmann::json j;
        j["ids"] = ids;
        if (o.pieces) {
            j["pieces"] = nlohmann::json::array();
            for (int32_t id : ids) j["pieces"].push_back(token_text(*tok, id));
        }
        out.write(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    } else if (o.pieces) {
        for (int32_t id : ids) out.write(fmt::format("{}\t{}\n", id, token_text(*tok, id)));
    } else {
        out.write(fmt::format("{}\n", fmt::join(ids, " ")));
    }
    out.flush();
    return 0;
}

int cmd_bench(BenchCliOptions& o) {
    std::unique_ptr<quill::Model> model;
    std::unique_ptr<quill::SyntheticModel> synth;
    const quill::ModelConfig* config;
    const quill::Weights* weights;
    std::string desc;
    if (o.dtype && o.synthetic.empty()) throw UsageError("bench: --dtype goes with --synthetic");
    if (std::all_of(o.bench.n_prompt.begin(), o.bench.n_prompt.end(), [](int n) { return n == 0; }) &&
        std::all_of(o.bench.n_gen.begin(), o.bench.n_gen.end(), [](int n) { return n == 0; }))
        throw UsageError("bench: no tests: every -p and -n value is 0");
    if (!o.synthetic.empty()) {
        if (!o.model.empty()) throw UsageError("bench: give either -m or --synthetic, not both");
        const std::string dtype = o.dtype.value_or("q4_0");
        auto type = quill::type_from_name(dtype);
        if (!type) throw UsageError(fmt::format("--dtype '{}' is not a tensor type", dtype));
        synth = quill::SyntheticModel::make(quill::synthetic_config(o.synthetic), *type, 42);
        if (!o.save.empty()) {
            synth->save(o.save);
            quill::print_stderr("quill: wrote {}\n", o.save);
        }
        config = &synth->config;
        weights = &synth->weights;
        desc = fmt::format("{} ({}, {:.1f} MiB)", synth->config.name, dtype, synth->weight_bytes() / 1048576.0);
    } else {
        if (!o.save.empty()) throw UsageError("bench: --save goes with --synthetic");
        model = quill::Model::load(quill::resolve_model_path(o.model));
        config = &model->config;
        weights = &model->weights;
        desc = fmt::format("{} ({:.1f} MiB)", model->config.name, model->weight_bytes() / 1048576.0);
    }
    const int64_t n_ctx = o.engine.ctx > 0 ? o.engine.ctx : quill::bench_context(o.bench);
    quill::SessionOptions so = session_options({}, o.engine);
    so.n_slots = o.bench.n_seq;
    auto backend = quill::make_backend(*config, *weights, so, n_ctx);
    const quill::BenchResult res = quill::run_bench(*backend, *weights, o.bench);
    const quill::BackendInfo info = backend->describe();
    const double copy = backend->copy_bandwidth_gbs();  // a GPU's measured bandwidth, 0 on the CPU
    const double rate = backend->matmul_rate_tflops();  // a GPU's measured GEMM rate, 0 on the CPU
    quill::Output out(stdout, "stdout");
    if (o.json) {
        nlohmann::json j = res.to_json();
        j["model"] = desc;
        j["backend"] = info.name;
        if (info.n_threads > 0) {
            j["threads"] = info.n_threads;
            j["kernels"] = info.kernels;
        }
        j["reps"] = o.bench.reps;
        j["n_batch"] = o.bench.n_batch;
        if (copy > 0.0) j["copy_gb_per_s"] = copy;
        if (rate > 0.0) j["matmul_tflops"] = rate;
        out.put(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
        return 0;
    }
    out.write(quill::bench_table(res, info, desc, copy, rate));
    out.put("");
    return 0;
}

int cmd_perplexity(const PerplexityCliOptions& o) {
    quill::signals::install();  // Ctrl-C stops the load and the tokenizer, and ends the scoring with the chunks so far
    const std::string text = o.file == "-" ? read_stdin(o.max_input_bytes)
                                           : quill::read_prompt_file(o.file, o.max_input_bytes, "the text file");
    quill::SessionOptions so = session_options(o.model, o.engine);
    // Without -c: chunks of 512 tokens (llama-perplexity's usual figure), or the model's training context if shorter.
    if (so.ctx == 0)
        so.context_needed = [](const quill::Session& s) {
            const int64_t train = s.model->config.n_ctx_train;
            return train > 0 ? std::min<int64_t>(512, train) : 512;
        };
    auto session = quill::Session::open(so);
    if (!o.quiet) quill::print_stderr("{}\n", session->load_line());
    const quill::Tokenizer& tok = *session->tokenizer;
    const std::vector<int32_t> tokens = tok.encode(text, true, false, &quill::signals::stop_flag());
    warn_if_lossy(tok, text, tokens);
    quill::PerplexityOptions po;
    po.n_ctx = session->n_ctx;
    po.n_batch = o.n_batch;
    po.max_chunks = o.max_chunks;
    po.bos = tok.add_bos() ? tok.bos() : -1;
    const int64_t n_chunks = std::min<int64_t>(static_cast<int64_t>(tokens.size()) / po.n_ctx,
                                               o.max_chunks > 0 ? o.max_chunks : INT64_MAX);
    const bool progress = !o.quiet && isatty(STDERR_FILENO);
    const auto t0 = std::chrono::steady_clock::now();
    const quill::PerplexityResult r = quill::perplexity(
        *session->backend, tokens, po,
        [&](const quill::PerplexityResult& so_far) {
            if (progress)
                quill::print_stderr("\rchunk {}/{}: perplexity {:.4f}\x1b[K", so_far.n_chunks, n_chunks, so_far.ppl);
        },
        [] { return quill::signals::stop_flag().load(); });
    if (progress) quill::print_stderr("\r\x1b[K");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool interrupted = r.n_chunks < n_chunks;
    quill::Output out(stdout, "stdout");
    if (o.json) {
        nlohmann::json j;
        j["model"] = session->model->config.name;
        j["n_ctx"] = po.n_ctx;
        j["n_tokens"] = tokens.size();
        j["n_chunks"] = r.n_chunks;
        j["n_scored"] = r.n_scored;
        j["mean_nll"] = r.mean_nll;
        j["perplexity"] = r.ppl;
        j["perplexity_error"] = r.ppl_error;
        j["chunks"] = r.chunk_ppl;
        j["seconds"] = seconds;
        if (interrupted) j["interrupted"] = true;
        if (r.n_chunks > 0) out.put(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    } else if (r.n_chunks > 0) {
        out.put(fmt::format("perplexity {:.4f} +/- {:.5f} ({} chunks of {} tokens, {} tokens scored{})\n", r.ppl,
                            r.ppl_error, r.n_chunks, po.n_ctx, r.n_scored, interrupted ? ", interrupted" : ""));
    }
    if (interrupted)
        throw quill::Interrupted(fmt::format("interrupted after {} of {} chunks", r.n_chunks, n_chunks));
    if (!o.quiet)
        quill::print_stderr("quill: {} tokens in {:.2f} s ({:.1f} tokens/s)\n", r.n_chunks * po.n_ctx, seconds,
                            seconds > 0 ? static_cast<double>(r.n_chunks * po.n_ctx) / seconds : 0.0);
    return 0;
}

// The model's path (its parts' paths, one a line) on stdout, for scripts: quill run -m "$(quill pull NAME)".
int cmd_pull(const PullCliOptions& o) {
    const quill::hub::PulledModel m = quill::hub::pull_model(o.spec, {.ask_hub = true, .quiet = o.quiet});
    if (!o.quiet) print_line("", fmt::format("{} is ready ({})", m.name, m.from_cache ? "cached" : "up to date"));
    quill::Output out(stdout, "stdout");
    for (const auto& f : m.files) out.put(f.string() + "\n");
    return 0;
}

// `quill list` and `quill rm`: their text on stdout.
int print_stdout(const std::string& text) {
    quill::Output(stdout, "stdout").put(text);
    return 0;
}


}  // namespace quill::cli
