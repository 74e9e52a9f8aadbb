// --draft-model and --draft on the command line: greedy text unchanged in run, chat and batch, the acceptance rate
// in the stats line and --json, sampled runs with guesses, and the flags' checks (one error line, exit status 2).
#include "tests/support/batch_texts.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <regex>

namespace test_draft {

using namespace quill;
using nlohmann::json;

namespace {

// The tiny SPM model's vocabulary with other weights (seed 2): a draft that is often wrong.
const std::filesystem::path& other_draft() {
    static const std::filesystem::path dir = test::temp_dir("draft-models");
    static const std::filesystem::path path = [] {
        test::TinySpec s = test::tiny_model_spec(test::TinyModel::spm);
        s.seed = 2;
        const std::vector<uint8_t> bytes = test::make_tiny_gguf(s);
        const auto p = dir / "tiny-spm-seed2.gguf";
        std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                 static_cast<std::streamsize>(bytes.size()));
        return p;
    }();
    return path;
}

// "draft: A of G guesses accepted" from a stats line; {-1, -1} when absent.
std::pair<int, int> draft_stats(const std::string& err) {
    std::smatch m;
    if (!std::regex_search(err, m, std::regex("draft: (\\d+) of (\\d+) guesses accepted \\(\\d+%\\)"))) return {-1, -1};
    return {std::stoi(m[1]), std::stoi(m[2])};
}

}  // namespace

TEST_CASE("run --draft-model gives the text of run without it, and reports the acceptance rate", "[draft][cli]") {
    const std::string target = test::tiny_model_file(test::TinyModel::spm).string();
    const std::vector<std::string> base = {"run", "-m", target, "-p", "Once upon a time there was a dog", "--raw",
                                           "--temp", "0", "-n", "60"};
    const auto plain = test::run_quill(base);
    REQUIRE(plain.status == 0);
    for (const std::string& draft : {test::tiny_model_file(test::TinyModel::spm_q8_0).string(), other_draft().string()}) {
        for (const char* n : {"0", "1", "6"}) {
            INFO(draft << " --draft " << n);
            auto args = base;
            args.insert(args.end(), {"--draft-model", draft, "--draft", n});
            const auto r = test::run_quill(args);
            INFO(r.err);
            REQUIRE(r.status == 0);
            CHECK(r.out == plain.out);
            const auto [accepted, guessed] = draft_stats(r.err);
            CHECK(guessed > 0);
            CHECK(accepted <= guessed);
            CHECK(accepted >= 0);
        }
    }
    // --json: the guesses and the rate; -n is kept exactly.
    const auto j = test::run_quill({"run", "-m", target, "-p", "Once upon a time", "--raw", "--temp", "0", "-n", "7",
                                    "--draft-model", test::tiny_model_file(test::TinyModel::spm_q8_0).string(),
                                    "--json", "-q"});
    REQUIRE(j.status == 0);
    const json out = json::parse(j.out);
    CHECK(out["completion_tokens"] == 7);
    const json& d = out["draft"];
    REQUIRE(d["guessed"].get<int>() > 0);
    CHECK(d["acceptance_rate"].get<double>() ==
          Approx(d["accepted"].get<double>() / d["guessed"].get<double>()));
}

TEST_CASE("sampled runs check guesses too: lookup and a draft model accept some with --temp > 0", "[draft][cli]") {
    const std::string target = test::tiny_model_file(test::TinyModel::spm).string();
    for (const std::vector<std::string>& extra :
         {std::vector<std::string>{"--lookup", "8"},
          std::vector<std::string>{"--draft-model", test::tiny_model_file(test::TinyModel::spm_q8_0).string()}}) {
        std::vector<std::string> args = {"run", "-m", target, "-p", "the dog and the dog and the dog and the", "--raw",
                                         "--temp", "0.8", "--seed", "3", "-n", "60", "--json", "-q"};
        args.insert(args.end(), extra.begin(), extra.end());
        const auto r = test::run_quill(args);
        REQUIRE(r.status == 0);
        const json out = json::parse(r.out);
        const json& g = out[extra[0] == "--lookup" ? "lookup" : "draft"];
        INFO(r.out);
        CHECK(g["guessed"].get<int>() > 0);
        CHECK(g["accepted"].get<int>() > 0);
        CHECK(out["completion_tokens"] == 60);
        // The same seed, the same text.
        CHECK(json::parse(test::run_quill(args).out)["text"] == out["text"]);
    }
}

