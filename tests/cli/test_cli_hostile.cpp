// The command line against hostile files and careless use: text from a model file on stderr (escape sequences,
// megabyte strings), a GGUF of millions of strings, failed writes of --help, exit statuses, thread counts far above
// the CPUs, bytes a BPE vocabulary drops, `-f -`, `quill run` at a terminal, prompts' final newlines, --version,
// -q, -v and -c above the trained context.
#include "engine/format/gguf.h"
#include "tests/support/fault_util.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <pty.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace test_cli_hostile {

using namespace quill;
using test::run_quill;
using test::TinyModel;

namespace {

// A tiny model the tests write (tests/support/random_model.h): the shape of stories260K, trained context 2048.
std::string tiny_model(TinyModel which = TinyModel::spm) { return test::tiny_model_file(which).string(); }

size_t count_of(const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
}

size_t longest_line(const std::string& text) {
    size_t longest = 0, start = 0;
    for (size_t nl = text.find('\n'); nl != std::string::npos; start = nl + 1, nl = text.find('\n', start))
        longest = std::max(longest, nl - start);
    return std::max(longest, text.size() - start);
}

// Peak resident memory of one run of quill (KiB), from wait4 of that child alone; output discarded.
long peak_rss_kib(const std::vector<std::string>& args) {
    const int null = open("/dev/null", O_RDWR);
    REQUIRE(null >= 0);
    const pid_t pid = test::spawn_quill(args, {null, null, null});
    close(null);
    int status = 0;
    rusage usage{};
    REQUIRE(wait4(pid, &status, 0, &usage) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    return usage.ru_maxrss;
}

// A GGUF holding one array of n empty strings (8 bytes each in the file: their lengths).
void write_empty_strings_gguf(const std::filesystem::path& path, uint64_t n) {
    std::ofstream f(path, std::ios::binary);
    auto put = [&](auto v) { f.write(reinterpret_cast<const char*>(&v), sizeof v); };
    f.write("GGUF", 4);
    put(uint32_t{3});
    put(uint64_t{0});  // tensors
    put(uint64_t{1});  // metadata
    const std::string key = "tokenizer.ggml.tokens";
    put(uint64_t{key.size()});
    f.write(key.data(), static_cast<std::streamsize>(key.size()));
    put(uint32_t{9});  // array
    put(uint32_t{8});  // of strings
    put(n);
    const std::vector<char> zeros(size_t{1} << 20, 0);
    for (uint64_t left = 8 * n; left > 0;) {
        const auto k = static_cast<std::streamsize>(std::min<uint64_t>(left, zeros.size()));
        f.write(zeros.data(), k);
        left -= static_cast<uint64_t>(k);
    }
}

// Runs quill on a pseudo-terminal: types each line at the prompt ("> "), waiting for the reply's stats line after
// each, then /exit. The terminal's output (without \r) and the exit status (-1 when it did not exit in time).
struct PtyRun {
    std::string output;
    int status = -1;
};

PtyRun run_on_terminal(const std::vector<std::string>& args, const std::vector<std::string>& lines) {
    const auto state = test::temp_dir("hostile-pty");
    winsize size{24, 100, 0, 0};
    int fd = -1;
    const pid_t pid = forkpty(&fd, nullptr, nullptr, &size);
    REQUIRE(pid >= 0);
    if (pid == 0) {
        setenv("NO_COLOR", "1", 1);
        setenv("XDG_STATE_HOME", state.c_str(), 1);
        std::vector<char*> argv{const_cast<char*>(QUILL_BIN)};
        for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        execv(QUILL_BIN, argv.data());
        _exit(127);
    }
    PtyRun r;
    // Reads until `needle` shows after `from` (false after 60 s or at the end of output).
    auto read_until = [&](const std::string& needle, size_t from) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (r.output.find(needle, from) == std::string::npos) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            pollfd p{fd, POLLIN, 0};
            if (poll(&p, 1, 100) <= 0) continue;
            char buf[4096];
            const ssize_t n = read(fd, buf, sizeof buf);
            if (n <= 0) return false;
            for (ssize_t i = 0; i < n; ++i)
                if (buf[i] != '\r') r.output.push_back(buf[i]);
        }
        return true;
    };
    size_t mark = 0;
    std::vector<std::string> typed = lines;
    typed.push_back("/exit");
    for (const auto& line : typed) {
        if (!read_until("> ", mark)) break;
        usleep(300000);  // libedit takes the terminal just after it prints the prompt
        mark = r.output.size();
        const std::string keys = line + "\r";
        REQUIRE(write(fd, keys.data(), keys.size()) == static_cast<ssize_t>(keys.size()));
        if (line != "/exit" && read_until(" tok/s; context ", mark)) mark = r.output.find(" tok/s; context ", mark);
    }
    read_until("\x01", mark);  // everything up to the end of output
    int st = 0;
    for (int i = 0; i < 100 && waitpid(pid, &st, WNOHANG) != pid; ++i) usleep(100000);
    if (waitpid(pid, &st, WNOHANG) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    } else {
        r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    close(fd);
    std::filesystem::remove_all(state);
    return r;
}

}  // namespace

