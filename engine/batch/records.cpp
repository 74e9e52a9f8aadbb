#include "engine/batch/records.h"

#include "engine/error.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace quill::batch {

using json = nlohmann::ordered_json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The OpenAI batch output envelope around a response.
json openai_envelope(const BatchRequest& r, size_t index, int status, json body) {
    return json{{"id", fmt::format("batch_req_{}", index)},
                {"custom_id", r.id},
                {"response", {{"status_code", status}, {"request_id", fmt::format("req_{}", index)}, {"body", body}}},
                {"error", nullptr}};
}

json usage(const Completion& c) {
    return json{{"prompt_tokens", c.prompt_tokens},
                {"completion_tokens", c.completion_tokens},
                {"total_tokens", c.prompt_tokens + c.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", c.cached_tokens}}}};
}

}  // namespace

std::string result_record(const RecordContext& ctx, const BatchRequest& r, size_t index, const Completion& c) {
    const std::string reason(finish_reason_name(c.finish_reason));
    if (ctx.format != InputFormat::openai) {
        return dump(json{{"id", r.id},
                         {"text", c.text},
                         {"finish_reason", reason},
                         {"usage", {{"prompt_tokens", c.prompt_tokens}, {"completion_tokens", c.completion_tokens}}}});
    }
    const std::string model = r.model.empty() ? ctx.model_name : r.model;
    json body;
    if (r.endpoint == Endpoint::chat_completions) {
        body = json{{"id", fmt::format("chatcmpl-{}", index)},
                    {"object", "chat.completion"},
                    {"created", ctx.created},
                    {"model", model},
                    {"choices",
                     json::array({{{"index", 0},
                                   {"message", {{"role", "assistant"}, {"content", c.text}}},
                                   {"finish_reason", reason}}})},
                    {"usage", usage(c)}};
    } else {
        body = json{{"id", fmt::format("cmpl-{}", index)},
                    {"object", "text_completion"},
                    {"created", ctx.created},
                    {"model", model},
                    {"choices",
                     json::array({{{"index", 0}, {"text", c.text}, {"logprobs", nullptr}, {"finish_reason", reason}}})},
                    {"usage", usage(c)}};
    }
    return dump(openai_envelope(r, index, 200, std::move(body)));
}

std::string error_record(const RecordContext& ctx, const BatchRequest& r, size_t index, const std::string& message) {
    if (ctx.format != InputFormat::openai) return dump(json{{"id", r.id}, {"error", {{"message", message}}}});
    json body{{"error", {{"message", message}, {"type", "invalid_request_error"}, {"param", nullptr}, {"code", nullptr}}}};
    return dump(openai_envelope(r, index, 400, std::move(body)));
}

// ---- resume ----

ResumeScan scan_output(std::string_view content, const std::string& name) {
    ResumeScan scan;
    size_t line_no = 0;
    for (size_t start = 0; start < content.size();) {
        ++line_no;
        const size_t nl = content.find('\n', start);
        const bool last = nl == std::string_view::npos || nl + 1 == content.size();
        const std::string_view line = content.substr(start, (nl == std::string_view::npos ? content.size() : nl) - start);
        const json j = json::parse(line, nullptr, false);
        const json* id = nullptr;
        if (j.is_object()) {
            auto it = j.find(j.contains("custom_id") ? "custom_id" : "id");
            if (it != j.end() && it->is_string()) id = &*it;
        }
        if (nl == std::string_view::npos || !id) {
            if (!last)
                throw FileError(fmt::format("{}: line {} is not a batch record; cannot resume from it", name, line_no));
            scan.torn = true;
            break;
        }
        scan.done.insert(id->get<std::string>());
        scan.intact_bytes = nl + 1;
        start = nl + 1;
    }
    return scan;
}

ResumeScan prepare_resume(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return {};
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FileError(fmt::format("{}: cannot open the output to resume", path));
    std::ostringstream ss;
    ss << in.rdbuf();
    ResumeScan scan = scan_output(ss.str(), path);
    if (scan.torn && ::truncate(path.c_str(), static_cast<off_t>(scan.intact_bytes)) != 0)
        throw FileError(fmt::format("{}: cannot cut its torn last line: {}", path, std::strerror(errno)));
    return scan;
}

// ---- writer ----

RecordWriter::RecordWriter(std::FILE* stream, std::string name, bool fsync_enabled, std::chrono::milliseconds every)
    : f_(stream), out_(stream, std::move(name)), fsync_(fsync_enabled), every_(every),
      last_sync_(std::chrono::steady_clock::now()) {}

void RecordWriter::write(const std::string& record) {
    out_.write(record);
    out_.write("\n");
    out_.flush();
    if (fsync_ && std::chrono::steady_clock::now() - last_sync_ >= every_) sync();
}

void RecordWriter::sync() {
    out_.flush();
    last_sync_ = std::chrono::steady_clock::now();
    if (fsync_ && ::fsync(fileno(f_)) != 0)
        throw OutputError(fmt::format("cannot fsync {}: {}", out_.name(), std::strerror(errno)), errno);
}

}  // namespace quill::batch
