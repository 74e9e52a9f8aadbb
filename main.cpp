// quill: the command-line front end. Parses options, calls the engine, catches once.
#include "engine/cli/commands.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/thread_pool.h"
#include "engine/error.h"
#include "engine/hub/pull.h"
#include "engine/io/output.h"
#include "engine/io/signals.h"
#include "engine/model/synthetic.h"
#include "engine/session.h"

#include "quill_build_info.h"  // generated at build time: QUILL_GIT_REVISION

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace quill::cli;

namespace fs = std::filesystem;

using quill::UsageError;

constexpr const char* kDefaultModel = quill::kDefaultModelFile;

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
    cmd->add_option("--devices", o.devices,
                    "Split the layers across backends: DEVICE[@FIRST_LAYER],... e.g. cpu,cpu or cpu,cpu@12")
        ->check(kNotEmpty);
    cmd->add_option("--gpu-layers", o.gpu_layers, "Run the last N layers on the GPU and the rest on the CPU (also -ngl)")
        ->check(kNotEmpty)
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
    cmd->add_option("--kv-type", o.kv_type, "KV cache type")->check(CLI::IsMember({"f16", "f32"}));
    cmd->add_flag("-v,--verbose", o.verbose, "Say why the CPU runs the model when no GPU can (no driver, no device)");
}

