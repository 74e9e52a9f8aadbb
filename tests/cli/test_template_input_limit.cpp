// `quill template --messages FILE` reads at most --max-input-bytes (64 MiB by default), as run, chat and batch read
// their input, and a longer file's error names the option that raises the limit.
#include "engine/io/input.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <fstream>

namespace test_template_input_limit {

using quill::test::run_quill;

TEST_CASE("quill template --messages: a file over the limit is refused naming --max-input-bytes that raises it",
          "[chat][cli]") {
    const auto dir = quill::test::temp_dir("template_input_limit");
    const auto small = dir / "small.json";
    std::ofstream(small) << R"([{"role": "user", "content": "Why is the sky blue?"}])";
    // 58 bytes: over a limit of 40, within one of 100.
    auto r = run_quill({"template", "--chat-template", "chatml", "--messages", small.string(), "--max-input-bytes", "40"});
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find("longer than the limit of 40 bytes (--max-input-bytes raises it)") != std::string::npos);
    r = run_quill({"template", "--chat-template", "chatml", "--messages", small.string(), "--max-input-bytes", "100"});
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.out == "<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n");

    // The default limit, one byte over it (JSON with trailing spaces): the hint is an option template has.
    const auto big = dir / "big.json";
    {
        std::ofstream f(big, std::ios::binary);
        const std::string head = R"([{"role": "user", "content": "hi"}])";
        f << head;
        const std::string spaces(size_t{1} << 20, ' ');
        size_t left = quill::kDefaultMaxInputBytes + 1 - head.size();
        for (; left >= spaces.size(); left -= spaces.size()) f << spaces;
        f << spaces.substr(0, left);
    }
    REQUIRE(std::filesystem::file_size(big) == quill::kDefaultMaxInputBytes + 1);
    r = run_quill({"template", "--chat-template", "chatml", "--messages", big.string()});
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find("longer than the limit of 64 MiB (--max-input-bytes raises it)") != std::string::npos);
    r = run_quill({"template", "--chat-template", "chatml", "--messages", big.string(), "--max-input-bytes",
                   std::to_string(quill::kDefaultMaxInputBytes + 1)});
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.out == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    std::filesystem::remove_all(dir);
}

}  // namespace test_template_input_limit
