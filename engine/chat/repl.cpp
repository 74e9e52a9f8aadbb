#include "engine/chat/repl.h"

#include "engine/error.h"

#include <fstream>
#include <sstream>

namespace quill::chat {

namespace {

constexpr const char* kHelp =
    "Type a message and press Enter. A line ending in \\ continues on the next line; \"\"\" opens and closes a\n"
    "multi-line block. Ctrl-C stops a reply; Ctrl-D or /exit quits. A message starting with / is a command\n"
    "(// sends a literal /):\n"
    "  /help          this text\n"
    "  /reset         forget the conversation (the system message stays)\n"
    "  /system TEXT   set the system message (without TEXT: show it)\n"
    "  /undo          remove the last exchange\n"
    "  /regen         generate the last reply again\n"
    "  /save FILE     write the conversation as JSON\n"
    "  /load FILE     read a conversation written by /save\n"
    "  /stats         context use and the last reply's speed\n"
    "  /exit          quit\n";

std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return {};
    return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace

ChatRepl::ChatRepl(Conversation& conv, LineReader& in, Output& out, Output& status, ReplOptions options)
    : conv_(conv), in_(in), out_(out), status_(status), opt_(std::move(options)) {}

void ChatRepl::say(const std::string& text) { note(text + "\n"); }

void ChatRepl::note(const std::string& text) {
    try {
        status_.put(text);
    } catch (const OutputError&) {  // diagnostics never stop the chat (a closed or full stderr)
    }
}

std::optional<std::string> ChatRepl::read_input() {
    const bool tty = in_.interactive();
    std::string text;
    bool in_block = false;
    for (;;) {
        const bool first = text.empty() && !in_block;
        InputLine line = in_.read(first ? "> " : "... ");
        if (opt_.should_exit && opt_.should_exit()) return std::nullopt;
        if (line.status == InputLine::Status::interrupted) {
            if (opt_.clear_cancel) opt_.clear_cancel();
            if (tty) note("^C\n");
            text.clear();
            in_block = false;
            continue;  // Ctrl-C at the prompt drops the input, never exits
        }
        if (line.status == InputLine::Status::eof) {
            if (tty) note("\n");
            if (in_block || !text.empty()) return text;  // a block cut by EOF is still a message
            return std::nullopt;
        }
        if (trim(line.text) == "\"\"\"") {
            if (in_block) return text;
            if (first) {
                in_block = true;
                continue;
            }
        }
        if (in_block) {
            text += line.text + "\n";
            continue;
        }
        if (!line.text.empty() && line.text.back() == '\\') {
            text += line.text.substr(0, line.text.size() - 1) + "\n";
            continue;
        }
        text += line.text;
        return text;
    }
}

int ChatRepl::run() {
    if (in_.interactive()) say("quill chat: /help lists the commands; Ctrl-D quits");
    for (;;) {
        std::optional<std::string> input = read_input();
        if (!input) return 0;
        if (trim(*input).empty()) continue;  // an empty line sends nothing
        in_.remember(*input);
        if (handle(*input) == Action::exit) return 0;
        if (opt_.should_exit && opt_.should_exit()) return 0;
    }
}

ChatRepl::Action ChatRepl::handle(const std::string& input) {
    Action action = Action::go_on;
    if (input.starts_with("/") && !input.starts_with("//")) {
        const size_t sp = input.find_first_of(" \t");
        const std::string name = input.substr(1, sp == std::string::npos ? std::string::npos : sp - 1);
        const std::string arg = sp == std::string::npos ? std::string() : trim(input.substr(sp + 1));
        try {
            command(name, arg, action);
        } catch (const OutputError&) {
            throw;
        } catch (const Error& e) {
            say(fmt::format("quill: {}", e.what()));
        }
        return action;
    }
    const std::string message = input.starts_with("//") ? input.substr(1) : input;
    try {
        reply(false, message);
    } catch (const OutputError&) {
        throw;
    } catch (const UsageError& e) {
        say(fmt::format("quill: {}", e.what()));
    }
    return action;
}

void ChatRepl::reply(bool regenerate, const std::string& message) {
    auto print = [&](std::string_view piece) { out_.put(piece); };
    TurnResult r = regenerate ? conv_.regenerate(print, opt_.cancel) : conv_.send(message, print, opt_.cancel);
    const bool interrupted = r.finish == FinishReason::interrupted;
    if (opt_.clear_cancel) opt_.clear_cancel();
    out_.put(in_.interactive() ? "\n" : "\n\n");
    if (r.dropped_messages > 0)
        say(fmt::format("quill: the conversation outgrew the context of {} tokens: dropped the oldest {} messages",
                        conv_.n_ctx(), r.dropped_messages));
    if (interrupted) say("quill: reply interrupted");
    if (r.finish == FinishReason::context)
        say(fmt::format("quill: the context of {} tokens is full; the reply was cut", conv_.n_ctx()));
    last_ = r;
    has_last_ = true;
    if (in_.interactive()) {
        std::string line = fmt::format("{} tokens, {:.1f} tok/s; context {}/{}; reused {}, prefilled {}",
                                       r.stats.completion_tokens, r.stats.decode_tokens_per_s(),
                                       conv_.cached_tokens() + 1, conv_.n_ctx(), r.stats.reused_tokens,
                                       r.stats.prefilled_tokens);
        say(opt_.color ? "\033[2m" + line + "\033[0m" : line);
    }
}

void ChatRepl::command(const std::string& name, const std::string& arg, Action& action) {
    if (name == "help" || name == "?") {
        note(kHelp);
    } else if (name == "exit" || name == "quit") {
        action = Action::exit;
    } else if (name == "reset") {
        conv_.reset();
        say("quill: conversation cleared");
    } else if (name == "system") {
        if (arg.empty()) {
            say(conv_.system().empty() ? "quill: no system message (the template's default applies)"
                                       : "quill: system message: " + conv_.system());
        } else {
            conv_.set_system(arg);
            say("quill: system message set");
        }
    } else if (name == "undo") {
        say(conv_.undo() ? "quill: removed the last exchange" : "quill: nothing to undo");
    } else if (name == "regen") {
        reply(true, "");
    } else if (name == "save") {
        if (arg.empty()) throw UsageError("/save needs a file name");
        save(arg);
    } else if (name == "load") {
        if (arg.empty()) throw UsageError("/load needs a file name");
        load(arg);
    } else if (name == "stats") {
        std::string s = fmt::format("quill: {} messages; context {}/{} tokens in the cache", conv_.turns().size(),
                                    conv_.cached_tokens(), conv_.n_ctx());
        if (has_last_)
            s += fmt::format("; last reply {} tokens, prefill {:.1f} tok/s, decode {:.1f} tok/s, reused {}, "
                             "prefilled {}",
                             last_.stats.completion_tokens, last_.stats.prefill_tokens_per_s(),
                             last_.stats.decode_tokens_per_s(), last_.stats.reused_tokens,
                             last_.stats.prefilled_tokens);
        say(s);
    } else {
        throw UsageError(fmt::format("unknown command /{}; /help lists the commands", name));
    }
}

void ChatRepl::save(const std::string& path) {
    const auto& s = conv_.params().sampling;
    nlohmann::json j = {{"messages", conv_.messages()},
                        {"model", opt_.model_name},
                        {"sampling",
                         {{"temperature", s.temperature},
                          {"top_k", s.top_k},
                          {"top_p", s.top_p},
                          {"min_p", s.min_p},
                          {"repeat_penalty", s.repeat_penalty},
                          {"seed", s.seed}}}};
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    f.flush();
    if (!f) throw UsageError(fmt::format("/save {}: cannot write the file", path));
    say(fmt::format("quill: saved {} messages to {}", conv_.messages().size(), path));
}

void ChatRepl::load(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw UsageError(fmt::format("/load {}: cannot open the file", path));
    std::ostringstream ss;
    ss << f.rdbuf();
    conv_.load(parse_messages(ss.str(), path));
    say(fmt::format("quill: loaded {} messages from {}", conv_.messages().size(), path));
}

}  // namespace quill::chat
