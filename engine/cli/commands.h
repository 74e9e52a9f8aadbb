// The commands of the command line: each one's options, as main.cpp's parser fills them, and what it does. main.cpp
// registers the options and dispatches; these files hold the commands (run and chat in generate_commands.cpp, batch
// in batch_command.cpp, the others in model_commands.cpp) and what they share (command_support.cpp).
#pragma once

#include "engine/grammar/constraint.h"
#include "engine/io/input.h"
#include "engine/runtime/bench.h"
#include "engine/runtime/draft.h"
#include "engine/runtime/generator.h"
#include "engine/runtime/sampler.h"
#include "engine/session.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace quill::cli {

struct ModelOptions {
    std::string model;
    std::string tokenizer;  // a sentencepiece tokenizer.model overriding the GGUF's vocabulary
};

struct EngineOptions {
    int threads = 0;
    int64_t ctx = 0;
    std::string device = "auto";
    std::string devices;                // --devices (SessionOptions::devices)
    std::optional<int64_t> gpu_layers;  // --gpu-layers
    std::string kv_type = "f16";
    bool verbose = false;
};

struct InfoOptions {
    std::string model;
    bool tensors = false;
    bool json = false;
};

struct TokenizeOptions {
    ModelOptions model;
    std::optional<std::string> prompt;
    bool no_bos = false;
    bool pieces = false;
    bool json = false;
    bool parse_special = false;
    size_t max_input_bytes = quill::kDefaultMaxInputBytes;
};

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
    std::vector<std::string> positional_prompt;  // `quill run why is the sky blue`: the words, as -p with spaces
    std::string prompt_file;
    int n_predict = -1;
    quill::SamplingParams sampling;
    std::optional<uint64_t> seed;
    std::vector<std::string> stop;
    int logprobs = -1;
    int lookup = 0;
    std::string draft_model;  // --draft-model FILE
    int draft = 0;            // --draft N (0: adaptive)
    bool raw = false;
    bool json = false;
    std::string system;
    std::string chat_template;
    std::string tools;  // --tools FILE
    std::string tool_choice;  // --tool-choice none|auto|required|NAME
    std::string reasoning = "show";  // --reasoning show|hide
    size_t max_input_bytes = quill::kDefaultMaxInputBytes;
    bool quiet = false;  // no load line and no stats line
    ConstraintOptions constraint;
};

// The output constraint bound to the model's vocabulary: compile first (before the model loads), bind after, with
// the chat format's markers that are control tokens (chat::marker_tokens) as their text, so that the grammar's
// literals can choose them as batch's grammars do.
struct OutputConstraint {
    std::shared_ptr<const quill::grammar::Grammar> grammar;
    std::shared_ptr<quill::grammar::TokenGrammar> bind(const quill::Tokenizer& tok,
                                                       std::span<const int32_t> shown = {}) const {
        return grammar ? std::make_shared<quill::grammar::TokenGrammar>(grammar, tok, shown) : nullptr;
    }
};

struct TemplateOptions {
    std::string model;
    std::string chat_template;
    std::string messages;  // a file, or - for stdin
    bool no_generation_prompt = false;
    std::optional<std::string> bos, eos;
    bool tokens = false;
    size_t max_input_bytes = quill::kDefaultMaxInputBytes;  // the longest messages file read
};

struct ChatCliOptions {
    ModelOptions model;
    EngineOptions engine;
    int n_predict = -1;
    quill::SamplingParams sampling;
    std::optional<uint64_t> seed;
    std::vector<std::string> stop;
    std::string system;
    std::string chat_template;
    std::string tools;        // --tools FILE
    std::string tool_choice;  // --tool-choice none|auto|required|NAME
    std::string overflow = "drop-oldest";
    std::string reasoning = "show";  // --reasoning show|hide
    size_t max_input_bytes = quill::kDefaultMaxInputBytes;
    bool quiet = false;
    int lookup = 0;
    std::string draft_model;
    int draft = 0;
    ConstraintOptions constraint;
};

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
    std::string draft_model;
    int draft = 0;
    bool raw = false;
    bool quiet = false;
    size_t max_input_bytes = size_t{1} << 30;
    std::string system;
    std::string chat_template;
    ConstraintOptions constraint;
};

