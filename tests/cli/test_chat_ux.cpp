// `quill chat` at a terminal as a demanding user meets it: the line editor on the terminal when stdout goes to a
// file, no colour or other escape codes for TERM=dumb, a line that keeps its shape when the window is resized while
// it is edited, a block pasted while a reply streams kept as one message, keys typed while it streams kept out of
// it, /save and /load with ~/ and quotes.
// On the tiny model the tests write, but for the one that needs a reply slow enough to type into (the default model).
#include "tests/support/pty_process.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace test_chat_ux {

using namespace quill;
using test::human_pause;
using test::PtyProcess;
namespace fs = std::filesystem;

namespace {

// Greedy chat on the tiny SPM model in the chatml format: short replies (-n 3), quick to load.
std::vector<std::string> tiny_chat() {
    return {"chat", "-m", test::tiny_model_file(test::TinyModel::spm).string(), "--chat-template", "chatml",
            "--temp", "0", "-t", "1", "-n", "3"};
}

// The first message of a conversation /save wrote.
std::string first_message(const fs::path& saved) {
    return nlohmann::json::parse(test::read_file(saved))["messages"][0]["content"].get<std::string>();
}

// At the next prompt after `from`, types `keys`; returns where the output stood when they were sent.
size_t at_prompt(PtyProcess& p, size_t from, const std::string& keys) {
    INFO(p.output());
    REQUIRE(p.wait_for("> ", from, 20));
    human_pause();
    const size_t at = p.size();
    p.send(keys);
    return at;
}

}  // namespace

TEST_CASE("quill chat > FILE at a terminal edits on the terminal and writes only the replies to the file",
          "[chat][terminal]") {
    const auto dir = test::temp_dir("chat-ux-file");
    const fs::path replies = dir / "replies.txt", saved = dir / "conv.json";
    PtyProcess p(tiny_chat(), dir.string(), {{"TERM", "xterm"}}, replies.string());
    // Ctrl-A works only where libedit edits the line (the terminal's own line editing has no such key).
    size_t at = at_prompt(p, 0, "nce\x01O\r");
    INFO(p.output());
    REQUIRE(p.wait_for(" tok/s; context ", at));
    at = at_prompt(p, at, "/save " + saved.string() + "\r");
    REQUIRE(p.wait_for("saved 2 messages", at));
    at_prompt(p, at, "/exit\r");
    CHECK(p.wait_exit() == 0);
    CHECK(first_message(saved) == "Once");
    const std::string text = test::read_file(replies);
    CHECK(!text.empty());
    CHECK(text.ends_with("\n"));
    CHECK(text.find('\033') == std::string::npos);  // no bracketed paste mode, no prompt, no redraws
    CHECK(text.find("> ") == std::string::npos);
}

TEST_CASE("quill chat shows no colour and asks for no bracketed paste with TERM=dumb, and an empty NO_COLOR is unset",
          "[chat][terminal]") {
    const auto dir = test::temp_dir("chat-ux-dumb");
    for (const char* term : {"dumb", "xterm"}) {
        INFO("TERM=" << term);
        PtyProcess p(tiny_chat(), dir.string(), {{"TERM", term}, {"NO_COLOR", ""}});
        const size_t at = at_prompt(p, 0, "Once\r");
        REQUIRE(p.wait_for(" tok/s; context ", at));
        at_prompt(p, at, "/exit\r");
        CHECK(p.wait_exit() == 0);
        const bool dumb = std::string(term) == "dumb";
        CHECK((p.output().find("\033[2m") == std::string::npos) == dumb);     // the dim stats line
        CHECK((p.output().find("\033[?2004h") == std::string::npos) == dumb);  // bracketed paste
    }
}

TEST_CASE("a line edited while the terminal is resized wraps at the new width", "[chat][terminal]") {
    const auto dir = test::temp_dir("chat-ux-resize");
    const fs::path saved = dir / "conv.json";
    PtyProcess p(tiny_chat(), dir.string(), {{"TERM", "xterm"}});
    const std::string line(50, 'a');
    at_prompt(p, 0, line);
    REQUIRE(p.wait_for(line));
    human_pause();
    p.resize(30, 40);  // "> " and 50 letters now take two rows
    human_pause();
    const size_t at = p.size();
    p.send("\x01X");  // Ctrl-A: to the start of the line, a row up
    INFO(p.output());
    REQUIRE(p.wait_for("X", at, 10));
    CHECK(p.output().find("\033[A", at) != std::string::npos);
    p.send("\r");
    REQUIRE(p.wait_for(" tok/s; context ", at));
    const size_t saved_at = at_prompt(p, at, "/save " + saved.string() + "\r");
    REQUIRE(p.wait_for("saved 2 messages", saved_at));
    at_prompt(p, saved_at, "/exit\r");
    CHECK(p.wait_exit() == 0);
    CHECK(first_message(saved) == "X" + line);
}

