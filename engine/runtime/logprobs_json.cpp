#include "engine/runtime/logprobs_json.h"

namespace quill {

namespace {

using json = nlohmann::ordered_json;

json entry(const Tokenizer& tok, int32_t id, double logprob, bool with_ids, std::span<const int32_t> shown) {
    const std::string bytes(shown_bytes(tok, id, shown));
    json e = json::object();
    if (with_ids) e["id"] = id;
    e["token"] = bytes;
    e["logprob"] = logprob;
    json b = json::array();
    for (unsigned char c : bytes) b.push_back(c);
    e["bytes"] = std::move(b);
    return e;
}

}  // namespace

json logprobs_content(const Tokenizer& tok, std::span<const TokenLogprobs> lps, bool with_ids,
                      std::span<const int32_t> shown) {
    json content = json::array();
    for (const TokenLogprobs& lp : lps) {
        json e = entry(tok, lp.token, lp.logprob, with_ids, shown);
        json top = json::array();
        for (const auto& [id, logprob] : lp.top) top.push_back(entry(tok, id, logprob, with_ids, shown));
        e["top_logprobs"] = std::move(top);
        content.push_back(std::move(e));
    }
    return content;
}

json completion_logprobs(const Tokenizer& tok, std::span<const TokenLogprobs> lps, std::span<const int32_t> shown) {
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
    size_t offset = 0;
    for (const TokenLogprobs& lp : lps) {
        const std::string_view bytes = shown_bytes(tok, lp.token, shown);
        tokens.push_back(std::string(bytes));
        token_logprobs.push_back(lp.logprob);
        json alternatives = json::object();
        for (const auto& [id, logprob] : lp.top) alternatives[std::string(shown_bytes(tok, id, shown))] = logprob;
        top.push_back(std::move(alternatives));
        offsets.push_back(offset);
        offset += bytes.size();
    }
    return json{{"tokens", std::move(tokens)},
                {"token_logprobs", std::move(token_logprobs)},
                {"top_logprobs", std::move(top)},
                {"text_offset", std::move(offsets)}};
}

}  // namespace quill
