// The Hugging Face cache, in huggingface_hub's own layout, so that what it downloaded is found here and what quill
// downloads serves it:
//   ROOT/models--OWNER--REPO/blobs/ETAG                   the file's bytes (ETAG: the LFS SHA-256, or the git oid)
//   ROOT/models--OWNER--REPO/snapshots/COMMIT/PATH        a relative symlink to ../../blobs/ETAG (deeper for subdirs)
//   ROOT/models--OWNER--REPO/refs/REVISION                the commit REVISION names (no newline)
//   ROOT/.locks/models--OWNER--REPO/ETAG.lock             held (flock) while a blob is downloaded
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace quill::hub {

class HubCache {
public:
    explicit HubCache(std::filesystem::path root) : root_(std::move(root)) {}

    const std::filesystem::path& root() const { return root_; }
    std::filesystem::path repo_dir(const std::string& repo) const;  // owner/repo -> ROOT/models--owner--repo
    std::filesystem::path blob_path(const std::string& repo, const std::string& etag) const;
    std::filesystem::path lock_path(const std::string& repo, const std::string& etag) const;
    std::filesystem::path snapshot_path(const std::string& repo, const std::string& commit,
                                        const std::string& file) const;

    // The commit `revision` names: itself when it is a 40-digit commit hash, else refs/REVISION; nullopt when the
    // cache holds no such ref.
    std::optional<std::string> commit_of(const std::string& repo, const std::string& revision) const;
    void write_ref(const std::string& repo, const std::string& revision, const std::string& commit) const;
    // Points snapshots/COMMIT/FILE at blobs/ETAG (a relative symlink, replacing what was there).
    void link(const std::string& repo, const std::string& commit, const std::string& file,
              const std::string& etag) const;
    // The files of a snapshot whose target exists, as repository paths, sorted.
    std::vector<std::string> snapshot_files(const std::string& repo, const std::string& commit) const;

    struct Entry {
        std::string repo;              // owner/repo
        std::string commit;
        std::string file;              // repository path
        std::filesystem::path path;    // the snapshot path
        uint64_t size = 0;
    };
    // Every GGUF file in every snapshot of every model repository, sorted by repo and file.
    std::vector<Entry> gguf_files() const;
    // Removes snapshot links to the given files, then every blob no snapshot points at, then empty snapshots; the
    // whole repository directory when `files` is empty. Returns the bytes of blobs removed.
    uint64_t remove(const std::string& repo, const std::vector<std::string>& files) const;

private:
    std::filesystem::path root_;
};

}  // namespace quill::hub