TEST_CASE("a block pasted while a reply streams is one message, not a message a line", "[chat][terminal]") {
    const auto dir = test::temp_dir("chat-ux-paste");
    const fs::path saved = dir / "conv.json";
    PtyProcess p(tiny_chat(), dir.string(), {{"TERM", "xterm"}});
    size_t at = at_prompt(p, 0, "Once\r");
    INFO(p.output());
    REQUIRE(p.wait_for(" tok/s; context ", at));
    // The terminal pastes as it was told last before the reply ended: bracketed, or line by line.
    const std::string& out = p.output();
    const size_t end = out.find(" tok/s; context ", at);
    const size_t on = out.rfind("\033[?2004h", end), off = out.rfind("\033[?2004l", end);
    const bool bracketed = on != std::string::npos && (off == std::string::npos || on > off);
    CHECK(bracketed);
    const std::string block = "line one\rline two";
    p.send(bracketed ? "\033[200~" + block + "\033[201~" : block);
    human_pause();
    p.send("\r");
    REQUIRE(p.wait_for(" tok/s; context ", end + 1));
    at = at_prompt(p, end + 1, "/save " + saved.string() + "\r");
    REQUIRE(p.wait_for("saved", at));
    at_prompt(p, at, "/exit\r");
    CHECK(p.wait_exit() == 0);
    const auto messages = nlohmann::json::parse(test::read_file(saved))["messages"];
    REQUIRE(messages.size() == 4);
    CHECK(messages[2]["content"] == "line one\nline two");
}

TEST_CASE("/save and /load read ~/ as the home folder and drop quotes, and name a missing folder", "[chat][terminal]") {
    const auto dir = test::temp_dir("chat-ux-save");
    PtyProcess p(tiny_chat(), dir.string(), {{"HOME", dir.string()}});
    size_t at = at_prompt(p, 0, "Once\r");
    INFO(p.output());
    REQUIRE(p.wait_for(" tok/s; context ", at));
    at = at_prompt(p, at, "/save ~/my chat.json\r");
    REQUIRE(p.wait_for("saved 2 messages to " + (dir / "my chat.json").string(), at));
    at = at_prompt(p, at, "/load \"" + (dir / "my chat.json").string() + "\"\r");
    REQUIRE(p.wait_for("loaded 2 messages", at));
    at = at_prompt(p, at, "/save ~/no such/chat.json\r");
    REQUIRE(p.wait_for("quill: error: ", at));
    REQUIRE(p.wait_for("\n", p.output().find("quill: error: ", at)));
    at_prompt(p, at, "/exit\r");
    CHECK(p.wait_exit() == 0);
    CHECK(first_message(dir / "my chat.json") == "Once");
    CHECK(p.output().find("quill: error: " + (dir / "no such" / "chat.json").string() + ": the folder " +
                          (dir / "no such").string() + " does not exist") != std::string::npos);
}

TEST_CASE("keys typed while a reply streams wait for the next prompt instead of landing in the reply",
          "[chat][terminal][model]") {
    const auto model = test::require_default_model();
    if (!model) return;
    const auto dir = test::temp_dir("chat-ux-typeahead");
    PtyProcess p({"chat", "-m", model->string(), "--temp", "0", "-t", "1", "-n", "300"}, dir.string(),
                 {{"TERM", "xterm"}});
    const size_t at = at_prompt(p, 0, "Tell me a long story about a dragon.\r");
    INFO(p.output());
    REQUIRE(p.wait_for("dragon.\n", at));
    const size_t reply = p.output().find("dragon.\n", at) + 8;
    p.wait_for("\x01 nothing", reply, 1);  // a second of the reply
    const size_t typed = p.size();
    REQUIRE(p.output().find(" tok/s; context ", reply) == std::string::npos);  // the reply still streams
    p.send("next question");
    REQUIRE(p.wait_for(" tok/s; context ", reply));
    const size_t stats = p.output().find(" tok/s; context ", reply);
    CHECK(p.output().substr(typed, stats - typed).find("next question") == std::string::npos);
    REQUIRE(p.wait_for("> next question", stats, 10));
    p.send("\x03");  // clears the line
    at_prompt(p, stats, "/exit\r");
    const int status = p.wait_exit();
    INFO(p.output().substr(stats));
    CHECK(status == 0);
}

TEST_CASE("/set says a number too big for its parameter is out of range, not that it is no number", "[chat]") {
    const auto r = test::run_quill(tiny_chat(), "/set top-k 99999999999\n/set temp 1e999\n/set seed 1e3\n");
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("/set top-k: 99999999999 is out of range: expected -2147483648 to 2147483647") !=
          std::string::npos);
    CHECK(r.err.find("/set temp: 1e999 is out of range: expected a finite number") != std::string::npos);
    CHECK(r.err.find("/set seed: '1e3' is not an integer >= 0") != std::string::npos);
}

TEST_CASE("at a terminal a reply that ends its own line is followed by the stats line, not by an empty line",
          "[chat][terminal]") {
    const auto dir = test::temp_dir("chat-ux-newline");
    const fs::path grammar = dir / "lines.gbnf";
    for (const bool newline : {true, false}) {
        INFO("reply ends in a newline: " << newline);
        // The reply is "a", with or without a newline after it.
        std::ofstream(grammar) << (newline ? "root ::= \"a\\n\"\n" : "root ::= \"a\"\n");
        auto args = tiny_chat();
        args.back() = "8";  // -n 8: the grammar ends the reply
        args.insert(args.end(), {"--grammar", grammar.string()});
        PtyProcess p(args, dir.string(), {{"TERM", "dumb"}});
        const size_t at = at_prompt(p, 0, "Once\r");
        INFO(p.output());
        REQUIRE(p.wait_for(" tok/s; context ", at));
        at_prompt(p, at, "/exit\r");
        CHECK(p.wait_exit() == 0);
        const std::string out = p.output().substr(at);
        INFO(nlohmann::json(out).dump());
        const size_t stats = out.find(" tokens, first token ");
        REQUIRE(stats != std::string::npos);
        const size_t reply = out.rfind("a", out.rfind('\n', stats));
        REQUIRE(reply != std::string::npos);
        // One line end between the reply and the stats, never two.
        CHECK(out.substr(reply, out.find_first_not_of('\n', reply + 1) - reply) == "a\n");
    }
}

}  // namespace test_chat_ux
