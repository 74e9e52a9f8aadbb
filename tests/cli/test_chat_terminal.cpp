// `quill chat` as a person uses it on a terminal (through a pseudo-terminal: non-ASCII keys whatever the locale
// says, bracketed paste, the stats line, -q) and as a script uses it through a pipe (a failed turn keeps replies
// paired and the exit status says so; an error never ends the chat or loses the conversation; /set, /show; /load
// and /save on files that are not regular). All on the tiny models the tests write: nothing here needs test data.
#include "engine/chat/chat_format.h"
#include "engine/chat/conversation.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "tests/support/fault_util.h"
#include "tests/support/pty_process.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sys/stat.h>

namespace test_chat_terminal {

using namespace quill;
using test::human_pause;
using test::PtyProcess;
namespace fs = std::filesystem;

namespace {

// `quill chat` on the tiny SPM model the tests write (no template of its own, no chatml tokens) in the chatml
// format, greedy: quick to load, and its replies run to -n or to the end of the context (it never ends one itself).
std::vector<std::string> tiny_chat(const std::vector<std::string>& more) {
    std::vector<std::string> args = {"chat", "-m", test::tiny_model_file(test::TinyModel::spm).string(),
                                     "--chat-template", "chatml", "--temp", "0", "-t", "1"};
    args.insert(args.end(), more.begin(), more.end());
    return args;
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// Gemma 2's chat template as google/gemma-2-2b-it ships it: it refuses a system message, and roles that do not
// alternate user, assistant, user.
constexpr const char* kGemma2Template =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";

nlohmann::json saved_messages(const fs::path& p) { return nlohmann::json::parse(test::read_file(p))["messages"]; }

// What a pipe's reader sees: one block per reply, each ended by a blank line.
std::vector<std::string> reply_blocks(const std::string& out) {
    std::vector<std::string> blocks;
    size_t at = 0;
    for (size_t end; (end = out.find("\n\n", at)) != std::string::npos; at = end + 2) blocks.push_back(out.substr(at, end - at));
    CHECK(at == out.size());  // nothing after the last blank line
    return blocks;
}

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

// A chat on a pseudo-terminal, typed into at its prompts as a person does.
struct TypedChat {
    PtyProcess p;
    size_t mark = 0;  // where the next wait starts: after what the last step saw

    TypedChat(const std::vector<std::string>& args, const fs::path& state, const test::EnvChanges& env = {})
        : p(args, state.string(), env) {}
    // At the next prompt, sends `keys` as they are.
    void keys(const std::string& keys) {
        INFO(p.output());
        REQUIRE(p.wait_for("> ", mark));
        human_pause();
        mark = p.size();
        p.send(keys);
    }
    // At the next prompt, types a line and Enter.
    void type(const std::string& line) { keys(line + "\r"); }
    // Waits for `needle` after the last step and moves past it.
    void expect(const std::string& needle, int seconds = 60) {
        INFO(p.output());
        REQUIRE(p.wait_for(needle, mark, seconds));
        mark = p.output().find(needle, mark) + needle.size();
    }
    void quit() {
        type("/exit");
        CHECK(p.wait_exit() == 0);
    }
    // After one exchange: /save, /exit, and the messages saved.
    nlohmann::json save_and_quit(const fs::path& saved) {
        type("/save " + saved.string());
        expect("saved 2 messages");
        quit();
        nlohmann::json messages = saved_messages(saved);
        REQUIRE(messages.size() == 2);
        return messages;
    }
};

}  // namespace

TEST_CASE("quill chat on a terminal keeps Chinese, French, emoji and combining marks whatever the locale says",
          "[chat][terminal]") {
    const auto dir = test::temp_dir("chat-utf8");
    // e + U+0301 (a combining acute), a thumb with a skin tone, a Korean syllable.
    const std::string text = "Say: 你好 café 🎉 e\xcc\x81t\xc3\xa9 👍🏽 한 ñ";
    const std::vector<test::EnvChanges> locales = {
        {{"LANG", std::nullopt}, {"LC_ALL", std::nullopt}, {"LC_CTYPE", std::nullopt}},  // none: the C locale
        {{"LANG", std::nullopt}, {"LC_ALL", "C"}},
        {{"LC_ALL", std::nullopt}, {"LC_CTYPE", std::nullopt}, {"LANG", "C.UTF-8"}},
    };
    for (size_t i = 0; i < locales.size(); ++i) {
        INFO("locale setting " << i);
        const fs::path saved = dir / fmt::format("conv{}.json", i);
        TypedChat c(tiny_chat({"-n", "2"}), dir, locales[i]);
        c.type(text);
        c.expect(" tok/s; context ");
        CHECK(c.save_and_quit(saved)[0]["content"].get<std::string>() == text);
    }
}

TEST_CASE("a bracketed paste on a terminal is one message with its newlines, sent by Enter", "[chat][terminal]") {
    const auto dir = test::temp_dir("chat-paste");
    const fs::path saved = dir / "conv.json";
    TypedChat c(tiny_chat({"-n", "2"}), dir);
    c.type("/help");
    c.expect("pasted text stays one message");
    // Typed text, then a paste as a terminal sends it (line ends as '\r'), then Enter.
    c.keys("Summarize: \033[200~first line\rsecond line\r\rthird 🎉 fin\033[201~");
    human_pause();
    c.p.send("\r");
    c.expect(" tok/s; context ");
    CHECK(c.save_and_quit(saved)[0]["content"].get<std::string>() ==
          "Summarize: first line\nsecond line\n\nthird 🎉 fin");
    // The terminal was asked to bracket pastes while quill read a line, and told to stop before quill exited.
    const std::string& out = c.p.output();
    CHECK(out.find("\033[?2004h") != std::string::npos);
    CHECK(out.rfind("\033[?2004l") > out.rfind("\033[?2004h"));
}

TEST_CASE("the stats line and /stats show the time to first token and one context count, also after a cut",
          "[chat][terminal]") {
    const auto dir = test::temp_dir("chat-stats");
    TypedChat c(tiny_chat({"-c", "64"}), dir);  // no -n: the reply runs into the end of the context
    c.type("Once upon a time");
    c.expect("the reply was cut");
    c.expect("prefilled");
    c.type("/stats");
    c.expect("prefilled");
    c.quit();
    const std::string& out = c.p.output();
    INFO(out);
    std::smatch line, stats;
    REQUIRE(std::regex_search(out, line, std::regex(R"(first token (\d+) ms, [0-9.]+ tok/s; context (\d+)/(\d+);)")));
    REQUIRE(std::regex_search(out, stats, std::regex(R"(context (\d+)/(\d+) tokens in the cache; last reply \d+ )"
                                                     R"(tokens, first token (\d+) ms)")));
    CHECK(line[2] == stats[1]);
    CHECK(line[3] == "64");
    CHECK(std::stoi(line[2]) <= 64);
    CHECK(line[1] == stats[3]);
}

TEST_CASE("on a terminal the notice of dropped messages comes before the reply it makes room for", "[chat][terminal]") {
    const auto dir = test::temp_dir("chat-drop");
    TypedChat c(tiny_chat({"-c", "128", "-n", "6"}), dir);
    const std::string notice = "quill: the conversation outgrew the context";
    size_t typed_at = 0;
    for (int turn = 0; turn < 4 && c.p.output().find(notice) == std::string::npos; ++turn) {
        c.type("Tell me a story about a cat");
        typed_at = c.mark;
        c.expect("prefilled");
    }
    c.quit();
    const std::string& out = c.p.output();
    INFO(out);
    const size_t at = out.find(notice, typed_at);
    REQUIRE(at != std::string::npos);
    // The echo of the message (and the end of bracketed paste), then the notice, then the reply and its stats line.
    CHECK(std::regex_replace(out.substr(typed_at, at - typed_at), std::regex("\033\\[\\?2004l"), "")
              .ends_with("cat\n"));
    const size_t reply = out.find('\n', at) + 1;
    CHECK(out.find(" tok/s; context ", reply) > reply);
}

TEST_CASE("quill chat -q shows no load line and no stats line", "[chat][terminal]") {
    const auto dir = test::temp_dir("chat-quiet");
    TypedChat c(tiny_chat({"-q", "-n", "4"}), dir);
    c.type("Once upon a time");
    c.expect("Once upon a time\n");
    c.type("/stats");  // typed at the prompt after the reply
    c.expect("tokens in the cache");
    c.quit();
    const std::string& out = c.p.output();
    INFO(out);
    CHECK(out.find(" tok/s; context ") == std::string::npos);
    CHECK(out.find("loaded in") == std::string::npos);
    CHECK(out.find("last reply 4 tokens") != std::string::npos);
}

TEST_CASE("through a pipe a failed turn prints an empty reply and one error line, and chat exits 1 at the end",
          "[chat]") {
    std::string long_message;
    for (int i = 0; i < 80; ++i) long_message += "the big dog ";
    auto r = test::run_quill(tiny_chat({"-n", "4", "-c", "256", "--context-overflow", "error"}),
                             "Once\n" + long_message + "\nThe end\n");
    INFO(r.err);
    CHECK(r.status == 1);
    const auto blocks = reply_blocks(r.out);
    REQUIRE(blocks.size() == 3);
    CHECK(!blocks[0].empty());
    CHECK(blocks[1].empty());
    CHECK(!blocks[2].empty());
    CHECK(count(r.err, "quill: error: ") == 1);
    CHECK(r.err.find("the message is 295 tokens in the chat template, longer than the context of 256") !=
          std::string::npos);  // alone: neither /undo nor drop-oldest can help
    // Nothing failed: 0.
    CHECK(test::run_quill(tiny_chat({"-n", "2"}), "Once\n").status == 0);
}

TEST_CASE("a line or block over --max-input-bytes and a message over the render limit fail alone", "[chat]") {
    const std::string over(3000, 'x');
    auto r = test::run_quill(tiny_chat({"-n", "2", "--max-input-bytes", "1000"}),
                             "Once\n" + over + "\n\"\"\"\nshort\n" + over + "\n\"\"\"\nThe end\n");
    INFO(r.err);
    CHECK(r.status == 1);
    auto blocks = reply_blocks(r.out);
    REQUIRE(blocks.size() == 4);
    CHECK(blocks[1].empty());
    CHECK(blocks[2].empty());
    CHECK(!blocks[3].empty());
    CHECK(count(r.err, "longer than the limit of 1000 bytes") == 2);

    // 5 MB in one message: past the chat template's render limit, under --max-input-bytes.
    std::string big;
    while (big.size() < 5'000'000) big += "Once upon a time there was a big dog. ";
    auto b = test::run_quill(tiny_chat({"-n", "2"}), "Once\n" + big + "\nThe end\n");
    INFO(b.err);
    CHECK(b.status == 1);
    blocks = reply_blocks(b.out);
    REQUIRE(blocks.size() == 3);
    CHECK(blocks[1].empty());
    CHECK(!blocks[2].empty());
    CHECK(count(b.err, "quill: error: ") == 1);
}

TEST_CASE("a template that refuses /system or a loaded conversation leaves the chat going and the conversation whole",
          "[chat]") {
    const auto dir = test::temp_dir("chat-refused");
    const fs::path gemma = dir / "gemma-2.jinja";
    write_text(gemma, kGemma2Template);
    write_text(dir / "alt.json", R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
    const fs::path saved = dir / "conv.json";
    auto r = test::run_quill({"chat", "-m", test::tiny_model_file(test::TinyModel::spm).string(), "--chat-template",
                              gemma.string(), "--temp", "0", "-n", "3", "-t", "1"},
                             "Hi\n/system Be brief.\nAgain\n/load " + (dir / "alt.json").string() +
                                 "\nThird\n/save " + saved.string() + "\n");
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("quill: error: System role not supported") != std::string::npos);
    CHECK(r.err.find("quill: error: Conversation roles must alternate") != std::string::npos);
    CHECK(reply_blocks(r.out).size() == 3);
    const auto messages = saved_messages(saved);
    REQUIRE(messages.size() == 6);
    CHECK(messages[0]["content"] == "Hi");
    CHECK(messages[2]["content"] == "Again");
    CHECK(messages[4]["content"] == "Third");
    for (size_t i = 0; i < messages.size(); ++i) CHECK(messages[i]["role"] == (i % 2 ? "assistant" : "user"));
}

TEST_CASE("/load and /save refuse FIFOs and devices at once, /load stops at --max-input-bytes, /save replaces whole",
          "[chat]") {
    const auto dir = test::temp_dir("chat-files");
    const fs::path fifo = dir / "fifo", saved = dir / "conv.json", link = dir / "link.json", big = dir / "big.json";
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    write_text(saved, "old");
    REQUIRE(chmod(saved.c_str(), 0640) == 0);
    fs::create_hard_link(saved, link);
    write_text(big, R"([{"role": "user", "content": ")" + std::string(2000, 'a') + R"("}])");
    const std::string input = "/load /dev/zero\n/load " + fifo.string() + "\n/save " + fifo.string() +
                              "\n/save /dev/null\n/save " + dir.string() + "\n/load " + big.string() + "\nHi\n/save " +
                              saved.string() + "\n";
    write_text(dir / "input", input);
    const auto started = std::chrono::steady_clock::now();
    auto r = test::run_io(tiny_chat({"-n", "2", "--max-input-bytes", "1000"}), (dir / "input").string(),
                          "", "", 60);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(seconds < 30);
    CHECK(r.err.find("/dev/zero: the conversation file is not a regular file (it is a character device)") !=
          std::string::npos);
    CHECK(r.err.find("fifo: the conversation file is not a regular file (it is a FIFO)") != std::string::npos);
    CHECK(count(r.err, "not a regular file: /save writes only files") == 3);
    CHECK(r.err.find("the input is longer than the limit of 1000 bytes") != std::string::npos);
    CHECK(count(r.err, "quill: error: ") == 6);
    // The saved conversation replaced the file through a new one: the old file's other name still holds it.
    const auto messages = saved_messages(saved);
    REQUIRE(messages.size() == 2);
    CHECK(messages[0]["content"] == "Hi");
    CHECK(test::read_file(link) == "old");
    CHECK((fs::status(saved).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write |
                                                                  fs::perms::group_read));
    CHECK(fs::is_fifo(fifo));
    CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 5);  // no temporary file left
}

TEST_CASE("/set changes the sampling parameters, /show lists them, /clear forgets, /bye and /quit quit", "[chat]") {
    auto r = test::run_quill(tiny_chat({}),
                             "/set temp 1.5\n/set top-k 7\n/set seed 11\n/set n-predict 6\n/set top-p 2\n"
                             "/set frob 1\n/set temp x\nOnce\n/set seed 11\n/regen\n/show\n/clear\n/show\n/set\n"
                             "/bye\nNever\n");
    INFO(r.err);
    CHECK(r.status == 1);  // three /set failed
    CHECK(r.err.find("/set top-p: --top-p 2 is out of range") != std::string::npos);
    CHECK(r.err.find("/set: unknown parameter 'frob' (expected temp, top-k,") != std::string::npos);
    CHECK(r.err.find("/set temp: 'x' is not a number") != std::string::npos);
    CHECK(r.err.find("template    built-in chatml") != std::string::npos);
    CHECK(r.err.find("parameters  temp 1.5, top-k 7, top-p 0.95, min-p 0.05, repeat-penalty 1, repeat-last-n 64, "
                     "frequency-penalty 0, presence-penalty 0, seed 11, n-predict 6") != std::string::npos);
    CHECK(r.err.find("tokens in the cache; 2 messages") != std::string::npos);
    CHECK(r.err.find("tokens in the cache; 0 messages") != std::string::npos);
    // Two replies (the message, /regen), none to "Never"; with the seed set again /regen samples the same reply.
    const auto blocks = reply_blocks(r.out);
    REQUIRE(blocks.size() == 2);
    CHECK(!blocks[0].empty());
    CHECK(blocks[1] == blocks[0]);

    auto q = test::run_quill(tiny_chat({"-n", "2"}), "/quit\nNever\n");
    CHECK(q.status == 0);
    CHECK(q.out.empty());
}

TEST_CASE("invalid UTF-8 in a chat message gets one warning line, as in quill run", "[chat]") {
    auto r = test::run_quill(tiny_chat({"-n", "2"}), "caf\xe9 au lait\nfine\n");
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(count(r.err, "quill: warning: the text was changed by tokenizing: 1 byte of invalid UTF-8") == 1);
    CHECK(reply_blocks(r.out).size() == 2);
}

namespace {

// A backend that fails its forward pass when told to, after letting `pass` passes through.
class FailingBackend final : public Backend {
public:
    explicit FailingBackend(Backend& inner) : inner_(inner) {}
    std::string_view name() const override { return inner_.name(); }
    const ModelConfig& config() const override { return inner_.config(); }
    const KvCacheShape& kv_shape() const override { return inner_.kv_shape(); }
    void forward(const Batch& batch, std::span<float> logits) override {
        if (fail_after_ >= 0 && fail_after_-- == 0) throw Error("the device failed");
        inner_.forward(batch, logits);
    }
    void fail_after(int passes) { fail_after_ = passes; }

private:
    Backend& inner_;
    int fail_after_ = -1;
};

}  // namespace

TEST_CASE("a turn that fails midway leaves the messages and the cache bookkeeping true, drops and regen included",
          "[chat]") {
    auto model = Model::load(test::tiny_model_file(test::TinyModel::spm_chat).string());
    auto tok = Tokenizer::from_gguf(model->file);
    const auto format = chat::ChatFormat::from_source(*chat::builtin_template("chatml"), "chatml", "", "");
    const int64_t n_ctx = 192;
    cpu::CpuBackendOptions o;
    o.n_threads = 1;
    o.n_ctx = n_ctx;
    cpu::CpuBackend cpu(model->config, model->weights, o), fresh_cpu(model->config, model->weights, o);
    FailingBackend backend(cpu);
    GenerationParams greedy;
    greedy.max_tokens = 12;
    greedy.sampling.temperature = 0;
    chat::Conversation conv(backend, *tok, format, n_ctx, greedy, chat::ContextOverflow::drop_oldest);
    auto ignore = [](std::string_view) {};
    // The oracle: the conversation so far, run on a fresh slot.
    auto fresh_reply = [&](nlohmann::json messages) {
        messages.erase(messages.end() - 1);
        chat::Conversation fresh(fresh_cpu, *tok, format, n_ctx, greedy, chat::ContextOverflow::error);
        fresh.load(messages);
        return fresh.regenerate(ignore).text;
    };
    int dropped = 0;
    for (int turn = 0; turn < 6; ++turn) {
        INFO("turn " << turn);
        const nlohmann::ordered_json before = conv.messages();
        backend.fail_after(2);  // the prefill and a decode step ran: the slot holds some of this turn
        CHECK_THROWS_WITH(conv.send("Tell me about the little red ball in the park", ignore), "the device failed");
        CHECK(conv.messages() == before);
        const chat::TurnResult r = conv.send("Tell me about the little red ball in the park", ignore);
        dropped += r.dropped_messages;
        CHECK(r.text == fresh_reply(conv.messages()));
        if (turn > 0) CHECK(r.stats.reused_tokens > 0);
    }
    CHECK(dropped > 0);  // some of the failed turns had dropped messages first
    // /regen that fails keeps the reply it was to replace.
    const nlohmann::ordered_json before = conv.messages();
    backend.fail_after(1);
    CHECK_THROWS(conv.regenerate(ignore));
    CHECK(conv.messages() == before);
    CHECK(conv.regenerate(ignore).text == before.back()["content"]);
}

}  // namespace test_chat_terminal
