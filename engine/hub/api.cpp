#include "engine/hub/api.h"

#include "engine/io/json_input.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <regex>

namespace quill::hub {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

bool truthy(std::string v) {
    for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return v == "1" || v == "true" || v == "yes" || v == "on";
}

// Escapes a path for a URL, keeping '/' (repository paths are '/'-separated).
std::string url_path(std::string_view s) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += kHex[c >> 4];
            out += kHex[c & 15];
        }
    }
    return out;
}

// The next page of a listing: the URL in `Link: <URL>; rel="next"`, or "".
// An entry's "size" when it is a non-negative integer, else `otherwise`.
uint64_t size_member(const nlohmann::json& entry, uint64_t otherwise) {
    const auto it = entry.find("size");
    return it != entry.end() && it->is_number_unsigned() ? it->get<uint64_t>() : otherwise;
}

std::string next_page(const HttpResponse& r) {
    static const std::regex next(R"(<([^>]+)>\s*;\s*rel="next")");
    std::smatch m;
    const std::string link = r.header("link");
    return std::regex_search(link, m, next) ? m[1].str() : std::string();
}

}  // namespace

HubConfig hub_config_from_env() {
    HubConfig c;
    c.endpoint = env("HF_ENDPOINT");
    if (c.endpoint.empty()) c.endpoint = "https://huggingface.co";
    while (c.endpoint.ends_with('/')) c.endpoint.pop_back();
    c.offline = truthy(env("HF_HUB_OFFLINE"));
    fs::path hf_home;
    if (!env("HF_HOME").empty()) {
        hf_home = env("HF_HOME");
    } else if (!env("XDG_CACHE_HOME").empty()) {
        hf_home = fs::path(env("XDG_CACHE_HOME")) / "huggingface";
    } else {
        hf_home = fs::path(env("HOME").empty() ? "/tmp" : env("HOME")) / ".cache" / "huggingface";
    }
    c.cache_root = env("HF_HUB_CACHE").empty() ? hf_home / "hub" : fs::path(env("HF_HUB_CACHE"));
    c.token = env("HF_TOKEN");
    if (c.token.empty()) {
        std::ifstream in(env("HF_TOKEN_PATH").empty() ? hf_home / "token" : fs::path(env("HF_TOKEN_PATH")));
        std::getline(in, c.token);
        while (!c.token.empty() && std::isspace(static_cast<unsigned char>(c.token.back()))) c.token.pop_back();
    }
    return c;
}

std::string RepoRef::text() const {
    return repo + (revision == "main" ? "" : "@" + revision) + (quant.empty() ? "" : ":" + quant);
}

RepoRef parse_repo_ref(std::string_view spec) {
    static const std::regex form(R"(([A-Za-z0-9][A-Za-z0-9_.-]*)/([A-Za-z0-9][A-Za-z0-9_.-]*)(@([A-Za-z0-9_./-]+))?(:(.+))?)");
    std::match_results<std::string_view::const_iterator> m;
    if (!std::regex_match(spec.begin(), spec.end(), m, form) || m[2].str().ends_with(".gguf"))
        throw UsageError(fmt::format("'{}': expected a Hugging Face repository as owner/repo[:QUANT] "
                                     "(e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M)",
                                     spec));
    RepoRef r;
    r.repo = m[1].str() + "/" + m[2].str();
    if (m[4].matched) r.revision = m[4].str();
    if (m[6].matched) r.quant = m[6].str();
    return r;
}

std::string normalize_etag(std::string_view etag) {
    if (etag.starts_with("W/")) etag.remove_prefix(2);
    while (!etag.empty() && etag.front() == '"') etag.remove_prefix(1);
    while (!etag.empty() && etag.back() == '"') etag.remove_suffix(1);
    return std::string(etag);
}

HubApi::HubApi(const HubConfig& config)
    : endpoint_(config.endpoint),
      has_token_(!config.token.empty()),
      http_(HttpOptions{.token = config.token, .token_scope = config.endpoint + "/"}) {}

