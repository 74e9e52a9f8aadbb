// run, template and chat.
#include "engine/cli/commands.h"

#include "engine/runtime/bench.h"
#include "engine/runtime/logprobs_json.h"
#include "engine/runtime/perplexity.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/batch/input.h"
#include "engine/cli/progress.h"
#include "engine/batch/records.h"
#include "engine/batch/runner.h"
#include "engine/chat/answer_stream.h"
#include "engine/chat/chat_format.h"
#include "engine/chat/conversation.h"
#include "engine/chat/markers.h"
#include "engine/chat/reasoning.h"
#include "engine/cli/reasoning_printer.h"
#include "engine/chat/tool_calls.h"
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

#include <algorithm>
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

void check_draft_options(const std::string& draft_model, int draft, int lookup) {
    if (draft != 0 && draft_model.empty())
        throw UsageError(fmt::format("--draft {} needs a draft model: give --draft-model FILE", draft));
    if (lookup > 0 && !draft_model.empty())
        throw UsageError("--lookup and --draft-model cannot be combined: choose one");
}

namespace {

// A Drafter and the draft model it runs on, kept loaded together.
struct DraftModel {
    std::unique_ptr<quill::Session> session;
    std::optional<quill::Drafter> drafter;
};

// Refuses a prompt of more bytes than n_ctx tokens of the vocabulary could hold, before tokenizing it: megabytes of
// one repeated letter take the tokenizer seconds and gigabytes, and Ctrl-C is not seen until it ends. No token
// stands for more bytes of text than its piece holds (SPM and byte-level pieces spell spaces and bytes with more
// bytes than they stand for), so such a prompt is longer than the context whatever it tokenizes to; the factor 2
// leaves room for normalizations that shorten text.
void refuse_if_cannot_fit(const quill::Tokenizer& tok, std::string_view text, int64_t n_ctx) {
    if (static_cast<int64_t>(text.size()) <= n_ctx) return;
    size_t longest = 1;
    for (int32_t id = 0; id < tok.n_vocab(); ++id) longest = std::max(longest, tok.piece(id).size());
    if (text.size() / 2 / longest > static_cast<uint64_t>(n_ctx))
        throw UsageError(fmt::format("the prompt is {} bytes, longer than the context of {} (raise -c)",
                                     text.size(), n_ctx));
}

}  // namespace

std::shared_ptr<quill::Drafter> open_drafter(const std::string& path, const quill::Session& target,
                                             const EngineOptions& engine, bool quiet) {
    if (path.empty()) return nullptr;
    quill::SessionOptions so = session_options(ModelOptions{path, ""}, engine);
    so.device = target.backend->name() == "cuda" ? quill::DeviceChoice::cuda : quill::DeviceChoice::cpu;
    so.ctx = target.n_ctx;
    so.n_slots = target.backend->kv_shape().n_slots;
    auto draft = std::make_shared<DraftModel>();
    draft->session = quill::Session::open(so);
    if (draft->session->backend->max_rewind() == 0)  // (the draft model goes back over every rejected guess)
        throw UsageError(fmt::format("--draft-model {}: {} models cannot draft, their recurrent state cannot take "
                                     "back a rejected guess", path, draft->session->model->config.gguf_arch()));
    quill::check_same_vocabulary(*target.tokenizer, *draft->session->tokenizer, path);
    draft->drafter.emplace(*draft->session->backend);
    if (!quiet) quill::print_stderr("{} (draft model)\n", draft->session->load_line());
    return {draft, &*draft->drafter};
}

