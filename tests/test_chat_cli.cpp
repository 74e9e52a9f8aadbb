// `quill chat`, `quill template` and `quill run` with chat templates, end to end on the default model: through a
// pipe, and through a pseudo-terminal as a person types (two turns, Ctrl-C in the middle of a reply, /undo,
// /regen, Ctrl-D).
#include "engine/format/gguf.h"
#include "tests/fault_util.h"
#include "tests/pty_process.h"
#include "tests/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace quill;
using test::human_pause;
using test::PtyProcess;
using test::run_quill;

namespace {

std::vector<int32_t> parse_ids(const std::string& line) {
    std::vector<int32_t> ids;
    std::istringstream ss(line);
    for (int32_t id; ss >> id;) ids.push_back(id);
    return ids;
}

// The reference's prompt tokens and text for the chat-sky case.
struct SkyRef {
    std::vector<int32_t> prompt_tokens;
};

std::optional<SkyRef> sky_reference() {
    auto path = test::require_testdata("models/ref/SmolLM2-135M-Instruct.Q4_1.chat-sky.greedy.txt");
    if (!path) return std::nullopt;
    std::istringstream in(test::read_file(*path));
    SkyRef r;
    for (std::string line; std::getline(in, line);) {
        const std::string key = "prompt_tokens (add_special=true) ";
        if (line.starts_with(key)) r.prompt_tokens = parse_ids(line.substr(key.size()));
    }
    return r;
}

std::optional<std::string> default_model_or_skip() {
    auto m = test::default_model();
    if (!m) test::skip("the default model is absent (run models/fetch_default.sh)");
    if (!m) return std::nullopt;
    return m->string();
}

}  // namespace

