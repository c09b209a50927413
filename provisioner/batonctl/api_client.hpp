// batonctl's client of batond's HTTP API. Every request carries the invoking user's MUNGE credential
// (`Authorization: MUNGE <credential>`) bound to its method, target and body, so batond learns who asks
// from munged, never from the request. Failures become CommandFailure with batonctl's exit codes.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

namespace baton::ctl {

inline constexpr std::string_view defaultServer = "http://127.0.0.1:8760";

// --server, else $BATON_SERVER, else defaultServer.
std::string serverUrl(const std::string& option);

// Percent-encodes one path segment or query value (everything but RFC 3986's unreserved characters).
std::string encodeComponent(std::string_view text);

// The exit code for an HTTP error status: 404 not found, 401/403 denied, 409 conflict, else failure.
int exitCodeForStatus(int status);

class ApiClient {
public:
    // `baseUrl`: http[s]://host[:port][/prefix]. Throws UsageError for a malformed URL.
    ApiClient(const std::string& baseUrl, std::chrono::seconds timeout);
    ~ApiClient();
    ApiClient(const ApiClient&) = delete;
    ApiClient& operator=(const ApiClient&) = delete;

    // Sends a signed request; returns the body of a 2xx response. `target` is the path after the
    // prefix, with its query, already encoded. Throws CommandFailure otherwise.
    std::string get(const std::string& target);
    std::string post(const std::string& target, const std::string& body);

private:
    std::string send(const std::string& method, const std::string& target, const std::string& body);

    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::string baseUrl_;
    std::string prefix_;
};

} // namespace baton::ctl