TEST_CASE("chat and batch with a draft model give the text without it", "[draft][cli]") {
    const std::string chat_model = test::tiny_model_file(test::TinyModel::spm_chat).string();
    const std::vector<std::string> chat = {"chat", "-m", chat_model, "--temp", "0", "-n", "20"};
    const std::string turns = "Once upon a time\nThe cat\nAnd then\n";
    const auto plain_chat = test::run_quill(chat, turns);
    INFO(plain_chat.err);
    REQUIRE(plain_chat.status == 0);
    auto with = chat;
    with.insert(with.end(), {"--draft-model", chat_model});
    const auto drafted_chat = test::run_quill(with, turns);
    REQUIRE(drafted_chat.status == 0);
    CHECK(drafted_chat.out == plain_chat.out);

    const std::string target = test::tiny_model_file(test::TinyModel::spm).string();
    std::string input;
    for (const char* p : {"Once upon a time", "The little dog", "Lily wanted to play in the park", "One day, Tom",
                          "The sun was hot and the sun", "A big red ball"})
        input += p + std::string("\n");
    const std::vector<std::string> batch = {"batch", "-m", target, "--raw", "--temp", "0", "-n", "40", "--parallel", "3"};
    auto quiet = batch;
    quiet.push_back("-q");
    const auto plain = test::run_quill(quiet, input);
    REQUIRE(plain.status == 0);
    auto args = batch;
    args.insert(args.end(), {"--draft-model", other_draft().string()});
    const auto r = test::run_quill(args, input);
    REQUIRE(r.status == 0);
    CHECK(test::texts_by_id(r.out) == test::texts_by_id(plain.out));
    CHECK(test::texts_by_id(r.out).size() == 6);
    CHECK(std::regex_search(r.err, std::regex("\\d+ of \\d+ guesses accepted \\(\\d+%\\)")));
    CHECK(r.err.find("(draft model)") != std::string::npos);
}

TEST_CASE("draft flags: a vocabulary that differs, --draft without a model, with --lookup, out of range",
          "[draft][cli]") {
    const std::string target = test::tiny_model_file(test::TinyModel::spm).string();
    const std::vector<std::string> base = {"run", "-m", target, "-p", "x", "--raw", "-n", "3", "-q"};
    auto expect = [&](std::vector<std::string> extra, const std::string& says) {
        auto args = base;
        args.insert(args.end(), extra.begin(), extra.end());
        const auto r = test::run_quill(args);
        INFO(r.err);
        CHECK(r.status == 2);
        CHECK(r.err.find(says) != std::string::npos);
        CHECK(r.err.rfind("quill: error:", 0) == 0);  // one line, and nothing before it (-q)
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    };
    expect({"--draft-model", test::tiny_model_file(test::TinyModel::bpe_chat).string()}, "same vocabulary");
    expect({"--draft-model", test::tiny_model_file(test::TinyModel::spm_chat).string()}, "same vocabulary");
    expect({"--draft", "4"}, "--draft-model");
    expect({"--lookup", "4", "--draft-model", target}, "cannot be combined");
    expect({"--draft", "33", "--draft-model", target}, "--draft");
    const auto missing = test::run_quill({"run", "-m", target, "-p", "x", "--draft-model", "/nonexistent.gguf"});
    CHECK(missing.status != 0);
    CHECK(missing.err.find("/nonexistent.gguf") != std::string::npos);
}

}  // namespace test_draft