struct BenchCliOptions {
    std::string model;
    std::string synthetic;
    std::optional<std::string> dtype;  // of --synthetic; q4_0 when not given
    std::string save;
    EngineOptions engine;
    quill::BenchOptions bench;
    bool json = false;
};

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

struct PullCliOptions {
    std::string spec;
    bool quiet = false;
};

// ---- the commands: each returns the exit status, or throws (main.cpp's report_failure says what went wrong) ----

int cmd_info(const InfoOptions& o);
int cmd_tokenize(const TokenizeOptions& o);
int cmd_run(RunOptions& o);
int cmd_template(const TemplateOptions& o);
int cmd_chat(ChatCliOptions& o);
int cmd_batch(BatchCliOptions& o);
int cmd_bench(BenchCliOptions& o);
int cmd_perplexity(const PerplexityCliOptions& o);
int cmd_pull(const PullCliOptions& o);
// `quill run` with no prompt at a terminal: `quill chat` with run's options.
int chat_from_run(const RunOptions& o);
// `quill list` and `quill rm`: their text on stdout.
int print_stdout(const std::string& text);

// ---- what the commands share ----

// One line on stderr, "quill: " + prefix + the message escaped and capped. Never throws.
void print_line(std::string_view prefix, std::string_view message) noexcept;
// print_line("warning: ", message).
void warn_line(const std::string& message);
// stdin, read up to max_bytes (UsageError past them).
std::string read_stdin(size_t max_bytes);
quill::SessionOptions session_options(const ModelOptions& m, const EngineOptions& e);
std::unique_ptr<quill::Tokenizer> load_tokenizer(const quill::GgufFile& file, const ModelOptions& o);
// One warning when the tokenizer could not keep all of the text (invalid UTF-8, characters not in the vocabulary).
void warn_if_lossy(const quill::Tokenizer& tok, std::string_view text, const std::vector<int32_t>& ids);
// The constraint the options ask for (at most one; UsageError otherwise), compiled before the model loads.
std::optional<quill::grammar::ConstraintSpec> constraint_spec(const ConstraintOptions& c);
OutputConstraint compile_output_constraint(const ConstraintOptions& c);
// The template variables of --tools FILE and --tool-choice: {"tools": [...], "tool_choice": ...}
// (chat::parse_tools checks the tools, chat::tool_choice_value makes the choice), each left out when not given.
nlohmann::ordered_json tools_template_vars(const std::string& path, const std::string& tool_choice, size_t max_bytes);
// run's prompt: -p, the argument, -f FILE (- for stdin) or stdin; nullopt when none is given and stdin is a terminal.
std::optional<std::string> read_run_prompt(const RunOptions& o);
// --draft-model and --draft against --lookup, before anything loads: UsageError naming the flags.
void check_draft_options(const std::string& draft_model, int draft, int lookup);
// The --draft-model file as a Drafter for `target`'s requests: on the same kind of backend, as many KV slots and as
// long a context, its vocabulary checked (check_same_vocabulary); null when path is empty. It keeps the draft model
// loaded. Its load line goes to stderr unless quiet.
std::shared_ptr<quill::Drafter> open_drafter(const std::string& path, const quill::Session& target,
                                             const EngineOptions& engine, bool quiet);
// The stats line's report of the guesses: "; lookup: A of G guesses accepted (R%)" (or "draft:"); "" without
// lookup or a draft model.
std::string guesses_phrase(const quill::GenerationParams& gp, const quill::GenerationStats& st);
// The text without one final line ending ("\n" or "\r\n"): not part of the user's message.
std::string without_final_newline(std::string text);

}  // namespace quill::cli
