// quill batch (and the other readers of JSON files) against hostile and mistaken input, and batch as its users
// expect it: JSON nested 300,000 deep, broken JSONL lines, invalid UTF-8, two runs on one output, a non-empty
// output, SIGTERM, exit statuses, shards counted from 1, the progress line on a terminal, seeds in records. The
// command runs end to end on the tiny model the tests write (tests/support/random_model.h); the engine parts are tested
// directly where they decide.
#include "engine/batch/input.h"
#include "engine/batch/records.h"
#include "engine/cli/progress.h"
#include "engine/error.h"
#include "tests/support/fault_util.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace test_batch_hostile {

using namespace quill;
using namespace quill::batch;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A request line whose field "x", which quill never reads, holds `depth` nested arrays.
std::string deep_request(const std::string& id, int depth) {
    const std::string open(static_cast<size_t>(depth), '['), close(static_cast<size_t>(depth), ']');
    return fmt::format(R"({{"id": "{}", "prompt": "hi", "x": {}{}}})", id, open, close);
}

// The records of an output by id; a second record for one id fails the test.
std::map<std::string, json> records_by_id(const std::string& text) {
    std::map<std::string, json> m;
    size_t start = 0;
    for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
        const json r = json::parse(text.substr(start, nl - start));
        const std::string id = r.contains("custom_id") ? r["custom_id"] : r["id"];
        INFO("id " << id);
        CHECK(m.count(id) == 0);
        m[id] = r;
    }
    CHECK(start == text.size());  // no torn line
    return m;
}

std::string prompt_lines(size_t n) {
    const char* starts[] = {"Once upon a time", "The little dog", "Lily wanted to", "One day, Tom", "The sun"};
    std::string s;
    for (size_t i = 0; i < n; ++i) s += fmt::format("{} {}\n", starts[i % 5], i);
    return s;
}

// stderr without the session's line about the device ("quill: built without CUDA; using the CPU").
std::string batch_diagnostics(const std::string& err) {
    std::string kept;
    size_t start = 0;
    for (size_t nl; (nl = err.find('\n', start)) != std::string::npos; start = nl + 1) {
        const std::string line = err.substr(start, nl + 1 - start);
        if (!line.ends_with("; using the CPU\n")) kept += line;
    }
    return kept + err.substr(start);
}

// The tiny model with the SPM vocabulary and no chat template, as a base model ships.
std::string tiny_model() { return test::tiny_model_file(test::TinyModel::spm).string(); }

