// Models by name: `quill pull owner/repo[:QUANT]`, `-m hf:owner/repo[:QUANT]`, `quill list` and `quill rm`, over
// the hub API (api.h), the quantization choice (quant_choice.h), the shared cache (cache.h) and safe downloads
// (download.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace quill::hub {

struct PullOptions {
    bool ask_hub = true;  // false: a model already in the cache is used without asking the hub (-m hf:)
    bool quiet = false;   // no progress and no notes on stderr
};

struct PulledModel {
    std::string name;                           // owner/repo:QUANT (or owner/repo:FILE when the name has no quant)
    std::string commit;
    std::vector<std::filesystem::path> files;   // snapshot paths in the cache; the parts of a split model in order
    uint64_t bytes = 0;
    bool from_cache = false;                    // nothing was asked of the hub (offline, unreachable, or ask_hub off)
};

// Finds the model in the hub, refuses it before downloading when its GGUF header says quill cannot run it, and
// downloads what the cache lacks. Offline ($HF_HUB_OFFLINE, or the hub unreachable) it uses the cache and says so.
PulledModel pull_model(const std::string& spec, const PullOptions& options);

// The GGUF path that -m hf:SPEC stands for: the cached model, pulled first when the cache lacks it (a split model's
// first part, with which open_model_file loads them all).
std::string resolve_hf_model(const std::string& spec);

// `quill list`: one line per cached GGUF model (name, file, size, architecture and weight type, whether quill can
// run it), under a header line; a note when the cache holds none.
std::string list_models();

// `quill rm owner/repo[:QUANT]`: removes the model's files (the whole repository without QUANT) and the blobs no
// other snapshot uses; returns what it says it removed. Error (a failure, not a usage error) when the cache does not
// hold the repository; UsageError for a QUANT that matches no cached file or several (choose_model).
std::string remove_model(const std::string& spec);

}  // namespace quill::hub
