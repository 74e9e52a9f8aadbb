// The architecture tests' end-to-end check of the CLI on a synthetic file (tests/model/test_arch_*.cpp).
#pragma once

#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

namespace quill::test {

// `quill run -v --device auto` with the chat template file `tmpl` (empty: the file's own) gives 8 tokens on the CPU
// with one line saying why not on a GPU; where a GPU is there, that line is the CUDA backend's `refusal` (when given).
inline void check_run_auto_on_cpu(const std::string& file, const std::string& tmpl, const std::string& refusal = "") {
    std::vector<std::string> args = {"run", "-v", "--device", "auto", "-m", file, "-p", "Why is the sky blue?",
                                     "--temp", "0", "-n", "8", "--json"};
    if (!tmpl.empty()) args.insert(args.end(), {"--chat-template", tmpl});
    auto run = run_quill(args);
    CHECK(run.status == 0);
    CHECK(run.out.find("\"completion_tokens\":8") != std::string::npos);
    INFO(run.err);
    CHECK(run.err.find("cpu backend") != std::string::npos);
    const size_t why = run.err.find("; using the CPU");
    CHECK(why != std::string::npos);
    CHECK(run.err.find("; using the CPU", why + 1) == std::string::npos);
    if (!refusal.empty() && run.err.find("cannot run on") != std::string::npos)
        CHECK(run.err.find(refusal) != std::string::npos);
}

// The model's layers split over two CPU ranges (`--devices cpu,cpu`, each range with its layers' caches and states)
// give the greedy text of one backend; stderr says the first range as `first_range` ("2 of 3 layers on cpu (layers
// 0-1").
inline void check_split_over_two_cpus(const std::string& file, const std::string& first_range) {
    const std::vector<std::string> raw = {"run", "--raw", "-m", file, "-p", "Hello there", "-n", "6", "--temp", "0"};
    std::vector<std::string> split = raw;
    split.insert(split.end(), {"--devices", "cpu,cpu"});
    auto whole = run_quill(raw), halves = run_quill(split);
    CHECK((whole.status == 0 && halves.status == 0));
    INFO(halves.err);
    CHECK(halves.err.find(first_range) != std::string::npos);
    CHECK(halves.out == whole.out);
}

// `quill batch --raw` of `prompts` side by side (--parallel `parallel`, prefill in chunks of 5 tokens) gives each
// prompt's greedy text of `quill run` alone.
inline void check_batch_texts_alone(const std::string& file, const std::vector<std::string>& prompts,
                                    const char* parallel = "3") {
    INFO("--parallel " << parallel);
    std::string input;
    for (const auto& p : prompts) input += nlohmann::json{{"prompt", p}}.dump() + "\n";
    auto r = run_quill({"batch", "--raw", "-m", file, "--temp", "0", "-n", "8", "--parallel", parallel,
                        "--batch-tokens", "5", "--quiet", "-t", "1"}, input);
    REQUIRE(r.status == 0);
    std::istringstream lines(r.out);
    std::string line;
    size_t i = 0;
    for (; std::getline(lines, line); ++i) {
        const auto rec = nlohmann::json::parse(line);
        auto alone = run_quill({"run", "--raw", "-m", file, "--temp", "0", "-n", "8", "-t", "1", "--json", "-p",
                                prompts.at(std::stoul(rec["id"].get<std::string>().substr(5)) - 1)});
        REQUIRE(alone.status == 0);
        CHECK(nlohmann::json::parse(alone.out)["text"] == rec["text"]);
    }
    CHECK(i == prompts.size());
}

// The F16 synthetic `shape` saved by `quill bench --synthetic SHAPE --dtype f16 --save` in a folder of its own, then,
// with the chat template tests/data/templates/src/TEMPLATE (a model's published one; empty: the file's own, where the
// corpus has none of the family's): `quill info` printing each of
// `info`, `quill run --device auto` giving 8 tokens on the CPU with one line saying why not on a GPU, and two turns
// of `quill chat` without an error.
inline void check_run_and_chat(const std::string& shape, const std::string& tmpl_file,
                               std::initializer_list<const char*> info) {
    const std::filesystem::path dir = temp_dir("arch_cli_" + shape);
    const std::string file = (dir / (shape + ".gguf")).string();
    auto save = run_quill({"bench", "--synthetic", shape, "--dtype", "f16", "--save", file, "-p", "4", "-n", "2", "-r",
                           "1"});
    REQUIRE(save.status == 0);
    const std::string tmpl =
        (std::filesystem::path(QUILL_SOURCE_DIR) / "tests" / "data" / "templates" / "src" / tmpl_file).string();
    auto with_template = [&](std::vector<std::string> args) {
        if (!tmpl_file.empty()) args.insert(args.end(), {"--chat-template", tmpl});
        return args;
    };
    auto described = run_quill({"info", file});
    CHECK(described.status == 0);
    for (const char* line : info) {
        INFO(described.out);
        CHECK(described.out.find(line) != std::string::npos);
    }
    check_run_auto_on_cpu(file, tmpl_file.empty() ? "" : tmpl);
    auto chat = run_quill(with_template({"chat", "-m", file, "--temp", "0", "-n", "6"}), "Hello there\nAnd again\n");
    CHECK(chat.status == 0);
    CHECK(chat.err.find("error") == std::string::npos);
}

}  // namespace quill::test
