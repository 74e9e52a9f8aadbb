// What a batch's records were made with, besides their requests: the model and the options that change a record's
// text, as one short string that every result record carries ("system_fingerprint", OpenAI's name for "the backend
// configuration the model runs with"; in the OpenAI batch shape inside the response body). --resume compares it
// with this run's and refuses an OUTPUT made otherwise, so that one file never silently mixes two runs. Records keep
// it line by line: it survives a kill, a torn last line and `cat out.*.jsonl` of shards, and all the records of one
// configuration carry one fingerprint.
//
// "quill1-MMMMMMMM-PPPPPPPP-SSSSSSSS-OOOOOOOO": 32 bits of a hash of each part, so that a refusal names the part:
//  - model:    model_identity (metadata, tensor table, each tensor's first bytes), a --tokenizer file
//  - prompt:   the chat template's source (or --raw), --system
//  - sampling: --temp and the penalties; when any request samples (--temp > 0, or a request's own temperature),
//              also --top-k, --top-p, --min-p, --seed (or random), --lookup, --draft-model and --draft (which change
//              the text a seed draws, never a greedy one)
//  - output:   -n, --stop, --logprobs, --json-schema / --json-object / --grammar / --regex
// Not in it, since they never change a record: threads, --parallel, --batch-tokens, -q, --shard (the ids are
// checked apart), the input format. Nor the device, the KV type or -c: their numerics or a context's end can move a
// token, as a build of another version can, and resuming on another machine is what --resume is for.
#pragma once

#include "engine/batch/input.h"
#include "engine/batch/records.h"
#include "engine/format/gguf.h"

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace quill::batch {

// A hash of what identifies a model's file(s) without reading their tensors: the metadata (but split.*, so that a
// split model is its whole file), every tensor's name, type and shape, and the first 64 bytes of its data (a page
// read per tensor). Milliseconds for any file size.
uint64_t model_identity(const GgufFile& file);

enum class FingerprintPart { model, prompt, sampling, output };
inline constexpr size_t kFingerprintParts = 4;

// One part: the canonical text hashed, and what it is in words for a message ("--temp 0.8 --top-k 40 ...").
struct PartValue {
    std::string key;
    std::string shown;
};

struct RunFingerprint {
    std::array<PartValue, kFingerprintParts> parts;
    std::string model_name;  // the records' "model" (plain and JSONL shapes)

    // "quill1-" and the four parts' hashes in hex, '-' between them.
    std::string str() const;
};

// The settings a fingerprint is made of (what `quill batch` was given, after defaults).
struct FingerprintInputs {
    std::string model_name;
    uint64_t model_identity = 0;
    std::string tokenizer_file;  // the bytes of --tokenizer's file ("" without one)
    bool raw = false;
    std::string template_source;  // the chat template's source ("" when none could be chosen)
    std::string system;
    GenerationParams defaults;    // the flags' sampling, -n, --stop, --logprobs, --lookup, --draft
    std::optional<uint64_t> seed;
    uint64_t draft_identity = 0;  // model_identity of --draft-model, 0 without one
    std::optional<grammar::ConstraintSpec> constraint;
    bool any_request_samples = false;  // a temperature > 0: the flags' or a request's own
};
RunFingerprint make_fingerprint(const FingerprintInputs& in);

// UsageError when a result record of `earlier` carries another fingerprint than `now`, naming the first part that
// differs: "--resume: OUT was made with model X (hash), this run uses Y (hash); use --overwrite or another OUTPUT".
// Result records without one (an older quill's) are resumed, unchecked, with one warning through `warn`.
void check_resume_fingerprint(const ResumeScan& earlier, const RunFingerprint& now, const std::string& name,
                              const std::function<void(const std::string&)>& warn);

// What a request asks, as 16 hex digits of a hash that every result record carries ("request_hash"; in the OpenAI
// shape in the response body): its endpoint, prompt or messages and template variables, the OpenAI "model" a
// response echoes, and each of its own options (RequestOverrides). Not its id or line. --resume compares it with
// the input's request of the same id, so that a line edited since its result was written is not silently skipped.
std::string request_hash(const BatchRequest& r);

// UsageError when a result record of `earlier` carries another request_hash than the input's request of its id:
// "--resume: OUT holds the result of another request for id "x" (line N has changed since); ...". Records without
// one (an older quill's) and ids the input lacks (check_resume_ids refuses those) pass.
void check_resume_requests(const ResumeScan& earlier, const BatchInput& input, const std::string& name);

// Whether any request of the input sets its own temperature above 0 (then a run with --temp 0 samples).
bool input_samples(const BatchInput& input);

}  // namespace quill::batch
