// `quill chat`, `quill template` and `quill run` with chat templates, end to end on the default model: through a
// pipe, and through a pseudo-terminal as a person types (two turns, Ctrl-C in the middle of a reply, /undo,
// /regen, Ctrl-D); and on the tiny model the tests write where any model will do.
#include "engine/chat/chat_format.h"
#include "engine/format/gguf.h"
#include "tests/support/fault_util.h"
#include "tests/support/pty_process.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_vocab.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace test_chat_cli {

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

// The ids `quill template --tokens` prints on its last line.
std::vector<int32_t> template_ids(const std::string& out) {
    const size_t last_line = out.rfind('\n', out.size() - 2);
    REQUIRE(last_line != std::string::npos);
    return parse_ids(out.substr(last_line + 1));
}

std::optional<std::string> default_model_or_skip() {
    auto m = test::default_model();
    if (!m) test::skip("the default model is absent (run models/fetch_default.sh)");
    if (!m) return std::nullopt;
    return m->string();
}

}  // namespace

TEST_CASE("quill template prints the prompt and its tokens, and the user's text never becomes a special token",
          "[chat][model]") {
    auto model = default_model_or_skip();
    if (!model) return;
    const std::string messages = R"([{"role": "user", "content": "Why is the sky blue?"}])";
    auto r = run_quill({"template", "-m", *model, "--messages", "-", "--tokens"}, messages);
    REQUIRE(r.status == 0);
    const size_t last_line = r.out.rfind('\n', r.out.size() - 2);
    REQUIRE(last_line != std::string::npos);
    // The ids are those of the model's chat format (which test_template.cpp checks against the reference's).
    const GgufFile gguf = GgufFile::open(*model);
    const auto tok = Tokenizer::from_gguf(gguf);
    const auto format = chat::ChatFormat::choose(&gguf, tok.get(), "", [](const std::string&) {});
    CHECK(template_ids(r.out) == format.tokenize(*tok, nlohmann::json::parse(messages), true));
    CHECK(r.out.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"));
    CHECK(r.out.substr(0, last_line).ends_with("<|im_start|>user\nWhy is the sky blue?<|im_end|>\n"
                                              "<|im_start|>assistant\n"));

    // The user's own text is never parsed as special tokens: <|im_end|> typed by the user stays text.
    auto typed = run_quill({"template", "-m", *model, "--messages", "-", "--tokens"},
                           R"([{"role": "user", "content": "a<|im_end|>b"}])");
    REQUIRE(typed.status == 0);
    auto ids = template_ids(typed.out);
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
    auto model = default_model_or_skip();
    if (!model) return;
    auto r = run_quill({"run", "-m", *model, "-p", "Why is the sky blue?", "--temp", "0", "-n", "24", "--json"});
    REQUIRE(r.status == 0);
    auto j = nlohmann::json::parse(r.out);
    // The prompt is the template's rendering of the question, as `quill template` tokenizes it.
    auto t = run_quill({"template", "-m", *model, "--messages", "-", "--tokens"},
                       R"([{"role": "user", "content": "Why is the sky blue?"}])");
    REQUIRE(t.status == 0);
    CHECK(j["prompt_tokens"] == template_ids(t.out).size());
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
    const auto tiny = test::tiny_model_file(test::TinyModel::spm);  // no template, no chatml tokens
    auto r = run_quill({"run", "-m", tiny.string(), "-p", "Once upon a time", "-n", "4"});
    CHECK(r.status == 2);
    CHECK(r.err.find("no chat template") != std::string::npos);
    CHECK(r.err.find("--raw") != std::string::npos);
    auto ok = run_quill({"run", "-m", tiny.string(), "-p", "Once", "-n", "4", "--chat-template", "chatml"});
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

TEST_CASE("a byte-level BPE model's own template: quill template, run and chat feed the model its tokens", "[chat]") {
    const std::string m = test::tiny_model_file(test::TinyModel::bpe_chat).string();
    const test::TinyVocab vocab = test::tiny_bpe_vocab();
    // The template's default system message, then the user's message; the markers are control tokens, the text
    // around them the tokenizer's.
    const std::string messages = R"([{"role": "user", "content": "Once upon a time"}])";
    auto t = run_quill({"template", "-m", m, "--messages", "-", "--tokens"}, messages);
    REQUIRE(t.status == 0);
    const std::string rendered = t.out.substr(0, t.out.rfind('\n', t.out.size() - 2) + 1);
    CHECK(rendered == "<|im_start|>system\nYou are a tiny test model.<|im_end|>\n<|im_start|>user\nOnce upon a "
                      "time<|im_end|>\n<|im_start|>assistant\n\n");
    const std::vector<int32_t> ids = template_ids(t.out);
    CHECK(ids == test::make_tokenizer(vocab)->encode(rendered.substr(0, rendered.size() - 1), false, true));
    CHECK(std::count(ids.begin(), ids.end(), vocab.id("<|im_start|>")) == 3);
    CHECK(std::count(ids.begin(), ids.end(), vocab.id("Ġupon")) == 1);
    // run feeds those tokens; chat's first reply through a pipe is run's reply.
    auto run = run_quill({"run", "-m", m, "-p", "Once upon a time", "--temp", "0", "-n", "12", "--json"});
    REQUIRE(run.status == 0);
    const auto j = nlohmann::json::parse(run.out);
    CHECK(j["prompt_tokens"] == ids.size());
    CHECK(j["completion_tokens"] == 12);
    auto single = run_quill({"run", "-m", m, "-p", "Once upon a time", "--temp", "0", "-n", "12"});
    auto chat = run_quill({"chat", "-m", m, "--temp", "0", "-n", "12"}, "Once upon a time\nThe cat\n");
    REQUIRE(chat.status == 0);
    const size_t sep = chat.out.find("\n\n");
    REQUIRE(sep != std::string::npos);
    CHECK(chat.out.substr(0, sep) == single.out);
    CHECK(chat.out.size() > sep + 4);  // a second reply
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
    const auto tiny = test::tiny_model_file(test::TinyModel::spm);  // no template, no chatml tokens
    const auto dir = test::temp_dir("chat-fallback");
    auto with_template = [&](const std::string& name, const std::string& source) {
        const std::string out = (dir / name).string();
        test::rewrite_gguf(tiny.string(), out,
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
    const auto tiny = test::tiny_model_file(test::TinyModel::spm);  // no template, no chatml tokens
    int in[2], out[2];
    REQUIRE(pipe(in) == 0);
    REQUIRE(pipe(out) == 0);
    const pid_t pid = test::spawn_quill({"chat", "-m", tiny.string(), "--chat-template", "chatml", "-n", "100000",
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
    const auto tiny = test::tiny_model_file(test::TinyModel::spm);  // no template, no chatml tokens
    const auto state = test::temp_dir("tty-refuse");
    struct Case {
        std::vector<std::string> args;
        std::string message;
    };
    for (const Case& c : {Case{{"run", "-m", tiny.string(), "--raw"}, "--raw and --json need one"},
                          Case{{"batch", "-m", tiny.string()}, "no requests: give -i FILE or pipe them"}}) {
        INFO(c.args[0]);
        PtyProcess p(c.args, state.string());
        CHECK(p.wait_for(c.message, 0, 30));
        CHECK(p.wait_exit() == 2);
    }
    // -i - is stdin even on a terminal: requests typed there, ended by Ctrl-D.
    PtyProcess typed({"batch", "-m", tiny.string(), "--raw", "-i", "-", "-n", "2", "--quiet", "-t", "1"},
                     state.string());
    human_pause();
    typed.send("Once\n");
    human_pause();
    typed.send("\x04");
    CHECK(typed.wait_for("\"id\":\"line-1\"", 0, 30));
    CHECK(typed.wait_exit() == 0);
}

}  // namespace test_chat_cli
