// quill: the command-line front end. Parses options, calls the engine, catches once.
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

#include "quill_build_info.h"  // generated at build time: QUILL_GIT_REVISION

#include <CLI/CLI.hpp>
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

namespace {

namespace fs = std::filesystem;
using quill::UsageError;

constexpr const char* kDefaultModel = quill::kDefaultModelFile;

// ---- option values checked before they are converted ----

// CLI11 converts an empty string to 0 and "-5" to 2^64-5 for an unsigned option: reject both before that.
const CLI::Validator kNotEmpty(
    [](std::string& value) { return value.empty() ? std::string("expected a value, got an empty string") : ""; }, "",
    "NOT_EMPTY");

const CLI::Validator kSeedValidator(
    [](std::string& value) {
        uint64_t seed = 0;
        const char* end = value.data() + value.size();
        auto [ptr, ec] = std::from_chars(value.data(), end, seed);
        if (value.empty() || ec != std::errc() || ptr != end)
            return fmt::format("'{}' is not a seed: expected an integer 0..{}", value, UINT64_MAX);
        return std::string();
    },
    "", "SEED");

// Every option that takes a value, in every subcommand, refuses an empty one (`--temp ''`, `-m ''`); prompt
// text (-p, run's argument) is exempt: an empty prompt has its own message. (Validators run in the order added: an
// option with a range check adds kNotEmpty before it, for this message rather than the range's.)
void refuse_empty_values(CLI::App& app) {
    for (CLI::App* cmd : app.get_subcommands({}))
        for (CLI::Option* opt : cmd->get_options())
            if (opt->get_type_size() != 0 && opt->get_name() != "--prompt" && opt->get_name() != "prompt" &&
                opt->get_name() != "--help")
                opt->check(kNotEmpty);
}

// "unknown subcommand 'frob' (expected info, tokenize, ...)" when argv[1] is neither a subcommand nor an
// option, else CLI11's message.
std::string parse_error_message(CLI::App& app, int argc, char** argv, const CLI::ParseError& e) {
    if (argc < 2 || argv[1][0] == '-') return e.what();
    std::vector<std::string> names;
    for (const CLI::App* cmd : app.get_subcommands({})) {
        if (cmd->check_name(argv[1])) return e.what();
        names.push_back(cmd->get_name());
    }
    std::string expected;
    for (size_t i = 0; i < names.size(); ++i)
        expected += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    return fmt::format("unknown subcommand '{}' (expected {})", argv[1], expected);
}

// One line on stderr, "quill: " + prefix + the message escaped and capped (escape_line: a model file's text can
// carry escape sequences and run to megabytes). Never throws.
void print_line(std::string_view prefix, std::string_view message) noexcept {
    try {
        quill::print_stderr_noexcept(fmt::format("quill: {}{}\n", prefix, quill::escape_line(message)));
    } catch (...) {  // out of memory formatting a diagnostic: nothing better to do
    }
}

// ---- options shared by the subcommands that load a model ----

struct ModelOptions {
    std::string model;
    std::string tokenizer;  // a sentencepiece tokenizer.model overriding the GGUF's vocabulary
};

struct EngineOptions {
    int threads = 0;
    int64_t ctx = 0;
    std::string device = "auto";
    std::string kv_type = "f16";
    bool verbose = false;
};

void add_model_options(CLI::App* cmd, ModelOptions& o) {
    cmd->add_option("-m,--model", o.model,
                    fmt::format("GGUF model, or hf:owner/repo[:QUANT] (default: models/{})", kDefaultModel));
    cmd->add_option("--tokenizer", o.tokenizer, "A sentencepiece tokenizer.model to use instead of the GGUF's");
}

void add_engine_options(CLI::App* cmd, EngineOptions& o) {
    cmd->add_option("-t,--threads", o.threads, "CPU threads (default: the physical cores)")
        ->check(kNotEmpty)
        ->check(CLI::Range(1, 1024));
    cmd->add_option("-c,--ctx", o.ctx, "Context size in tokens (default: the model's, capped to fit memory)")
        ->check(kNotEmpty)
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
    cmd->add_option("--device", o.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    cmd->add_option("--kv-type", o.kv_type, "KV cache type")->check(CLI::IsMember({"f16", "f32"}));
    cmd->add_flag("-v,--verbose", o.verbose, "Say why the CPU runs the model when no GPU can (no driver, no device)");
}

quill::SessionOptions session_options(const ModelOptions& m, const EngineOptions& e) {
    quill::SessionOptions o;
    o.model = m.model;
    o.tokenizer = m.tokenizer;
    o.device = quill::parse_device(e.device);
    o.threads = e.threads;
    o.ctx = e.ctx;
    o.kv_type = quill::parse_kv_type(e.kv_type);
    o.verbose = e.verbose;
    return o;
}

std::unique_ptr<quill::Tokenizer> load_tokenizer(const quill::GgufFile& file, const ModelOptions& o) {
    if (!o.tokenizer.empty()) return quill::Tokenizer::from_spm_file(o.tokenizer, &file);
    return quill::Tokenizer::from_gguf(file);
}

std::string read_stdin(size_t max_bytes) { return quill::read_capped(STDIN_FILENO, "stdin", max_bytes); }

void add_max_input_option(CLI::App* cmd, size_t& max_bytes,
                          const char* help = "Longest prompt read from a file or stdin") {
    cmd->add_option("--max-input-bytes", max_bytes, help)
        ->capture_default_str()
        ->check(kNotEmpty)
        ->check(CLI::Range(size_t{1}, size_t{1} << 40));
}

// One warning when the tokenizer could not keep all of the text (invalid UTF-8, characters not in the vocabulary).
void warn_if_lossy(const quill::Tokenizer& tok, std::string_view text, const std::vector<int32_t>& ids) {
    const std::string loss = tok.describe_loss(text, ids);
    if (loss.empty()) return;
    print_line("warning: the text was changed by tokenizing: ", loss);
}

// ---- info ----

struct InfoOptions {
    std::string model;
    bool tensors = false;
    bool json = false;
};

int cmd_info(const InfoOptions& o) {
    quill::GgufFile file = quill::GgufFile::open(quill::resolve_model_path(o.model));
    nlohmann::json info = quill::describe_model(file, o.tensors);
    if (info["runnable"].get<bool>()) {
        if (std::string why = quill::why_not_runnable(file); !why.empty()) {
            info["runnable"] = false;
            info["not_runnable"] = why;
        }
    }
    quill::Output out(stdout, "stdout");
    out.put(o.json ? info.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"
                   : quill::render_model_info(info));
    return 0;
}

// ---- tokenize ----

struct TokenizeOptions {
    ModelOptions model;
    std::optional<std::string> prompt;
    bool no_bos = false;
    bool pieces = false;
    bool json = false;
    bool parse_special = false;
    size_t max_input_bytes = quill::kDefaultMaxInputBytes;
};

int cmd_tokenize(const TokenizeOptions& o) {
    quill::GgufFile file = quill::GgufFile::open(quill::resolve_model_path(o.model.model));
    auto tok = load_tokenizer(file, o.model);
    std::string text;
    if (o.prompt) {
        text = *o.prompt;
    } else {
        if (isatty(STDIN_FILENO)) throw UsageError("no text: give -p TEXT or pipe it on stdin");
        text = read_stdin(o.max_input_bytes);
    }
    std::vector<int32_t> ids = tok->encode(text, !o.no_bos, o.parse_special);
    if (!o.parse_special) warn_if_lossy(*tok, text, ids);
    quill::Output out(stdout, "stdout");
    if (o.json) {
        nlohmann::json j;
        j["ids"] = ids;
        if (o.pieces) {
            j["pieces"] = nlohmann::json::array();
            for (int32_t id : ids) j["pieces"].push_back(std::string(tok->piece(id)));
        }
        out.write(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    } else if (o.pieces) {
        for (int32_t id : ids) out.write(fmt::format("{}\t{}\n", id, quill::escape_for_terminal(tok->piece(id))));
    } else {
        std::string line;
        for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
        out.write(line + "\n");
    }
    out.flush();
    return 0;
}

// ---- run ----

struct ConstraintOptions {
    std::string json_schema;  // a file or the JSON text
    std::string format;       // "json" or ""
    bool json_object = false;
    std::string grammar;      // a GBNF file
    std::string regex;
};

struct RunOptions {
    ModelOptions model;
    EngineOptions engine;
    std::optional<std::string> prompt;
    std::optional<std::string> positional_prompt;  // `quill run "text"`, as -p
    std::string prompt_file;
    int n_predict = -1;
    quill::SamplingParams sampling;
    std::optional<uint64_t> seed;
    std::vector<std::string> stop;
    int logprobs = -1;
    int lookup = 0;
    bool raw = false;
    bool json = false;
    std::string system;
    std::string chat_template;
    size_t max_input_bytes = quill::kDefaultMaxInputBytes;
    bool quiet = false;  // no load line and no stats line
    ConstraintOptions constraint;
};

void warn_line(const std::string& message) { print_line("warning: ", message); }

// --json-schema, --format json / --json-object, --grammar, --regex: at most one, read and compiled before the model
// loads, so that a bad schema fails at once.
std::optional<quill::grammar::ConstraintSpec> constraint_spec(const ConstraintOptions& c) {
    namespace qg = quill::grammar;
    std::vector<qg::ConstraintSpec> given;
    if (!c.json_schema.empty()) given.push_back(qg::json_schema_option(c.json_schema));
    if (!c.format.empty()) {
        if (c.format != "json") throw UsageError(fmt::format("--format '{}': expected json", c.format));
        given.push_back({qg::ConstraintSpec::Kind::json_object, "", "--format json"});
    }
    if (c.json_object) given.push_back({qg::ConstraintSpec::Kind::json_object, "", "--json-object"});
    if (!c.grammar.empty()) given.push_back(qg::grammar_file_option(c.grammar));
    if (!c.regex.empty()) given.push_back({qg::ConstraintSpec::Kind::regex, c.regex, "--regex"});
    if (given.size() > 1)
        throw UsageError("give at most one of --json-schema, --format json, --json-object, --grammar and --regex");
    if (given.empty()) return std::nullopt;
    return given[0];
}

// The output constraint bound to the model's vocabulary: compile first (before the model loads), bind after.
struct OutputConstraint {
    std::shared_ptr<const quill::grammar::Grammar> grammar;
    std::shared_ptr<quill::grammar::TokenGrammar> bind(const quill::Tokenizer& tok) const {
        return grammar ? std::make_shared<quill::grammar::TokenGrammar>(grammar, tok) : nullptr;
    }
};
OutputConstraint compile_output_constraint(const ConstraintOptions& c) {
    const auto spec = constraint_spec(c);
    return {spec ? quill::grammar::compile_constraint(*spec) : nullptr};
}

void add_constraint_options(CLI::App* cmd, ConstraintOptions& c, bool format_option) {
    cmd->add_option("--json-schema", c.json_schema, "The output must be JSON valid against this schema (a file, or "
                                                    "the schema's JSON text)");
    if (format_option)
        cmd->add_option("--format", c.format, "json: the output must be a JSON object");
    cmd->add_flag("--json-object", c.json_object, "The output must be a JSON object (as --format json)");
    cmd->add_option("--grammar", c.grammar, "The output must follow this GBNF grammar file (llama.cpp's format)");
    cmd->add_option("--regex", c.regex, "The output must match this regular expression, whole");
}

void add_template_option(CLI::App* cmd, std::string& chat_template) {
    cmd->add_option("--chat-template", chat_template,
                    "Chat template: a built-in format (chatml, llama2, llama3, gemma, mistral, phi3, zephyr) or a "
                    "Jinja file (default: the model's)");
}

void add_sampling_options(CLI::App* cmd, quill::SamplingParams& s, std::optional<uint64_t>& seed) {
    cmd->add_option("--temp", s.temperature, "Temperature; 0 is greedy")->capture_default_str();
    cmd->add_option("--top-k", s.top_k, "Top-k (0: off)")->capture_default_str();
    cmd->add_option("--top-p", s.top_p, "Top-p (1: off)")->capture_default_str();
    cmd->add_option("--min-p", s.min_p, "Min-p (0: off)")->capture_default_str();
    cmd->add_option("--repeat-penalty", s.repeat_penalty, "Repetition penalty (1: off)")->capture_default_str();
    cmd->add_option("--repeat-last-n", s.repeat_last_n, "Penalty window (0: off, -1: all)")->capture_default_str();
    cmd->add_option("--frequency-penalty", s.frequency_penalty, "Frequency penalty")->capture_default_str();
    cmd->add_option("--presence-penalty", s.presence_penalty, "Presence penalty")->capture_default_str();
    cmd->add_option("--seed", seed, "RNG seed (default: random, printed with --json)")->check(kSeedValidator);
}

// --logprobs N: the model's log-probability of each generated token and its N most likely alternatives.
CLI::Option* add_logprobs_option(CLI::App* cmd, int& logprobs, const std::string& help) {
    return cmd->add_option("--logprobs", logprobs, help)
        ->check(kNotEmpty)
        ->check(CLI::Range(0, quill::kMaxTopLogprobs));
}

// --lookup N: prompt lookup's guesses per decode step (greedy sampling only; the text does not change).
void add_lookup_option(CLI::App* cmd, int& lookup) {
    cmd->add_option("--lookup", lookup,
                    "Guess up to N next tokens per step from earlier text and check them in the same pass (greedy "
                    "sampling only: --temp 0; the text is the same, faster where it repeats its prompt; 0: off)")
        ->capture_default_str()
        ->check(kNotEmpty)
        ->check(CLI::Range(0, quill::kMaxLookup));
}

int chat_from_run(const RunOptions& o);  // (below cmd_chat)

// run's prompt: -p, the argument, -f FILE (- for stdin) or stdin; nullopt when none is given and stdin is a terminal.
std::optional<std::string> read_run_prompt(const RunOptions& o) {
    if (o.positional_prompt && (o.prompt || !o.prompt_file.empty()))
        throw UsageError("give the prompt once: as an argument, with -p or with -f");
    if (o.prompt) return *o.prompt;
    if (o.positional_prompt) return *o.positional_prompt;
    if (!o.prompt_file.empty()) return quill::read_prompt_file(o.prompt_file, o.max_input_bytes);
    if (isatty(STDIN_FILENO)) return std::nullopt;
    return read_stdin(o.max_input_bytes);
}

// The text without one final line ending ("\n" or "\r\n"): a line read from a file or a pipe ends with one, which
// is not part of the user's message (`echo Q | quill run` is `quill run Q`).
std::string without_final_newline(std::string text) {
    if (text.ends_with("\r\n")) text.resize(text.size() - 2);
    else if (text.ends_with("\n")) text.pop_back();
    return text;
}

int cmd_run(RunOptions& o) {
    quill::signals::install();  // Ctrl-C and SIGTERM stop the generation (or the read of stdin); the text is kept
    std::optional<std::string> given = read_run_prompt(o);
    if (!given) {  // nothing to complete at a terminal: a conversation, as `ollama run` starts one
        if (o.raw || o.json)
            throw UsageError("no prompt: give -p TEXT, an argument, -f FILE or pipe it on stdin (--raw and --json "
                             "need one; without them, run at a terminal starts a chat)");
        return chat_from_run(o);
    }
    // --raw feeds the bytes exactly; the chat template gets the message without its line ending.
    const std::string text = o.raw ? std::move(*given) : without_final_newline(std::move(*given));
    if (text.empty()) throw UsageError("the prompt is empty: give text with -p, an argument, -f or on stdin");
    o.sampling.seed = o.seed ? *o.seed : std::random_device{}();
    quill::GenerationParams gp;
    gp.max_tokens = o.n_predict;
    gp.stop = o.stop;
    gp.sampling = o.sampling;
    gp.logprobs = o.logprobs;
    gp.lookup = o.lookup;
    gp.validate();
    const OutputConstraint constraint = compile_output_constraint(o.constraint);

    auto session = quill::Session::open(session_options(o.model, o.engine));
    const quill::Tokenizer* tok = session->tokenizer.get();
    gp.grammar = constraint.bind(*tok);
    quill::Backend* backend = session->backend.get();
    const int64_t n_ctx = session->n_ctx;
    const double load_ms = session->load_ms;
    if (!o.quiet) quill::print_stderr("{}\n", session->load_line());

    // The prompt as the user message of the model's chat format, unless --raw feeds it as is.
    std::vector<int32_t> prompt;
    if (o.raw) {
        prompt = quill::chat::prompt_tokens(*tok, nullptr, text, o.system);
        warn_if_lossy(*tok, text, prompt);
    } else {
        const std::vector<int32_t> plain = tok->encode(text, false, false);
        warn_if_lossy(*tok, text, plain);
        // Too long for the context already: said as with --raw, before the template renders (and caps) megabytes.
        if (static_cast<int64_t>(plain.size()) > n_ctx)
            throw UsageError(fmt::format("the prompt is {} tokens before the chat template, longer than the context "
                                         "of {} (raise -c)",
                                         plain.size(), n_ctx));
        auto format = quill::chat::ChatFormat::choose(&session->model->file, tok, o.chat_template, warn_line);
        // A signal stops a runaway template too (the handlers are installed above, before anything renders).
        prompt = quill::chat::prompt_tokens(*tok, &format, text, o.system, &quill::signals::stop_flag());
    }
    quill::Generation gen(*tok, std::move(prompt), gp, n_ctx);

    // Text streams to stdout as it comes; a failed write (a full disk, a closed pipe) stops the generation at once.
    quill::Output out(stdout, "stdout");
    std::string all;
    auto on_text = [&](std::string_view piece) {
        all += piece;
        if (!o.json) out.put(piece);
    };
    quill::GenerateOptions go;
    go.cancel = &quill::signals::stop_flag();
    quill::GenerationStats st = quill::generate(*backend, gen, 0, on_text, go);
    if (gen.finish_reason() == quill::FinishReason::context)
        quill::print_stderr("\nquill: the context of {} tokens is full; stopping (finish reason \"length\")\n", n_ctx);
    if (o.json) {
        nlohmann::json j{{"text", all},
                         {"finish_reason", quill::finish_reason_name(gen.finish_reason())},
                         {"prompt_tokens", st.prompt_tokens},
                         {"completion_tokens", st.completion_tokens},
                         {"seed", gen.seed()},
                         {"timings",
                          {{"load_ms", load_ms},
                           {"ttft_ms", st.ttft_ms},
                           {"prefill_tokens_per_s", st.prefill_tokens_per_s()},
                           {"decode_tokens_per_s", st.decode_tokens_per_s()}}}};
        if (gp.logprobs >= 0) j["logprobs"] = quill::logprobs_content(*tok, gen.logprobs(), true);
        if (gp.lookup > 0) j["lookup"] = {{"guessed", st.guessed_tokens}, {"accepted", st.accepted_tokens}};
        out.put(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    }
    if (!o.quiet)
        quill::print_stderr("\nquill: {} prompt tokens, {} generated; time to first token {:.0f} ms; prefill {:.1f} "
                            "tok/s; decode {:.1f} tok/s; finish reason {}{}\n",
                            st.prompt_tokens, st.completion_tokens, st.ttft_ms, st.prefill_tokens_per_s(),
                            st.decode_tokens_per_s(), quill::finish_reason_name(gen.finish_reason()),
                            gp.lookup > 0 ? fmt::format("; lookup: {} of {} guesses accepted", st.accepted_tokens,
                                                        st.guessed_tokens)
                                          : "");
    // Stopped by a signal: the output is complete as far as it goes; the exit status says which signal.
    if (gen.finish_reason() == quill::FinishReason::interrupted) return 128 + quill::signals::last();
    return 0;
}

// ---- template ----

struct TemplateOptions {
    std::string model;
    std::string chat_template;
    std::string messages;  // a file, or - for stdin
    bool no_generation_prompt = false;
    std::optional<std::string> bos, eos;
    bool tokens = false;
};

int cmd_template(const TemplateOptions& o) {
    nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", "Hello"}}});
    if (!o.messages.empty()) {
        const std::string text = o.messages == "-" ? read_stdin(quill::kDefaultMaxInputBytes)
                                                    : quill::read_prompt_file(o.messages, quill::kDefaultMaxInputBytes);
        messages = quill::chat::parse_messages(text, o.messages == "-" ? "stdin" : o.messages);
    }
    // A model is read when one is named, when no template is given, or for the token ids.
    std::optional<quill::GgufFile> file;
    std::unique_ptr<quill::Tokenizer> tok;
    if (!o.model.empty() || o.chat_template.empty() || o.tokens) {
        file.emplace(quill::GgufFile::open(quill::resolve_model_path(o.model)));
        tok = quill::Tokenizer::from_gguf(*file);
    }
    quill::chat::ChatFormat format =
        quill::chat::ChatFormat::choose(file ? &*file : nullptr, tok.get(), o.chat_template, warn_line);
    if (o.bos) format.set_bos_text(*o.bos);
    if (o.eos) format.set_eos_text(*o.eos);
    quill::Output out(stdout, "stdout");
    out.write(format.render(messages, !o.no_generation_prompt).text);
    if (o.tokens) {
        std::vector<int32_t> ids = format.tokenize(*tok, messages, !o.no_generation_prompt);
        std::string line = "\n";
        for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
        out.write(line + "\n");
    }
    out.flush();
    return 0;
}

// ---- chat ----

struct ChatCliOptions {
    ModelOptions model;
    EngineOptions engine;
    int n_predict = -1;
    quill::SamplingParams sampling;
    std::optional<uint64_t> seed;
    std::vector<std::string> stop;
    std::string system;
    std::string chat_template;
    std::string overflow = "drop-oldest";
    size_t max_input_bytes = quill::kDefaultMaxInputBytes;
    bool quiet = false;
    int lookup = 0;
    ConstraintOptions constraint;
};

int cmd_chat(ChatCliOptions& o) {
    o.sampling.seed = o.seed ? *o.seed : std::random_device{}();
    quill::GenerationParams gp;
    gp.max_tokens = o.n_predict;
    gp.stop = o.stop;
    gp.sampling = o.sampling;
    gp.lookup = o.lookup;
    gp.validate();
    const quill::chat::ContextOverflow overflow = quill::chat::parse_context_overflow(o.overflow);
    const OutputConstraint constraint = compile_output_constraint(o.constraint);
    auto session = quill::Session::open(session_options(o.model, o.engine));
    gp.grammar = constraint.bind(*session->tokenizer);
    if (!o.quiet) quill::print_stderr("{}\n", session->load_line());
    auto format = quill::chat::ChatFormat::choose(&session->model->file, session->tokenizer.get(), o.chat_template,
                                                  warn_line);
    quill::chat::Conversation conv(*session->backend, *session->tokenizer, format, session->n_ctx, gp, overflow);
    conv.set_system(o.system);

    quill::signals::install();
    const bool tty = isatty(STDIN_FILENO) != 0;
    auto in = tty ? quill::chat::make_terminal_reader(stdin, stdout, quill::chat::default_history_path(),
                                                      o.max_input_bytes)
                  : quill::chat::make_stream_reader(stdin, o.max_input_bytes);
    quill::Output out(stdout, "stdout");
    quill::Output status(stderr, "stderr");
    quill::chat::ReplOptions ro;
    ro.color = tty && isatty(STDERR_FILENO) && !std::getenv("NO_COLOR");
    ro.quiet = o.quiet;
    ro.model_name = session->model->config.name;
    ro.max_input_bytes = o.max_input_bytes;
    ro.cancel = &quill::signals::stop_flag();
    ro.clear_cancel = [] { quill::signals::clear(); };
    // SIGTERM ends the chat; so does Ctrl-C when nobody is typing (input from a pipe or a file).
    ro.should_exit = [tty] { return quill::signals::last() == SIGTERM || (!tty && quill::signals::count() > 0); };
    quill::chat::ChatRepl repl(conv, *in, out, status, ro);
    const int rc = repl.run();
    // Ended by a signal: the conventional status (130 SIGINT, 143 SIGTERM), as `run` does; else 1 when a message
    // or command read from a pipe or file failed.
    if (quill::signals::last() == SIGTERM || (!tty && quill::signals::count() > 0)) return 128 + quill::signals::last();
    return rc;
}

// ---- batch ----

struct BatchCliOptions {
    ModelOptions model;
    EngineOptions engine;
    std::string input;  // empty: stdin, not given on the command line
    std::string output;
    int parallel = 8;
    bool resume = false;
    bool overwrite = false;
    std::string format = "auto";
    std::string shard = "1/1";
    int n_batch = 512;
    int n_predict = -1;
    quill::SamplingParams sampling;
    std::optional<uint64_t> seed;
    std::vector<std::string> stop;
    int logprobs = -1;
    int lookup = 0;
    bool raw = false;
    bool quiet = false;
    size_t max_input_bytes = size_t{1} << 30;
    std::string system;
    std::string chat_template;
    ConstraintOptions constraint;
};

// How a batch request becomes tokens: `messages` through the chat template; OpenAI /v1/completions prompts as they
// are; other prompts as the user message of the chat template, unless --raw. A model without a usable template
// makes each request that needs one an error record, not the whole batch.
quill::batch::PromptEncoder batch_encoder(const quill::Session& session, const BatchCliOptions& o) {
    const quill::Tokenizer* tok = session.tokenizer.get();
    auto format = std::make_shared<std::optional<quill::chat::ChatFormat>>();
    auto format_error = std::make_shared<std::string>();
    try {
        format->emplace(quill::chat::ChatFormat::choose(&session.model->file, tok, o.chat_template, warn_line));
    } catch (const UsageError& e) {
        *format_error = e.what();
    }
    return [tok, format, format_error, raw = o.raw, system = o.system](const quill::batch::BatchRequest& r) {
        const bool raw_prompt = r.prompt && (raw || r.endpoint == quill::batch::Endpoint::completions);
        if (raw_prompt) return quill::chat::prompt_tokens(*tok, nullptr, *r.prompt, system);
        if (!*format) throw UsageError(*format_error);
        if (!r.messages) return quill::chat::prompt_tokens(*tok, &**format, *r.prompt, system);
        nlohmann::json messages = nlohmann::json::array();
        for (const auto& m : *r.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
        return (*format)->tokenize(*tok, messages, true);
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
    ro.seed = o.seed;
    ro.n_batch = o.n_batch;
    ro.defaults.validate();
    ro.constraint = constraint_spec(o.constraint);
    if (ro.constraint) quill::grammar::compile_constraint(*ro.constraint);  // a bad one fails before the model loads
    // Requests typed at a terminal only when asked for (-i -): without -i, a terminal on stdin is a mistake.
    if (o.input.empty() && isatty(STDIN_FILENO))
        throw UsageError("no requests: give -i FILE or pipe them on stdin (-i - reads them from the terminal)");
    const bool from_stdin = o.input.empty() || o.input == "-";
    const std::string text = from_stdin ? read_stdin(o.max_input_bytes) : quill::read_prompt_file(o.input, o.max_input_bytes);
    const qb::FormatHint hint = format_option != qb::FormatHint::none || from_stdin
                                    ? format_option
                                    : qb::format_hint_from_name(o.input);
    const qb::BatchInput input = qb::parse_batch_input(text, hint);  // duplicate ids stop here, before any work

    BatchOutput output = open_batch_output(o);
    const qb::ResumeScan& resume = output.earlier;
    std::FILE* out_stream = output.file ? output.file->stream() : stdout;
    const std::string out_name = output.file ? o.output : "stdout";
    qb::RecordWriter writer(out_stream, out_name, output.file && output.file->is_regular());

    quill::SessionOptions so = session_options(o.model, o.engine);
    // No more slots than requests to run: every slot's KV cache counts when the context is fitted to memory.
    so.n_slots = static_cast<int64_t>(
        std::clamp<size_t>(qb::runnable_requests(input, ro.shard, resume.done), 1, static_cast<size_t>(o.parallel)));
    // Without -c, the context is what the requests need (their prompts encoded once the tokenizer is loaded), when
    // each has a max_tokens: no memory for positions no request can reach, and the CPU's cache in 2 MiB pages.
    std::optional<qb::PromptEncoder> encoder;
    so.context_needed = [&](const quill::Session& s) {
        encoder = batch_encoder(s, o);
        return qb::context_needed(input, ro.shard, resume.done, *encoder, ro);
    };
    auto session = quill::Session::open(so);
    if (!o.quiet) {
        quill::print_stderr("{}{}; {} input, {} slots\n", session->load_line(),
                            session->context_fitted ? " (what the requests need)" : "",
                            qb::input_format_name(input.format), so.n_slots);
        if (ro.shard.n > 1) quill::print_stderr("{}", qb::shard_line(input, ro.shard));
    }
    const quill::Tokenizer& tok = *session->tokenizer;
    warn_invalid_utf8(input, from_stdin ? "stdin" : o.input, tok);
    const qb::PromptEncoder encode = encoder ? *encoder : batch_encoder(*session, o);
    quill::signals::install();
    ro.interrupts = [] { return quill::signals::count(); };
    const qb::RecordContext ctx{input.format, session->model->config.name, static_cast<int64_t>(std::time(nullptr))};
    qb::ProgressReporter progress(isatty(STDERR_FILENO) != 0, o.quiet);
    if (!output.file && qb::same_terminal(STDOUT_FILENO, STDERR_FILENO)) writer.set_before_write([&] { progress.clear(); });
    const qb::BatchProgress result =
        qb::run_batch(*session->backend, tok, session->n_ctx, input, resume.done, encode, writer, ctx, ro,
                      [&](const qb::BatchProgress& p) { progress.update(p); });
    progress.finish(result);
    if (resume.torn && !o.quiet) quill::print_stderr("quill: dropped a torn last line of {}\n", o.output);
    return batch_exit_status(input, ro.shard, resume, result, out_name);
}

// `quill run` with no prompt at a terminal: `quill chat` with run's options.
int chat_from_run(const RunOptions& o) {
    ChatCliOptions chat;
    chat.model = o.model;
    chat.engine = o.engine;
    chat.n_predict = o.n_predict;
    chat.sampling = o.sampling;
    chat.seed = o.seed;
    chat.stop = o.stop;
    chat.system = o.system;
    chat.chat_template = o.chat_template;
    chat.lookup = o.lookup;
    chat.constraint = o.constraint;
    return cmd_chat(chat);
}

// ---- bench ----

struct BenchCliOptions {
    std::string model;
    std::string synthetic;
    std::optional<std::string> dtype;  // of --synthetic; q4_0 when not given
    std::string save;
    EngineOptions engine;
    quill::BenchOptions bench;
    bool json = false;
};

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

// ---- perplexity ----

struct PerplexityCliOptions {
    ModelOptions model;
    EngineOptions engine;
    std::string file;
    int64_t max_chunks = 0;
    int64_t n_batch = 512;
    bool json = false;
    bool quiet = false;
    size_t max_input_bytes = quill::kDefaultMaxInputBytes;
};

int cmd_perplexity(const PerplexityCliOptions& o) {
    const std::string text = o.file == "-" ? read_stdin(o.max_input_bytes)
                                           : quill::read_prompt_file(o.file, o.max_input_bytes);
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
    const std::vector<int32_t> tokens = tok.encode(text, true, false);
    warn_if_lossy(tok, text, tokens);
    quill::PerplexityOptions po;
    po.n_ctx = session->n_ctx;
    po.n_batch = o.n_batch;
    po.max_chunks = o.max_chunks;
    po.bos = tok.add_bos() ? tok.bos() : -1;
    const int64_t n_chunks = std::min<int64_t>(static_cast<int64_t>(tokens.size()) / po.n_ctx,
                                               o.max_chunks > 0 ? o.max_chunks : INT64_MAX);
    const bool progress = !o.quiet && isatty(STDERR_FILENO);
    quill::signals::install();  // Ctrl-C ends the run with the chunks scored so far
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

// ---- pull, list, rm: models by name from the Hugging Face hub, kept in its cache ----

struct PullCliOptions {
    std::string spec;
    bool quiet = false;
};

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

// The one place where errors become a message and an exit status: 2 for a usage error, 128 + the signal when
// interrupted, 141 (as if killed by SIGPIPE) and no message when the reader of stdout went away (`quill run |
// head`), 1 otherwise. The message is one line, escaped and capped (print_line): it may quote a model file. Never
// throws: stderr may be closed or full.
int report_failure(std::exception_ptr error) noexcept {
    std::fflush(stdout);  // what was printed before the error comes first
    try {
        std::rethrow_exception(error);
    } catch (const quill::OutputError& e) {
        if (e.error_number() == EPIPE) return 128 + SIGPIPE;
        print_line("error: ", e.what());
    } catch (const quill::Interrupted& e) {
        print_line("", e.what());
        return 128 + (quill::signals::last() ? quill::signals::last() : SIGINT);
    } catch (const quill::UsageError& e) {
        print_line("error: ", e.what());
        return 2;
    } catch (const std::bad_alloc&) {
        print_line("error: ", "out of memory");
    } catch (const std::exception& e) {
        print_line("error: ", e.what());
    } catch (...) {
        print_line("error: ", "an unexpected failure");
    }
    return 1;
}

// `quill --version`: the build (version, git revision, build type, CUDA and its architectures) and what this machine
// offers it (the CUDA device or why there is none, the CPU kernels quill picks).
std::string version_text() {
#ifdef QUILL_HAVE_CUDA
    const std::string cuda = fmt::format("on (architectures {}); {}", QUILL_CUDA_ARCHITECTURES, quill::describe_cuda());
#else
    const std::string cuda = "off (built without CUDA)";
#endif
    return fmt::format("quill {} (git {}, {} build)\nCUDA: {}\nCPU kernels: {} ({} CPUs available)", QUILL_VERSION,
                       QUILL_GIT_REVISION, QUILL_BUILD_TYPE, cuda,
                       quill::cpu::isa_name(quill::cpu::best_isa()), quill::cpu::ThreadPool::available_cpus());
}

// --help and --version: CLI11's text written through Output, so that a failed write (`quill --help > /dev/full`)
// is an error line and status 1 instead of a silent 0.
int print_requested_text(const CLI::App& app, const CLI::ParseError& e) noexcept {
    try {
        std::ostringstream text, ignored;
        const int rc = app.exit(e, text, ignored);
        quill::Output out(stdout, "stdout");
        out.put(text.str());
        return rc;
    } catch (...) {
        return report_failure(std::current_exception());
    }
}

}  // namespace

int main(int argc, char** argv) {
    quill::reserve_standard_descriptors();
    quill::signals::install_fault_handlers();
    CLI::App app{"quill: run large language models from GGUF files"};
    app.require_subcommand(1);
    app.set_version_flag("--version", version_text, "Print the version, the build and the CPU kernels, and exit");

    InfoOptions info;
    CLI::App* info_cmd = app.add_subcommand("info", "Describe a GGUF model file (validates the whole file)");
    info_cmd->add_option("-m,--model,model", info.model, fmt::format("GGUF file (default: models/{})", kDefaultModel));
    info_cmd->add_flag("--tensors", info.tensors, "List every tensor");
    info_cmd->add_flag("--json", info.json, "Print JSON");

    TokenizeOptions tok;
    CLI::App* tok_cmd = app.add_subcommand("tokenize", "Print the token ids of a text (-p or stdin, used as is)");
    add_model_options(tok_cmd, tok.model);
    tok_cmd->add_option("-p,--prompt", tok.prompt, "Text to tokenize (default: stdin)");
    tok_cmd->add_flag("--no-bos", tok.no_bos, "Do not add BOS/EOS tokens");
    tok_cmd->add_flag("--pieces", tok.pieces, "Print one id<TAB>piece per line");
    tok_cmd->add_flag("--json", tok.json, "Print JSON");
    tok_cmd->add_flag("--parse-special", tok.parse_special, "Recognize control-token text like <|im_end|>");
    add_max_input_option(tok_cmd, tok.max_input_bytes);

    RunOptions run;
    CLI::App* run_cmd = app.add_subcommand("run", "Generate a completion for one prompt, streamed to stdout");
    add_model_options(run_cmd, run.model);
    add_engine_options(run_cmd, run.engine);
    auto* p_opt = run_cmd->add_option("-p,--prompt", run.prompt, "Prompt text");
    run_cmd->add_option("prompt", run.positional_prompt, "Prompt text, as -p");
    run_cmd->add_option("-f,--file", run.prompt_file, "Read the prompt from a file (- for stdin)")->excludes(p_opt);
    run_cmd->add_option("-n,--n-predict", run.n_predict, "Tokens to generate (-1: until EOS or a full context)")->capture_default_str();
    add_sampling_options(run_cmd, run.sampling, run.seed);
    add_lookup_option(run_cmd, run.lookup);
    add_constraint_options(run_cmd, run.constraint, true);
    run_cmd->add_option("--stop", run.stop, "Stop at this text (repeatable); it is not printed");
    auto* raw_flag = run_cmd->add_flag("--raw", run.raw, "Feed the prompt as is, without the chat template");
    run_cmd->add_option("--system", run.system, "A system message for the chat template")->excludes(raw_flag);
    add_template_option(run_cmd, run.chat_template);
    auto* json_flag = run_cmd->add_flag("--json", run.json, "Print one JSON record instead of streaming text");
    add_logprobs_option(run_cmd, run.logprobs, "With --json: log-probabilities of every generated token and this "
                                               "many alternatives")
        ->needs(json_flag);
    run_cmd->add_flag("-q,--quiet", run.quiet, "No load line and no stats line on stderr")->excludes("--verbose");
    add_max_input_option(run_cmd, run.max_input_bytes);

    TemplateOptions tmpl;
    CLI::App* tmpl_cmd = app.add_subcommand("template", "Print the text the chat template makes of a conversation");
    tmpl_cmd->add_option("-m,--model", tmpl.model, fmt::format("GGUF model (default: models/{})", kDefaultModel));
    add_template_option(tmpl_cmd, tmpl.chat_template);
    tmpl_cmd->add_option("--messages", tmpl.messages,
                         "JSON file (or - for stdin): an array of {role, content}, or {\"messages\": [...]} "
                         "(default: one user message \"Hello\")");
    tmpl_cmd->add_flag("--no-generation-prompt", tmpl.no_generation_prompt, "Do not open an assistant turn at the end");
    tmpl_cmd->add_option("--bos", tmpl.bos, "bos_token text (default: the model's)");
    tmpl_cmd->add_option("--eos", tmpl.eos, "eos_token text (default: the model's)");
    tmpl_cmd->add_flag("--tokens", tmpl.tokens, "Also print the token ids, on a line after the text");

    ChatCliOptions chat;
    CLI::App* chat_cmd = app.add_subcommand("chat", "Interactive chat (one message per line when stdin is not a terminal)");
    add_model_options(chat_cmd, chat.model);
    add_engine_options(chat_cmd, chat.engine);
    chat_cmd->add_option("-n,--n-predict", chat.n_predict, "Most tokens per reply (-1: until the end of the turn)")
        ->capture_default_str();
    add_sampling_options(chat_cmd, chat.sampling, chat.seed);
    add_lookup_option(chat_cmd, chat.lookup);
    add_constraint_options(chat_cmd, chat.constraint, true);
    chat_cmd->add_option("--stop", chat.stop, "Stop a reply at this text (repeatable)");
    chat_cmd->add_option("--system", chat.system, "The system message");
    add_template_option(chat_cmd, chat.chat_template);
    chat_cmd->add_option("--context-overflow", chat.overflow,
                         "When the conversation outgrows the context: drop-oldest (turns) or error")
        ->capture_default_str();
    add_max_input_option(chat_cmd, chat.max_input_bytes, "Longest message and /load file");
    chat_cmd->add_flag("-q,--quiet", chat.quiet, "No load line, no banner and no stats line after each reply");

    BatchCliOptions batch;
    CLI::App* batch_cmd = app.add_subcommand(
        "batch", "Generate replies for many prompts (plain lines, JSONL or OpenAI batch), continuously batched");
    add_model_options(batch_cmd, batch.model);
    add_engine_options(batch_cmd, batch.engine);
    batch_cmd->add_option("-i,--input", batch.input, "Input file (default or -: stdin)")->check(kNotEmpty);
    batch_cmd->add_option("-o,--output", batch.output, "Output JSONL file (default or -: stdout)")->check(kNotEmpty);
    batch_cmd->add_option("--parallel", batch.parallel, "Sequences decoded together (KV slots; no more than the requests)")
        ->capture_default_str()->check(CLI::Range(1, 1024));
    auto* resume_flag =
        batch_cmd->add_flag("--resume", batch.resume, "Skip the ids already in OUTPUT (a torn last line is dropped)");
    batch_cmd->add_flag("--overwrite", batch.overwrite, "Replace a non-empty OUTPUT (without it, or --resume, "
                                                        "a non-empty OUTPUT is refused)")
        ->excludes(resume_flag);
    batch_cmd->add_option("--format", batch.format,
                          "Input format: auto (by the .txt or .jsonl name, else by content), txt, jsonl or openai")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "txt", "jsonl", "openai"}));
    batch_cmd->add_option("--shard", batch.shard,
                          "Run shard K of N (1 <= K <= N): the K-th request, then every N-th (as Slurm array "
                          "indices 1..N)")
        ->capture_default_str();
    batch_cmd->add_option("--batch-tokens", batch.n_batch, "Tokens per forward pass (decode tokens + prefill chunks)")
        ->capture_default_str()->check(CLI::Range(1, 1 << 16));
    batch_cmd->add_option("-n,--n-predict", batch.n_predict, "Tokens to generate per request (-1: until EOS or a full "
                                                              "context)")->capture_default_str();
    add_sampling_options(batch_cmd, batch.sampling, batch.seed);
    add_lookup_option(batch_cmd, batch.lookup);
    add_constraint_options(batch_cmd, batch.constraint, false);
    batch_cmd->add_option("--stop", batch.stop, "Stop at this text (repeatable)");
    add_logprobs_option(batch_cmd, batch.logprobs, "Log-probabilities of every generated token and this many "
                                                   "alternatives, in each record (a request's own field wins)");
    auto* batch_raw = batch_cmd->add_flag("--raw", batch.raw, "Feed prompts as they are, without the chat template");
    batch_cmd->add_option("--system", batch.system, "A system message for prompts without messages")
        ->excludes(batch_raw);
    add_template_option(batch_cmd, batch.chat_template);
    batch_cmd->add_flag("-q,--quiet", batch.quiet, "No progress line, no summary and no shard line (warnings and "
                                                    "the count of failed requests still show)");
    batch_cmd->add_option("--max-input-bytes", batch.max_input_bytes, "Largest input read")->capture_default_str();

    PerplexityCliOptions ppl;
    CLI::App* ppl_cmd = app.add_subcommand("perplexity", "Perplexity of a text file, as llama.cpp's llama-perplexity");
    add_model_options(ppl_cmd, ppl.model);
    add_engine_options(ppl_cmd, ppl.engine);
    ppl_cmd->add_option("-f,--file", ppl.file, "The text (- for stdin)")->required();
    ppl_cmd->add_option("--chunks", ppl.max_chunks, "Score at most this many chunks of -c tokens (0: all)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
    ppl_cmd->add_option("--batch", ppl.n_batch, "Tokens per forward pass")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
    ppl_cmd->add_flag("--json", ppl.json, "Print one JSON record (with the running estimate after each chunk)");
    ppl_cmd->add_flag("-q,--quiet", ppl.quiet, "No load line and no speed line on stderr")->excludes("--verbose");
    add_max_input_option(ppl_cmd, ppl.max_input_bytes, "Longest text read");

    BenchCliOptions bench;
    CLI::App* bench_cmd = app.add_subcommand("bench", "Measure prefill and decode speed");
    bench_cmd->add_option("-m,--model", bench.model, "GGUF model (default: models/" + std::string(kDefaultModel) + ")");
    bench_cmd->add_option("--synthetic", bench.synthetic,
                          fmt::format("Random weights in a preset shape: {}",
                                      fmt::join(quill::synthetic_shape_names(), ", ")));
    bench_cmd->add_option("--dtype", bench.dtype,
                          "Weight type of --synthetic (f32, f16, bf16, q8_0, q4_0 (default), ...)");
    bench_cmd->add_option("--save", bench.save, "Write the --synthetic model to this GGUF file");
    bench_cmd->add_option("-p,--n-prompt", bench.bench.n_prompt,
                          "Prefill tests: prompt lengths, comma-separated (pp N; 0: none)")
        ->delimiter(',')
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 24));
    bench_cmd->add_option("-n,--n-gen", bench.bench.n_gen, "Decode tests: decoded tokens, comma-separated (tg N; 0: none)")
        ->delimiter(',')
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 24));
    bench_cmd->add_option("-r,--reps", bench.bench.reps, "Runs of each test")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    bench_cmd->add_option("--batch", bench.bench.n_batch, "Prefill tokens per forward pass")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 24));
    bench_cmd->add_option("--batch-decode", bench.bench.n_seq,
                          "Sequences decoded together in each decode test (tokens/s counts all of them)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1024));
    bench_cmd->add_flag("--json", bench.json, "Print JSON (medians, min, max, every run)");
    add_engine_options(bench_cmd, bench.engine);

    PullCliOptions pull;
    CLI::App* pull_cmd = app.add_subcommand(
        "pull", "Download a GGUF model from Hugging Face into its cache (-m hf:NAME does it on first use)");
    pull_cmd->add_option("name", pull.spec, "owner/repo[:QUANT] (default quant: Q4_K_M, else the closest)")
        ->required();
    pull_cmd->add_flag("-q,--quiet", pull.quiet, "No progress and no notes on stderr");

    CLI::App* list_cmd = app.add_subcommand("list", "List the GGUF models in the Hugging Face cache");

    std::string rm_spec;
    CLI::App* rm_cmd = app.add_subcommand("rm", "Remove a model from the Hugging Face cache");
    rm_cmd->add_option("name", rm_spec, "owner/repo[:QUANT] (without QUANT: the whole repository)")->required();

    refuse_empty_values(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return print_requested_text(app, e);  // --help, --version
        print_line("error: ", parse_error_message(app, argc, argv, e) + " (see quill --help)");
        return 2;
    }
    try {
        if (*info_cmd) return cmd_info(info);
        if (*tok_cmd) return cmd_tokenize(tok);
        if (*run_cmd) return cmd_run(run);
        if (*tmpl_cmd) return cmd_template(tmpl);
        if (*chat_cmd) return cmd_chat(chat);
        if (*batch_cmd) return cmd_batch(batch);
        if (*bench_cmd) return cmd_bench(bench);
        if (*ppl_cmd) return cmd_perplexity(ppl);
        if (*pull_cmd) return cmd_pull(pull);
        if (*list_cmd) return print_stdout(quill::hub::list_models());
        if (*rm_cmd) return print_stdout(quill::hub::remove_model(rm_spec));
    } catch (...) {
        return report_failure(std::current_exception());
    }
    return 0;
}
