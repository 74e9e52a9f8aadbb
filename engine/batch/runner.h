// `quill batch` in the engine: the selected requests of an input fed to a Scheduler over all the backend's KV
// slots, each record written the moment its request finishes.
#pragma once

#include "engine/batch/input.h"
#include "engine/batch/records.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/generator.h"
#include "tokenizer/tokenizer.h"

#include <functional>
#include <optional>
#include <unordered_set>

namespace quill::batch {

// How a request becomes prompt tokens (plain prompt, chat template...). May throw quill::Error: the request then
// gets an error record; quill::Interrupted (a signal) leaves it unwritten, for --resume.
using PromptEncoder = std::function<std::vector<int32_t>(const BatchRequest&)>;

struct RunnerOptions {
    GenerationParams defaults;     // the command line's -n, --stop and sampling flags
    std::optional<uint64_t> seed;  // --seed; unset: a request without its own seed gets a random one
    // --json-schema, --json-object, --grammar or --regex: what every request's output must be, unless the request
    // gives its own response_format or grammar.
    std::optional<grammar::ConstraintSpec> constraint;
    // Called once in a run, with the first warning a request's constraint gives (a JSON schema's oneOf generated as
    // anyOf, grammar::Grammar::warnings). Null: none said.
    std::function<void(const std::string&)> on_warning;
    // How the template teaches the model to call tools: the calls of answers to requests with tools become
    // records' "tool_calls" (take_tool_calls), and a request whose "tool_choice" is "required" or names a function
    // and that gives no response_format or grammar is constrained to a call (chat::tool_choice_constraint).
    chat::ToolCallSyntax tool_syntax = chat::ToolCallSyntax::none;
    // How the template's model writes its reasoning: records give it apart (take_reasoning). none for --raw.
    chat::ReasoningSyntax reasoning_syntax = chat::ReasoningSyntax::none;
    int n_batch = 512;             // tokens per forward pass (see SchedulerOptions)
    Shard shard;                   // the entries it runs
    // Signals received so far: 1 stops admission (running requests finish), 2 abandons the running ones (no
    // record is written for them, so --resume runs them again). Null: never interrupted.
    std::function<int()> interrupts;
};

struct BatchProgress {
    size_t total = 0;      // requests this run has to do (shard, minus those already in the output)
    size_t done = 0;       // records written (results and errors)
    size_t errors = 0;     // error records among them
    size_t abandoned = 0;  // interrupted requests, not written
    size_t skipped = 0;    // requests of this shard already in the output (--resume)
    int64_t prompt_tokens = 0;     // run through the model
    int64_t reused_tokens = 0;     // prompt tokens of written records found in the cache (a shared prefix)
    int64_t generated_tokens = 0;  // sampled
    int64_t guessed_tokens = 0;    // prompt lookup's or the draft model's guesses checked, in written records
    int64_t accepted_tokens = 0;   // and those accepted
    double elapsed_s = 0;
};

// Runs the requests of `input` that belong to the shard and are not in `done` (the ids --resume found). Error
// entries are written first, then results in completion order. on_progress is called after every step.
BatchProgress run_batch(Backend& backend, const Tokenizer& tok, int64_t n_ctx, const BatchInput& input,
                        const std::unordered_set<std::string>& done, const PromptEncoder& encode,
                        RecordWriter& out, const RecordContext& ctx, const RunnerOptions& options,
                        const std::function<void(const BatchProgress&)>& on_progress = {});

// How many of input's entries run_batch would run through the model: in the shard, not in `done`, not error
// entries. `quill batch` sizes its KV slots by it (more slots than requests only take memory from the context).
size_t runnable_requests(const BatchInput& input, const Shard& shard, const std::unordered_set<std::string>& done);

// The positions a KV slot needs to run every request run_batch would run (runnable_requests): the most prompt tokens
// plus max_tokens of one of them; 0 when one may generate until its context is full (max_tokens -1), or when none
// can run. Encodes each prompt (requests whose prompt or parameters fail are skipped: they become error records;
// Interrupted passes through).
// `quill batch` fits its context to it (SessionOptions::context_needed).
int64_t context_needed(const BatchInput& input, const Shard& shard, const std::unordered_set<std::string>& done,
                       const PromptEncoder& encode, const RunnerOptions& options);

// The generation parameters of one request: the defaults with its fields applied. UsageError when out of range.
GenerationParams request_params(const RunnerOptions& options, const RequestOverrides& o, uint64_t random_seed);

}  // namespace quill::batch
