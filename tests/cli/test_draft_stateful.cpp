// Speculation with a sampler that has state, on the command line: with --repeat-penalty, --regex and --logprobs, run
// with --draft-model or --lookup checks guesses (the stats say how many) and prints what run without them prints.
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace test_draft_stateful {

using namespace quill;
using nlohmann::json;

TEST_CASE("run with penalties or a regex or logprobs prints the same with --draft-model and --lookup",
          "[draft][cli]") {
    const std::string target = test::tiny_model_file(test::TinyModel::spm).string();
    const std::string draft = test::tiny_model_file(test::TinyModel::spm_q8_0).string();
    const std::vector<std::vector<std::string>> samplers = {
        {"--temp", "0", "--repeat-penalty", "1.3"},
        {"--temp", "0", "--regex", "[a-z ,]{10,80}\\."},
        {"--temp", "0", "--json", "--logprobs", "2"},
        {"--temp", "0.9", "--seed", "11", "--presence-penalty", "0.4"},
    };
    for (const auto& sampler : samplers) {
        std::vector<std::string> base = {"run", "-m", target, "-p", "Once upon a time there was a dog", "--raw",
                                         "-n", "48"};
        base.insert(base.end(), sampler.begin(), sampler.end());
        const auto plain = test::run_quill(base);
        REQUIRE(plain.status == 0);
        for (const std::vector<std::string>& spec :
             {std::vector<std::string>{"--draft-model", draft}, std::vector<std::string>{"--lookup", "6"}}) {
            auto args = base;
            args.insert(args.end(), spec.begin(), spec.end());
            std::string line;
            for (const std::string& a : args) line += a + " ";
            INFO(line);
            const auto r = test::run_quill(args);
            INFO(r.err);
            REQUIRE(r.status == 0);
            if (std::find(sampler.begin(), sampler.end(), "--json") == sampler.end()) {
                CHECK(r.out == plain.out);
                CHECK(r.err.find(" guesses accepted") != std::string::npos);
                CHECK(r.err.find("; " + std::string(spec[0] == "--lookup" ? "lookup" : "draft") + ": 0 of 0") ==
                      std::string::npos);
                continue;
            }
            const json got = json::parse(r.out), want = json::parse(plain.out);
            CHECK(got["text"] == want["text"]);
            CHECK(got["logprobs"] == want["logprobs"]);
            const json& d = got[spec[0] == "--lookup" ? "lookup" : "draft"];
            CHECK(d["guessed"].get<int>() > 0);
        }
    }
}

}  // namespace test_draft_stateful
