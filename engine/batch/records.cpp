#include "engine/batch/records.h"

#include "engine/batch/fingerprint.h"

#include "engine/error.h"
#include "engine/io/json_input.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <sys/file.h>
#include <unordered_map>
#include <sys/stat.h>
#include <unistd.h>

namespace quill::batch {

using json = nlohmann::ordered_json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The request's id as the input gave it: a string, or an integer.
json record_id(const BatchRequest& r) { return r.id_is_integer ? json::parse(r.id) : json(r.id); }

// The OpenAI batch output envelope around a response.
json openai_envelope(const BatchRequest& r, size_t index, int status, json body) {
    return json{{"id", fmt::format("batch_req_{}", index)},
                {"custom_id", record_id(r)},
                {"response", {{"status_code", status}, {"request_id", fmt::format("req_{}", index)}, {"body", body}}},
                {"error", nullptr}};
}

json usage(const Completion& c) {
    return json{{"prompt_tokens", c.prompt_tokens},
                {"completion_tokens", c.completion_tokens},
                {"total_tokens", c.prompt_tokens + c.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", c.cached_tokens}}}};
}

std::string finish_reason(const Completion& c) {
    return std::string(chat::openai_finish_reason(c.finish_reason, !c.tool_calls.is_null()));
}

}  // namespace

void take_tool_calls(Completion& c, const BatchRequest& r, chat::ToolCallSyntax syntax) {
    chat::ParsedAnswer parsed = chat::request_tool_calls(c.text, syntax, r.template_vars);
    if (parsed.calls.empty()) return;
    // "parallel_tool_calls": false: one call, as if the model had stopped after it
    if (const auto it = r.template_vars.find("parallel_tool_calls"); it != r.template_vars.end() && *it == false)
        parsed.calls.erase(parsed.calls.begin() + 1, parsed.calls.end());
    c.text = std::move(parsed.text);
    c.tool_calls = chat::openai_tool_calls(parsed.calls, syntax, c.seed);
}

void take_reasoning(Completion& c, const BatchRequest& r, chat::ReasoningSyntax syntax, bool opened_think) {
    if (r.endpoint == Endpoint::completions) return;
    chat::SplitAnswer split = chat::split_reasoning(c.text, syntax, opened_think);
    c.text = std::move(split.content);
    c.reasoning = std::move(split.reasoning);
}

std::string result_record(const RecordContext& ctx, const BatchRequest& r, size_t index, const Completion& c) {
    const std::string reason = finish_reason(c);
    if (ctx.format != InputFormat::openai) {
        json record{{"id", record_id(r)}, {"text", c.text}};
        if (!c.reasoning.empty()) record["reasoning_content"] = c.reasoning;
        if (!c.tool_calls.is_null()) record["tool_calls"] = c.tool_calls;
        record.update(json{{"finish_reason", reason},
                    {"usage", {{"prompt_tokens", c.prompt_tokens}, {"completion_tokens", c.completion_tokens}}},
                    {"seed", c.seed}});
        if (!c.logprobs.is_null()) record["logprobs"] = c.logprobs;
        record["model"] = ctx.model_name;
        record["system_fingerprint"] = ctx.fingerprint;
        record["request_hash"] = request_hash(r);
        return dump(record);
    }
    const std::string model = r.model.empty() ? ctx.model_name : r.model;
    json body;
    if (r.endpoint == Endpoint::chat_completions) {
        json message{{"role", "assistant"}, {"content", c.text}};
        if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
        if (!c.tool_calls.is_null()) {
            if (c.text.empty()) message["content"] = nullptr;
            message["tool_calls"] = c.tool_calls;
        }
        body = json{{"id", fmt::format("chatcmpl-{}", index)},
                    {"object", "chat.completion"},
                    {"created", ctx.created},
                    {"model", model},
                    {"choices",
                     json::array({{{"index", 0},
                                   {"message", std::move(message)},
                                   {"logprobs", c.logprobs},
                                   {"finish_reason", reason}}})},
                    {"usage", usage(c)},
                    {"seed", c.seed},
                    {"system_fingerprint", ctx.fingerprint},
                    {"request_hash", request_hash(r)}};
    } else {
        body = json{{"id", fmt::format("cmpl-{}", index)},
                    {"object", "text_completion"},
                    {"created", ctx.created},
                    {"model", model},
                    {"choices",
                     json::array({{{"index", 0}, {"text", c.text}, {"logprobs", c.logprobs}, {"finish_reason", reason}}})},
                    {"usage", usage(c)},
                    {"seed", c.seed},
                    {"system_fingerprint", ctx.fingerprint},
                    {"request_hash", request_hash(r)}};
    }
    return dump(openai_envelope(r, index, 200, std::move(body)));
}

std::string error_record(const RecordContext& ctx, const BatchRequest& r, size_t index, const std::string& message) {
    if (ctx.format != InputFormat::openai) return dump(json{{"id", record_id(r)}, {"error", {{"message", message}}}});
    json body{{"error", {{"message", message}, {"type", "invalid_request_error"}, {"param", nullptr}, {"code", nullptr}}}};
    return dump(openai_envelope(r, index, 400, std::move(body)));
}

// ---- resume ----

namespace {

// What --resume reads of a record line.
struct RecordSummary {
    std::string id;  // "custom_id" for OpenAI records, else "id" (an integer as its digits)
    bool failed = false;
    std::optional<std::string> fingerprint;  // a result's "system_fingerprint" (an OpenAI record's in its body)
    std::string model;  // a plain or JSONL result's "model"
    std::optional<std::string> request_hash;  // a result's "request_hash" (an OpenAI record's in its body)
};

std::string string_at(const nlohmann::json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// nullopt when the line is not a record.
std::optional<RecordSummary> read_record(std::string_view line) {
    const std::optional<nlohmann::json> parsed = try_parse_untrusted_json(line);
    if (!parsed || !parsed->is_object()) return std::nullopt;
    const nlohmann::json& j = *parsed;
    const auto id = j.find(j.contains("custom_id") ? "custom_id" : "id");
    if (id == j.end() || !(id->is_string() || id->is_number_integer())) return std::nullopt;
    RecordSummary s;
    s.id = id->is_string() ? id->get<std::string>() : id->dump();
    const auto error = j.find("error");
    s.failed = error != j.end() && !error->is_null();
    const nlohmann::json* holder = &j;  // the object that holds a result's fingerprint
    if (const auto r = j.find("response"); r != j.end() && r->is_object()) {
        const auto status = r->find("status_code");
        s.failed = s.failed || (status != r->end() && *status != 200);
        const auto body = r->find("body");
        holder = body != r->end() && body->is_object() ? &*body : nullptr;
    } else {
        s.model = string_at(j, "model");
    }
    if (!s.failed && holder && holder->contains("system_fingerprint"))
        s.fingerprint = string_at(*holder, "system_fingerprint");
    if (!s.failed && holder && holder->contains("request_hash")) s.request_hash = string_at(*holder, "request_hash");
    return s;
}

void note_config(ResumeScan& scan, const RecordSummary& r) {
    if (r.failed) return;
    if (!r.fingerprint) {
        ++scan.unfingerprinted;
        return;
    }
    for (const EarlierConfig& c : scan.configs)
        if (c.fingerprint == *r.fingerprint) return;
    scan.configs.push_back(EarlierConfig{*r.fingerprint, r.model, r.id});
}

}  // namespace

ResumeScan scan_output(std::string_view content, const std::string& name) {
    ResumeScan scan;
    size_t line_no = 0;
    for (size_t start = 0; start < content.size();) {
        ++line_no;
        const size_t nl = content.find('\n', start);
        const bool last = nl == std::string_view::npos || nl + 1 == content.size();
        const std::string_view line = content.substr(start, (nl == std::string_view::npos ? content.size() : nl) - start);
        const auto record = read_record(line);
        if (nl == std::string_view::npos || !record) {
            // Torn: what a record's write cut short leaves (its first bytes, or the zeros a crash can leave at the
            // end of a file). Any other last line is someone's text, not to be cut off.
            const bool cut_record = line.starts_with('{') || line.find_first_not_of('\0') == std::string_view::npos;
            if (!last || !cut_record)
                throw FileError(fmt::format("{}: line {} is not a batch record; cannot resume from it", name, line_no));
            scan.torn = true;
            break;
        }
        scan.done.insert(record->id);
        if (record->failed) scan.failed.insert(record->id);
        note_config(scan, *record);
        if (record->request_hash) scan.request_hashes[record->id] = *record->request_hash;
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

void check_resume_ids(const ResumeScan& earlier, const BatchInput& input, const Shard& shard, const std::string& name) {
    std::unordered_map<std::string_view, size_t> index;  // id -> entry
    for (size_t i = 0; i < input.entries.size(); ++i) index.emplace(input.entries[i].request.id, i);
    size_t foreign = 0, outside = 0;
    const std::string* first_foreign = nullptr;
    const std::string* first_outside = nullptr;
    auto note = [](size_t& count, const std::string*& first, const std::string& id) {
        ++count;
        if (!first || id < *first) first = &id;
    };
    for (const std::string& id : earlier.done) {
        if (earlier.failed.contains(id)) continue;
        const auto it = index.find(id);
        if (it == index.end()) note(foreign, first_foreign, id);
        else if (!shard.contains(it->second)) note(outside, first_outside, id);
    }
    auto results = [](size_t n) { return n == 1 ? "1 result" : fmt::format("{} results", n); };
    if (foreign > 0)
        throw UsageError(fmt::format("{} holds {} for ids the input lacks (\"{}\"{}): it is not this input's "
                                     "output, and --resume would mix the two; give another -o, or --overwrite",
                                     name, results(foreign), *first_foreign, foreign == 1 ? "" : ", ..."));
    if (outside > 0)
        throw UsageError(fmt::format("{} holds {} of requests outside --shard {}/{} (\"{}\"{}): it is another "
                                     "shard's output; give its --shard, another -o, or --overwrite",
                                     name, results(outside), shard.k, shard.n, *first_outside,
                                     outside == 1 ? "" : ", ..."));
}

// ---- the locked output file ----

LockedOutput::LockedOutput(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) throw FileError(fmt::format("{}: cannot open for writing: {}", path, std::strerror(errno)));
    f_ = ::fdopen(fd, "ab");
    if (!f_) {
        ::close(fd);
        throw FileError(fmt::format("{}: cannot open for writing: {}", path, std::strerror(errno)));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
        locked_ = true;
    } else if (errno == EWOULDBLOCK) {
        std::fclose(f_);
        f_ = nullptr;
        throw FileError(fmt::format("{}: another quill batch is writing it (the file is locked); wait for it to "
                                    "finish, or give another -o",
                                    path));
    }
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        regular_ = true;
        size_ = static_cast<uint64_t>(st.st_size);
    }
}

LockedOutput::~LockedOutput() {
    if (f_) std::fclose(f_);  // (the lock goes with the descriptor)
}

void LockedOutput::truncate() {
    if (regular_ && ::ftruncate(fileno(f_), 0) != 0)
        throw FileError(fmt::format("{}: cannot empty the output: {}", path_, std::strerror(errno)));
}

// ---- writer ----

RecordWriter::RecordWriter(std::FILE* stream, std::string name, bool file_output, std::chrono::milliseconds every)
    : f_(stream), out_(stream, std::move(name)), fsync_(file_output), every_(every),
      last_sync_(std::chrono::steady_clock::now()) {
    struct stat st {};
    regular_ = ::fstat(fileno(f_), &st) == 0 && S_ISREG(st.st_mode);
}

uint64_t RecordWriter::file_size() const {
    struct stat st {};
    if (::fstat(fileno(f_), &st) != 0) return 0;
    if (fsync_ && st.st_nlink == 0)
        throw OutputError(fmt::format("{} was deleted while the batch was writing it (the records written to it are "
                                      "lost); stopped",
                                      out_.name()),
                          ENOENT);
    return static_cast<uint64_t>(st.st_size);
}

void RecordWriter::write(const std::string& record) {
    if (before_write_) before_write_();
    const uint64_t whole = regular_ ? file_size() : 0;
    try {
        out_.write(record);
        out_.write("\n");
        out_.flush();
    } catch (const OutputError&) {
        // The record's first bytes would be a torn last line: the file keeps only whole records (should the cut
        // fail too, --resume drops the torn line).
        if (regular_ && ::ftruncate(fileno(f_), static_cast<off_t>(whole)) != 0) errno = 0;
        throw;
    }
    if (fsync_ && std::chrono::steady_clock::now() - last_sync_ >= every_) sync();
}

void RecordWriter::sync() {
    out_.flush();
    last_sync_ = std::chrono::steady_clock::now();
    if (fsync_ && ::fsync(fileno(f_)) != 0)
        throw OutputError(fmt::format("cannot fsync {}: {}", out_.name(), std::strerror(errno)), errno);
    if (fsync_) file_size();
}

}  // namespace quill::batch
