// A minimal HTTP/1.1 client for posting events: POSIX sockets, non-blocking, with one overall deadline
// for the name lookup, connect, send and receiving the status line. Never throws from postJson and
// never raises SIGPIPE, so that it is safe inside slurmstepd.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace baton::spank {

struct HttpUrl {
    std::string host; // name or address; IPv6 without brackets
    std::string port; // "80" when the URL has none
    std::string basePath; // without trailing slash, may be empty
};

// Accepts http://host[:port][/path] and http://[v6addr][:port][/path]; throws std::invalid_argument.
HttpUrl parseHttpUrl(std::string_view url);

struct HttpResult {
    bool ok = false; // a 2xx status arrived before the deadline
    int status = 0; // the HTTP status, 0 if none arrived
    std::string error; // why it failed
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// The request target a POST to `path` puts on its request line: basePath + path. A signed request's
// credential names exactly this text.
std::string requestTarget(const HttpUrl& url, std::string_view path);

// POSTs `body` as application/json to requestTarget(url, path), with `headers` added (a header with a
// line break or colon in its name, or a line break in its value, fails the request unsent).
HttpResult postJson(const HttpUrl& url, std::string_view path, std::string_view body,
    std::chrono::milliseconds timeout, const HttpHeaders& headers = {}) noexcept;

} // namespace baton::spank
