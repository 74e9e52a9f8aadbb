// Tool calls in `quill chat` on a real model whose template teaches calls (qwen2.5-coder 0.5B, Qwen2.5's Hermes
// syntax): under --tool-choice required its reply is a call, shown as "[tool call NAME ARGS]"; /tool answers it and
// the model replies to the result; /save keeps the call and the result as OpenAI's messages.
#include "tests/support/test_util.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace test_chat_tool_calls_real {

using namespace quill;
namespace fs = std::filesystem;

TEST_CASE("qwen2.5-coder 0.5B in chat: a forced call, its result by /tool and the reply to it", "[real][qwen2][tools]") {
    const fs::path model = fs::path(QUILL_SOURCE_DIR) / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
    if (!fs::exists(model)) {
        test::skip_unfetched("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf is absent: run models/fetch_real.sh");
        return;
    }
    const auto dir = test::temp_dir("real-tool-calls");
    std::ofstream(dir / "tools.json")
        << R"([{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather )"
           R"(in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, )"
           R"("required": ["city"]}}}])";
    const fs::path saved = dir / "saved.json";
    const auto r = test::run_quill({"chat", "-m", model.string(), "--tools", (dir / "tools.json").string(),
                                    "--tool-choice", "required", "--temp", "0", "-n", "60", "-q"},
                                   "What is the weather in Paris?\n/set tool-choice auto\n"
                                   "/tool {\"temperature\": 18, \"sky\": \"clear\"}\n/save " + saved.string() + "\n");
    CAPTURE(r.out, r.err);
    REQUIRE(r.status == 0);
    CHECK(r.out.starts_with("[tool call get_weather {\"city\":\"Paris\"}]\n\n"));
    CHECK(r.out.find("<tool_call>") == std::string::npos);
    const auto messages = nlohmann::json::parse(test::read_file(saved))["messages"];
    CAPTURE(messages.dump());
    REQUIRE(messages.size() == 4);
    CHECK(messages[1]["tool_calls"][0]["function"]["arguments"] == nlohmann::json{{"city", "Paris"}});
    CHECK(messages[2]["role"] == "tool");
    CHECK(messages[2]["tool_call_id"] == messages[1]["tool_calls"][0]["id"]);
    CHECK(messages[3]["role"] == "assistant");
    CHECK(!messages[3]["content"].get<std::string>().empty());
}

}  // namespace test_chat_tool_calls_real
