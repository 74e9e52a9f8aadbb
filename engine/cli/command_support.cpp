// What the commands share: diagnostics, input, the session options, output constraints.
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
#include "engine/chat/tool_calls.h"
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

// One line on stderr, "quill: " + prefix + the message escaped and capped (escape_line: a model file's text can
// carry escape sequences and run to megabytes). Never throws.
void print_line(std::string_view prefix, std::string_view message) noexcept {
    try {
        quill::print_stderr_noexcept(fmt::format("quill: {}{}\n", prefix, quill::escape_line(message)));
    } catch (...) {  // out of memory formatting a diagnostic: nothing better to do
    }
}

quill::SessionOptions session_options(const ModelOptions& m, const EngineOptions& e) {
    quill::SessionOptions o;
    o.model = m.model;
    o.tokenizer = m.tokenizer;
    o.device = quill::parse_device(e.device);
    o.devices = e.devices;
    o.gpu_layers = e.gpu_layers;
    o.threads = e.threads;
    o.ctx = e.ctx;
    o.kv_type = quill::parse_kv_type(e.kv_type);
    o.verbose = e.verbose;
    o.cancel = &quill::signals::stop_flag();  // raised only once a command installs the handlers
    return o;
}

std::unique_ptr<quill::Tokenizer> load_tokenizer(const quill::GgufFile& file, const ModelOptions& o) {
    if (!o.tokenizer.empty()) return quill::Tokenizer::from_spm_file(o.tokenizer, &file);
    return quill::Tokenizer::from_gguf(file);
}

std::string read_stdin(size_t max_bytes) { return quill::read_capped(STDIN_FILENO, "stdin", max_bytes); }

// One warning when the tokenizer could not keep all of the text (invalid UTF-8, characters not in the vocabulary).
void warn_if_lossy(const quill::Tokenizer& tok, std::string_view text, const std::vector<int32_t>& ids) {
    const std::string loss = tok.describe_loss(text, ids);
    if (loss.empty()) return;
    print_line("warning: the text was changed by tokenizing: ", loss);
}

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

OutputConstraint compile_output_constraint(const ConstraintOptions& c) {
    const auto spec = constraint_spec(c);
    if (!spec) return {};
    auto grammar = quill::grammar::compile_constraint(*spec, &quill::signals::stop_flag());
    for (const std::string& w : grammar->warnings) warn_line(w);
    return {grammar};
}

// run's prompt: -p, the argument, -f FILE (- for stdin) or stdin; nullopt when none is given and stdin is a terminal.
nlohmann::ordered_json tools_template_vars(const std::string& path, const std::string& tool_choice, size_t max_bytes) {
    nlohmann::ordered_json vars = nlohmann::ordered_json::object();
    if (!path.empty())
        vars["tools"] =
            quill::chat::parse_tools(quill::read_prompt_file(path, max_bytes, "the tools file"), "--tools " + path);
    if (!tool_choice.empty()) vars["tool_choice"] = quill::chat::tool_choice_value(tool_choice);
    return vars;
}

std::optional<std::string> read_run_prompt(const RunOptions& o) {
    if (!o.positional_prompt.empty() && (o.prompt || !o.prompt_file.empty()))
        throw UsageError("give the prompt once: as an argument, with -p or with -f");
    if (o.prompt) return *o.prompt;
    // Several words unquoted are one prompt, as `ollama run MODEL why is the sky blue` takes them.
    if (!o.positional_prompt.empty()) return fmt::format("{}", fmt::join(o.positional_prompt, " "));
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


}  // namespace quill::cli
