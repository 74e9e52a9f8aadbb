// quill batch.
#include "engine/cli/commands.h"

#include "engine/runtime/bench.h"
#include "engine/runtime/logprobs_json.h"
#include "engine/runtime/perplexity.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/batch/fingerprint.h"
#include "engine/batch/input.h"
#include "engine/cli/progress.h"
#include "engine/batch/records.h"
#include "engine/batch/runner.h"
#include "engine/chat/chat_format.h"
#include "engine/chat/conversation.h"
#include "engine/chat/tool_calls.h"
#include "engine/cli/line_reader.h"
#include "engine/cli/repl.h"
#include "engine/error.h"
#include "engine/io/output.h"
#include "engine/io/signals.h"
#include "engine/session.h"
#include "engine/runtime/generator.h"
#include "engine/format/gguf.h"
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
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>


namespace quill::cli {

namespace fs = std::filesystem;

// How a batch request becomes tokens: `messages` and the template variables beside them through the chat template; OpenAI /v1/completions prompts as they
// are; other prompts as the user message of the chat template, unless --raw. A model without a usable template
// makes each request that needs one an error record, not the whole batch.
// `ro` receives the syntax of the template's tool calls and (unless --raw) of its reasoning, `template_source` the
// template's source ("" when none fits).
quill::batch::PromptEncoder batch_encoder(const quill::Session& session, const BatchCliOptions& o,
                                          quill::batch::RunnerOptions& ro, std::string& template_source) {
    const quill::Tokenizer* tok = session.tokenizer.get();
    auto format = std::make_shared<std::optional<quill::chat::ChatFormat>>();
    auto format_error = std::make_shared<std::string>();
    try {
        format->emplace(quill::chat::ChatFormat::choose(&session.model->file, tok, o.chat_template, warn_line, "--raw"));
        template_source = (*format)->source();
        ro.tool_syntax = quill::chat::tool_call_syntax((*format)->source());
        if (!o.raw) ro.reasoning_syntax = quill::chat::reasoning_syntax((*format)->source());
    } catch (const UsageError& e) {
        *format_error = e.what();
    }
    // A signal stops the encoding of a long prompt: Interrupted, and the runner leaves that request for --resume.
    return [tok, format, format_error, raw = o.raw, system = o.system](const quill::batch::BatchRequest& r) {
        const auto* cancel = &quill::signals::stop_flag();
        const bool raw_prompt = r.prompt && (raw || r.endpoint == quill::batch::Endpoint::completions);
        if (raw_prompt) return quill::chat::prompt_tokens(*tok, nullptr, *r.prompt, system, cancel);
        if (!*format) throw UsageError(*format_error);
        if (!r.messages) return quill::chat::prompt_tokens(*tok, &**format, *r.prompt, system, cancel);
        // As `quill template --messages` renders the same request.
        return (*format)->tokenize(*tok, *r.messages, true, cancel, r.template_vars);
    };
}

// The output of a batch: stdout, or OUTPUT opened and locked, then (--resume) its records read and a torn last line
// cut off, under the lock, so that two runs never resume one file together. A non-empty OUTPUT is kept unless
// --resume continues it or --overwrite empties it.
struct BatchOutput {
    std::unique_ptr<quill::batch::LockedOutput> file;  // null: stdout
    quill::batch::ResumeScan earlier;
};

BatchOutput open_batch_output(const BatchCliOptions& o) {
    BatchOutput out;
    if (o.output.empty()) return out;
    out.file = std::make_unique<quill::batch::LockedOutput>(o.output);
    if (!out.file->locked())
        warn_line(fmt::format("{}: the file system cannot lock it; a second quill batch on it would not be refused",
                              o.output));
    if (o.resume) {
        out.earlier = quill::batch::prepare_resume(o.output);
    } else if (o.overwrite) {
        out.file->truncate();
    } else if (out.file->initial_size() > 0) {
        throw UsageError(fmt::format("{} is not empty ({}): --resume runs only the requests it lacks, --overwrite "
                                     "replaces it",
                                     o.output, quill::format_bytes(out.file->initial_size())));
    }
    return out;
}

// The fingerprint of this run's records (engine/batch/fingerprint.h).
quill::batch::RunFingerprint batch_fingerprint(const quill::Session& session, const BatchCliOptions& o,
                                               const quill::batch::RunnerOptions& ro, const quill::batch::BatchInput& input,
                                               const std::string& template_source) {
    quill::batch::FingerprintInputs in;
    in.model_name = session.model->config.name;
    in.model_identity = quill::batch::model_identity(session.model->file);
    if (!o.model.tokenizer.empty()) {
        std::ifstream f(o.model.tokenizer, std::ios::binary);
        in.tokenizer_file.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    in.raw = o.raw;
    in.template_source = template_source;
    in.system = o.system;
    in.defaults = ro.defaults;
    in.seed = ro.seed;
    in.constraint = ro.constraint;
    in.any_request_samples = ro.defaults.sampling.temperature > 0 || quill::batch::input_samples(input);
    if (!o.draft_model.empty() && in.any_request_samples)
        in.draft_identity =
            quill::batch::model_identity(quill::GgufFile::open(quill::resolve_model_path(o.draft_model)));
    return quill::batch::make_fingerprint(in);
}

// One warning for the input lines that are not UTF-8: in JSON they are error records; a plain-text prompt is
// tokenized as it is, and the warning says what the tokenizer made of the first one, as `quill run` does.
void warn_invalid_utf8(const quill::batch::BatchInput& input, const std::string& name, const quill::Tokenizer& tok) {
    const std::vector<size_t>& bad = input.invalid_utf8_lines;
    if (bad.empty()) return;
    std::string list;
    for (size_t i = 0; i < bad.size() && i < 5; ++i) list += fmt::format("{}{}", i ? ", " : "", bad[i]);
    if (bad.size() > 5) list += ", ...";
    std::string effect = "they are error records (JSON text must be UTF-8)";
    if (input.format == quill::batch::InputFormat::plain) {
        const auto first = std::find_if(input.entries.begin(), input.entries.end(),
                                        [&](const quill::batch::InputEntry& e) { return e.request.line == bad[0]; });
        const std::string loss = tok.describe_loss(*first->request.prompt, {});
        effect = loss.empty() ? "their bytes are tokenized as they are" : fmt::format("in line {}, {}", bad[0], loss);
    }
    warn_line(fmt::format("{}: {} line{} of invalid UTF-8 ({} {}): {}", quill::escape_for_terminal(name), bad.size(),
                          bad.size() == 1 ? "" : "s", bad.size() == 1 ? "line" : "lines", list, effect));
}

// One warning for the keys of prompt requests that are no request field: ignored, and likely misspelt.
void warn_unknown_fields(const quill::batch::BatchInput& input, const std::string& name) {
    const auto& unknown = input.unknown_fields;
    if (unknown.empty()) return;
    std::string list;
    for (size_t i = 0; i < unknown.size() && i < 5; ++i)
        list += fmt::format("{}\"{}\" (line {})", i ? ", " : "", unknown[i].first, unknown[i].second);
    if (unknown.size() > 5) list += ", ...";
    warn_line(fmt::format("{}: ignored, not a request field: {}", quill::escape_for_terminal(name), list));
}

// 128 + the signal when a signal stopped the batch; 3 when the output holds error records for requests of this
// shard (this run's and, with --resume, earlier ones), their count on stderr; else 0.
int batch_exit_status(const quill::batch::BatchInput& input, const quill::batch::Shard& shard,
                      const quill::batch::ResumeScan& earlier, const quill::batch::BatchProgress& result,
                      const std::string& output_name) {
    if (quill::signals::count() > 0) return 128 + quill::signals::last();
    size_t failed = result.errors;
    for (size_t i = 0; i < input.entries.size(); ++i)
        failed += shard.contains(i) && earlier.failed.contains(input.entries[i].request.id);
    if (failed == 0) return 0;
    quill::print_stderr("{}", quill::batch::failures_line(failed, result.done + result.skipped, output_name));
    return 3;
}

int cmd_batch(BatchCliOptions& o) {
    namespace qb = quill::batch;
    if (o.output == "-") o.output.clear();  // stdout, as - is stdin for -i
    if (o.resume && o.output.empty()) throw UsageError("--resume needs -o OUTPUT (the file to resume)");
    quill::batch::RunnerOptions ro;
    ro.shard = qb::parse_shard(o.shard);
    const qb::FormatHint format_option = qb::parse_format_option(o.format);
    ro.defaults.max_tokens = o.n_predict;
    ro.defaults.stop = o.stop;
    ro.defaults.sampling = o.sampling;
    ro.defaults.logprobs = o.logprobs;
    ro.defaults.lookup = o.lookup;
    ro.defaults.draft = o.draft;
    check_draft_options(o.draft_model, o.draft, o.lookup);
    ro.seed = o.seed;
    ro.n_batch = o.n_batch;
    ro.defaults.validate();
    ro.constraint = constraint_spec(o.constraint);
    if (ro.constraint) quill::grammar::compile_constraint(*ro.constraint);  // a bad one fails before the model loads
    ro.on_warning = warn_line;
    // Requests typed at a terminal only when asked for (-i -): without -i, a terminal on stdin is a mistake.
    if (o.input.empty() && isatty(STDIN_FILENO))
        throw UsageError("no requests: give -i FILE or pipe them on stdin (-i - reads them from the terminal)");
    const bool from_stdin = o.input.empty() || o.input == "-";
    const std::string text = from_stdin ? read_stdin(o.max_input_bytes)
                                        : quill::read_prompt_file(o.input, o.max_input_bytes, "the batch input");
    const qb::FormatHint hint = format_option != qb::FormatHint::none || from_stdin
                                    ? format_option
                                    : qb::format_hint_from_name(o.input);
    const qb::BatchInput input = qb::parse_batch_input(text, hint);  // duplicate ids stop here, before any work

    BatchOutput output = open_batch_output(o);
    const qb::ResumeScan& resume = output.earlier;
    qb::check_resume_ids(resume, input, ro.shard, o.output);
    qb::check_resume_requests(resume, input, o.output);
    std::FILE* out_stream = output.file ? output.file->stream() : stdout;
    const std::string out_name = output.file ? o.output : "stdout";
    qb::RecordWriter writer(out_stream, out_name, output.file && output.file->is_regular());

    quill::SessionOptions so = session_options(o.model, o.engine);
    // No more slots than requests to run: every slot's KV cache counts when the context is fitted to memory.
    so.n_slots = static_cast<int64_t>(
        std::clamp<size_t>(qb::runnable_requests(input, ro.shard, resume.done), 1, static_cast<size_t>(o.parallel)));
    // Without -c, the context is what the requests need (their prompts encoded once the tokenizer is loaded), when
    // each has a max_tokens: no memory for positions no request can reach, and the CPU's cache in 2 MiB pages.
    // The fingerprint is checked as soon as the model and its template are known: before the weights are packed
    // when the context is fitted (context_needed), else once the session is open.
    std::optional<qb::PromptEncoder> encoder;
    std::string template_source;
    std::optional<qb::RunFingerprint> fingerprint;
    auto make_encoder = [&](const quill::Session& s) {
        encoder = batch_encoder(s, o, ro, template_source);
        fingerprint = batch_fingerprint(s, o, ro, input, template_source);
        if (o.resume) qb::check_resume_fingerprint(resume, *fingerprint, o.output, warn_line);
    };
    so.context_needed = [&](const quill::Session& s) {
        make_encoder(s);
        return qb::context_needed(input, ro.shard, resume.done, *encoder, ro);
    };
    auto session = quill::Session::open(so);
    if (!encoder) make_encoder(*session);
    if (!o.quiet) {
        quill::print_stderr("{}{}; {} input, {} slot{}\n", session->load_line(),
                            session->context_fitted ? " (what the requests need)" : "",
                            qb::input_format_name(input.format), so.n_slots, so.n_slots == 1 ? "" : "s");
        if (ro.shard.n > 1) quill::print_stderr("{}", qb::shard_line(input, ro.shard));
    }
    ro.defaults.drafter = open_drafter(o.draft_model, *session, o.engine, o.quiet);
    const quill::Tokenizer& tok = *session->tokenizer;
    warn_invalid_utf8(input, from_stdin ? "stdin" : o.input, tok);
    warn_unknown_fields(input, from_stdin ? "stdin" : o.input);
    const qb::PromptEncoder& encode = *encoder;
    quill::signals::install();
    ro.interrupts = [] { return quill::signals::count(); };
    const qb::RecordContext ctx{input.format, session->model->config.name, static_cast<int64_t>(std::time(nullptr)),
                                fingerprint->str()};
    qb::ProgressReporter progress(isatty(STDERR_FILENO) != 0, o.quiet);
    if (!output.file && qb::same_terminal(STDOUT_FILENO, STDERR_FILENO)) writer.set_before_write([&] { progress.clear(); });
    const qb::BatchProgress result =
        qb::run_batch(*session->backend, tok, session->n_ctx, input, resume.done, encode, writer, ctx, ro,
                      [&](const qb::BatchProgress& p) { progress.update(p); });
    progress.finish(result);
    if (resume.torn && !o.quiet) quill::print_stderr("quill: dropped a torn last line of {}\n", o.output);
    return batch_exit_status(input, ro.shard, resume, result, out_name);
}


}  // namespace quill::cli
