// quill run refuses a prompt too long for any tokenization to fit the context before tokenizing it.
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace test_prompt_size {

using namespace quill;

TEST_CASE("quill run refuses megabytes of prompt for a small context before tokenizing them", "[cli]") {
    const std::string model = test::tiny_model_file(test::TinyModel::spm).string();
    const std::filesystem::path file = test::temp_dir("prompt-size") / "long.txt";
    {
        std::ofstream out(file, std::ios::binary);
        out << std::string(4 << 20, 'a');
    }
    for (bool raw : {true, false}) {
        INFO((raw ? "--raw" : "with the chat template"));
        std::vector<std::string> args = {"run", "-m", model, "-c", "32", "-n", "1", "-f", file.string()};
        if (raw) args.push_back("--raw");
        const test::CommandResult r = test::run_quill(args);
        INFO("stderr: " << r.err);
        CHECK(r.status == 2);
        CHECK(r.err.find("quill: error: the prompt is 4194304 bytes, longer than the context of 32") !=
              std::string::npos);
    }
    // A prompt within the bound but longer than the context is still measured in tokens.
    const test::CommandResult r = test::run_quill({"run", "--raw", "-m", model, "-c", "8", "-p", std::string(40, 'a')});
    CHECK(r.status == 2);
    CHECK(r.err.find("longer than the context of 8") != std::string::npos);
}

}  // namespace test_prompt_size