// The text of a request line run alone, with the same model and options: what a batch must give it undisturbed.
std::string text_alone(const std::string& model, const std::string& request) {
    auto r = test::run_quill({"batch", "--raw", "-m", model, "-t", "1", "-q"}, request + "\n");
    REQUIRE(r.status == 0);
    const auto recs = records_by_id(r.out);
    REQUIRE(recs.size() == 1);
    const std::string text = recs.begin()->second["text"];
    CHECK_FALSE(text.empty());
    return text;
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

size_t count_of(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

// A batch long enough to be caught running (40 requests of 200 tokens), started in the background; returns once
// it has written its first record.
struct RunningBatch {
    pid_t pid;
    std::vector<std::string> args;
};
RunningBatch start_long_batch(const std::string& model, const fs::path& dir) {
    write_text(dir / "in.txt", prompt_lines(40));
    const std::string out = (dir / "out.jsonl").string();
    std::vector<std::string> args{"batch", "--raw", "-m", model, "-i", (dir / "in.txt").string(), "-o", out,
                                  "--temp", "0", "-n", "200", "--parallel", "4", "-t", "1", "-q"};
    const int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    const pid_t pid = test::spawn_quill(args, {devnull, devnull, devnull});
    close(devnull);
    for (int waited = 0; !fs::exists(out) || fs::file_size(out) == 0; waited += 5) {
        REQUIRE(waited < 60000);
        REQUIRE(waitpid(pid, nullptr, WNOHANG) == 0);  // still running
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return {pid, args};
}

}  // namespace

// ---- JSON nested too deep ----

TEST_CASE("a request nested 300,000 levels deep is an error record and the batch goes on", "[batch][model]") {
    const std::string model = tiny_model();
    const std::string ok = R"({"id": "ok", "prompt": "Once upon a time", "max_tokens": 4, "temperature": 0})";
    const std::string input = deep_request("d", 300000) + "\n" + ok + "\n";
    auto r = test::run_quill({"batch", "--raw", "-m", model, "-t", "1", "-q"}, input);
    CHECK(r.status == 3);
    const auto got = records_by_id(r.out);
    REQUIRE(got.size() == 2);
    CHECK(got.at("line-1")["error"]["message"] == "input line 1: JSON nested deeper than 64 levels at column 97");
    CHECK(got.at("ok")["text"] == text_alone(model, ok));
    CHECK_THAT(r.err, Catch::Contains("quill: 1 of 2 requests failed (error records in stdout)"));
    // 64 levels in all (the request object is one) is within the limit.
    auto at_limit = test::run_quill({"batch", "--raw", "-m", model, "-t", "1", "-q", "-n", "1"},
                                    deep_request("d", 63) + "\n");
    CHECK(at_limit.status == 0);
    CHECK(records_by_id(at_limit.out).at("d").contains("text"));
}

// ---- the input format ----

TEST_CASE("a JSONL input whose first line is broken stays JSONL: each broken line is an error record",
          "[batch][model]") {
    const std::string model = tiny_model();
    const std::string c = R"({"id": "c", "prompt": "Once upon a time", "max_tokens": 4, "temperature": 0})";
    const std::string input = "{\"id\": \"a\", \"prompt\": \"Once\", \"max_tokens\": 2,}\n"  // a trailing comma
                              "{\"id\": \"b\", \"prompt\": \"Once \xff\", \"max_tokens\": 2}\n"  // not UTF-8
                              + c + "\n";
    auto r = test::run_quill({"batch", "--raw", "-m", model, "-t", "1"}, input);
    CHECK(r.status == 3);
    CHECK_THAT(r.err, Catch::Contains("; JSONL input, 1 slot\n"));
    auto got = records_by_id(r.out);
    REQUIRE(got.size() == 3);
    CHECK_THAT(got.at("line-1")["error"]["message"].get<std::string>(),
               Catch::StartsWith("input line 1: not valid JSON at column 47: "));
    CHECK_THAT(got.at("line-2")["error"]["message"].get<std::string>(),
               Catch::StartsWith("input line 2: not valid JSON at column ") && Catch::Contains("UTF-8"));
    CHECK(got.at("c")["text"] == text_alone(model, c));

    // --format and the file's extension decide before the content does.
    const auto dir = test::temp_dir("hostile-format");
    write_text(dir / "in.txt", input);
    write_text(dir / "in.jsonl", "hello\nworld\n{\"id\": \"a\", \"prompt\": \"Once\", \"max_tokens\": 2}\n");
    struct Case {
        std::vector<std::string> args;
        std::string format;
        std::vector<std::string> ids;
        int status;
    };
    const std::vector<Case> cases = {
        {{"-i", (dir / "in.txt").string()}, "plain text", {"line-1", "line-2", "line-3"}, 0},
        {{"-i", (dir / "in.jsonl").string()}, "JSONL", {"line-1", "line-2", "a"}, 3},
        {{"-i", (dir / "in.jsonl").string(), "--format", "txt"}, "plain text", {"line-1", "line-2", "line-3"}, 0},
        {{"--format", "jsonl"}, "JSONL", {"line-1", "line-2", "c"}, 3},
    };
    for (const Case& c : cases) {
        std::vector<std::string> args{"batch", "--raw", "-m", model, "-t", "1", "-n", "2"};
        args.insert(args.end(), c.args.begin(), c.args.end());
        INFO(fmt::format("{}", fmt::join(c.args, " ")));
        auto f = test::run_quill(args, input);
        CHECK(f.status == c.status);
        CHECK_THAT(f.err, Catch::Contains("; " + c.format + " input"));
        const auto recs = records_by_id(f.out);
        for (const auto& id : c.ids) CHECK(recs.count(id) == 1);
    }
    auto bad = test::run_quill({"batch", "-m", model, "--format", "csv"}, input);
    CHECK(bad.status == 2);
}

TEST_CASE("the format is read from the whole input: more than half of its lines beginning with {", "[batch]") {
    const std::string ok = R"({"id": "a", "prompt": "x"})";
    CHECK(parse_batch_input("{\"id\": \"a\",}\n" + ok + "\n").format == InputFormat::jsonl);
    CHECK(parse_batch_input("oops\n" + ok + "\n  {\"id\": \"c\", \"te\n").format == InputFormat::jsonl);
    CHECK(parse_batch_input("{a prompt in braces}\nanother prompt\n").format == InputFormat::plain);
    CHECK(parse_batch_input("{not json\n{\"custom_id\": \"c\"}\n").format == InputFormat::openai);
    CHECK(parse_batch_input("\xEF\xBB\xBF" + ok + "\n").entries.at(0).request.id == "a");  // a byte order mark
    CHECK(parse_batch_input("prompt\n", FormatHint::jsonl).format == InputFormat::jsonl);
    CHECK(parse_batch_input(ok, FormatHint::plain).entries.at(0).request.prompt == ok);
    CHECK(parse_batch_input("x\ny\n" + ok, FormatHint::json).format == InputFormat::jsonl);
    CHECK(format_hint_from_name("a/in.jsonl") == FormatHint::json);
    CHECK(format_hint_from_name("in.txt") == FormatHint::plain);
    CHECK(format_hint_from_name("in.csv") == FormatHint::none);
    CHECK(parse_format_option("openai") == FormatHint::openai);
    CHECK_THROWS_AS(parse_format_option("csv"), UsageError);
    const BatchInput bad = parse_batch_input("ok\nbad \xff\nok\n\n\xc3(\n");
    CHECK(bad.invalid_utf8_lines == std::vector<size_t>{2, 5});
}

// ---- the output file ----

TEST_CASE("a second batch on an output another batch is writing is refused, and the first one's records stay single",
          "[batch][model]") {
    const std::string model = tiny_model();
    const auto dir = test::temp_dir("hostile-lock");
    RunningBatch first = start_long_batch(model, dir);
    for (const char* flag : {"--resume", "--overwrite"}) {
        std::vector<std::string> args = first.args;
        args.push_back(flag);
        auto second = test::run_quill(args);
        CHECK(second.status == 1);
        CHECK_THAT(second.err, Catch::Contains("out.jsonl: another quill batch is writing it"));
    }
    CHECK(test::wait_child(first.pid, 120) == 0);
    CHECK(records_by_id(test::read_file(dir / "out.jsonl")).size() == 40);
}

TEST_CASE("LockedOutput holds an exclusive lock until it is closed", "[batch]") {
    const auto path = (test::temp_dir("hostile-lock-unit") / "out.jsonl").string();
    {
        LockedOutput a(path);
        CHECK(a.locked());
        CHECK_THROWS_WITH(LockedOutput(path), Catch::Contains("another quill batch is writing it"));
    }
    LockedOutput again(path);
    CHECK(again.locked());
}

TEST_CASE("a non-empty output is refused unless --resume or --overwrite says what to do with it", "[batch][model]") {
    const std::string model = tiny_model();
    const auto dir = test::temp_dir("hostile-nonempty");
    const std::string out = (dir / "out.jsonl").string();
    const std::string earlier = R"({"id":"line-1","text":"earlier","finish_reason":"length"})" "\n";
    write_text(out, earlier);
    const std::vector<std::string> base{"batch", "--raw", "-m", model, "-o", out, "-n", "2", "-t", "1", "-q"};
    auto refused = test::run_quill(base, "Once\nThe sun\n");
    CHECK(refused.status == 2);
    CHECK_THAT(refused.err, Catch::Contains(out + " is not empty (58 bytes): --resume"));
    CHECK(test::read_file(out) == earlier);
    auto both = base;
    both.insert(both.end(), {"--resume", "--overwrite"});
    CHECK(test::run_quill(both, "Once\n").status == 2);
    CHECK(test::read_file(out) == earlier);
    auto resume = base;
    resume.push_back("--resume");
    CHECK(test::run_quill(resume, "Once\nThe sun\n").status == 0);
    auto resumed = records_by_id(test::read_file(out));
    CHECK(resumed.at("line-1")["text"] == "earlier");
    CHECK(resumed.count("line-2") == 1);
    auto overwrite = base;
    overwrite.push_back("--overwrite");
    CHECK(test::run_quill(overwrite, "Once\n").status == 0);
    auto replaced = records_by_id(test::read_file(out));
    REQUIRE(replaced.size() == 1);
    CHECK(replaced.at("line-1")["text"] != "earlier");
    write_text(out, "");  // an empty file is no work to lose
    CHECK(test::run_quill(base, "Once\n").status == 0);
}

// ---- exit statuses ----

TEST_CASE("SIGTERM ends a batch with status 143, as run, and --resume completes it", "[batch][model]") {
    const std::string model = tiny_model();
    const auto dir = test::temp_dir("hostile-sigterm");
    RunningBatch b = start_long_batch(model, dir);
    kill(b.pid, SIGTERM);
    CHECK(test::wait_child(b.pid, 120) == 143);
    std::vector<std::string> resume = b.args;
    resume.push_back("--resume");
    CHECK(test::run_quill(resume).status == 0);
    CHECK(records_by_id(test::read_file(dir / "out.jsonl")).size() == 40);
}

TEST_CASE("a batch whose output holds error records exits 3 and counts them on stderr", "[batch][model]") {
    const std::string model = tiny_model();
    const auto dir = test::temp_dir("hostile-status");
    const std::string out = (dir / "out.jsonl").string();
    const std::string input = R"({"id": "a", "prompt": "Once", "max_tokens": 2})" "\n"
                              R"({"id": "b", "prompt": "Once", "temperature": -1})" "\n"
                              R"({"id": "c", "messages": [{"role": "user", "content": "hi"}]})" "\n";
    const std::vector<std::string> args{"batch", "--raw", "-m", model, "-o", out, "-t", "1", "-q"};
    auto r = test::run_quill(args, input);
    CHECK(r.status == 3);
    CHECK(batch_diagnostics(r.err) == "quill: 2 of 3 requests failed (error records in " + out + ")\n");
    // Resumed with nothing left to run, the output still holds them: the same status.
    auto resume = args;
    resume.push_back("--resume");
    auto again = test::run_quill(resume, input);
    CHECK(again.status == 3);
    CHECK_THAT(again.err, Catch::Contains("2 of 3 requests failed"));
    CHECK(test::run_quill({"batch", "--raw", "-m", model, "-n", "2", "-t", "1", "-q"}, "Once\n").status == 0);
}

// ---- shards ----

TEST_CASE("shards count from 1 and say which requests they take", "[batch][model]") {
    const std::string model = tiny_model();
    const std::string input = prompt_lines(16);
    auto r = test::run_quill({"batch", "--raw", "-m", model, "--shard", "2/3", "-n", "1", "-t", "1"}, input);
    CHECK(r.status == 0);
    CHECK_THAT(r.err, Catch::Contains("\nquill: shard 2/3 takes 5 of 16 requests: 2, 5, 8, 11, 14 (ids line-2 to "
                                      "line-14)\n"));
    CHECK(records_by_id(r.out).size() == 5);
    auto last = test::run_quill({"batch", "--raw", "-m", model, "--shard", "2/2", "-n", "1", "-t", "1", "-q"},
                                input);
    CHECK(last.status == 0);
    CHECK(batch_diagnostics(last.err).empty());
    const auto got = records_by_id(last.out);
    CHECK(got.size() == 8);
    CHECK(got.count("line-2") == 1);
    CHECK(got.count("line-16") == 1);
    auto zero = test::run_quill({"batch", "--raw", "-m", model, "--shard", "0/2"}, input);
    CHECK(zero.status == 2);
    CHECK_THAT(zero.err, Catch::Contains("shards count from 1"));
    CHECK(parse_shard("3/3").k == 3);
    CHECK_FALSE(parse_shard("3/3").contains(1));
    CHECK(parse_shard("3/3").contains(5));
    for (const char* bad : {"4/3", "0/1", "-1/3", "1/0"}) CHECK_THROWS_AS(parse_shard(bad), UsageError);
    BatchInput few = parse_batch_input("a\nb\nc\n");
    CHECK(shard_line(few, parse_shard("4/4")) == "quill: shard 4/4 takes none of 3 requests\n");
    CHECK(shard_line(few, parse_shard("3/4")) == "quill: shard 3/4 takes 1 of 3 requests: 3 (id line-3)\n");
    few = parse_batch_input(prompt_lines(30));
    CHECK(shard_line(few, parse_shard("1/2")) ==
          "quill: shard 1/2 takes 15 of 30 requests: 1, 3, 5, ..., 29 (ids line-1 to line-29)\n");
}

// ---- seeds ----

TEST_CASE("every record carries its seed, and the seed sent back reproduces a sampled text", "[batch][model]") {
    const std::string model = tiny_model();
    std::string input;
    for (int i = 0; i < 4; ++i)
        input += json{{"id", fmt::format("s{}", i)}, {"prompt", "Once upon a time"}, {"temperature", 1.0},
                      {"max_tokens", 16}}.dump() + "\n";
    const std::vector<std::string> args{"batch", "--raw", "-m", model, "-t", "1", "-q"};
    const auto first = records_by_id(test::run_quill(args, input).out);
    REQUIRE(first.size() == 4);
    std::string again_input;
    for (const auto& [id, rec] : first) {
        REQUIRE(rec["seed"].is_number_unsigned());
        again_input += json{{"id", id}, {"prompt", "Once upon a time"}, {"temperature", 1.0}, {"max_tokens", 16},
                            {"seed", rec["seed"]}}.dump() + "\n";
    }
    const auto again = records_by_id(test::run_quill(args, again_input).out);
    for (const auto& [id, rec] : first) {
        INFO(id);
        CHECK(again.at(id)["text"] == rec["text"]);
        CHECK(again.at(id)["seed"] == rec["seed"]);
    }
    auto fixed = args;
    fixed.insert(fixed.end(), {"--seed", "7", "-n", "2"});
    for (const auto& [id, rec] : records_by_id(test::run_quill(fixed, "a\nb\n").out)) CHECK(rec["seed"] == 7);
    const std::string openai =
        R"({"custom_id": "o", "method": "POST", "url": "/v1/completions", "body": {"prompt": "Once", "max_tokens": 2, "seed": 99}})" "\n";
    CHECK(records_by_id(test::run_quill(args, openai).out).at("o")["response"]["body"]["seed"] == 99);
}

// ---- invalid UTF-8 ----

TEST_CASE("invalid UTF-8 in batch input gets one warning that counts its lines", "[batch][model]") {
    const std::string model = tiny_model();
    const std::vector<std::string> args{"batch", "--raw", "-m", model, "-n", "1", "-t", "1", "-q"};
    auto plain = test::run_quill(args, "Once\nbad \xff one\nThe sun\nbad \xc3( two\n");
    CHECK(plain.status == 0);
    CHECK(count_of(plain.err, "warning") == 1);
    CHECK_THAT(plain.err, Catch::Contains("quill: warning: stdin: 2 lines of invalid UTF-8 (lines 2, 4): in line 2, 1 "
                                          "byte of invalid UTF-8 (the first, 0xff, at offset 4) became U+FFFD"));
    CHECK(records_by_id(plain.out).size() == 4);
    auto jsonl = test::run_quill(args, "{\"id\": \"a\", \"prompt\": \"\xff\"}\n{\"id\": \"b\", \"prompt\": \"Once\"}\n");
    CHECK(jsonl.status == 3);
    CHECK(count_of(jsonl.err, "warning") == 1);
    CHECK_THAT(jsonl.err, Catch::Contains("stdin: 1 line of invalid UTF-8 (line 1): they are error records"));
}

// ---- the terminal ----

TEST_CASE("batch -q is --quiet: nothing on stderr for a batch that went well", "[batch][model]") {
    const std::string model = tiny_model();
    auto r = test::run_quill({"batch", "--raw", "-m", model, "-n", "2", "-t", "1", "-q"}, "Once\nThe sun\n");
    CHECK(r.status == 0);
    CHECK(batch_diagnostics(r.err).empty());
    CHECK(records_by_id(r.out).size() == 2);
}

TEST_CASE("on a terminal the progress line is cleared before each record printed there", "[batch][model]") {
    const std::string model = tiny_model();
    const auto dir = test::temp_dir("hostile-tty");
    write_text(dir / "in.txt", prompt_lines(12));
    winsize size{};
    size.ws_row = 40;
    size.ws_col = 200;
    int fd = -1;
    const pid_t pid = forkpty(&fd, nullptr, nullptr, &size);
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const std::string in = (dir / "in.txt").string();
        execl(QUILL_BIN, QUILL_BIN, "batch", "--raw", "-m", model.c_str(), "-i", in.c_str(), "-n", "24", "--parallel", "2",
              "-t", "1", static_cast<char*>(nullptr));
        _exit(127);
    }
    std::string all;  // stdout and stderr as the terminal shows them
    for (char buf[4096];;) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 60000) <= 0) break;
        const ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) break;
        all.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    CHECK(test::wait_child(pid, 30) == 0);
    REQUIRE(count_of(all, "{\"id\":") == 12);
    CHECK(count_of(all, " done, ") > 0);  // the live line was drawn
    for (size_t at = all.find("{\"id\":"); at != std::string::npos; at = all.find("{\"id\":", at + 1)) {
        INFO(all.substr(at < 40 ? 0 : at - 40, 80));
        CHECK((at == 0 || all[at - 1] == '\n' || all.compare(at - 4, 4, "\r\033[K") == 0));
    }
}

}  // namespace test_batch_hostile
