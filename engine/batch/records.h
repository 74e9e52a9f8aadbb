// The output of `quill batch`: one JSONL record per request, written and flushed as each finishes, and the scan
// that --resume makes of an earlier, possibly killed, run's output.
//  - plain text and JSONL input: {"id", "text", "finish_reason", "usage": {"prompt_tokens", "completion_tokens"}}
//    or {"id", "error": {"message"}}
//  - OpenAI batch input: {"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error": null} with
//    a chat.completion or text_completion body; a failed request has status_code 400 and an OpenAI error body.
#pragma once

#include "engine/batch/input.h"
#include "engine/io/output.h"
#include "engine/runtime/generator.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <unordered_set>

namespace quill::batch {

struct Completion {
    std::string text;
    FinishReason finish_reason = FinishReason::none;
    int prompt_tokens = 0;
    int completion_tokens = 0;
    int cached_tokens = 0;  // prompt tokens found in the KV cache (OpenAI's usage.prompt_tokens_details)
};

// What OpenAI response bodies name: the model, and the creation time (Unix seconds).
struct RecordContext {
    InputFormat format = InputFormat::plain;
    std::string model_name;
    int64_t created = 0;
};

// One record as a line of JSON (no newline). `index` is the entry's position in the input (for OpenAI ids).
std::string result_record(const RecordContext& ctx, const BatchRequest& r, size_t index, const Completion& c);
std::string error_record(const RecordContext& ctx, const BatchRequest& r, size_t index, const std::string& message);

// An earlier output, as --resume reads it: the request ids it holds ("custom_id" for OpenAI records, else "id"),
// and where its intact part ends. A last line without its newline, or one that is not a JSON object, is torn (a
// kill -9 in mid-write) and is dropped; an unreadable line before the last is a FileError (the file is not a
// batch output).
struct ResumeScan {
    std::unordered_set<std::string> done;
    size_t intact_bytes = 0;  // the file's length without a torn last line
    bool torn = false;
};
ResumeScan scan_output(std::string_view content, const std::string& name);

// Reads OUTPUT for --resume and cuts a torn last line off the file. A missing file is an empty scan.
ResumeScan prepare_resume(const std::string& path);

// Writes records: each line written and flushed at once, and the file fsync'ed when `sync_every` has passed
// since the last fsync (and by sync()), so that a crash or power loss loses at most those seconds.
class RecordWriter {
public:
    RecordWriter(std::FILE* stream, std::string name, bool fsync_enabled,
                 std::chrono::milliseconds sync_every = std::chrono::milliseconds(2000));
    void write(const std::string& record);
    void sync();

private:
    std::FILE* f_;
    Output out_;
    bool fsync_;
    std::chrono::milliseconds every_;
    std::chrono::steady_clock::time_point last_sync_;
};

}  // namespace quill::batch
