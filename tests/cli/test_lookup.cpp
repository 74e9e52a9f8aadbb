// Prompt lookup: the guesses it makes, and that checking them never changes the text (run, chat, batch; the tiny
// models and the default model), while it does accept some where the text repeats.
#include "engine/runtime/lookup.h"
#include "tests/support/batch_texts.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <map>
#include <regex>

namespace test_lookup {

using namespace quill;
using nlohmann::json;

namespace {

std::vector<int32_t> v(std::initializer_list<int32_t> x) { return x; }

// "lookup: A of G guesses accepted" from a stats line; {-1, -1} when absent.
std::pair<int, int> lookup_stats(const std::string& err) {
    std::smatch m;
    if (!std::regex_search(err, m, std::regex("lookup: (\\d+) of (\\d+) guesses accepted"))) return {-1, -1};
    return {std::stoi(m[1]), std::stoi(m[2])};
}

}  // namespace

TEST_CASE("lookup_guesses continues the most recent earlier occurrence of the longest suffix", "[lookup]") {
    // "3 4" occurs at 2..3 and 6..7: the most recent one is followed by 9 8.
    CHECK(lookup_guesses(v({1, 2, 3, 4, 5, 6, 3, 4, 9, 8, 7, 3, 4}), 3) == v({9, 8, 7}));
    // The longest suffix wins over a more recent shorter one: "2 3 4" at 1..3 -> 5 6 ...
    CHECK(lookup_guesses(v({1, 2, 3, 4, 5, 6, 3, 4, 7, 2, 3, 4}), 2) == v({5, 6}));
    // Guesses stop at the end of the history; max_guesses caps them.
    CHECK(lookup_guesses(v({5, 6, 7, 5, 6}), 10) == v({7, 5, 6}));
    CHECK(lookup_guesses(v({5, 6, 7, 5, 6}), 1) == v({7}));
    // No earlier occurrence, an empty or one-token history, no budget: nothing.
    CHECK(lookup_guesses(v({1, 2, 3, 4}), 4).empty());
    CHECK(lookup_guesses(v({}), 4).empty());
    CHECK(lookup_guesses(v({1}), 4).empty());
    CHECK(lookup_guesses(v({1, 1, 1}), 0).empty());
    // min_ngram: a one-token match is refused when two are asked for.
    CHECK(lookup_guesses(v({1, 2, 9, 2}), 2, 4, 2).empty());
    CHECK(lookup_guesses(v({1, 2, 9, 2}), 2, 4, 1) == v({9, 2}));
}

TEST_CASE("run --lookup gives the text of run without it, token for token", "[lookup][cli]") {
    for (auto which : {test::TinyModel::spm, test::TinyModel::spm_q8_0, test::TinyModel::bpe_chat}) {
        const auto& path = test::tiny_model_file(which);
        INFO(path.filename());
        const std::vector<std::string> base = {"run", "-m", path.string(), "-p", "Once upon a time there was a dog",
                                               "--raw", "--temp", "0", "-n", "120"};
        const auto plain = test::run_quill(base);
        REQUIRE(plain.status == 0);
        CHECK(lookup_stats(plain.err).first == -1);
        for (const char* n : {"1", "4", "32"}) {
            INFO("--lookup " << n);
            auto args = base;
            args.insert(args.end(), {"--lookup", n});
            const auto r = test::run_quill(args);
            REQUIRE(r.status == 0);
            CHECK(r.out == plain.out);
            const auto [accepted, guessed] = lookup_stats(r.err);
            CHECK(guessed >= accepted);
            CHECK(accepted >= 0);
        }
        // -n is kept exactly, whatever was guessed.
        const auto five = test::run_quill({"run", "-m", path.string(), "-p", "Once upon a time", "--raw", "--temp",
                                           "0", "-n", "5", "--lookup", "32", "--json", "-q"});
        REQUIRE(five.status == 0);
        CHECK(json::parse(five.out)["completion_tokens"] == 5);
    }
}

TEST_CASE("lookup with penalties checks guesses and keeps the seed's text, and its flag is checked", "[lookup][cli]") {
    const auto& path = test::tiny_model_file(test::TinyModel::spm);
    const std::vector<std::string> base = {"run", "-m", path.string(), "-p", "Once upon a time", "--raw", "--temp",
                                           "0.8", "--repeat-penalty", "1.2", "--seed", "1", "-n", "40", "--json", "-q"};
    const auto plain = test::run_quill(base);
    REQUIRE(plain.status == 0);
    auto args = base;
    args.insert(args.end(), {"--lookup", "8"});
    const auto penalized = test::run_quill(args);
    REQUIRE(penalized.status == 0);
    CHECK(json::parse(penalized.out)["lookup"]["guessed"].get<int>() > 0);
    CHECK(json::parse(penalized.out)["text"] == json::parse(plain.out)["text"]);
    const auto too_many = test::run_quill({"run", "-m", path.string(), "-p", "x", "--lookup", "33"});
    CHECK(too_many.status == 2);
    CHECK(too_many.err.find("--lookup") != std::string::npos);
}

TEST_CASE("batch --lookup: every record's text is the text without it, with sequences decoded together",
          "[lookup][cli]") {
    const auto& path = test::tiny_model_file(test::TinyModel::spm);
    std::string input;
    const char* prompts[] = {"Once upon a time", "The little dog", "Lily wanted to play in the park",
                             "One day, Tom", "The sun was hot and the sun", "A big red ball"};
    for (const char* p : prompts) input += p + std::string("\n");
    const std::vector<std::string> base = {"batch", "-m", path.string(), "--raw", "--temp", "0", "-n", "60", "-q",
                                           "--parallel", "4"};
    const auto plain = test::run_quill(base, input);
    REQUIRE(plain.status == 0);
    auto args = base;
    args.insert(args.end(), {"--lookup", "6"});
    const auto r = test::run_quill(args, input);
    REQUIRE(r.status == 0);
    CHECK(test::texts_by_id(r.out) == test::texts_by_id(plain.out));
    CHECK(test::texts_by_id(r.out).size() == 6);
}

TEST_CASE("lookup on the default model: an extraction prompt gives the same text, with guesses accepted",
          "[lookup][cli][model]") {
    const auto model = test::require_default_model();
    if (!model) return;
    const std::string prompt =
        "Quote, word for word, every sentence of this report that mentions the harbor.\n\nThe council met on "
        "Tuesday. The harbor needs new lights along the north pier, and the council agreed to pay for them. "
        "Residents spoke about the market. Funds were also set aside to dredge the harbor entrance, which has become "
        "too shallow for the ferry at low tide. The meeting ended at nine.";
    const std::vector<std::string> base = {"run", "-m", model->string(), "-p", prompt, "--temp", "0", "-n", "80"};
    const auto plain = test::run_quill(base);
    REQUIRE(plain.status == 0);
    auto args = base;
    args.insert(args.end(), {"--lookup", "10"});
    const auto r = test::run_quill(args);
    REQUIRE(r.status == 0);
    CHECK(r.out == plain.out);
    const auto [accepted, guessed] = lookup_stats(r.err);
    INFO(r.err);
    CHECK(accepted >= 10);  // 18 of 335 when written: the reply quotes the report in part
}

}  // namespace test_lookup
