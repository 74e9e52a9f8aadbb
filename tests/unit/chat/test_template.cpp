// Chat templates: real templates against Jinja2's renderings (golden files), built-in formats, detection, and the
// model's own template. Constructs and the expression evaluator are in test_template_eval.cpp.
#include "engine/chat/chat_format.h"
#include "engine/chat/template.h"
#include "engine/format/gguf.h"
#include "tests/support/test_util.h"
#include "tests/unit/chat/golden_clock.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace test_template {

namespace fs = std::filesystem;
using quill::chat::ChatTemplate;
using quill::chat::TemplateError;
using json = nlohmann::ordered_json;
using quill::test::golden_options;

namespace {

std::string slurp(const fs::path& p) {
    return quill::test::read_file(p);
}

json case_variables(const json& cases, const std::string& name) {
    json vars = cases["variables"];
    const json& c = cases["cases"][name];
    vars["messages"] = c["messages"];
    vars["add_generation_prompt"] = c["add_generation_prompt"];
    return vars;
}

}  // namespace

TEST_CASE("every real template renders every golden case as Jinja2 does", "[template]") {
    auto dir = quill::test::require_testdata("templates");
    if (!dir) return;
    json cases = json::parse(slurp(*dir / "golden" / "cases.json"));
    REQUIRE(cases.at("strftime_now_date") == "2026-11-29T12:00:00");
    int templates = 0, checked = 0;
    for (const auto& entry : fs::directory_iterator(*dir / "src")) {
        if (entry.path().extension() != ".jinja") continue;
        std::string name = entry.path().stem().string();
        ++templates;
        ChatTemplate tmpl = ChatTemplate::parse(slurp(entry.path()), name);
        for (const auto& [case_name, c] : cases["cases"].items()) {
            CAPTURE(name, case_name);
            fs::path golden = *dir / "golden" / name / (case_name + ".txt");
            fs::path error = *dir / "golden" / name / (case_name + ".error");
            json vars = case_variables(cases, case_name);
            if (fs::exists(error)) {
                // "TemplateError: <message>": Python's exception class, then the message raise_exception gave.
                std::string expected = slurp(error);
                while (!expected.empty() && expected.back() == '\n') expected.pop_back();
                expected = expected.substr(expected.find(": ") + 2);
                try {
                    tmpl.render(vars, golden_options());
                    FAIL("rendered although Jinja2 raised: " << expected);
                } catch (const TemplateError& e) {
                    CHECK(std::string(e.what()) == expected);
                }
            } else {
                REQUIRE(fs::exists(golden));
                CHECK(tmpl.render(vars, golden_options()) == slurp(golden));
            }
            ++checked;
        }
    }
    CHECK(templates == 7);
    CHECK(checked == 35);
}

