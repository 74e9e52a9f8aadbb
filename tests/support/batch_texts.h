// The text of each record `quill batch` wrote (JSONL, one record a line), by its id; "error" for an error record.
#pragma once

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <map>
#include <string>

namespace quill::test {

inline std::map<std::string, std::string> texts_by_id(const std::string& out) {
    std::map<std::string, std::string> m;
    for (size_t start = 0; start < out.size();) {
        const size_t nl = out.find('\n', start);
        REQUIRE(nl != std::string::npos);
        const nlohmann::json r = nlohmann::json::parse(out.substr(start, nl - start));
        m[r["id"]] = r.value("text", "error");
        start = nl + 1;
    }
    return m;
}

}  // namespace quill::test
