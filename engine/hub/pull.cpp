#include "engine/hub/pull.h"

#include "engine/hub/api.h"
#include "engine/hub/cache.h"
#include "engine/hub/download.h"
#include "engine/hub/gguf_header.h"
#include "engine/hub/quant_choice.h"
#include "engine/io/output.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>

namespace quill::hub {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kFirstProbe = uint64_t{256} << 10;  // bytes of a GGUF asked first for its header
constexpr uint64_t kLargestProbe = uint64_t{64} << 20;

void note(const PullOptions& o, const std::string& text) {
    if (!o.quiet) print_stderr_noexcept("quill: " + text + "\n");
}

std::string model_name(const std::string& repo, const GgufModel& m) {
    const std::string& first = m.files.front();
    return repo + ":" + (m.quant.empty() ? first.substr(first.rfind('/') + 1) : m.quant);
}

std::vector<RepoFile> files_of_snapshot(const HubCache& cache, const std::string& repo, const std::string& commit) {
    std::vector<RepoFile> files;
    std::error_code ec;
    for (const std::string& f : cache.snapshot_files(repo, commit))
        files.push_back({f, static_cast<uint64_t>(fs::file_size(cache.snapshot_path(repo, commit, f), ec)), ""});
    return files;
}

// The model in the cache's snapshot of ref.revision; nullopt when the cache does not hold it (a UsageError from the
// choice, such as an ambiguous quantization, is thrown only when `must`).
std::optional<PulledModel> from_cache(const HubCache& cache, const RepoRef& ref, bool must) {
    const std::optional<std::string> commit = cache.commit_of(ref.repo, ref.revision);
    if (!commit) return std::nullopt;
    const std::vector<GgufModel> models = gguf_models(files_of_snapshot(cache, ref.repo, *commit));
    if (models.empty()) return std::nullopt;
    GgufModel m;
    try {
        m = choose_model(models, ref.quant, ref.repo);
    } catch (const UsageError&) {
        if (must) throw;
        return std::nullopt;
    }
    PulledModel p{model_name(ref.repo, m), *commit, {}, m.bytes, true};
    for (const std::string& f : m.files) p.files.push_back(cache.snapshot_path(ref.repo, *commit, f));
    return p;
}

// The header of the GGUF at `url`, read with growing range requests; nullopt when it is longer than kLargestProbe
// (rare: the full download will tell).
std::optional<GgufHeader> remote_header(const HubApi& api, const std::string& url, uint64_t size,
                                        const std::string& label) {
    for (uint64_t n = std::min(kFirstProbe, size);; n = std::min(n * 4, size)) {
        const std::vector<uint8_t> prefix = api.read_prefix(url, n);
        if (auto header = parse_gguf_header(prefix, label)) return header;
        if (prefix.size() < n || n >= size) throw FileError(fmt::format("{}: the GGUF header is truncated", label));
        if (n >= kLargestProbe) return std::nullopt;
    }
}

// The header of a local GGUF file (its first bytes, read as far as the header goes).
std::optional<GgufHeader> read_header(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    for (uint64_t n = kFirstProbe; n <= kLargestProbe && in; n *= 4) {
        std::vector<uint8_t> bytes(n);
        in.clear();
        in.seekg(0);
        in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(n));
        bytes.resize(static_cast<size_t>(in.gcount()));
        if (auto h = parse_gguf_header(bytes, path.string())) return h;
        if (bytes.size() < n) break;
    }
    return std::nullopt;
}

// The header of a model in one or several files (a split model: the first part's metadata and the tensors of
// all parts), from header(i) for each file i; nullopt when one of them is.
template <class HeaderOf>
std::optional<GgufHeader> model_header(size_t n_files, const HeaderOf& header) {
    std::optional<GgufHeader> model;
    for (size_t i = 0; i < n_files; ++i) {
        std::optional<GgufHeader> h = header(i);
        if (!h) return std::nullopt;
        if (!model) {
            model = std::move(h);
        } else {
            model->tensors.insert(model->tensors.end(), h->tensors.begin(), h->tensors.end());
        }
    }
    return model;
}

// Throws FileError before any download when the headers of the model's files say quill cannot run it.
void refuse_unsupported(const HubApi& api, const std::vector<BlobRequest>& files) {
    const std::optional<GgufHeader> h = model_header(files.size(), [&](size_t i) {
        std::error_code ec;
        const BlobRequest& b = files[i];
        return fs::exists(b.blob, ec) ? read_header(b.blob) : remote_header(api, b.url, b.size, b.label);
    });
    if (!h) return;
    if (const std::string why = why_unsupported(*h); !why.empty())
        throw FileError(
            fmt::format("{}: quill cannot run this model: {} (nothing was downloaded)", files.front().label, why));
}

PulledModel fetch_from_hub(const HubApi& api, const HubCache& cache, const RepoRef& ref, const GgufModel& m,
                           const std::vector<RepoFile>& listing, const PullOptions& o) {
    PulledModel p{model_name(ref.repo, m), "", {}, m.bytes, false};
    std::vector<BlobRequest> blobs;
    std::vector<std::string> etags;
    bool missing = false;
    for (const std::string& file : m.files) {
        const FileMeta meta = api.file_meta(ref.repo, ref.revision, file);
        if (p.commit.empty()) p.commit = meta.commit;
        const RepoFile* listed = nullptr;
        for (const RepoFile& f : listing)
            if (f.path == file) listed = &f;
        BlobRequest b;
        b.url = meta.url;
        b.size = listed && listed->size ? listed->size : meta.size;
        b.sha256 = listed ? listed->sha256 : "";
        b.blob = cache.blob_path(ref.repo, meta.etag);
        b.lock = cache.lock_path(ref.repo, meta.etag);
        b.label = ref.repo + "/" + file;
        std::error_code ec;
        missing = missing || !fs::exists(b.blob, ec);
        blobs.push_back(std::move(b));
        etags.push_back(meta.etag);
    }
    if (missing) refuse_unsupported(api, blobs);
    const bool bar = !o.quiet && ::isatty(STDERR_FILENO);
    for (size_t i = 0; i < blobs.size(); ++i) {
        std::error_code ec;
        if (!fs::exists(blobs[i].blob, ec)) download_blob(api.http(), blobs[i], bar, o.quiet);
        cache.link(ref.repo, p.commit, m.files[i], etags[i]);
        p.files.push_back(cache.snapshot_path(ref.repo, p.commit, m.files[i]));
    }
    cache.write_ref(ref.repo, ref.revision, p.commit);
    return p;
}

}  // namespace

