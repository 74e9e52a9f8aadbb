#include "engine/hub/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <exception>
#include <memory>
#include <thread>

namespace quill::hub {

namespace {

void global_init() {
    static const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);  // once per process, thread-safe start-up
    QUILL_CHECK(rc == CURLE_OK, "libcurl failed to initialize: {}", curl_easy_strerror(rc));
}

struct CurlDeleter {
    void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct ListDeleter {
    void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

struct Transfer {
    HttpResponse* response;
    const std::function<void(std::span<const uint8_t>)>* sink = nullptr;
    size_t max_body = 0;
    uint64_t offset = 0;                // the Range asked for starts here
    CURL* curl = nullptr;
    bool too_large = false;
    uint64_t skipped = 0;               // bytes of a 200 answer to a Range request, before `offset`
    std::exception_ptr sink_error;      // what the sink threw: it may not cross libcurl's C frames
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    std::string_view line(data, size * n);
    if (line.starts_with("HTTP/")) {
        t->response->headers.clear();  // a new response (after a redirect): keep only the last one's headers
    } else if (auto colon = line.find(':'); colon != std::string_view::npos) {
        std::string name(line.substr(0, colon));
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
        std::string_view value = line.substr(colon + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
        while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
            value.remove_suffix(1);
        t->response->headers[name] = std::string(value);
    }
    return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const size_t bytes = size * n;
    if (t->sink) {
        long status = 0;
        curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
        if (status != 200 && status != 206) return bytes;  // an error page is not the file
        std::span<const uint8_t> b(reinterpret_cast<const uint8_t*>(data), bytes);
        if (status == 200 && t->skipped < t->offset) {  // the server ignored the Range: drop what is already here
            const size_t drop = static_cast<size_t>(std::min<uint64_t>(b.size(), t->offset - t->skipped));
            t->skipped += drop;
            b = b.subspan(drop);
        }
        try {
            if (!b.empty()) (*t->sink)(b);
        } catch (...) {
            t->sink_error = std::current_exception();
            return 0;  // aborts the transfer
        }
        return bytes;
    }
    if (t->response->body.size() + bytes > t->max_body) {
        t->too_large = true;
        return 0;  // aborts the transfer
    }
    t->response->body.append(data, bytes);
    return bytes;
}

long retry_after_seconds(const HttpResponse& r) {
    const std::string v = r.header("retry-after");
    if (v.empty() || !std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); })) return -1;
    return std::min(std::stol(v.substr(0, 6)), 300L);
}

}  // namespace

std::string HttpResponse::header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
}

Http::Http(HttpOptions options) : options_(std::move(options)) { global_init(); }

namespace {

// One transfer with the options every request shares; the curl handle is set up here and nowhere else.
HttpResponse perform(const HttpOptions& o, const std::string& url, bool head, bool follow, Transfer& t,
                     const std::string& range) {
    HttpResponse& r = *t.response;
    std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
    QUILL_CHECK(curl != nullptr, "libcurl could not make a handle");
    std::unique_ptr<curl_slist, ListDeleter> headers;
    auto add_header = [&](const std::string& h) { headers.reset(curl_slist_append(headers.release(), h.c_str())); };
    add_header("User-Agent: quill");
    add_header("Accept-Encoding: identity");  // sizes and ranges are of the file's bytes
    if (!o.token.empty() && !o.token_scope.empty() && url.starts_with(o.token_scope))
        add_header("Authorization: Bearer " + o.token);
    CURL* c = curl.get();
    t.curl = c;
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(c, CURLOPT_NOBODY, head ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, o.connect_timeout_s);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, o.stall_timeout_s);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    if (!range.empty()) curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
    char error[CURL_ERROR_SIZE] = {};
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
    const CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    if (t.sink_error) std::rethrow_exception(t.sink_error);
    if (t.too_large) throw NetworkError(fmt::format("{}: the answer is larger than {} bytes", url, t.max_body), false);
    if (rc != CURLE_OK) {
        const bool unreachable = rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY ||
                                 rc == CURLE_COULDNT_CONNECT || (rc == CURLE_OPERATION_TIMEDOUT && r.status == 0);
        throw NetworkError(fmt::format("{}: {}", url, error[0] ? error : curl_easy_strerror(rc)), unreachable);
    }
    return r;
}

}  // namespace

HttpResponse Http::fetch(const std::string& url, bool head, bool follow_redirects, size_t max_body) const {
    HttpResponse r;
    Transfer t{&r, nullptr, max_body};
    return perform(options_, url, head, follow_redirects, t, "");
}

HttpResponse Http::fetch_ok(const std::string& url, bool head, bool follow_redirects, bool retry_unreachable) const {
    HttpResponse r;
    with_retries(
        [&] {
            r = fetch(url, head, follow_redirects);
            if (r.status >= 400) throw_status(r, url);
        },
        retry_unreachable);
    return r;
}

HttpResponse Http::stream(const std::string& url, uint64_t offset, uint64_t end_exclusive,
                          const std::function<void(std::span<const uint8_t>)>& sink) const {
    HttpResponse r;
    Transfer t{&r, &sink, 0, offset};
    std::string range;
    if (offset > 0 || end_exclusive > 0)
        range = end_exclusive > 0 ? fmt::format("{}-{}", offset, end_exclusive - 1) : fmt::format("{}-", offset);
    return perform(options_, url, false, true, t, range);
}

void Http::with_retries(const std::function<void()>& fn, bool retry_unreachable) const {
    double wait_s = options_.backoff_s;
    for (int attempt = 0;; ++attempt) {
        long retry_after = -1;
        try {
            fn();
            return;
        } catch (const NetworkError& e) {
            if (attempt >= options_.retries || (e.unreachable() && !retry_unreachable)) throw;
        } catch (const HttpStatusError& e) {
            const bool retryable = e.status() == 429 || e.status() >= 500;
            if (!retryable || attempt >= options_.retries) throw;
            retry_after = e.retry_after_s();
        }
        const double s = retry_after >= 0 ? static_cast<double>(retry_after) : wait_s;
        std::this_thread::sleep_for(std::chrono::duration<double>(s));
        wait_s *= 2;
    }
}

void throw_status(const HttpResponse& r, const std::string& url) {
    std::string why;
    if (r.status == 401 || r.status == 403) {
        why = "access denied: the repository is gated or private";
    } else if (r.status == 404) {
        why = "not found";
    } else if (r.status == 429) {
        why = "too many requests";
    }
    const std::string hub_message = r.header("x-error-message");
    throw HttpStatusError(r.status,
                          fmt::format("{}: HTTP {}{}{}", url, r.status, why.empty() ? "" : " (" + why + ")",
                                      hub_message.empty() ? "" : ": " + hub_message),
                          retry_after_seconds(r));
}

}  // namespace quill::hub