TEST_CASE("a model file's text reaches stderr escaped, on one line and capped", "[cli]") {
    const std::string tiny = tiny_model();
    const auto dir = test::temp_dir("hostile-escape");
    const std::string title = "\x1b]0;pwned\x07";  // OSC 0: retitles the terminal
    const std::string huge(100000, 'A');
    const std::string evil = (dir / "evil.gguf").string();
    test::rewrite_gguf(tiny, evil, [&](GgufWriter& w) {
        w.set("general.name", title + "\x1b[2J" + huge);
        // A template that refuses every conversation, with the same text as its message.
        w.set("tokenizer.chat_template", "{{ raise_exception('" + title + "line\nbreak" + huge + "') }}");
    });
    auto r = run_quill({"run", "-m", evil, "-p", "Once", "-n", "2"});
    INFO(r.err.substr(0, 2000));
    CHECK(r.status != 0);
    CHECK(r.err.find('\x1b') == std::string::npos);
    CHECK(r.err.find('\x07') == std::string::npos);
    CHECK(r.err.find("\\x1b]0;pwned\\x07") != std::string::npos);  // shown, not obeyed
    CHECK(longest_line(r.err) < 1100);
    CHECK(r.err.size() < 4000);
    CHECK(count_of(r.err, "quill: error: ") == 1);
    CHECK(r.err.find("\\x1b]0;pwned\\x07line\\nbreak") != std::string::npos);  // the error stays one line
    CHECK(r.err.find(" more bytes]") != std::string::npos);                    // and says it was cut
    // A template the renderer cannot parse is a warning (then the built-in format), escaped the same way.
    const std::string broken = (dir / "broken.gguf").string();
    test::rewrite_gguf(tiny, broken, [&](GgufWriter& w) {
        w.set("tokenizer.chat_template", "{% if " + title + huge + " %}");
    });
    auto b = run_quill({"run", "-m", broken, "-p", "Once", "-n", "2"});
    INFO(b.err.substr(0, 2000));
    CHECK(b.err.find('\x1b') == std::string::npos);
    CHECK(longest_line(b.err) < 1100);
    std::filesystem::remove_all(dir);
}

TEST_CASE("quill info holds a GGUF's array of millions of strings in about the file's size", "[cli]") {
    const auto dir = test::temp_dir("hostile-strings");
    const auto big = dir / "strings.gguf", small = dir / "small.gguf";
    write_empty_strings_gguf(big, 5'000'000);  // 40 MB
    write_empty_strings_gguf(small, 1);
    const double file_kib = static_cast<double>(std::filesystem::file_size(big)) / 1024;
    const long base = peak_rss_kib({"info", small.string()});
    const long peak = peak_rss_kib({"info", big.string()});
    INFO("peak " << peak << " KiB, base " << base << " KiB, file " << file_kib << " KiB");
    // The file's pages (mapped and read once) and an index of every 16th string: a std::string-sized value per
    // element made it 6x the file.
    CHECK(static_cast<double>(peak - base) < 1.5 * file_kib);
    auto j = nlohmann::json::parse(run_quill({"info", "--json", big.string()}).out);
    CHECK(j["tokenizer"]["vocab_size"] == 5'000'000);
    std::filesystem::remove_all(dir);
}

TEST_CASE("a failed write of --help or --version is an error, and --version says what was built", "[cli]") {
    for (const auto& args : std::vector<std::vector<std::string>>{{"--help"}, {"run", "--help"}, {"--version"}}) {
        INFO(args[0]);
        const test::Outcome r = test::run_io(args, "", "/dev/full", "");
        CHECK(r.status == 1);
        CHECK(test::count_errors(r.err) == 1);
        CHECK(test::last_line(r.err).starts_with("quill: error: cannot write to stdout"));
    }
    auto v = run_quill({"--version"});
    CHECK(v.status == 0);
    CHECK(v.out.starts_with("quill 0."));
    CHECK(v.out.find(" build)\n") != std::string::npos);
    CHECK(v.out.find("(git ") != std::string::npos);
    CHECK(v.out.find("\nCUDA: ") != std::string::npos);
    CHECK(v.out.find("\nCPU kernels: ") != std::string::npos);
}