TEST_CASE("quill template renders the model's template and tokenizes it as the reference does", "[chat][model]") {
    auto ref = sky_reference();
    if (!ref) return;
    auto model = default_model_or_skip();
    if (!model) return;
    const std::string messages = R"([{"role": "user", "content": "Why is the sky blue?"}])";
    auto r = run_quill({"template", "-m", *model, "--messages", "-", "--tokens"}, messages);
    REQUIRE(r.status == 0);
    const size_t last_line = r.out.rfind('\n', r.out.size() - 2);
    REQUIRE(last_line != std::string::npos);
    CHECK(parse_ids(r.out.substr(last_line + 1)) == ref->prompt_tokens);
    CHECK(r.out.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"));
    CHECK(r.out.substr(0, last_line).ends_with("<|im_start|>user\nWhy is the sky blue?<|im_end|>\n"
                                              "<|im_start|>assistant\n"));

    // The user's own text is never parsed as special tokens: <|im_end|> typed by the user stays text.
    auto typed = run_quill({"template", "-m", *model, "--messages", "-", "--tokens"},
                           R"([{"role": "user", "content": "a<|im_end|>b"}])");
    REQUIRE(typed.status == 0);
    auto ids = parse_ids(typed.out.substr(typed.out.rfind('\n', typed.out.size() - 2) + 1));
    CHECK(std::count(ids.begin(), ids.end(), 2) == 2);  // the template's two <|im_end|>, not the user's

    // Without a generation prompt, with other bos/eos texts, and errors.
    auto plain = run_quill({"template", "--chat-template", "chatml", "--no-generation-prompt"});
    CHECK(plain.status == 0);
    CHECK(plain.out == "<|im_start|>user\nHello<|im_end|>\n");
    auto bad = run_quill({"template", "-m", *model, "--messages", "-"}, "[{\"role\": 1}]");
    CHECK(bad.status == 2);
    CHECK(bad.err.find("message 1 has no string \"role\"") != std::string::npos);
    auto missing = run_quill({"template", "--chat-template", "/nonexistent/t.jinja"});
    CHECK(missing.status != 0);
    CHECK(missing.err.find("not a built-in format") != std::string::npos);
}

TEST_CASE("quill run applies the chat template: the README's first command answers", "[chat][model]") {
    auto ref = sky_reference();
    if (!ref) return;
    auto model = default_model_or_skip();
    if (!model) return;
    auto r = run_quill({"run", "-m", *model, "-p", "Why is the sky blue?", "--temp", "0", "-n", "24", "--json"});
    REQUIRE(r.status == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["prompt_tokens"] == ref->prompt_tokens.size());
    CHECK(j["completion_tokens"].get<int>() > 0);
    CHECK(!j["text"].get<std::string>().empty());
    auto raw = run_quill({"run", "-m", *model, "-p", "Why is the sky blue?", "--temp", "0", "-n", "4", "--raw",
                          "--json"});
    REQUIRE(raw.status == 0);
    CHECK(nlohmann::json::parse(raw.out)["prompt_tokens"] == 6);
    auto sys = run_quill({"run", "-m", *model, "-p", "Hi", "--system", "Answer in French.", "-n", "1", "--json"});
    CHECK(sys.status == 0);
    auto conflict = run_quill({"run", "-m", *model, "-p", "Hi", "--system", "x", "--raw"});
    CHECK(conflict.status == 2);
}

TEST_CASE("quill run without a template asks for --chat-template or --raw", "[chat]") {
    auto stories = test::require_testdata("models/stories260K.gguf");
    if (!stories) return;
    auto r = run_quill({"run", "-m", stories->string(), "-p", "Once upon a time", "-n", "4"});
    CHECK(r.status == 2);
    CHECK(r.err.find("no chat template") != std::string::npos);
    CHECK(r.err.find("--raw") != std::string::npos);
    auto ok = run_quill({"run", "-m", stories->string(), "-p", "Once", "-n", "4", "--chat-template", "chatml"});
    CHECK(ok.status == 0);
}

TEST_CASE("quill chat through a pipe: one turn per line, replies followed by a blank line", "[chat][model]") {
    auto model = default_model_or_skip();
    if (!model) return;
    auto r = run_quill({"chat", "-m", *model, "--temp", "0", "-n", "24"}, "What is 2+2?\nAnd times 3?\n");
    REQUIRE(r.status == 0);
    CHECK(r.out.find('\033') == std::string::npos);
    CHECK(r.out.find("> ") == std::string::npos);
    const size_t sep = r.out.find("\n\n");
    REQUIRE(sep != std::string::npos);
    CHECK(r.out.ends_with("\n\n"));
    // The first reply is what `quill run` answers to the same message.
    auto single = run_quill({"run", "-m", *model, "-p", "What is 2+2?", "--temp", "0", "-n", "24"});
    REQUIRE(single.status == 0);
    CHECK(r.out.substr(0, sep) == single.out);
    CHECK(r.out.size() > sep + 4);  // a second reply
}

namespace {

// The reply printed after the echo of `input`, up to the stats line.
// (Input typed ahead may be echoed twice: by the terminal, then by the line editor; the last echo counts.)
std::string reply_after(const std::string& out, const std::string& input, size_t from) {
    const size_t first = out.find(input + "\n", from);
    if (first == std::string::npos) return {};
    const size_t stats = out.find(" tok/s; context ", first);
    if (stats == std::string::npos) return {};
    const size_t at = out.rfind(input + "\n", stats);
    const size_t begin = at + input.size() + 1;
    const size_t line = out.rfind('\n', stats);
    return out.substr(begin, line == std::string::npos || line < begin ? 0 : line - begin);
}

}  // namespace

TEST_CASE("quill chat on a terminal: two turns, Ctrl-C in a reply, undo, regen, Ctrl-D", "[chat][model]") {
    auto model = default_model_or_skip();
    if (!model) return;
    const auto state = test::temp_dir("chat-pty");
    // Replies of up to 80 tokens: enough text to compare a regenerated reply with the first (60 bytes), short enough
    // for the sanitizer build, where one thread decodes the default model at 3-4 tokens/s.
    PtyProcess p({"chat", "-m", *model, "--temp", "0", "-n", "80", "-t", "1"}, state.string());
    constexpr int kReplySeconds = 180;  // a whole reply, under the sanitizers on a loaded machine
    // Input is typed only at a prompt, as a person does (libedit then has the terminal in its own mode).
    size_t mark = 0;
    auto at_prompt = [&] {
        REQUIRE(p.wait_for("> ", mark));
        human_pause();
        mark = p.size();
    };
    at_prompt();
    p.send("Why is the sky blue?\r");
    REQUIRE(p.wait_for("reused 0, prefilled", mark, kReplySeconds));
    const std::string first = reply_after(p.output(), "Why is the sky blue?", mark);
    INFO(p.output());
    CHECK(first.find("blue") != std::string::npos);
    mark = p.output().find("reused 0, prefilled", mark);
    at_prompt();

    // A long reply, interrupted by Ctrl-C once it has started: the chat goes on.
    p.send("Write a very long story about a dragon who learns to fly.\r");
    REQUIRE(p.wait_for("dragon who learns to fly.\n", mark));
    REQUIRE(p.wait_for(" ", p.size() + 1));  // some of the reply has been printed
    p.send("\x03");
    REQUIRE(p.wait_for("reply interrupted", mark));
    REQUIRE(p.wait_for(" tok/s; context ", mark));  // the stats line follows
    const std::string cut = reply_after(p.output(), "dragon who learns to fly.", mark);
    CHECK(!cut.empty());
    // The second turn reused the first from the cache.
    const size_t stats2 = p.output().find(" tok/s; context ", mark);
    REQUIRE(stats2 != std::string::npos);
    REQUIRE(p.wait_for("\n", stats2));  // the rest of the line (it can arrive after its first part)
    CHECK(p.output().find("reused 0,", stats2) > p.output().find('\n', stats2));
    mark = p.output().find("reply interrupted", mark);
    at_prompt();

    p.send("/undo\r");
    REQUIRE(p.wait_for("removed the last exchange", mark));
    at_prompt();
    p.send("/regen\r");
    REQUIRE(p.wait_for(" tok/s; context ", mark, kReplySeconds));
    const std::string again = reply_after(p.output(), "/regen", mark);
    // The regenerated reply runs its last prompt token alone on the reused cache, where the first ran it inside
    // the prompt's batch; greedy texts agree until a near-tie of the Q4_1 model may tip one way or the other.
    REQUIRE(first.size() > 60);
    CHECK(again.substr(0, 60) == first.substr(0, 60));
    mark = p.output().find(" tok/s; context ", mark);
    at_prompt();

    p.send("/stats\r");
    REQUIRE(p.wait_for("messages; context", mark));
    at_prompt();
    p.send("/exit\r");
    CHECK(p.wait_exit() == 0);
    // The history was written where XDG_STATE_HOME says (libedit escapes spaces as \040).
    CHECK(test::read_file(state / "quill" / "history").find("sky\\040blue?") != std::string::npos);
}

TEST_CASE("quill chat on a terminal: Ctrl-C at the prompt does not exit, Ctrl-D does", "[chat][model]") {
    auto model = default_model_or_skip();
    if (!model) return;
    const auto state = test::temp_dir("chat-pty-eof");
    PtyProcess p({"chat", "-m", *model, "-t", "1"}, state.string());
    REQUIRE(p.wait_for("> "));
    human_pause();
    size_t mark = p.size();
    p.send("\x03");
    REQUIRE(p.wait_for("^C", mark));
    REQUIRE(p.wait_for("> ", mark));
    human_pause();
    p.send("\x04");
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("a model template quill cannot parse gets one warning and the built-in format it resembles", "[chat]") {
    auto stories = test::require_testdata("models/stories260K.gguf");
    if (!stories) return;
    const auto dir = test::temp_dir("chat-fallback");
    auto with_template = [&](const std::string& name, const std::string& source) {
        const std::string out = (dir / name).string();
        test::rewrite_gguf(stories->string(), out,
                           [&](GgufWriter& w) { w.set("tokenizer.chat_template", GgufValue(source)); });
        return out;
    };
    // chatml markers, and a tag quill does not know.
    const std::string broken = with_template(
        "broken.gguf", "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                       "{% frobnicate %}");
    auto r = run_quill({"template", "-m", broken});
    CHECK(r.status == 0);
    CHECK(r.out == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
    CHECK(r.err.find("warning: the model's chat template cannot be used") != std::string::npos);
    CHECK(r.err.find("frobnicate") != std::string::npos);  // the renderer's own message, with line and column
    // Nothing to fall back to: an error that asks for --chat-template or --raw.
    const std::string hopeless = with_template("hopeless.gguf", "{% if %}");
    auto h = run_quill({"template", "-m", hopeless});
    CHECK(h.status == 2);
    CHECK(h.err.find("--chat-template") != std::string::npos);
    // --bos / --eos set the texts the template prints.
    auto b = run_quill({"template", "--chat-template", "llama3", "--bos", "<B>", "--no-generation-prompt"});
    CHECK(b.status == 0);
    CHECK(b.out.starts_with("<B><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"));
}

TEST_CASE("SIGTERM during a chat reply ends quill chat with the reply so far and status 143", "[chat][faults]") {
    auto stories = test::require_testdata("models/stories260K.gguf");
    if (!stories) return;
    int in[2], out[2];
    REQUIRE(pipe(in) == 0);
    REQUIRE(pipe(out) == 0);
    const pid_t pid = test::spawn_quill({"chat", "-m", stories->string(), "--chat-template", "chatml", "-n", "100000",
                                         "-c", "100000", "--temp", "1", "--seed", "1", "-t", "1"},
                                        {in[0], out[1], -1});
    close(in[0]);
    close(out[1]);
    REQUIRE(write(in[1], "Once upon a time\n", 17) == 17);  // stdin stays open: chat would wait for more
    std::string got;
    char buf[256];
    while (got.size() < 64) {  // the reply has begun
        const ssize_t n = read(out[0], buf, sizeof buf);
        REQUIRE(n > 0);
        got.append(buf, static_cast<size_t>(n));
    }
    kill(pid, SIGTERM);
    CHECK(test::wait_child(pid, 20) == 143);
    got += test::read_all(out[0]);
    CHECK(got.size() >= 64);
    close(in[1]);
    close(out[0]);
}

TEST_CASE("on a terminal run without a prompt and batch without -i refuse at once instead of waiting", "[cli]") {
    auto stories = test::require_testdata("models/stories260K.gguf");
    if (!stories) return;
    const auto state = test::temp_dir("tty-refuse");
    struct Case {
        std::vector<std::string> args;
        std::string message;
    };
    for (const Case& c : {Case{{"run", "-m", stories->string(), "--raw"}, "--raw and --json need one"},
                          Case{{"batch", "-m", stories->string()}, "no requests: give -i FILE or pipe them"}}) {
        INFO(c.args[0]);
        PtyProcess p(c.args, state.string());
        CHECK(p.wait_for(c.message, 0, 30));
        CHECK(p.wait_exit() == 2);
    }
    // -i - is stdin even on a terminal: requests typed there, ended by Ctrl-D.
    PtyProcess typed({"batch", "-m", stories->string(), "--raw", "-i", "-", "-n", "2", "--quiet", "-t", "1"},
                     state.string());
    human_pause();
    typed.send("Once\n");
    human_pause();
    typed.send("\x04");
    CHECK(typed.wait_for("\"id\":\"line-1\"", 0, 30));
    CHECK(typed.wait_exit() == 0);
}