void HubApi::explain(const HttpStatusError& e, const std::string& repo) const {
    if (e.status() == 401 || e.status() == 403) {
        throw HttpStatusError(e.status(),
                              has_token_
                                  ? fmt::format("{}: access denied (HTTP {}): the token in HF_TOKEN does not grant "
                                                "access to this gated or private repository (accept its terms on "
                                                "the hub, or use a token of an account that has)",
                                                repo, e.status())
                                  : fmt::format("{}: access denied (HTTP {}): the repository is gated or private; "
                                                "set HF_TOKEN to a token that has access",
                                                repo, e.status()),
                              -1);
    }
    if (e.status() == 404)
        throw HttpStatusError(404, fmt::format("{}: not found on {} ({})", repo, endpoint_, e.what()), -1);
    throw e;
}

std::vector<RepoFile> HubApi::list_files(const std::string& repo, const std::string& revision) const {
    std::vector<RepoFile> files;
    std::string url = fmt::format("{}/api/models/{}/tree/{}?recursive=true", endpoint_, url_path(repo),
                                  url_path(revision));
    for (int page = 0; !url.empty(); ++page) {
        QUILL_CHECK(page < 10000, "{}: the file listing does not end", repo);
        HttpResponse r;
        try {
            r = http_.fetch_ok(url, false, true, false);  // unreachable: fall back to the cache at once
        } catch (const HttpStatusError& e) {
            explain(e, repo);
        }
        nlohmann::json j;
        try {
            j = parse_untrusted_json(r.body, url + ": the file listing");
        } catch (const UsageError& e) {  // the server's answer, not the user's input
            throw Error(e.what());
        }
        if (!j.is_array()) throw Error(fmt::format("{}: the file listing is not a JSON array", url));
        for (const auto& item : j) {
            // (an entry of another shape, or with members of other types, is passed over or read as absent)
            if (string_member(item, "type") != "file" || string_member(item, "path").empty()) continue;
            RepoFile f;
            f.path = string_member(item, "path");
            f.size = size_member(item, f.size);
            if (auto lfs = item.find("lfs"); lfs != item.end() && lfs->is_object()) {
                f.sha256 = string_member(*lfs, "oid");
                f.size = size_member(*lfs, f.size);
            }
            files.push_back(std::move(f));
        }
        url = next_page(r);
    }
    return files;
}

FileMeta HubApi::file_meta(const std::string& repo, const std::string& revision, const std::string& path) const {
    const std::string url = fmt::format("{}/{}/resolve/{}/{}", endpoint_, url_path(repo), url_path(revision),
                                        url_path(path));
    HttpResponse r;
    try {
        r = http_.fetch_ok(url, true, false);
    } catch (const HttpStatusError& e) {
        explain(e, repo);
    }
    FileMeta m;
    m.commit = r.header("x-repo-commit");
    m.etag = normalize_etag(r.header("x-linked-etag").empty() ? r.header("etag") : r.header("x-linked-etag"));
    const std::string size = r.header("x-linked-size").empty() ? r.header("content-length") : r.header("x-linked-size");
    if (!size.empty() && size.find_first_not_of("0123456789") == std::string::npos) m.size = std::stoull(size);
    m.url = url;
    if (r.status >= 300 && r.status < 400 && !r.header("location").empty()) {
        const std::string loc = r.header("location");
        m.url = loc.starts_with("/") ? endpoint_ + loc : loc;  // the hub redirects within itself with a path
    }
    if (m.commit.empty() || m.etag.empty())
        throw Error(fmt::format("{}: the answer lacks X-Repo-Commit or ETag; is HF_ENDPOINT ({}) a Hugging Face hub?",
                                url, endpoint_));
    return m;
}

std::vector<uint8_t> HubApi::read_prefix(const std::string& url, uint64_t n) const {
    struct Enough {};  // thrown by the sink to end the transfer of a server that ignores the Range
    std::vector<uint8_t> bytes;
    http_.with_retries([&] {
        bytes.clear();
        try {
            const HttpResponse r = http_.stream(url, 0, n, [&](std::span<const uint8_t> b) {
                const size_t keep = std::min<size_t>(b.size(), n - bytes.size());
                bytes.insert(bytes.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(keep));
                if (bytes.size() == n) throw Enough{};
            });
            if (r.status >= 400) throw_status(r, url);
        } catch (const Enough&) {
        }
    });
    return bytes;
}

}  // namespace quill::hub