TEST_CASE("a prompt longer than the context is a usage error, through the chat template as with --raw", "[cli]") {
    const std::string m = tiny_model();
    auto raw = run_quill({"run", "--raw", "-m", m, "-c", "4", "-p", "Once upon a time"});
    CHECK(raw.status == 2);
    auto templated = run_quill({"run", "--chat-template", "chatml", "-m", m, "-c", "4", "-p", "Once upon a time"});
    CHECK(templated.status == 2);
    // Megabytes of prompt: longer than the context before the template's own output limit (4 MiB) is reached.
    std::string big;
    while (big.size() < (size_t{5} << 20)) big += "Once upon a time. ";
    auto huge = run_quill({"run", "--chat-template", "chatml", "-m", m, "-n", "1"}, big);
    INFO(huge.err);
    CHECK(huge.status == 2);
    CHECK(test::last_line(huge.err).find("longer than the context of 2048") != std::string::npos);
}

TEST_CASE("quill bench refuses bad values with status 2 before loading anything", "[cli]") {
    const std::string m = tiny_model();
    const std::vector<std::vector<std::string>> bad{
        {"-m", m, "--dtype", "nonsense"},          {"-m", m, "--dtype", "q8_0"},
        {"--synthetic", "stories15m", "--dtype", "nonsense"},
        {"-m", m, "-p", "0", "-n", "0"},           {"-m", m, "-r", "0"},
        {"-m", m, "--batch", "0"},                 {"-m", m, "--batch-decode", "0"},
        {"-m", m, "-p", "-4"},                     {"-m", m, "-n", "8,-1"},
    };
    for (auto args : bad) {
        args.insert(args.begin(), "bench");
        auto r = run_quill(args);
        INFO(args[2] << " " << args[3] << ": " << r.err);
        CHECK(r.status == 2);
        CHECK(test::count_errors(r.err) == 1);
        CHECK(r.err.find("loaded") == std::string::npos);
        CHECK(r.out.empty());
    }
}

TEST_CASE("quill run -t far above the CPUs is capped with one warning and prints what -t 2 prints", "[cli]") {
    const std::vector<std::string> args{"run", "--raw", "-m", tiny_model(), "-p", "Once upon a time", "-n", "16",
                                        "--temp", "0"};
    auto with_threads = [&](const char* t) {
        auto a = args;
        a.insert(a.end(), {"-t", t});
        return a;
    };
    // 999 threads spinning on a few CPUs took seconds a token (a minute for these 16 on 2 CPUs).
    const auto start = std::chrono::steady_clock::now();
    const test::Outcome many = test::run_io(with_threads("999"), "", "", "", 60);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(many.err);
    REQUIRE(many.status == 0);
    CHECK(seconds < 15);
    CHECK(count_of(many.err, "warning") == 1);
    CHECK(many.err.find("-t 999 is more threads than the ") != std::string::npos);
    CHECK(many.err.find("; using ") != std::string::npos);
    CHECK(many.out == run_quill(with_threads("2")).out);
}

TEST_CASE("a byte-level BPE vocabulary's dropped bytes get a warning", "[cli][model]") {
    auto model = test::require_default_model();
    if (!model) return;
    auto r = run_quill({"tokenize", "-m", model->string(), "--no-bos", "--pieces"}, "a\xff" "b\xfe");
    CHECK(r.status == 0);
    CHECK(count_of(r.out, "\n") == 2);  // a and b: the default model has no token for 0xff or 0xfe
    CHECK(r.err.find("2 bytes with no token in the vocabulary (the first, 0xff, at offset 1) were dropped") !=
          std::string::npos);
    auto clean = run_quill({"tokenize", "-m", model->string(), "-p", "a\tb\n\xc3\xa9"});
    CHECK(clean.err.empty());
}

TEST_CASE("quill run -f - reads the prompt from stdin", "[cli]") {
    const std::vector<std::string> common{"run", "--raw", "-m", tiny_model(), "-n", "8", "--temp", "0"};
    auto from_stdin = common, from_p = common;
    from_stdin.insert(from_stdin.end(), {"-f", "-"});
    from_p.insert(from_p.end(), {"-p", "Once upon a time"});
    auto r = run_quill(from_stdin, "Once upon a time");
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.out == run_quill(from_p).out);
}