std::string guesses_phrase(const quill::GenerationParams& gp, const quill::GenerationStats& st) {
    if (gp.lookup <= 0 && !gp.drafter) return "";
    return fmt::format("; {}: {} of {} guesses accepted ({:.0f}%)", gp.drafter ? "draft" : "lookup",
                       st.accepted_tokens, st.guessed_tokens, 100.0 * st.acceptance_rate());
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
    gp.draft = o.draft;
    check_draft_options(o.draft_model, o.draft, o.lookup);
    gp.validate();
    const OutputConstraint constraint = compile_output_constraint(o.constraint);
    nlohmann::ordered_json template_vars = tools_template_vars(o.tools, o.tool_choice, o.max_input_bytes);

    auto session = quill::Session::open(session_options(o.model, o.engine));
    const quill::Tokenizer* tok = session->tokenizer.get();
    quill::Backend* backend = session->backend.get();
    const int64_t n_ctx = session->n_ctx;
    const double load_ms = session->load_ms;
    if (!o.quiet) quill::print_stderr("{}\n", session->load_line());
    gp.drafter = open_drafter(o.draft_model, *session, o.engine, o.quiet);

    // The prompt as the user message of the model's chat format, unless --raw feeds it as is.
    std::vector<int32_t> prompt;
    quill::chat::ToolCallSyntax tool_syntax = quill::chat::ToolCallSyntax::none;
    quill::chat::ReasoningSyntax reasoning = quill::chat::ReasoningSyntax::none;
    refuse_if_cannot_fit(*tok, text, n_ctx);
    if (o.raw) {
        gp.grammar = constraint.bind(*tok);
        prompt = quill::chat::prompt_tokens(*tok, nullptr, text, o.system, &quill::signals::stop_flag());
        warn_if_lossy(*tok, text, prompt);
    } else {
        const std::vector<int32_t> plain = tok->encode(text, false, false, &quill::signals::stop_flag());
        warn_if_lossy(*tok, text, plain);
        // Too long for the context already: said as with --raw, before the template renders (and caps) megabytes.
        if (static_cast<int64_t>(plain.size()) > n_ctx)
            throw UsageError(fmt::format("the prompt is {} tokens before the chat template, longer than the context "
                                         "of {} (raise -c)",
                                         plain.size(), n_ctx));
        auto format = quill::chat::ChatFormat::choose(&session->model->file, tok, o.chat_template, warn_line, "--raw");
        tool_syntax = quill::chat::tool_call_syntax(format.source());
        reasoning = quill::chat::reasoning_syntax(format.source());
        gp.shown_tokens = quill::chat::marker_tokens(*tok, tool_syntax, reasoning);
        gp.grammar = constraint.bind(*tok, gp.shown_tokens);
        // --tool-choice required or a name: the answer is a call, unless --json-schema, --grammar... say otherwise
        if (auto forced = quill::chat::tool_choice_constraint(template_vars, tool_syntax, "--tool-choice");
            forced && !gp.grammar)
            gp.grammar = quill::grammar::token_grammar(*forced, *tok, gp.shown_tokens);
        // A signal stops a runaway template too (the handlers are installed above, before anything renders).
        prompt = quill::chat::prompt_tokens(*tok, &format, text, o.system, &quill::signals::stop_flag(), template_vars);
    }
    const bool opened_think = quill::chat::prompt_opens_think(*tok, prompt);
    quill::Generation gen(*tok, std::move(prompt), gp, n_ctx);

    // Text streams to stdout as it comes, reasoning apart from the answer; a failed write (a full disk, a closed
    // pipe) stops the generation at once.
    quill::Output out(stdout, "stdout");
    quill::chat::ReasoningPrinter printer(out, quill::chat::reasoning_display(o.reasoning, STDOUT_FILENO));
    quill::chat::AnswerSinks sinks;  // nothing shown with --json
    if (!o.json)
        sinks = {[&](std::string_view t) { printer.reasoning(t); }, [&](std::string_view t) { printer.content(t); },
                 [&](const quill::chat::ToolCall& call) { printer.call(call); }};
    quill::chat::AnswerStream split(reasoning, opened_think, tool_syntax, template_vars, std::move(sinks));
    auto on_text = [&](std::string_view piece) { split.push(piece); };
    quill::GenerateOptions go;
    go.cancel = &quill::signals::stop_flag();
    quill::GenerationStats st = quill::generate(*backend, gen, 0, on_text, go);
    split.finish();
    if (!o.json) printer.finish();
    const quill::chat::ParsedAnswer answer = split.calls();
    const std::string_view finish = quill::chat::openai_finish_reason(gen.finish_reason(), !answer.calls.empty());
    if (gen.finish_reason() == quill::FinishReason::context)
        quill::print_stderr("\nquill: the context of {} tokens is full; stopping (finish reason \"length\")\n", n_ctx);
    if (o.json) {
        // The answer's tool calls as OpenAI's, out of its text (as quill batch's records give them).
        nlohmann::json j{{"text", answer.text},
                         {"finish_reason", finish},
                         {"prompt_tokens", st.prompt_tokens},
                         {"completion_tokens", st.completion_tokens},
                         {"seed", gen.seed()},
                         {"timings",
                          {{"load_ms", load_ms},
                           {"ttft_ms", st.ttft_ms},
                           {"prefill_tokens_per_s", st.prefill_tokens_per_s()},
                           {"decode_tokens_per_s", st.decode_tokens_per_s()}}}};
        if (!split.answer().reasoning.empty()) j["reasoning_content"] = split.answer().reasoning;
        if (!answer.calls.empty()) j["tool_calls"] = quill::chat::openai_tool_calls(answer.calls, tool_syntax, gen.seed());
        if (gp.logprobs >= 0) j["logprobs"] = quill::logprobs_content(*tok, gen.logprobs(), true, gp.shown_tokens);
        if (gp.lookup > 0 || gp.drafter)
            j[gp.drafter ? "draft" : "lookup"] = {{"guessed", st.guessed_tokens},
                                                  {"accepted", st.accepted_tokens},
                                                  {"acceptance_rate", st.acceptance_rate()}};
        out.put(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    }
    if (!o.quiet)
        quill::print_stderr("\nquill: {} prompt tokens, {} generated; time to first token {:.0f} ms; prefill {:.1f} "
                            "tok/s; decode {:.1f} tok/s; finish reason {}{}\n",
                            st.prompt_tokens, st.completion_tokens, st.ttft_ms, st.prefill_tokens_per_s(),
                            st.decode_tokens_per_s(), finish, guesses_phrase(gp, st));
    // Stopped by a signal: the output is complete as far as it goes; the exit status says which signal.
    if (gen.finish_reason() == quill::FinishReason::interrupted) return 128 + quill::signals::last();
    return 0;
}

int cmd_template(const TemplateOptions& o) {
    quill::chat::ChatRequest request;
    request.messages.push_back({{"role", "user"}, {"content", "Hello"}});
    if (!o.messages.empty()) {
        const std::string text =
            quill::read_prompt_file(o.messages, o.max_input_bytes, "the messages file");
        request = quill::chat::parse_chat_request(text, o.messages == "-" ? "stdin" : o.messages);
    }
    // A model is read when one is named, when no template is given, or for the token ids.
    std::optional<quill::GgufFile> file;
    std::unique_ptr<quill::Tokenizer> tok;
    if (!o.model.empty() || o.chat_template.empty() || o.tokens) {
        file.emplace(quill::open_model_file(quill::resolve_model_path(o.model)));
        tok = quill::Tokenizer::from_gguf(*file);
    }
    quill::chat::ChatFormat format =
        quill::chat::ChatFormat::choose(file ? &*file : nullptr, tok.get(), o.chat_template, warn_line);
    if (o.bos) format.set_bos_text(*o.bos);
    if (o.eos) format.set_eos_text(*o.eos);
    quill::Output out(stdout, "stdout");
    out.write(format.render(request.messages, !o.no_generation_prompt, nullptr, request.vars).text);
    if (o.tokens) {
        std::vector<int32_t> ids = format.tokenize(*tok, request.messages, !o.no_generation_prompt, nullptr, request.vars);
        out.write(fmt::format("\n{}\n", fmt::join(ids, " ")));
    }
    out.flush();
    return 0;
}

int cmd_chat(ChatCliOptions& o) {
    o.sampling.seed = o.seed ? *o.seed : std::random_device{}();
    quill::GenerationParams gp;
    gp.max_tokens = o.n_predict;
    gp.stop = o.stop;
    gp.sampling = o.sampling;
    gp.lookup = o.lookup;
    gp.draft = o.draft;
    check_draft_options(o.draft_model, o.draft, o.lookup);
    gp.validate();
    const quill::chat::ContextOverflow overflow = quill::chat::parse_context_overflow(o.overflow);
    const OutputConstraint constraint = compile_output_constraint(o.constraint);
    nlohmann::ordered_json template_vars = tools_template_vars(o.tools, o.tool_choice, o.max_input_bytes);
    quill::SessionOptions so = session_options(o.model, o.engine);
    so.state_snapshots = quill::chat::kStateSnapshots;  // (a recurrent model's, where each prompt's history ends)
    auto session = quill::Session::open(so);
    if (!o.quiet) quill::print_stderr("{}\n", session->load_line());
    gp.drafter = open_drafter(o.draft_model, *session, o.engine, o.quiet);
    auto format = quill::chat::ChatFormat::choose(&session->model->file, session->tokenizer.get(), o.chat_template,
                                                  warn_line);
    gp.grammar = constraint.bind(*session->tokenizer,
                                 quill::chat::marker_tokens(*session->tokenizer,
                                                            quill::chat::tool_call_syntax(format.source()),
                                                            quill::chat::reasoning_syntax(format.source())));
    quill::chat::Conversation conv(*session->backend, *session->tokenizer, format, session->n_ctx, gp, overflow);
    // --tool-choice required or a name: each reply is a call, unless --json-schema, --grammar... say otherwise
    conv.set_template_vars(std::move(template_vars), "--tool-choice");
    conv.set_system(o.system);

    quill::signals::install();
    const bool tty = isatty(STDIN_FILENO) != 0;
    // The line editor draws on the terminal: stderr when stdout goes to a file (`quill chat > log`), so that the
    // file gets the replies and no prompts or escape codes.
    std::FILE* screen = !isatty(STDOUT_FILENO) && isatty(STDERR_FILENO) ? stderr : stdout;
    auto in = tty ? quill::chat::make_terminal_reader(stdin, screen, quill::chat::default_history_path(),
                                                      o.max_input_bytes)
                  : quill::chat::make_stream_reader(stdin, o.max_input_bytes);
    quill::Output out(stdout, "stdout");
    quill::Output status(stderr, "stderr");
    quill::chat::ReplOptions ro;
    ro.color = tty && quill::colors_allowed(STDERR_FILENO);
    ro.quiet = o.quiet;
    ro.reasoning = quill::chat::reasoning_display(o.reasoning, STDOUT_FILENO);
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
    chat.tools = o.tools;
    chat.tool_choice = o.tool_choice;
    chat.lookup = o.lookup;
    chat.draft_model = o.draft_model;
    chat.draft = o.draft;
    chat.constraint = o.constraint;
    chat.reasoning = o.reasoning;
    chat.max_input_bytes = o.max_input_bytes;
    chat.quiet = o.quiet;
    return cmd_chat(chat);
}


}  // namespace quill::cli
