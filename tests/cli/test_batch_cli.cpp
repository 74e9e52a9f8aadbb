// quill batch end to end on the tiny model the tests write (and the default model, briefly): batch invariance
// against `quill run` of each request alone, error records, kill -9 then --resume, SIGINT, and --shard.
#include "engine/model/model.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <random>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace test_batch_cli {

using namespace quill;
using nlohmann::json;
using test::TinyModel;
namespace fs = std::filesystem;

namespace {

// Records of an output, in order; every line must be whole.
std::vector<json> records(const std::string& text) {
    std::vector<json> out;
    for (size_t start = 0; start < text.size();) {
        const size_t nl = text.find('\n', start);
        REQUIRE(nl != std::string::npos);
        out.push_back(json::parse(text.substr(start, nl - start)));
        start = nl + 1;
    }
    return out;
}

// id -> record; fails on a second record for one id.
std::map<std::string, json> by_id(const std::vector<json>& rs) {
    std::map<std::string, json> m;
    for (const auto& r : rs) {
        const std::string id = r.contains("custom_id") ? r["custom_id"] : r["id"];
        INFO("id " << id);
        CHECK(m.count(id) == 0);
        m[id] = r;
    }
    return m;
}

// Short different prompts, made of the tiny vocabulary's words.
std::vector<std::string> prompts(size_t n) {
    const char* starts[] = {"Once upon a time", "The little dog", "Lily wanted to", "One day, Tom", "The sun",
                            "A big red ball", "Mom said", "The cat and the bird"};
    const char* ends[] = {"", " and", " in the park", " with a toy", ". She"};
    std::vector<std::string> out;
    for (size_t i = 0; i < n; ++i) out.push_back(std::string(starts[i % 8]) + ends[(i / 8) % 5]);
    return out;
}

std::string lines(const std::vector<std::string>& ps) {
    std::string s;
    for (const auto& p : ps) s += p + "\n";
    return s;
}

// `quill run --json --raw` of one prompt alone: its text.
std::string run_alone(const std::string& model, const std::string& prompt, const std::vector<std::string>& extra) {
    std::vector<std::string> args{"run", "--json", "--raw", "-m", model, "-p", prompt, "-t", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = test::run_quill(args);
    REQUIRE(r.status == 0);
    return json::parse(r.out)["text"];
}

// Starts quill with the arguments (stdout, stderr to /dev/null); returns its pid.
pid_t spawn_quill(const std::vector<std::string>& args) {
    std::vector<std::string> all{QUILL_BIN};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    REQUIRE(posix_spawn(&pid, QUILL_BIN, &fa, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

int wait_status(pid_t pid) {
    int st = 0;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

}  // namespace

TEST_CASE("batch invariance: each greedy text equals quill run of the request alone", "[batch][model]") {
    const fs::path tiny = test::tiny_model_file(TinyModel::spm);
    const auto ps = prompts(20);
    std::vector<std::string> want;
    for (const auto& p : ps) want.push_back(run_alone(tiny.string(), p, {"-n", "16", "--temp", "0"}));
    for (const char* parallel : {"1", "4", "16"}) {
        for (const char* budget : {"512", "7"}) {  // 7: prompts split into chunks that share batches with decodes
            INFO("--parallel " << parallel << " --batch-tokens " << budget);
            auto r = test::run_quill({"batch", "--raw", "-m", tiny.string(), "--temp", "0", "-n", "16", "--parallel", parallel,
                                      "--batch-tokens", budget, "--quiet", "-t", "1"},
                                     lines(ps));
            REQUIRE(r.status == 0);
            const auto got = by_id(records(r.out));
            REQUIRE(got.size() == ps.size());
            for (size_t i = 0; i < ps.size(); ++i) {
                const json& rec = got.at(fmt::format("line-{}", i + 1));
                CHECK(rec["text"] == want[i]);
                CHECK(rec["finish_reason"] == "length");
                CHECK(rec["usage"]["completion_tokens"] == 16);
            }
        }
    }
}

TEST_CASE("a sampled request depends only on its own seed and parameters", "[batch][model]") {
    const fs::path tiny = test::tiny_model_file(TinyModel::spm);
    const auto ps = prompts(8);
    std::string input;
    std::vector<std::string> want;
    for (size_t i = 0; i < ps.size(); ++i) {
        const int seed = 100 + static_cast<int>(i);
        const double temp = 0.6 + 0.1 * static_cast<double>(i % 4);
        input += json{{"id", fmt::format("s{}", i)}, {"prompt", ps[i]}, {"seed", seed}, {"temperature", temp},
                      {"max_tokens", 20}}.dump() + "\n";
        want.push_back(run_alone(tiny.string(), ps[i],
                                 {"-n", "20", "--seed", std::to_string(seed), "--temp", fmt::format("{}", temp)}));
    }
    for (const char* parallel : {"1", "8"}) {
        auto r = test::run_quill({"batch", "--raw", "-m", tiny.string(), "--parallel", parallel, "--quiet", "-t", "1"}, input);
        REQUIRE(r.status == 0);
        const auto got = by_id(records(r.out));
        for (size_t i = 0; i < ps.size(); ++i) CHECK(got.at(fmt::format("s{}", i))["text"] == want[i]);
    }
}

TEST_CASE("batch invariance on the default model", "[batch][model]") {
    auto model = test::default_model();
    if (!model) {
        test::skip("the default model is absent (models/ or QUILL_MODEL)");
        return;
    }
    const std::vector<std::string> ps = {"The capital of France is", "Write a haiku about rain.", "1, 2, 3, 4,",
                                         "def fibonacci(n):"};
    std::vector<std::string> want;
    for (const auto& p : ps) want.push_back(run_alone(model->string(), p, {"-n", "8", "--temp", "0"}));
    for (const char* parallel : {"1", "4"}) {
        INFO("--parallel " << parallel);
        auto r = test::run_quill(
            {"batch", "--raw", "-m", model->string(), "--temp", "0", "-n", "8", "--parallel", parallel, "--quiet", "-t", "1"},
            lines(ps));
        REQUIRE(r.status == 0);
        const auto got = by_id(records(r.out));
        for (size_t i = 0; i < ps.size(); ++i) CHECK(got.at(fmt::format("line-{}", i + 1))["text"] == want[i]);
    }
    // Without --raw each line is the user message of the chat template, as `quill run` feeds it.
    std::vector<std::string> chat_want;
    for (const auto& p : ps) {
        auto r = test::run_quill({"run", "--json", "-m", model->string(), "-p", p, "-t", "1", "-n", "8", "--temp", "0"});
        REQUIRE(r.status == 0);
        chat_want.push_back(json::parse(r.out)["text"]);
    }
    auto r = test::run_quill({"batch", "-m", model->string(), "--temp", "0", "-n", "8", "--parallel", "4", "--quiet",
                              "-t", "1"},
                             lines(ps));
    REQUIRE(r.status == 0);
    const auto got = by_id(records(r.out));
    for (size_t i = 0; i < ps.size(); ++i) CHECK(got.at(fmt::format("line-{}", i + 1))["text"] == chat_want[i]);
    // messages go through the template too.
    const std::string msg = json{{"id", "m"}, {"messages", json::array({{{"role", "user"}, {"content", ps[1]}}})},
                                 {"max_tokens", 8}, {"temperature", 0}}.dump() + "\n";
    auto m = test::run_quill({"batch", "-m", model->string(), "--quiet", "-t", "1"}, msg);
    REQUIRE(m.status == 0);
    CHECK(by_id(records(m.out)).at("m")["text"] == chat_want[1]);
}

TEST_CASE("without -c a batch's context is what its requests need when each has a max_tokens", "[batch][model]") {
    const fs::path tiny = test::tiny_model_file(TinyModel::spm);
    const auto loaded = Model::load(tiny.string());
    const auto tok = Tokenizer::from_gguf(loaded->file);
    const auto ps = prompts(12);
    size_t longest = 0;  // prompt tokens, BOS included (--raw)
    for (const auto& p : ps) longest = std::max(longest, tok->encode(p, true, false).size());
    std::string input;
    for (size_t i = 0; i < ps.size(); ++i)
        input += json{{"id", fmt::format("r{}", i)}, {"prompt", ps[i]}, {"max_tokens", i == 5 ? 30 : 6}}.dump() + "\n";
    const size_t need = (longest + 30 + 7) / 8 * 8;  // whole key blocks; request 5's prompt is not the longest
    INFO("longest prompt " << longest << " tokens");
    REQUIRE(tok->encode(ps[5], true, false).size() < longest);
    auto fitted = test::run_quill({"batch", "--raw", "-m", tiny.string(), "--temp", "0", "-t", "1"}, input);
    REQUIRE(fitted.status == 0);
    // (at most longest + 30 tokens: the context holds request 5's whole prompt and 30 tokens, whatever its length)
    CHECK_THAT(fitted.err, Catch::Contains(fmt::format("; context {} (what the requests need);", need)));
    const auto got = by_id(records(fitted.out));
    REQUIRE(got.size() == ps.size());
    CHECK(got.at("r5")["usage"]["completion_tokens"] == 30);
    CHECK(got.at("r5")["text"] == run_alone(tiny.string(), ps[5], {"-n", "30", "--temp", "0"}));
    // -c as given; a request without max_tokens (-n -1, the default) may fill the model's context: 2048.
    auto given =
        test::run_quill({"batch", "--raw", "-m", tiny.string(), "-c", "96", "-n", "2", "-t", "1"}, lines(ps));
    CHECK_THAT(given.err, Catch::Contains("; context 96;"));
    auto open = test::run_quill({"batch", "--raw", "-m", tiny.string(), "-t", "1"},
                                input + R"({"id": "open", "prompt": "Once", "temperature": 0})" "\n");
    CHECK_THAT(open.err, Catch::Contains("; context 2048;"));
}

TEST_CASE("requests that cannot run get error records and the batch goes on", "[batch][model]") {
    const fs::path tiny = test::tiny_model_file(TinyModel::spm);
    const std::string input =
        R"({"id": "ok", "prompt": "Once upon a time", "max_tokens": 4, "temperature": 0})"
        "\n"
        R"({"id": "long", "prompt": "Once upon a time there was a very long prompt that does not fit in the context"})"
        "\n"
        R"({"id": "hot", "prompt": "Hi", "temperature": -1})"
        "\n"
        R"({"id": "topp", "prompt": "Hi", "top_p": 2})"
        "\n"
        R"({"id": "chat", "messages": [{"role": "user", "content": "Hi"}]})"
        "\n{\"id\": \"broken\n"
        R"({"id": "zero", "prompt": "Once", "max_tokens": 0})"
        "\n";
    auto r = test::run_quill({"batch", "--raw", "-m", tiny.string(), "-c", "16", "--quiet", "-t", "1"}, input);
    REQUIRE(r.status == 3);  // some records are errors
    const auto got = by_id(records(r.out));
    REQUIRE(got.size() == 7);
    CHECK(got.at("ok")["text"] == run_alone(tiny.string(), "Once upon a time", {"-n", "4", "--temp", "0"}));
    CHECK(got.at("zero")["text"] == "");
    CHECK(got.at("zero")["finish_reason"] == "length");
    // A request's bad field is named as the request names it, not as the command line's flag.
    const std::map<std::string, std::string> errors = {{"long", "longer than the context of 16"},
                                                       {"hot", "temperature -1 is out of range: expected a finite number >= 0"},
                                                       {"topp", "top_p 2 is out of range: expected in (0, 1]"},
                                                       {"chat", "no chat template"},
                                                       {"line-6", "input line 6: not valid JSON"}};
    for (const auto& [id, fragment] : errors) {
        INFO(id);
        CHECK_THAT(got.at(id)["error"]["message"].get<std::string>(), Catch::Contains(fragment));
    }
    // Duplicate ids: an error before anything runs, and no output file.
    auto dir = test::temp_dir("batch-dup");
    auto dup = test::run_quill({"batch", "--raw", "-m", tiny.string(), "-o", (dir / "o.jsonl").string()},
                               "{\"id\": 1, \"prompt\": \"a\"}\n{\"id\": 1, \"prompt\": \"b\"}\n");
    CHECK(dup.status != 0);
    CHECK_THAT(dup.err, Catch::Contains("id \"1\" twice"));
    CHECK_FALSE(fs::exists(dir / "o.jsonl"));
    auto no_out = test::run_quill({"batch", "--raw", "-m", tiny.string(), "--resume"}, "a\n");
    CHECK_THAT(no_out.err, Catch::Contains("--resume needs -o OUTPUT"));
    auto dash_resume = test::run_quill({"batch", "--raw", "-m", tiny.string(), "-o", "-", "--resume"}, "a\n");
    CHECK_THAT(dash_resume.err, Catch::Contains("--resume needs -o OUTPUT"));
    // -o - is stdout (as -i - is stdin), not a file named "-".
    const fs::path cwd = fs::current_path(), model_path = fs::absolute(tiny);
    fs::current_path(dir);
    auto dash = test::run_quill({"batch", "--raw", "-m", model_path.string(), "-i", "-", "-o", "-", "-n", "2", "--quiet",
                                 "-t", "1"},
                                "Once\n");
    fs::current_path(cwd);
    CHECK(dash.status == 0);
    CHECK(records(dash.out).size() == 1);
    CHECK_FALSE(fs::exists(dir / "-"));
}

TEST_CASE("the input file may be given as an argument instead of -i, not both", "[batch][model]") {
    const fs::path tiny = test::tiny_model_file(TinyModel::spm);
    const fs::path dir = test::temp_dir("batch-positional");
    const fs::path in = dir / "prompts.txt";
    std::ofstream(in) << lines(prompts(2));
    const std::vector<std::string> common = {"batch", "--raw", "-m", tiny.string(), "--quiet", "-t", "1", "-n", "4",
                                             "--temp", "0", "--seed", "7"};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = common;
        args.insert(args.end(), extra.begin(), extra.end());
        return test::run_quill(args);
    };
    auto flag = with({"-i", in.string()});
    REQUIRE(flag.status == 0);
    CHECK(records(flag.out).size() == 2);
    auto arg = with({in.string()});
    CHECK(arg.status == 0);
    CHECK(arg.out == flag.out);
    auto both = with({"-i", in.string(), in.string()});
    CHECK(both.status == 2);
    CHECK(both.out.empty());
    fs::remove_all(dir);
}

TEST_CASE("OpenAI batch input gives OpenAI batch output", "[batch][model]") {
    const fs::path tiny = test::tiny_model_file(TinyModel::spm);
    const std::string input =
        R"({"custom_id": "c1", "method": "POST", "url": "/v1/completions", "body": {"model": "x", "prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}})"
        "\n"
        R"({"custom_id": "c2", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "Hi"}]}})"
        "\n";
    auto r = test::run_quill({"batch", "--raw", "-m", tiny.string(), "--quiet", "-t", "1"}, input);
    REQUIRE(r.status == 3);  // c2 needs a chat template
    const auto got = by_id(records(r.out));
    const json& c1 = got.at("c1");
    CHECK(c1["response"]["status_code"] == 200);
    CHECK(c1["response"]["body"]["choices"][0]["text"] ==
          run_alone(tiny.string(), "Once upon a time", {"-n", "4", "--temp", "0"}));
    CHECK(c1["response"]["body"]["usage"]["total_tokens"] == 9);
    CHECK(got.at("c2")["response"]["status_code"] == 400);
    // One slot: the second prompt extends the first, whose tokens its slot's cache holds.
    const std::string extended =
        R"({"custom_id": "c1", "method": "POST", "url": "/v1/completions", "body": {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}})"
        "\n"
        R"({"custom_id": "c3", "method": "POST", "url": "/v1/completions", "body": {"prompt": "Once upon a time there was", "max_tokens": 4, "temperature": 0}})"
        "\n";
    auto r2 = test::run_quill({"batch", "--raw", "-m", tiny.string(), "--quiet", "-t", "1", "--parallel", "1"}, extended);
    REQUIRE(r2.status == 0);
    const auto got2 = by_id(records(r2.out));
    const json& u1 = got2.at("c1")["response"]["body"]["usage"];
    const json& u3 = got2.at("c3")["response"]["body"]["usage"];
    CHECK(u1["prompt_tokens_details"]["cached_tokens"] == 0);
    CHECK(u3["prompt_tokens_details"]["cached_tokens"] == u1["prompt_tokens"]);
    CHECK(u3["prompt_tokens"].get<int>() > u1["prompt_tokens"].get<int>());
}

TEST_CASE("kill -9 at random moments then --resume gives exactly one record per id", "[batch][model]") {
    const fs::path tiny = test::tiny_model_file(TinyModel::spm);
    auto dir = test::temp_dir("batch-kill");
    const auto ps = prompts(24);
    const std::string in = (dir / "in.txt").string(), out = (dir / "out.jsonl").string();
    std::ofstream(in) << lines(ps);
    // (--seed: records name their seed, so an uninterrupted run's equal a resumed run's only when it is fixed)
    const std::vector<std::string> args{"batch", "--raw", "-m", tiny.string(), "-i", in, "-o", out, "--temp", "0",
                                        "--seed", "5", "-n", "24", "--parallel", "4", "-t", "1"};
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(wait_status(spawn_quill(args)) == 0);
    const int full_ms = static_cast<int>(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    const auto reference = by_id(records(test::read_file(out)));
    REQUIRE(reference.size() == ps.size());

    const char* seed_env = std::getenv("QUILL_TEST_SEED");
    const unsigned seed = seed_env ? static_cast<unsigned>(std::stoul(seed_env)) : std::random_device{}();
    WARN("kill times from seed " << seed << " (QUILL_TEST_SEED=" << seed << " repeats them)");
    std::mt19937 rng(seed);
    std::vector<std::string> resume_args = args;
    resume_args.push_back("--resume");
    for (int trial = 0; trial < 3; ++trial) {
        fs::remove(out);
        const int delay = std::uniform_int_distribution<int>(20, std::max(40, full_ms * 9 / 10))(rng);
        INFO("trial " << trial << ": killed after " << delay << " ms of a " << full_ms << " ms run");
        const pid_t pid = spawn_quill(args);
        sleep_ms(delay);
        kill(pid, SIGKILL);
        wait_status(pid);
        if (trial % 2 == 1 && fs::exists(out)) std::ofstream(out, std::ios::app) << "{\"id\":\"line-3\",\"te";  // torn
        if (trial == 2) {  // killed again while resuming
            const pid_t again = spawn_quill(resume_args);
            sleep_ms(delay / 2);
            kill(again, SIGKILL);
            wait_status(again);
        }
        REQUIRE(wait_status(spawn_quill(resume_args)) == 0);
        const auto got = by_id(records(test::read_file(out)));
        REQUIRE(got.size() == reference.size());
        for (const auto& [id, rec] : reference) CHECK(got.at(id) == rec);
    }
}

TEST_CASE("SIGINT stops admission and leaves a valid output that --resume completes", "[batch][model]") {
    const fs::path tiny = test::tiny_model_file(TinyModel::spm);
    auto dir = test::temp_dir("batch-sigint");
    const auto ps = prompts(40);
    const std::string in = (dir / "in.txt").string(), out = (dir / "out.jsonl").string();
    std::ofstream(in) << lines(ps);
    std::vector<std::string> args{"batch", "--raw", "-m", tiny.string(), "-i", in, "-o", out, "--temp", "0", "-n", "200",
                                  "--parallel", "4", "-t", "1"};
    for (int signals : {1, 2}) {
        INFO(signals << " SIGINT");
        fs::remove(out);
        const pid_t pid = spawn_quill(args);
        for (int waited = 0; !fs::exists(out) || fs::file_size(out) == 0; waited += 5) {  // after the first record
            REQUIRE(waited < 60000);
            REQUIRE(waitpid(pid, nullptr, WNOHANG) == 0);  // still running
            sleep_ms(5);
        }
        for (int i = 0; i < signals; ++i) kill(pid, SIGINT);
        CHECK(wait_status(pid) == 130);
        const auto partial = by_id(records(test::read_file(out)));
        CHECK(partial.size() < ps.size());
        for (const auto& [id, rec] : partial) CHECK(rec["finish_reason"] == "length");  // none written half-done
        std::vector<std::string> resume = args;
        resume.push_back("--resume");
        REQUIRE(wait_status(spawn_quill(resume)) == 0);
        CHECK(by_id(records(test::read_file(out))).size() == ps.size());
    }
}

TEST_CASE("shards 1/3 2/3 and 3/3 together give exactly the input's ids", "[batch][model]") {
    const fs::path tiny = test::tiny_model_file(TinyModel::spm);
    const auto ps = prompts(16);
    std::map<std::string, int> seen;
    for (int k = 0; k < 3; ++k) {
        auto r = test::run_quill({"batch", "--raw", "-m", tiny.string(), "--shard", fmt::format("{}/3", k + 1), "-n", "3",
                                  "--quiet", "-t", "1"},
                                 lines(ps));
        REQUIRE(r.status == 0);
        for (const auto& [id, rec] : by_id(records(r.out))) {
            const int line = std::stoi(id.substr(5));
            CHECK((line - 1) % 3 == k);
            ++seen[id];
        }
    }
    REQUIRE(seen.size() == ps.size());
    for (const auto& [id, n] : seen) CHECK(n == 1);
    // A shard's KV slots: no more than its requests (2/3 of 16: lines 2, 5, 8, 11, 14), whatever --parallel asks.
    auto r = test::run_quill({"batch", "--raw", "-m", tiny.string(), "--shard", "2/3", "--parallel", "16", "-n", "3",
                              "-t", "1"},
                             lines(ps));
    REQUIRE(r.status == 0);
    CHECK_THAT(r.err, Catch::Contains("plain text input, 5 slots"));
    CHECK(records(r.out).size() == 5);
}

}  // namespace test_batch_cli