TEST_CASE("quill run at a terminal without a prompt starts a chat with run's options", "[cli][chat]") {
    const std::string m = tiny_model(TinyModel::spm_chat);
    const PtyRun r = run_on_terminal(
        {"run", "-m", m, "--chat-template", "chatml", "-n", "3", "-c", "96", "--temp", "0"},
        {"Once upon a time"});
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("no prompt") == std::string::npos);
    CHECK(r.output.find("3 tokens, ") != std::string::npos);  // run's -n
    CHECK(r.output.find("/96; reused 0") != std::string::npos);  // run's -c
    // --raw and --json need a prompt: at a terminal without one they are a usage error, not a chat.
    const PtyRun raw = run_on_terminal({"run", "-m", m, "--raw"}, {});
    CHECK(raw.status == 2);
    CHECK(raw.output.find("run at a terminal starts a chat") != std::string::npos);
}

TEST_CASE("a prompt from stdin or a file loses one final newline in the chat template, none with --raw", "[cli]") {
    const std::string m = tiny_model();
    auto prompt_tokens = [&](std::vector<std::string> args, const std::string& input) {
        args.insert(args.begin(), {"run", "-m", m, "-n", "1", "--json"});
        auto r = run_quill(args, input);
        INFO(r.err);
        REQUIRE(r.status == 0);
        return nlohmann::json::parse(r.out)["prompt_tokens"].get<int>();
    };
    const int typed = prompt_tokens({"--chat-template", "chatml", "-p", "Once upon a time"}, "");
    CHECK(prompt_tokens({"--chat-template", "chatml"}, "Once upon a time\n") == typed);
    CHECK(prompt_tokens({"--chat-template", "chatml"}, "Once upon a time\r\n") == typed);
    CHECK(prompt_tokens({"--chat-template", "chatml", "-f", "-"}, "Once upon a time\n") == typed);
    CHECK(prompt_tokens({"--chat-template", "chatml"}, "Once upon a time\n\n") > typed);  // only one
    const int raw = prompt_tokens({"--raw", "-p", "Once upon a time"}, "");
    CHECK(prompt_tokens({"--raw"}, "Once upon a time\n") > raw);  // --raw keeps the bytes
}

TEST_CASE("quill run takes its prompt as an argument, -q and -v, and -c above the trained context warns", "[cli]") {
    const std::string m = tiny_model();
    auto p = run_quill({"run", "--raw", "-m", m, "-p", "Once upon a time", "-n", "8", "--temp", "0"});
    auto positional = run_quill({"run", "--raw", "-m", m, "Once upon a time", "-n", "8", "--temp", "0"});
    CHECK(positional.status == 0);
    CHECK(positional.out == p.out);
    CHECK(p.err.find("loaded in") != std::string::npos);
    auto both = run_quill({"run", "--raw", "-m", m, "-p", "Once", "Once upon a time"});
    CHECK(both.status == 2);
    CHECK(test::last_line(both.err).find("give the prompt once") != std::string::npos);
    // -q: neither the load line nor the stats line; the text is the same.
    auto quiet = run_quill({"run", "--raw", "-q", "-m", m, "Once upon a time", "-n", "8", "--temp", "0"});
    CHECK(quiet.status == 0);
    CHECK(quiet.out == p.out);
    CHECK(quiet.err.empty());
    // Without a GPU the CPU runs the model without a word, unless -v asks why.
    CHECK(p.err.find("using the CPU") == std::string::npos);
    auto verbose = run_quill({"run", "--raw", "-v", "-m", m, "Once", "-n", "1"});
    CHECK(count_of(verbose.err, "; using the CPU") + count_of(verbose.err, "cuda backend") == 1);
    // The tiny model was trained for 2048 positions: one warning above that, none at it.
    auto above = run_quill({"run", "--raw", "-q", "-m", m, "Once", "-n", "1", "-c", "4096"});
    CHECK(above.status == 0);
    CHECK(count_of(above.err, "\n") == 1);
    CHECK(above.err.find("warning: -c 4096 is more than the 2048 tokens the model was trained for") !=
          std::string::npos);
    CHECK(run_quill({"run", "--raw", "-q", "-m", m, "Once", "-n", "1", "-c", "2048"}).err.empty());
}

}  // namespace test_cli_hostile