void add_max_input_option(CLI::App* cmd, size_t& max_bytes,
                          const char* help = "Longest prompt read from a file or stdin") {
    cmd->add_option("--max-input-bytes", max_bytes, help)
        ->capture_default_str()
        ->check(kNotEmpty)
        ->check(CLI::Range(size_t{1}, size_t{1} << 40));
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

CLI::Option* add_tools_option(CLI::App* cmd, std::string& tools) {
    return cmd->add_option("--tools", tools,
                           "JSON file: an array of OpenAI tool definitions ({\"type\": \"function\", \"function\": "
                           "{\"name\", \"description\", \"parameters\"}}) for the chat template")
        ->check(kNotEmpty);
}

void add_reasoning_option(CLI::App* cmd, std::string& reasoning) {
    cmd->add_option("--reasoning", reasoning,
                    "A reasoning model's thinking before its answer: show (dim on a terminal, else between "
                    "\"Thinking...\" and \"...done thinking.\") or hide")
        ->check(CLI::IsMember({"show", "hide"}))
        ->capture_default_str();
}

void add_tool_choice_option(CLI::App* cmd, std::string& tool_choice, CLI::Option* tools, const char* per) {
    cmd->add_option("--tool-choice", tool_choice,
                    fmt::format("none, auto, required or a tool's name: required or a name makes {} a call (to that "
                                "tool) in the template's syntax, with arguments valid against its parameters",
                                per))
        ->check(kNotEmpty)
        ->needs(tools);
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

// --lookup N: prompt lookup's guesses per decode step (greedy: the text does not change; sampled: its distribution).
void add_lookup_option(CLI::App* cmd, int& lookup) {
    cmd->add_option("--lookup", lookup,
                    "Guess up to N next tokens per step from earlier text and check them in the same pass (greedy: "
                    "the same text; sampled: the same distribution; faster where it repeats its prompt; not with "
                    "penalties or a grammar; 0: off)")
        ->capture_default_str()
        ->check(kNotEmpty)
        ->check(CLI::Range(0, quill::kMaxLookup));
}

// --draft-model FILE and --draft N: speculative decoding with a small model of the same vocabulary.
void add_draft_options(CLI::App* cmd, std::string& draft_model, int& draft) {
    cmd->add_option("--draft-model", draft_model,
                    "A small model with the same vocabulary guesses the next tokens, checked in one pass of the "
                    "model (greedy: the same text; sampled: the same distribution; not with penalties or a grammar)")
        ->check(kNotEmpty);
    cmd->add_option("--draft", draft,
                    "Tokens the draft model guesses per step (0: adaptive, more while they are accepted)")
        ->capture_default_str()
        ->check(kNotEmpty)
        ->check(CLI::Range(0, quill::kMaxLookup));
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
    } catch (const nlohmann::json::exception& e) {
        // JSON of a type or shape that a reader did not check: quill's defect; the library's text would mean
        // nothing to the user, its number helps the report
        print_line("error: ", fmt::format("internal error: JSON of an unexpected type or shape (json error {}); "
                                          "please report it with the input",
                                          e.id));
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
    CLI::App* tok_cmd =
        app.add_subcommand("tokenize", "Print the token ids of a text (an argument, -p or stdin, used as is)");
    add_model_options(tok_cmd, tok.model);
    auto* tok_p = tok_cmd->add_option("-p,--prompt", tok.prompt, "Text to tokenize (default: stdin)");
    tok_cmd->add_option("text", tok.prompt, "Text to tokenize, as -p (one argument: quote it)")->excludes(tok_p);
    tok_cmd->add_flag("--no-bos", tok.no_bos, "Do not add BOS/EOS tokens");
    tok_cmd->add_flag("--pieces", tok.pieces,
                      "Print one id<TAB>text per line: the text each token stands for, as llama-tokenize prints it "
                      "(\\xNN: a byte of a character the token holds only part of)");
    tok_cmd->add_flag("--json", tok.json, "Print JSON");
    tok_cmd->add_flag("--parse-special", tok.parse_special, "Recognize control-token text like <|im_end|>");
    add_max_input_option(tok_cmd, tok.max_input_bytes);

    RunOptions run;
    CLI::App* run_cmd = app.add_subcommand("run", "Generate a completion for one prompt, streamed to stdout");
    add_model_options(run_cmd, run.model);
    add_engine_options(run_cmd, run.engine);
    auto* p_opt = run_cmd->add_option("-p,--prompt", run.prompt, "Prompt text");
    run_cmd->add_option("prompt", run.positional_prompt, "Prompt text, as -p (several words: joined by spaces)");
    run_cmd->add_option("-f,--file", run.prompt_file, "Read the prompt from a file (- for stdin)")->excludes(p_opt);
    run_cmd->add_option("-n,--n-predict", run.n_predict, "Tokens to generate (-1: until EOS or a full context)")->capture_default_str();
    add_sampling_options(run_cmd, run.sampling, run.seed);
    add_lookup_option(run_cmd, run.lookup);
    add_draft_options(run_cmd, run.draft_model, run.draft);
    add_constraint_options(run_cmd, run.constraint, true);
    run_cmd->add_option("--stop", run.stop, "Stop at this text (repeatable); it is not printed");
    auto* raw_flag = run_cmd->add_flag("--raw", run.raw, "Feed the prompt as is, without the chat template");
    run_cmd->add_option("--system", run.system, "A system message for the chat template")->excludes(raw_flag);
    add_template_option(run_cmd, run.chat_template);
    auto* run_tools = add_tools_option(run_cmd, run.tools)->excludes(raw_flag);
    add_tool_choice_option(run_cmd, run.tool_choice, run_tools, "the answer");
    add_reasoning_option(run_cmd, run.reasoning);
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
    add_max_input_option(tmpl_cmd, tmpl.max_input_bytes, "Longest --messages file read");

    ChatCliOptions chat;
    CLI::App* chat_cmd = app.add_subcommand("chat", "Interactive chat (one message per line when stdin is not a terminal)");
    add_model_options(chat_cmd, chat.model);
    add_engine_options(chat_cmd, chat.engine);
    chat_cmd->add_option("-n,--n-predict", chat.n_predict, "Most tokens per reply (-1: until the end of the turn)")
        ->capture_default_str();
    add_sampling_options(chat_cmd, chat.sampling, chat.seed);
    add_lookup_option(chat_cmd, chat.lookup);
    add_draft_options(chat_cmd, chat.draft_model, chat.draft);
    add_constraint_options(chat_cmd, chat.constraint, true);
    chat_cmd->add_option("--stop", chat.stop, "Stop a reply at this text (repeatable)");
    chat_cmd->add_option("--system", chat.system, "The system message");
    add_template_option(chat_cmd, chat.chat_template);
    add_tool_choice_option(chat_cmd, chat.tool_choice, add_tools_option(chat_cmd, chat.tools), "each reply");
    add_reasoning_option(chat_cmd, chat.reasoning);
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
    auto* input_opt =
        batch_cmd->add_option("-i,--input", batch.input, "Input file (default or -: stdin)")->check(kNotEmpty);
    batch_cmd->add_option("input", batch.input, "Input file, as -i")->check(kNotEmpty)->excludes(input_opt);
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
    add_draft_options(batch_cmd, batch.draft_model, batch.draft);
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
    add_max_input_option(batch_cmd, batch.max_input_bytes, "Largest input read");

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
    // llama.cpp's -ngl, a name CLI11 cannot give an option (one dash, several letters), read as --gpu-layers.
    std::vector<char*> args(argv, argv + argc);
    char gpu_layers_name[] = "--gpu-layers";
    for (char*& a : args) {
        if (std::string_view(a) == "--") break;
        if (std::string_view(a) == "-ngl") a = gpu_layers_name;
    }
    try {
        app.parse(argc, args.data());
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
