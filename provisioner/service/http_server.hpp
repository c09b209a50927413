// batond's HTTP/1.1 server (Boost.Beast): reads each request whole, within byte and time bounds,
// before anything looks at it, then runs its handler on a separate pool of threads.
//
// Reading is asynchronous on one I/O thread: a client that sends slowly holds a connection (there are at
// most maxConnections) until its request deadline, never a handler thread. The deadline covers the
// request line, the headers and the body together; a request that misses it is dropped unanswered.
// Handlers see only complete requests that passed the limits, so that authentication, which comes first
// in every handler that needs it, is never reached by a half-sent or oversized one.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace baton::service {

struct HttpRequest {
    std::string method; // "GET", "POST"
    std::string target; // as sent: the path and the query, still encoded
    std::string path; // the target's path, percent-decoded
    std::map<std::string, std::string> query; // decoded; the first of repeated keys
    std::map<std::string, std::string> headers; // names in lower case; the first of repeated names
    std::string body;
    std::vector<std::string> matches; // the route's regex groups: [0] the path, [1] the first group, ...

    // The header's value, or "" when absent (name in any case).
    std::string header(std::string_view name) const;
    bool hasParam(const std::string& key) const { return query.contains(key); }
    std::string param(const std::string& key) const;
};

struct HttpResponse {
    int status = 200;
    std::string body;
    std::string contentType = "text/plain";

    void setContent(std::string content, std::string type)
    {
        body = std::move(content);
        contentType = std::move(type);
    }
};

class HttpServer {
public:
    struct Limits {
        std::chrono::milliseconds requestTime { 10'000 }; // the whole request: line, headers and body
        std::chrono::milliseconds writeTime { 10'000 }; // the whole reply
        std::size_t headerBytes = 16 * 1024; // the request line and every header together
        std::size_t bodyBytes = 64 * 1024;
        std::size_t maxConnections = 512; // open at once; more are closed as they are accepted
        int handlerThreads = 8;
    };
    using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;

    explicit HttpServer(Limits limits);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // `pattern` must match the whole decoded path; its groups become HttpRequest::matches.
    void route(std::string method, const std::string& pattern, Handler handler);
    // Fills the body of a refusal (status >= 400) that has none: the server's own (400, 404, 405, 413,
    // 431) and a handler's.
    void onError(std::function<void(HttpResponse&)> fill);

    // Listens on address:port (port 0: any free one); returns the port. Throws std::runtime_error.
    int bind(const std::string& address, int port);
    // Serves until stop(); call from its own thread.
    void serve();
    // Stops accepting and reading, and waits for the handlers that are running.
    void stop();

    // How many connections are open now (for tests and metrics).
    std::size_t openConnections() const;

private:
    class Session;
    struct State;
    void accept();

    std::unique_ptr<State> state_;
};

} // namespace baton::service
