// The parts of the Hugging Face Hub API that pulling a model needs: where the hub is ($HF_ENDPOINT), the token
// ($HF_TOKEN, else the one `huggingface-cli login` saved), a repository's file listing with the LFS SHA-256 and
// sizes, and a file's resolve metadata (commit, ETag, size, and the blob URL its redirect points to).
#pragma once

#include "engine/hub/http.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace quill::hub {

// The settings every hub operation reads from the environment once.
struct HubConfig {
    std::string endpoint;              // $HF_ENDPOINT, default https://huggingface.co (no trailing '/')
    std::string token;                 // $HF_TOKEN, else $HF_HOME/token; "" for none
    bool offline = false;              // $HF_HUB_OFFLINE set to 1, true, yes or on
    std::filesystem::path cache_root;  // $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME or ~/.cache + huggingface/hub
};
HubConfig hub_config_from_env();

// A model named on the command line: owner/repo, an optional @revision, an optional :QUANT (a quantization such
// as Q4_K_M, or a .gguf file name in the repository).
struct RepoRef {
    std::string repo;               // owner/repo
    std::string revision = "main";
    std::string quant;              // "" when not given
    std::string text() const;       // as the user would write it
};
// UsageError naming the spec when it is not owner/repo[@revision][:QUANT].
RepoRef parse_repo_ref(std::string_view spec);

struct RepoFile {
    std::string path;    // in the repository, '/'-separated
    uint64_t size = 0;
    std::string sha256;  // the LFS object's SHA-256 (lowercase hex); "" for a file stored in git itself
};

// What HEAD on resolve/{revision}/{file} says (without following its redirect).
struct FileMeta {
    std::string commit;  // X-Repo-Commit
    std::string etag;    // X-Linked-Etag, else ETag, without quotes or W/ (the blob's name in the cache)
    uint64_t size = 0;   // X-Linked-Size, else Content-Length
    std::string url;     // where the bytes are: the redirect's Location, else the resolve URL
};

class HubApi {
public:
    explicit HubApi(const HubConfig& config);

    // Every file of the repository at `revision` (the tree listing, recursive, every page).
    std::vector<RepoFile> list_files(const std::string& repo, const std::string& revision) const;
    FileMeta file_meta(const std::string& repo, const std::string& revision, const std::string& path) const;
    // The first `n` bytes (fewer when the file is shorter) of the file at `url`.
    std::vector<uint8_t> read_prefix(const std::string& url, uint64_t n) const;

    const Http& http() const { return http_; }
    const std::string& endpoint() const { return endpoint_; }

private:
    // HttpStatusError and NetworkError become messages that say what to do (set HF_TOKEN, check the name).
    [[noreturn]] void explain(const HttpStatusError& e, const std::string& repo) const;

    std::string endpoint_;
    bool has_token_;
    Http http_;
};

// The value of an ETag header as huggingface_hub stores it: without W/ and quotes.
std::string normalize_etag(std::string_view etag);

}  // namespace quill::hub