TEST_CASE("each built-in format renders a conversation as its published spec lays it out", "[template]") {
    auto dir = quill::test::require_testdata("templates/golden/cases.json");
    if (!dir) return;
    json cases = json::parse(slurp(*dir));
    json vars = case_variables(cases, "multi_turn");  // system, user, assistant, user; bos <s>, eos </s>
    const std::string user1 = "Write a haiku about rain.", user2 = "Now one about snow.";
    const std::string reply = "Soft rain on tin roofs\nwhispers to the sleeping street\nmorning smells of earth";
    const std::string system = "You are a helpful assistant.";
    const std::vector<std::pair<std::string, std::string>> expected = {
        {"chatml", "<|im_start|>system\n" + system + "<|im_end|>\n<|im_start|>user\n" + user1 +
                       "<|im_end|>\n<|im_start|>assistant\n" + reply + "<|im_end|>\n<|im_start|>user\n" + user2 +
                       "<|im_end|>\n<|im_start|>assistant\n"},
        {"llama2", "<s>[INST] <<SYS>>\n" + system + "\n<</SYS>>\n\n" + user1 + " [/INST] " + reply + " </s><s>[INST] " +
                       user2 + " [/INST]"},
        {"llama3", "<s><|start_header_id|>system<|end_header_id|>\n\n" + system +
                       "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n" + user1 +
                       "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n" + reply +
                       "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n" + user2 +
                       "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
        {"gemma", "<s><start_of_turn>user\n" + system + "\n\n" + user1 + "<end_of_turn>\n<start_of_turn>model\n" + reply +
                      "<end_of_turn>\n<start_of_turn>user\n" + user2 + "<end_of_turn>\n<start_of_turn>model\n"},
        {"mistral", "<s>[INST] " + system + "\n\n" + user1 + " [/INST]" + reply + "</s>[INST] " + user2 + " [/INST]"},
        {"phi3", "<|system|>\n" + system + "<|end|>\n<|user|>\n" + user1 + "<|end|>\n<|assistant|>\n" + reply +
                     "<|end|>\n<|user|>\n" + user2 + "<|end|>\n<|assistant|>\n"},
        {"zephyr", "<|system|>\n" + system + "</s>\n<|user|>\n" + user1 + "</s>\n<|assistant|>\n" + reply +
                       "</s>\n<|user|>\n" + user2 + "</s>\n<|assistant|>\n"},
    };
    REQUIRE(quill::chat::builtin_template_names().size() == expected.size());
    for (const auto& [name, text] : expected) {
        CAPTURE(name);
        auto src = quill::chat::builtin_template(name);
        REQUIRE(src);
        CHECK(ChatTemplate::parse(*src, name).render(vars) == text);
    }
    CHECK_FALSE(quill::chat::builtin_template("nope"));
}

TEST_CASE("built-in chatml and phi3 match Qwen2.5 and Phi-3.5 where those follow the same format", "[template]") {
    auto dir = quill::test::require_testdata("templates");
    if (!dir) return;
    json cases = json::parse(slurp(*dir / "golden" / "cases.json"));
    ChatTemplate phi3 = ChatTemplate::parse(*quill::chat::builtin_template("phi3"), "phi3");
    ChatTemplate chatml = ChatTemplate::parse(*quill::chat::builtin_template("chatml"), "chatml");
    for (const auto& [case_name, c] : cases["cases"].items()) {
        CAPTURE(case_name);
        json vars = case_variables(cases, case_name);
        CHECK(phi3.render(vars) == slurp(*dir / "golden" / "microsoft-Phi-3.5-mini-instruct" / (case_name + ".txt")));
    }
    // Qwen2.5 adds its own system message only when there is none.
    for (const char* case_name : {"system_user", "multi_turn"}) {
        CAPTURE(case_name);
        CHECK(chatml.render(case_variables(cases, case_name)) ==
              slurp(*dir / "golden" / "Qwen-Qwen2.5-7B-Instruct" / (std::string(case_name) + ".txt")));
    }
}

TEST_CASE("detect_builtin recognizes the real templates' formats", "[template]") {
    auto dir = quill::test::require_testdata("templates/src");
    if (!dir) return;
    const std::vector<std::pair<std::string, std::optional<std::string_view>>> expected = {
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "chatml"},
        {"Qwen-Qwen2.5-7B-Instruct", "chatml"},
        {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", std::nullopt},  // its own <｜User｜> markers
        {"google-gemma-2-2b-it", "gemma"},
        {"meetkai-functionary-medium-v3.1", "llama3"},
        {"meta-llama-Llama-3.1-8B-Instruct", "llama3"},
        {"microsoft-Phi-3.5-mini-instruct", "phi3"},
    };
    for (const auto& [name, format] : expected) {
        CAPTURE(name);
        CHECK(quill::chat::detect_builtin(slurp(*dir / (name + ".jinja"))) == format);
    }
    // Each built-in is detected as itself.
    for (auto name : quill::chat::builtin_template_names()) {
        CAPTURE(name);
        CHECK(quill::chat::detect_builtin(*quill::chat::builtin_template(name)) == name);
    }
    CHECK_FALSE(quill::chat::detect_builtin("{{ messages[0].content }}"));
}

TEST_CASE("the default model's own template renders the reference prompt", "[template][model]") {
    // And quill's chat format for the model, which `quill template` and `quill run` use, gives its tokens.
    auto ref = quill::test::require_testdata("models/ref/SmolLM2-135M-Instruct.Q4_1.chat-sky.greedy.txt");
    if (!ref) return;
    auto model = quill::test::default_model();
    if (!model) {
        quill::test::skip("the default model is not in models/ (see models/)");
        return;
    }
    // The reference file holds "prompt <text>\n" up to the "prompt_tokens" line.
    std::string text = slurp(*ref);
    size_t begin = text.find("\nprompt ") + 8;
    size_t end = text.find("\nprompt_tokens");
    REQUIRE(end != std::string::npos);
    std::string expected = text.substr(begin, end - begin);
    auto gguf = quill::GgufFile::open(model->string());
    auto source = gguf.get_string("tokenizer.chat_template");
    REQUIRE(source);
    json vars = {{"messages", json::array({{{"role", "user"}, {"content", "Why is the sky blue?"}}})},
                 {"add_generation_prompt", true},
                 {"bos_token", "<|im_start|>"},
                 {"eos_token", "<|im_end|>"}};
    CHECK(ChatTemplate::parse(*source, "SmolLM2").render(vars) == expected);
    CHECK(quill::chat::detect_builtin(*source) == std::optional<std::string_view>("chatml"));

    const std::string key = "\nprompt_tokens (add_special=true) ";
    const size_t at = text.find(key);
    REQUIRE(at != std::string::npos);
    std::istringstream line(text.substr(at + key.size(), text.find('\n', at + key.size()) - at - key.size()));
    std::vector<int32_t> expected_ids;
    for (int32_t id; line >> id;) expected_ids.push_back(id);
    REQUIRE(expected_ids.size() > 10);
    const auto tok = quill::Tokenizer::from_gguf(gguf);
    const auto format = quill::chat::ChatFormat::choose(&gguf, tok.get(), "", [](const std::string&) {});
    const nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", "Why is the sky blue?"}}});
    CHECK(format.tokenize(*tok, messages, true) == expected_ids);
}

}  // namespace test_template
