#include "engine/cli/repl.h"

#include "engine/chat/conversation_file.h"
#include "engine/chat/settings.h"
#include "engine/chat/template_error.h"
#include "engine/chat/tool_calls.h"
#include "engine/error.h"
#include "engine/io/escape.h"

#include <charconv>
#include <cstdlib>

namespace quill::chat {

namespace {

// A float parameter as the user wrote it (0.8, not the float's value as a double, 0.800000011920929): the shortest
// decimal that reads back as the same float.
double as_written(float v) {
    const std::string text = fmt::format("{}", v);
    double d = v;
    std::from_chars(text.data(), text.data() + text.size(), d);
    return d;
}

constexpr const char* kHelp =
    "Type a message and press Enter. A line ending in \\ continues on the next line; \"\"\" opens and closes a\n"
    "multi-line block; pasted text stays one message, newlines and all (Enter sends it). Ctrl-C stops a reply,\n"
    "Ctrl-L clears the screen, Ctrl-D quits. A message starting with / is a command (// sends a literal /):\n"
    "  /help               this text\n"
    "  /clear, /reset      forget the conversation (the system message stays)\n"
    "  /system TEXT        set the system message (without TEXT: show it)\n"
    "  /undo               remove the last exchange\n"
    "  /regen              generate the last reply again\n"
    "  /tool RESULT        answer the last reply's next tool call with RESULT (also /tool-result); the model\n"
    "                      replies once every call has its result; /tool alone shows the call that waits\n"
    "  /set NAME VALUE     change a parameter (named as its flag: /set temp 0.7); /set alone lists them\n"
    "  /show               the model, template, system message, parameters and context use\n"
    "  /stats              context use and the last reply's speed\n"
    "  /save FILE          write the conversation as JSON (~/ at the start is your home folder)\n"
    "  /load FILE          read a conversation written by /save\n"
    "  /exit, /quit, /bye  quit\n"
    "/set takes: {}, tool-choice (none, auto, required or a tool's name: a call in each reply)\n";

// The conversation's "tool_choice" as --tool-choice writes it: none, auto, required or a function's name; "" unset.
std::string tool_choice_text(const Conversation& conv) {
    const auto& vars = conv.template_vars();
    const auto choice = vars.find("tool_choice");
    if (choice == vars.end()) return "";
    if (choice->is_string()) return choice->get<std::string>();
    return choice->value("function", nlohmann::ordered_json::object()).value("name", "");
}

// describe_parameters and the tool choice when there is one.
std::string describe_settings(const Conversation& conv) {
    const std::string choice = tool_choice_text(conv);
    return describe_parameters(conv.params()) + (choice.empty() ? "" : ", tool-choice " + escape_for_terminal(choice));
}

std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return {};
    return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// The file name of /save and /load as a shell would read it: quotes around it go (a name with spaces needs none),
// and a leading ~ is $HOME.
std::string file_argument(std::string path) {
    if (path.size() >= 2 && (path.front() == '"' || path.front() == '\'') && path.back() == path.front())
        path = path.substr(1, path.size() - 2);
    const char* home = std::getenv("HOME");
    if ((path == "~" || path.starts_with("~/")) && home && *home) path = home + path.substr(1);
    return path;
}

}  // namespace

ChatRepl::ChatRepl(Conversation& conv, LineReader& in, Output& out, Output& status, ReplOptions options)
    : conv_(conv), in_(in), out_(out), status_(status), opt_(std::move(options)) {
    // Said before the reply it makes room for.
    conv_.on_dropped([this](int dropped) {
        say(fmt::format("quill: the conversation outgrew the context of {} tokens: dropped the oldest {} messages",
                        conv_.n_ctx(), dropped));
    });
}

ChatRepl::~ChatRepl() { conv_.on_dropped(nullptr); }

void ChatRepl::say(const std::string& text) { note(text + "\n"); }

void ChatRepl::note(const std::string& text) {
    try {
        status_.put(text);
    } catch (const OutputError&) {  // diagnostics never stop the chat (a closed or full stderr)
    }
}

void ChatRepl::fail(const std::string& message) {
    failed_ = true;
    say("quill: error: " + escape_for_terminal(message));
}

std::optional<ChatRepl::Entry> ChatRepl::read_input() {
    const bool tty = in_.interactive();
    Entry entry;
    bool started = false;  // a line of this entry has been read
    bool in_block = false;
    for (;;) {
        InputLine line = in_.read(started ? "... " : "> ");
        if (opt_.should_exit && opt_.should_exit()) return std::nullopt;
        if (line.status == InputLine::Status::interrupted) {
            if (opt_.clear_cancel) opt_.clear_cancel();
            if (tty) note("^C\n");
            entry = {};
            started = in_block = false;
            continue;  // Ctrl-C at the prompt drops the input, never exits
        }
        if (line.status == InputLine::Status::eof) {
            if (tty) note("\n");
            if (started) return entry;  // a block cut by EOF is still a message
            return std::nullopt;
        }
        if (line.status == InputLine::Status::too_long) {
            entry = {{}, true};
            if (!in_block) return entry;
            started = true;
            continue;  // the rest of the block is read and dropped
        }
        if (trim(line.text) == "\"\"\"") {
            if (in_block) return entry;
            if (!started) {
                started = in_block = true;
                continue;
            }
        }
        started = true;
        const bool continued = !in_block && !line.text.empty() && line.text.back() == '\\';
        if (continued) line.text.back() = '\n';
        if (in_block) line.text += '\n';
        if (!entry.too_long) {
            if (entry.text.size() + line.text.size() > opt_.max_input_bytes)
                entry = {{}, true};
            else
                entry.text += line.text;
        }
        if (!in_block && !continued) return entry;
    }
}

int ChatRepl::run() {
    if (in_.interactive() && !opt_.quiet) say("quill chat: /help lists the commands; Ctrl-D quits");
    for (;;) {
        std::optional<Entry> input = read_input();
        if (!input) break;
        if (input->too_long) {
            if (!in_.interactive()) out_.put("\n\n");  // the empty reply of a message that was not sent
            fail(fmt::format("the message is longer than the limit of {} (--max-input-bytes raises it); not sent",
                             format_bytes(opt_.max_input_bytes)));
        } else if (!trim(input->text).empty()) {  // an empty line sends nothing
            in_.remember(input->text);
            if (handle(input->text) == Action::exit) break;
        }
        if (opt_.should_exit && opt_.should_exit()) break;
    }
    return failed_ && !in_.interactive() ? 1 : 0;
}

ChatRepl::Action ChatRepl::handle(const std::string& input) {
    Action action = Action::go_on;
    try {
        if (input.starts_with("/") && !input.starts_with("//")) {
            const size_t sp = input.find_first_of(" \t\n");
            const std::string name = input.substr(1, sp == std::string::npos ? std::string::npos : sp - 1);
            const std::string arg = sp == std::string::npos ? std::string() : trim(input.substr(sp + 1));
            command(name, arg, action);
        } else {
            const std::string message = input.starts_with("//") ? input.substr(1) : input;
            if (const std::string loss = conv_.describe_loss(message); !loss.empty())
                say("quill: warning: the text was changed by tokenizing: " + escape_for_terminal(loss));
            reply(Turn::message, message);
        }
    } catch (const OutputError&) {
        throw;  // stdout is gone: nothing more can be shown
    } catch (const Error& e) {
        fail(e.what());
    }
    return action;
}

void ChatRepl::reply(Turn turn, const std::string& text) {
    bool printed = false;
    ReasoningPrinter printer(out_, opt_.reasoning);
    auto print = [&](std::string_view piece) {
        printed = true;
        printer.content(piece);
    };
    conv_.on_reasoning([&](std::string_view piece) {
        printed = printed || opt_.reasoning != ReasoningDisplay::hide;
        printer.reasoning(piece);
    });
    conv_.on_call([&](const ToolCall& call) {
        printed = true;
        printer.call(call);
    });
    auto detach = [&] {
        conv_.on_reasoning(nullptr);
        conv_.on_call(nullptr);
    };
    const char* end = in_.interactive() ? "\n" : "\n\n";
    TurnResult r;
    try {
        if (turn == Turn::tool_result) {
            std::optional<TurnResult> answered = conv_.send_tool_result(text, print, opt_.cancel);
            if (!answered) {
                detach();
                const auto open = conv_.open_call();
                say(fmt::format("quill: result kept; {} more call{} wait{}: /tool RESULT answers {}", open->left,
                                open->left == 1 ? "" : "s", open->left == 1 ? "s" : "",
                                escape_for_terminal(open->name)));
                return;
            }
            r = std::move(*answered);
        } else {
            r = turn == Turn::regenerate ? conv_.regenerate(print, opt_.cancel) : conv_.send(text, print, opt_.cancel);
        }
        detach();
        printer.finish();
    } catch (const OutputError&) {
        detach();
        throw;
    } catch (const Error& e) {
        detach();
        printer.finish();
        if (opt_.clear_cancel) opt_.clear_cancel();
        // A failed turn ends as a reply does, empty when nothing was printed: scripts pair replies with messages.
        if (!in_.interactive() || (printed && !printer.line_ended())) out_.put(end);
        // Templates that refuse a user message after a call without its result: say how to go on.
        const auto open = turn == Turn::message && dynamic_cast<const TemplateError*>(&e) ? conv_.open_call()
                                                                                         : std::nullopt;
        if (open)
            throw UsageError(fmt::format("{} (the last reply's call {} waits for its result: /tool RESULT answers it, "
                                         "/undo drops the exchange)",
                                         e.what(), open->name));
        throw;
    }
    if (opt_.clear_cancel) opt_.clear_cancel();
    // At a terminal a reply that ended its own line gets no second newline (an empty line before the next prompt).
    if (!in_.interactive() || !printer.line_ended()) out_.put(end);
    if (r.finish == FinishReason::interrupted) say("quill: reply interrupted");
    if (r.finish == FinishReason::context)
        say(fmt::format("quill: the context of {} tokens is full; the reply was cut", conv_.n_ctx()));
    last_ = r;
    has_last_ = true;
    if (in_.interactive() && !opt_.quiet) {
        std::string line = fmt::format("{} tokens, first token {:.0f} ms, {:.1f} tok/s; context {}/{}; reused {}, "
                                       "prefilled {}",
                                       r.stats.completion_tokens, r.stats.ttft_ms, r.stats.decode_tokens_per_s(),
                                       conv_.cached_tokens(), conv_.n_ctx(), r.stats.reused_tokens,
                                       r.stats.prefilled_tokens);
        if (r.stats.guessed_tokens > 0)
            line += fmt::format("; {} of {} guesses accepted ({:.0f}%)", r.stats.accepted_tokens,
                                r.stats.guessed_tokens, 100.0 * r.stats.acceptance_rate());
        say(opt_.color ? "\033[2m" + line + "\033[0m" : line);
    }
}

void ChatRepl::command(const std::string& name, const std::string& arg, Action& action) {
    if (name == "help" || name == "?") {
        note(fmt::format(kHelp, parameter_names()));
    } else if (name == "exit" || name == "quit" || name == "bye") {
        action = Action::exit;
    } else if (name == "reset" || name == "clear") {
        conv_.reset();
        say("quill: conversation cleared");
    } else if (name == "system") {
        if (arg.empty()) {
            say(conv_.system().empty() ? "quill: no system message (the template's default applies)"
                                       : "quill: system message: " + escape_for_terminal(conv_.system()));
        } else {
            conv_.set_system(arg);
            say("quill: system message set");
        }
    } else if (name == "undo") {
        say(conv_.undo() ? "quill: removed the last exchange" : "quill: nothing to undo");
    } else if (name == "regen") {
        reply(Turn::regenerate, "");
    } else if (name == "tool" || name == "tool-result") {
        tool(arg);
    } else if (name == "set") {
        set(arg);
    } else if (name == "show") {
        show();
    } else if (name == "save") {
        if (arg.empty()) throw UsageError("/save needs a file name");
        save(file_argument(arg));
    } else if (name == "load") {
        if (arg.empty()) throw UsageError("/load needs a file name");
        load(file_argument(arg));
    } else if (name == "stats") {
        std::string s = fmt::format("quill: {} messages; context {}/{} tokens in the cache", conv_.turns().size(),
                                    conv_.cached_tokens(), conv_.n_ctx());
        if (has_last_)
            s += fmt::format("; last reply {} tokens, first token {:.0f} ms, prefill {:.1f} tok/s, decode {:.1f} "
                             "tok/s, reused {}, prefilled {}",
                             last_.stats.completion_tokens, last_.stats.ttft_ms, last_.stats.prefill_tokens_per_s(),
                             last_.stats.decode_tokens_per_s(), last_.stats.reused_tokens,
                             last_.stats.prefilled_tokens);
        say(s);
    } else {
        throw UsageError(fmt::format("unknown command /{}; /help lists the commands", escape_for_terminal(name)));
    }
}

void ChatRepl::tool(const std::string& result) {
    const auto open = conv_.open_call();
    if (!open) throw UsageError("/tool: no tool call waits for a result (the last reply made none, or all have one)");
    if (result.empty()) {
        say(fmt::format("quill: {} ({}) waits for a result{}: /tool RESULT", escape_for_terminal(open->name),
                        escape_for_terminal(open->id),
                        open->left > 1 ? fmt::format(", and {} more call{} after it", open->left - 1,
                                                     open->left == 2 ? "" : "s")
                                       : ""));
        return;
    }
    reply(Turn::tool_result, result);
}

void ChatRepl::set(const std::string& arg) {
    if (arg.empty()) {
        say("quill: " + describe_settings(conv_));
        return;
    }
    const size_t sp = arg.find_first_of(" \t");
    if (sp == std::string::npos) throw UsageError(fmt::format("/set {} needs a value", escape_for_terminal(arg)));
    const std::string name = arg.substr(0, sp);
    if (name == "tool-choice") {  // a template variable, and the grammar of the replies it forces
        nlohmann::ordered_json vars = conv_.template_vars();
        vars["tool_choice"] = tool_choice_value(trim(arg.substr(sp + 1)));
        conv_.set_template_vars(std::move(vars), "/set tool-choice");
    } else {
        GenerationParams params = conv_.params();
        set_parameter(params, name, trim(arg.substr(sp + 1)));
        conv_.set_params(params);
    }
    say("quill: " + describe_settings(conv_));
}

void ChatRepl::show() {
    const std::string& system = conv_.system();
    note(fmt::format("quill: model       {}\n"
                     "      template    {}\n"
                     "      system      {}\n"
                     "      context     {}/{} tokens in the cache; {} messages\n"
                     "      parameters  {}\n",
                     escape_for_terminal(opt_.model_name), escape_for_terminal(conv_.format().name()),
                     system.empty() ? "(none: the template's default applies)" : escape_for_terminal(system),
                     conv_.cached_tokens(), conv_.n_ctx(), conv_.turns().size(), describe_settings(conv_)));
}

void ChatRepl::save(const std::string& path) {
    const auto& s = conv_.params().sampling;
    nlohmann::ordered_json j = {{"messages", conv_.messages()},
                                {"model", opt_.model_name},
                                {"sampling",
                                 {{"temperature", as_written(s.temperature)},
                                  {"top_k", s.top_k},
                                  {"top_p", as_written(s.top_p)},
                                  {"min_p", as_written(s.min_p)},
                                  {"repeat_penalty", as_written(s.repeat_penalty)},
                                  {"seed", s.seed}}}};
    write_conversation_file(path, j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
    say(fmt::format("quill: saved {} messages to {}", conv_.messages().size(), escape_for_terminal(path)));
}

void ChatRepl::load(const std::string& path) {
    conv_.load(parse_messages(read_conversation_file(path, opt_.max_input_bytes), path));
    say(fmt::format("quill: loaded {} messages from {}", conv_.messages().size(), escape_for_terminal(path)));
}

}  // namespace quill::chat
