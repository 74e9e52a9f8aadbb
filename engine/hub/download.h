// One file of the hub into the cache's blobs/, safely: a lock so that concurrent pulls of the same file download it
// once, the bytes written to blobs/ETAG.incomplete (huggingface_hub's name, so either tool resumes the other's),
// resumed with a Range request after an interruption, checked against the SHA-256 the API gave, fsynced, and only
// then renamed to blobs/ETAG. A mismatch removes the partial file and is an error: nothing half-written is used.
#pragma once

#include "engine/hub/http.h"

#include <cstdint>
#include <filesystem>
#include <string>

namespace quill::hub {

struct BlobRequest {
    std::string url;                 // where the bytes are (the resolve redirect's target)
    uint64_t size = 0;               // expected bytes
    std::string sha256;              // expected SHA-256, lowercase hex; "" for a file kept in git (size checked only)
    std::filesystem::path blob;      // the final name, blobs/ETAG
    std::filesystem::path lock;      // the lock file
    std::string label;               // what the progress line and messages call it
};

// Downloads the blob unless it is there (or another process finishes it while this one waits for the lock).
// Progress: a bar with rate and ETA when `progress_bar` (stderr is a terminal), else a line at the start and the
// end unless `quiet`. FileError on a checksum mismatch; NetworkError / HttpStatusError after the retries.
void download_blob(const Http& http, const BlobRequest& request, bool progress_bar, bool quiet);

}  // namespace quill::hub