PulledModel pull_model(const std::string& spec, const PullOptions& o) {
    const HubConfig config = hub_config_from_env();
    const RepoRef ref = parse_repo_ref(spec);
    const HubCache cache(config.cache_root);
    if (config.offline || !o.ask_hub) {
        if (auto cached = from_cache(cache, ref, config.offline)) {
            if (config.offline) note(o, fmt::format("offline (HF_HUB_OFFLINE): using the cached {}", cached->name));
            return *cached;
        }
        if (config.offline)
            throw Error(fmt::format("{}: not in the cache ({}) and HF_HUB_OFFLINE is set", ref.text(),
                                    cache.repo_dir(ref.repo).string()));
    }
    const HubApi api(config);
    std::vector<RepoFile> listing;
    try {
        listing = api.list_files(ref.repo, ref.revision);
    } catch (const NetworkError& e) {
        if (auto cached = from_cache(cache, ref, true)) {
            note(o, fmt::format("offline: cannot reach {} ({}); using the cached {}", config.endpoint, e.what(),
                                cached->name));
            return *cached;
        }
        throw Error(fmt::format("{}: cannot reach the hub and the model is not in the cache ({}): {}", ref.text(),
                                cache.root().string(), e.what()));
    }
    const GgufModel chosen = choose_model(gguf_models(listing), ref.quant, ref.repo);
    return fetch_from_hub(api, cache, ref, chosen, listing, o);
}

std::string resolve_hf_model(const std::string& spec) {
    return pull_model(spec, PullOptions{.ask_hub = false}).files.front().string();
}

std::string list_models() {
    const HubCache cache(hub_config_from_env().cache_root);
    std::vector<std::vector<std::string>> rows{{"NAME", "FILE", "SIZE", "ARCH", "TYPE", "RUNS"}};
    const auto entries = cache.gguf_files();
    for (size_t i = 0; i < entries.size();) {
        // The entries of one snapshot, grouped into models (split parts together).
        size_t j = i;
        std::vector<RepoFile> files;
        for (; j < entries.size() && entries[j].repo == entries[i].repo && entries[j].commit == entries[i].commit; ++j)
            files.push_back({entries[j].file, entries[j].size, ""});
        for (const GgufModel& m : gguf_models(files)) {
            std::string arch = "?", type = "?", runs = "no: no GGUF header";
            try {
                const auto h = model_header(m.files.size(), [&](size_t k) {
                    return read_header(cache.snapshot_path(entries[i].repo, entries[i].commit, m.files[k]));
                });
                if (h) {
                    arch = h->architecture.empty() ? "?" : h->architecture;
                    type = main_weight_type(*h);
                    const std::string why = why_unsupported(*h);
                    runs = why.empty() ? "yes" : "no: " + why;
                }
            } catch (const FileError& e) {
                runs = std::string("no: ") + e.what();
            }
            rows.push_back({model_name(entries[i].repo, m), m.files.front(), human_size(m.bytes), arch, type, runs});
        }
        i = j;
    }
    if (rows.size() == 1) return fmt::format("no models in the cache ({}); get one with quill pull owner/repo:QUANT\n",
                                             cache.root().string());
    std::vector<size_t> width(rows[0].size(), 0);
    for (const auto& r : rows)
        for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
    std::string out;
    for (const auto& r : rows) {
        for (size_t c = 0; c < r.size(); ++c)
            out += c + 1 < r.size() ? fmt::format("{:<{}}  ", r[c], width[c]) : r[c] + "\n";
    }
    return out;
}

std::string remove_model(const std::string& spec) {
    const HubCache cache(hub_config_from_env().cache_root);
    const RepoRef ref = parse_repo_ref(spec);
    std::error_code ec;
    if (!fs::exists(cache.repo_dir(ref.repo), ec))
        throw Error(fmt::format("{}: no such model in the cache ({}), nothing removed; `quill list` shows the cached "
                                "models",
                                ref.repo, cache.root().string()));
    if (ref.quant.empty()) {
        const uint64_t freed = cache.remove(ref.repo, {});
        return fmt::format("removed {} ({} freed)\n", ref.repo, human_size(freed));
    }
    std::vector<RepoFile> files;
    for (const auto& e : cache.gguf_files()) {  // one entry per file, though several snapshots hold it
        const bool seen = std::any_of(files.begin(), files.end(), [&](const RepoFile& f) { return f.path == e.file; });
        if (e.repo == ref.repo && !seen) files.push_back({e.file, e.size, ""});
    }
    const GgufModel m = choose_model(gguf_models(files), ref.quant, ref.repo);
    const uint64_t freed = cache.remove(ref.repo, m.files);
    return fmt::format("removed {} ({} freed)\n", model_name(ref.repo, m), human_size(freed));
}

}  // namespace quill::hub
