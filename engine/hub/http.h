// HTTP over libcurl for the hub client: one request at a time, no redirect followed unless asked, proxies from the
// environment (libcurl reads http_proxy, https_proxy and no_proxy itself), a connect timeout and a stall timeout,
// and retries with exponential backoff (Retry-After honoured) for network failures, 429 and 5xx.
#pragma once

#include "engine/error.h"

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>

namespace quill::hub {

// The server could not be reached or the transfer broke off (DNS, refused connection, timeout, dropped connection).
class NetworkError : public Error {
public:
    NetworkError(const std::string& message, bool unreachable) : Error(message), unreachable_(unreachable) {}
    // No connection was made (the name did not resolve, the connection was refused or timed out).
    bool unreachable() const { return unreachable_; }

private:
    bool unreachable_;
};

// An HTTP status that is not a success, with the URL in the message.
class HttpStatusError : public Error {
public:
    HttpStatusError(long status, const std::string& message, long retry_after_s)
        : Error(message), status_(status), retry_after_s_(retry_after_s) {}
    long status() const { return status_; }
    long retry_after_s() const { return retry_after_s_; }  // the Retry-After header, -1 when absent

private:
    long status_;
    long retry_after_s_;
};

struct HttpResponse {
    long status = 0;
    std::map<std::string, std::string> headers;  // of the last response, names lowercased
    std::string body;
    std::string header(const std::string& lower_name) const;  // "" when absent
};

struct HttpOptions {
    std::string token;           // sent as "Authorization: Bearer" to URLs under token_scope
    std::string token_scope;     // the endpoint's URL prefix
    long connect_timeout_s = 10;
    long stall_timeout_s = 30;   // a transfer that moves no byte for this long fails
    int retries = 4;             // tries after the first
    double backoff_s = 1.0;      // the first wait; doubles after each try
};

class Http {
public:
    explicit Http(HttpOptions options);

    // One GET or HEAD (no retry); the body is kept up to max_body bytes (an error beyond). NetworkError when the
    // server cannot be reached.
    HttpResponse fetch(const std::string& url, bool head, bool follow_redirects, size_t max_body = size_t{64} << 20) const;
    // fetch with retries; HttpStatusError for a status >= 400 after them (401, 403 and 404 are not retried).
    // Without retry_unreachable a server that cannot be reached fails at once (for a quick fall back to the cache).
    HttpResponse fetch_ok(const std::string& url, bool head, bool follow_redirects, bool retry_unreachable = true) const;
    // One GET of url (redirects followed) of bytes [offset, end_exclusive) (end 0: to the end), the body of a 200
    // or 206 answer handed to `sink` as it comes (from `offset` on, also when the server ignored the Range).
    // Returns the response with an empty body; NetworkError when the transfer breaks off (what reached sink stays
    // delivered); what sink throws is rethrown.
    HttpResponse stream(const std::string& url, uint64_t offset, uint64_t end_exclusive,
                        const std::function<void(std::span<const uint8_t>)>& sink) const;

    // Calls fn until it returns, retrying NetworkError and the retryable HttpStatusErrors (429, 5xx) with backoff
    // (Retry-After when the server says); the last failure is thrown.
    void with_retries(const std::function<void()>& fn, bool retry_unreachable = true) const;

    const HttpOptions& options() const { return options_; }

private:
    HttpOptions options_;
};

// A status error for a response, naming the URL and the hub's error header when there is one.
[[noreturn]] void throw_status(const HttpResponse& r, const std::string& url);

}  // namespace quill::hub
