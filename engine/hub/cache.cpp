#include "engine/hub/cache.h"

#include "engine/error.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <system_error>
#include <unistd.h>

namespace quill::hub {

namespace fs = std::filesystem;

namespace {

bool is_commit_hash(const std::string& s) {
    return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(c) && !std::isupper(c); });
}

// models--owner--repo -> owner/repo; "" for a directory of another kind (datasets--, spaces--, .locks).
std::string repo_of_dir(const std::string& name) {
    if (!name.starts_with("models--")) return {};
    std::string rest = name.substr(8);
    const size_t sep = rest.find("--");
    if (sep == std::string::npos) return {};
    return rest.substr(0, sep) + "/" + rest.substr(sep + 2);
}

}  // namespace

fs::path HubCache::repo_dir(const std::string& repo) const {
    std::string name = "models--" + repo;
    for (size_t i = 0; (i = name.find('/', i)) != std::string::npos;) name.replace(i, 1, "--");
    return root_ / name;
}

fs::path HubCache::blob_path(const std::string& repo, const std::string& etag) const {
    return repo_dir(repo) / "blobs" / etag;
}

fs::path HubCache::lock_path(const std::string& repo, const std::string& etag) const {
    return root_ / ".locks" / repo_dir(repo).filename() / (etag + ".lock");
}

fs::path HubCache::snapshot_path(const std::string& repo, const std::string& commit, const std::string& file) const {
    return repo_dir(repo) / "snapshots" / commit / fs::path(file);
}

std::optional<std::string> HubCache::commit_of(const std::string& repo, const std::string& revision) const {
    if (is_commit_hash(revision)) return revision;
    std::ifstream in(repo_dir(repo) / "refs" / revision);
    std::string commit;
    if (!in || !std::getline(in, commit)) return std::nullopt;
    while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
    if (commit.empty()) return std::nullopt;
    return commit;
}

namespace {

// A name beside `path` for this process alone: two pulls of one model may write the same ref and link at once, each
// renaming its own file over the final name.
fs::path temporary_name(const fs::path& path) { return fmt::format("{}.quill-tmp-{}", path.string(), getpid()); }

}  // namespace

void HubCache::write_ref(const std::string& repo, const std::string& revision, const std::string& commit) const {
    if (revision == commit) return;
    const fs::path ref = repo_dir(repo) / "refs" / revision;
    fs::create_directories(ref.parent_path());
    const fs::path tmp = temporary_name(ref);
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << commit;
        if (!out) throw FileError(fmt::format("{}: cannot write the ref", ref.string()));
    }
    fs::rename(tmp, ref);
}

void HubCache::link(const std::string& repo, const std::string& commit, const std::string& file,
                    const std::string& etag) const {
    const fs::path at = snapshot_path(repo, commit, file);
    fs::create_directories(at.parent_path());
    const fs::path target = blob_path(repo, etag).lexically_relative(at.parent_path());
    const fs::path tmp = temporary_name(at);
    std::error_code ec;
    fs::remove(tmp, ec);
    fs::create_symlink(target, tmp);
    fs::rename(tmp, at);  // atomic: a reader sees the old link or the new one
}

std::vector<std::string> HubCache::snapshot_files(const std::string& repo, const std::string& commit) const {
    std::vector<std::string> files;
    const fs::path dir = repo_dir(repo) / "snapshots" / commit;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        if (fs::is_regular_file(it->path(), ec))  // follows the link: a dangling one is left out
            files.push_back(it->path().lexically_relative(dir).generic_string());
    }
    std::sort(files.begin(), files.end());
    return files;
}

std::vector<HubCache::Entry> HubCache::gguf_files() const {
    std::vector<Entry> out;
    std::error_code ec;
    for (const auto& d : fs::directory_iterator(root_, ec)) {
        const std::string repo = repo_of_dir(d.path().filename().string());
        if (repo.empty()) continue;
        for (const auto& s : fs::directory_iterator(d.path() / "snapshots", ec)) {
            const std::string commit = s.path().filename().string();
            for (const std::string& f : snapshot_files(repo, commit)) {
                if (!f.ends_with(".gguf")) continue;
                const fs::path p = s.path() / f;
                out.push_back({repo, commit, f, p, static_cast<uint64_t>(fs::file_size(p, ec))});
            }
        }
    }
    std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
        return std::tie(a.repo, a.file, a.commit) < std::tie(b.repo, b.file, b.commit);
    });
    return out;
}

uint64_t HubCache::remove(const std::string& repo, const std::vector<std::string>& files) const {
    const fs::path dir = repo_dir(repo);
    uint64_t freed = 0;
    std::error_code ec;
    if (files.empty()) {
        for (const auto& b : fs::directory_iterator(dir / "blobs", ec)) freed += fs::file_size(b.path(), ec);
        fs::remove_all(dir);
        return freed;
    }
    for (const auto& s : fs::directory_iterator(dir / "snapshots", ec)) {
        for (const std::string& f : files) {
            fs::remove(s.path() / f, ec);
            // The folders the file was in (a split model's Q8_0/), once empty.
            for (fs::path d = (s.path() / f).parent_path(); d != s.path() && fs::is_empty(d, ec); d = d.parent_path())
                fs::remove(d, ec);
        }
    }
    // The blobs some snapshot still points at stay.
    std::set<fs::path> used;
    for (auto it = fs::recursive_directory_iterator(dir / "snapshots", ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        if (it->is_symlink()) used.insert(fs::weakly_canonical(it->path(), ec));
    }
    for (const auto& b : fs::directory_iterator(dir / "blobs", ec)) {
        if (used.count(fs::weakly_canonical(b.path(), ec))) continue;
        freed += fs::file_size(b.path(), ec);
        fs::remove(b.path(), ec);
    }
    for (const auto& s : fs::directory_iterator(dir / "snapshots", ec))
        if (fs::is_empty(s.path(), ec)) fs::remove(s.path(), ec);
    return freed;
}

}  // namespace quill::hub
