// The output of `quill batch`: one JSONL record per request, written and flushed as each finishes, and the scan
// that --resume makes of an earlier, possibly killed, run's output.
//  - plain text and JSONL input: {"id", "text", ["reasoning_content",] ["tool_calls",] "finish_reason", "usage":
//    {"prompt_tokens", "completion_tokens"}, "seed", "model", "system_fingerprint"} (and "logprobs": [{"id", "token", "logprob", "bytes", "top_logprobs"}] when asked) or {"id", "error":
//    {"message"}}
//  - OpenAI batch input: {"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error": null} with
//    a chat.completion or text_completion body (which adds "seed"; "system_fingerprint" as OpenAI's); a failed request has status_code 400 and an
//    OpenAI error body. Asked for, a choice's "logprobs" has the endpoint's shape (engine/runtime/logprobs_json.h).
// A reasoning model's thinking is "reasoning_content" (only when there is some; in a chat.completion body, in the
// message), out of "text" / "content", as OpenAI-compatible servers give it.
// "id" (or "custom_id") is the request's, of its type: a string, or an integer.
// "seed" is the sampler's seed, so that a request sent again with it (and the same settings) samples the same text.
#pragma once

#include "engine/batch/input.h"
#include "engine/chat/reasoning.h"
#include "engine/chat/tool_calls.h"
#include "engine/io/output.h"
#include "engine/runtime/generator.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace quill::batch {

struct Completion {
    std::string text;
    FinishReason finish_reason = FinishReason::none;
    int prompt_tokens = 0;
    int completion_tokens = 0;
    int cached_tokens = 0;  // prompt tokens found in the KV cache (OpenAI's usage.prompt_tokens_details)
    uint64_t seed = 0;      // the sampler's seed
    nlohmann::ordered_json logprobs;  // null unless the request asked; else in its output format's shape
    nlohmann::ordered_json tool_calls;  // null, or OpenAI's "tool_calls" taken out of `text` (take_tool_calls)
    std::string reasoning;  // taken out of `text` (take_reasoning)
};

// When the request offers tools (and its "tool_choice" is not "none"), the calls of c.text in `syntax` move to
// c.tool_calls (chat::openai_tool_calls: ids from c.seed, in the form `syntax`'s template takes back) and c.text
// keeps the rest. A call that is not well-formed stays text. With "parallel_tool_calls": false only the first call
// is kept.
void take_tool_calls(Completion& c, const BatchRequest& r, chat::ToolCallSyntax syntax);

// The reasoning of c.text in `syntax` (its answer began inside a think block when `opened_think`) moves to
// c.reasoning; c.text keeps the content (harmony's calls included, for take_tool_calls). A /v1/completions
// request's text is left as it is: its prompt had no template.
void take_reasoning(Completion& c, const BatchRequest& r, chat::ReasoningSyntax syntax, bool opened_think);

// What OpenAI response bodies name: the model, and the creation time (Unix seconds).
struct RecordContext {
    InputFormat format = InputFormat::plain;
    std::string model_name;
    int64_t created = 0;
    std::string fingerprint;  // every result record's "system_fingerprint" (engine/batch/fingerprint.h)
};

// One record as a line of JSON (no newline). `index` is the entry's position in the input (for OpenAI ids).
std::string result_record(const RecordContext& ctx, const BatchRequest& r, size_t index, const Completion& c);
std::string error_record(const RecordContext& ctx, const BatchRequest& r, size_t index, const std::string& message);

// An earlier output, as --resume reads it: the request ids it holds ("custom_id" for OpenAI records, else "id"; an
// integer id as its digits, as BatchRequest::id holds it),
// those of its error records, and where its intact part ends. A last line that begins as a record does ('{') or
// holds only NUL bytes, and is not a whole record with its newline, is torn (a kill -9 in mid-write, a crash) and
// is dropped; any other line that is not a record is a FileError (the file is not a batch output).
// The configurations its result records were made with: each distinct "system_fingerprint" (in the OpenAI shape,
// the body's), with the "model" and id of the first record that carries it, in the order they first appear.
struct EarlierConfig {
    std::string fingerprint;
    std::string model;  // the plain and JSONL records' "model"; "" in the OpenAI shape (its body echoes the request's)
    std::string first_id;
};
struct ResumeScan {
    std::unordered_set<std::string> done;
    std::unordered_set<std::string> failed;  // the ids of done whose record is an error
    std::vector<EarlierConfig> configs;
    size_t unfingerprinted = 0;  // result records without a fingerprint (an older quill's)
    // id -> "request_hash" of each result record that carries one (engine/batch/fingerprint.h).
    std::unordered_map<std::string, std::string> request_hashes;
    size_t intact_bytes = 0;  // the file's length without a torn last line
    bool torn = false;
};
ResumeScan scan_output(std::string_view content, const std::string& name);

// Reads OUTPUT for --resume and cuts a torn last line off the file. A missing file is an empty scan.
ResumeScan prepare_resume(const std::string& path);

// UsageError naming the first of them when the earlier output holds results for ids the input lacks: it is the
// output of another input (or of lines since removed), and resuming would mix the two; likewise for results of
// requests outside `shard` (another shard's output: a job array's index that does not match its file). Error
// records are let pass: their lines may since have been mended, under another id.
void check_resume_ids(const ResumeScan& earlier, const BatchInput& input, const Shard& shard, const std::string& name);

// The output file of a batch, opened for appending and locked (flock, exclusive) for as long as it is open, so that
// a second `quill batch` on the same file is refused instead of writing every record again. Not truncated here.
class LockedOutput {
public:
    // FileError "<path>: another quill batch is writing it" when another holds the lock; FileError when it cannot
    // be opened. A file system that cannot lock (locked() false) does not stop the batch.
    explicit LockedOutput(const std::string& path);
    ~LockedOutput();
    LockedOutput(const LockedOutput&) = delete;
    LockedOutput& operator=(const LockedOutput&) = delete;

    std::FILE* stream() const { return f_; }
    // The file's size when it was opened; always 0 for what is not a regular file (a FIFO, a device).
    uint64_t initial_size() const { return size_; }
    bool is_regular() const { return regular_; }
    bool locked() const { return locked_; }
    // Empties the file (--overwrite).
    void truncate();

private:
    std::string path_;
    std::FILE* f_ = nullptr;
    uint64_t size_ = 0;
    bool regular_ = false;
    bool locked_ = false;
};

// Writes records: each line written and flushed at once, and the file fsync'ed when `sync_every` has passed
// since the last fsync (and by sync()), so that a crash or power loss loses at most those seconds. When the stream
// is a regular file, a record that cannot be written whole (a full disk, a file size limit) is cut off again, so
// that the file ends with the last whole record. The file named `name` (`file_output`: fsync'ed), once deleted
// while written (its directory removed), is an OutputError at the next record or sync(), instead of records
// written on into a file nobody can read.
class RecordWriter {
public:
    RecordWriter(std::FILE* stream, std::string name, bool file_output,
                 std::chrono::milliseconds sync_every = std::chrono::milliseconds(2000));
    // Called before each record is written (a progress line on the same terminal clears itself).
    void set_before_write(std::function<void()> f) { before_write_ = std::move(f); }
    void write(const std::string& record);
    void sync();

private:
    // The regular file's size; OutputError when it is the file output and has been deleted.
    uint64_t file_size() const;

    std::FILE* f_;
    Output out_;
    bool regular_ = false;
    std::function<void()> before_write_;
    bool fsync_;
    std::chrono::milliseconds every_;
    std::chrono::steady_clock::time_point last_sync_;
};

}  // namespace quill::batch
