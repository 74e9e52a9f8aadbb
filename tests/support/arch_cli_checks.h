// The architecture tests' end-to-end check of the CLI on a synthetic file (tests/model/test_arch_*.cpp).
#pragma once

#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

namespace quill::test {

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
    auto run = run_quill(with_template({"run", "-v", "--device", "auto", "-m", file, "-p", "Why is the sky blue?",
                                        "--temp", "0", "-n", "8", "--json"}));
    CHECK(run.status == 0);
    CHECK(run.out.find("\"completion_tokens\":8") != std::string::npos);
    INFO(run.err);
    CHECK(run.err.find("cpu backend") != std::string::npos);
    const size_t why = run.err.find("; using the CPU");
    CHECK(why != std::string::npos);
    CHECK(run.err.find("; using the CPU", why + 1) == std::string::npos);
    auto chat = run_quill(with_template({"chat", "-m", file, "--temp", "0", "-n", "6"}), "Hello there\nAnd again\n");
    CHECK(chat.status == 0);
    CHECK(chat.err.find("error") == std::string::npos);
}

}  // namespace quill::test
