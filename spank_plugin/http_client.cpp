#include "http_client.hpp"

#include "unique_fd.hpp"

#include <cerrno>
#include <cstring>
#include <memory>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdexcept>
#include <sys/socket.h>

namespace baton::spank {

namespace {

using Clock = std::chrono::steady_clock;

// Rounded up: poll() waits whole milliseconds, and a wait rounded down would end before the deadline.
int remainingMs(Clock::time_point deadline)
{
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left > 0 ? static_cast<int>(left) : 0;
}

// Waits until fd is ready for `events` or the deadline passes.
bool waitFor(int fd, short events, Clock::time_point deadline)
{
    for (;;) {
        pollfd entry { fd, events, 0 };
        const int rc = ::poll(&entry, 1, remainingMs(deadline));
        if (rc > 0) {
            return true;
        }
        if (rc == 0 || errno != EINTR) {
            return false;
        }
    }
}

UniqueFd connectTo(const addrinfo& address, Clock::time_point deadline, std::string& error)
{
    UniqueFd fd(
        ::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, address.ai_protocol));
    if (!fd.valid()) {
        error = std::string("socket: ") + std::strerror(errno);
        return {};
    }
    if (::connect(fd.get(), address.ai_addr, address.ai_addrlen) == 0) {
        return fd;
    }
    if (errno != EINPROGRESS) {
        error = std::string("connect: ") + std::strerror(errno);
        return {};
    }
    if (!waitFor(fd.get(), POLLOUT, deadline)) {
        error = "connect: timed out";
        return {};
    }
    int soError = 0;
    socklen_t length = sizeof soError;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soError, &length) != 0 || soError != 0) {
        error = std::string("connect: ") + std::strerror(soError != 0 ? soError : errno);
        return {};
    }
    return fd;
}

bool sendAll(int fd, std::string_view data, Clock::time_point deadline, std::string& error)
{
    while (!data.empty()) {
        const ssize_t sent = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
        if (sent > 0) {
            data.remove_prefix(static_cast<std::size_t>(sent));
            continue;
        }
        if (sent < 0 && errno == EINTR) {
            continue;
        }
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!waitFor(fd, POLLOUT, deadline)) {
                error = "send: timed out";
                return false;
            }
            continue;
        }
        error = std::string("send: ") + std::strerror(errno);
        return false;
    }
    return true;
}

// Reads until the status line is complete and returns its status code, or 0.
int receiveStatus(int fd, Clock::time_point deadline, std::string& error)
{
    std::string head;
    char buffer[1024];
    while (head.find("\r\n") == std::string::npos && head.size() < 8192) {
        const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
        if (got > 0) {
            head.append(buffer, static_cast<std::size_t>(got));
            continue;
        }
        if (got == 0) {
            break;
        }
        if (errno == EINTR) {
            continue;
        }
        if ((errno == EAGAIN || errno == EWOULDBLOCK) && waitFor(fd, POLLIN, deadline)) {
            continue;
        }
        error = errno == EAGAIN || errno == EWOULDBLOCK ? "recv: timed out"
                                                        : std::string("recv: ") + std::strerror(errno);
        return 0;
    }
    // "HTTP/1.1 204 No Content"
    if (head.rfind("HTTP/1.", 0) != 0 || head.size() < 12 || head[8] != ' ') {
        error = "malformed HTTP response";
        return 0;
    }
    int status = 0;
    for (std::size_t i = 9; i < 12; ++i) {
        if (head[i] < '0' || head[i] > '9') {
            error = "malformed HTTP status";
            return 0;
        }
        status = status * 10 + (head[i] - '0');
    }
    return status;
}

struct AddrInfoDeleter {
    void operator()(addrinfo* info) const { ::freeaddrinfo(info); }
};

struct Resolution {
    std::unique_ptr<addrinfo, AddrInfoDeleter> addresses; // null on failure
    std::string error;
};

// Resolves the URL's host before the deadline. An address needs no lookup. A name is looked up with
// getaddrinfo_a, on glibc's own thread, so that a silent DNS server cannot hold slurmstepd past the
// deadline (plain getaddrinfo waits for the resolver's own timeouts, 10 s and more).
Resolution resolve(const HttpUrl& url, Clock::time_point deadline)
{
    Resolution out;
    addrinfo hints {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG | AI_NUMERICHOST;
    addrinfo* found = nullptr;
    int rc = ::getaddrinfo(url.host.c_str(), url.port.c_str(), &hints, &found);
    if (rc == 0) {
        out.addresses.reset(found);
        return out;
    }
    if (rc != EAI_NONAME) {
        out.error = std::string("cannot resolve '") + url.host + "': " + ::gai_strerror(rc);
        return out;
    }

    // glibc keeps pointers into the request until the lookup ends, so it lives on the heap.
    struct Request {
        gaicb block {};
        addrinfo hints {};
        std::string host, port;
    };
    auto request = std::make_unique<Request>();
    request->hints = hints;
    request->hints.ai_flags &= ~AI_NUMERICHOST;
    request->host = url.host;
    request->port = url.port;
    request->block.ar_name = request->host.c_str();
    request->block.ar_service = request->port.c_str();
    request->block.ar_request = &request->hints;
    gaicb* list[] = { &request->block };
    sigevent noSignal {};
    noSignal.sigev_notify = SIGEV_NONE;
    rc = ::getaddrinfo_a(GAI_NOWAIT, list, 1, &noSignal);
    if (rc != 0) {
        out.error = std::string("cannot resolve '") + url.host + "': " + ::gai_strerror(rc);
        return out;
    }
    for (rc = ::gai_error(&request->block); rc == EAI_INPROGRESS; rc = ::gai_error(&request->block)) {
        const int leftMs = remainingMs(deadline);
        if (leftMs == 0) {
            break;
        }
        const timespec wait { leftMs / 1000, static_cast<long>(leftMs % 1000) * 1000000L };
        ::gai_suspend(list, 1, &wait); // returns early on completion or a signal; the loop re-checks
    }
    if (rc == EAI_INPROGRESS) {
        if (::gai_cancel(&request->block) == EAI_NOTCANCELED) {
            // The lookup is running and will still write into the request: leave it to glibc (a few
            // bytes, once per timed-out lookup) rather than free it underneath.
            static_cast<void>(request.release());
        } else {
            ::freeaddrinfo(request->block.ar_result);
        }
        out.error = "cannot resolve '" + url.host + "': timed out";
        return out;
    }
    if (rc != 0) {
        out.error = std::string("cannot resolve '") + url.host + "': " + ::gai_strerror(rc);
        return out;
    }
    out.addresses.reset(request->block.ar_result);
    return out;
}

} // namespace

HttpUrl parseHttpUrl(std::string_view url)
{
    const std::string_view scheme = "http://";
    if (url.substr(0, scheme.size()) != scheme) {
        throw std::invalid_argument("URL '" + std::string(url) + "' must start with http://");
    }
    std::string_view rest = url.substr(scheme.size());
    const std::size_t slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    HttpUrl parsed;
    if (slash != std::string_view::npos) {
        parsed.basePath = rest.substr(slash);
        while (!parsed.basePath.empty() && parsed.basePath.back() == '/') {
            parsed.basePath.pop_back();
        }
    }
    std::string_view port;
    if (!authority.empty() && authority.front() == '[') {
        const std::size_t close = authority.find(']');
        if (close == std::string_view::npos) {
            throw std::invalid_argument("URL '" + std::string(url) + "' has an unterminated IPv6 address");
        }
        parsed.host = authority.substr(1, close - 1);
        const std::string_view after = authority.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':') {
                throw std::invalid_argument("URL '" + std::string(url) + "' is malformed");
            }
            port = after.substr(1);
        }
    } else {
        const std::size_t colon = authority.find(':');
        parsed.host = authority.substr(0, colon);
        if (colon != std::string_view::npos) {
            port = authority.substr(colon + 1);
        }
    }
    if (parsed.host.empty() || parsed.host.find_first_of("@ \t\r\n") != std::string::npos) {
        throw std::invalid_argument("URL '" + std::string(url) + "' has no valid host");
    }
    if (port.empty() && authority.find(':') == std::string_view::npos) {
        port = "80";
    }
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos
        || std::stoi(std::string(port)) < 1 || std::stoi(std::string(port)) > 65535) {
        throw std::invalid_argument("URL '" + std::string(url) + "' has an invalid port");
    }
    parsed.port = port;
    if (parsed.basePath.find_first_of(" \t\r\n") != std::string::npos) {
        throw std::invalid_argument("URL '" + std::string(url) + "' has an invalid path");
    }
    return parsed;
}

std::string requestTarget(const HttpUrl& url, std::string_view path)
{
    return url.basePath + std::string(path);
}

HttpResult postJson(const HttpUrl& url, std::string_view path, std::string_view body,
    std::chrono::milliseconds timeout, const HttpHeaders& headers) noexcept
{
    HttpResult result;
    try {
        // A line break would let a value inject headers or a second request.
        for (const auto& [name, value] : headers) {
            if (name.empty() || name.find_first_of(":\r\n \t") != std::string::npos
                || value.find_first_of("\r\n") != std::string::npos) {
                result.error = "invalid HTTP header '" + name + "'";
                return result;
            }
        }
        const auto deadline = Clock::now() + timeout;
        auto resolved = resolve(url, deadline);
        if (!resolved.addresses) {
            result.error = std::move(resolved.error);
            return result;
        }
        const addrinfo* found = resolved.addresses.get();
        UniqueFd fd;
        for (const addrinfo* address = found; address && !fd.valid(); address = address->ai_next) {
            fd = connectTo(*address, deadline, result.error);
        }
        if (!fd.valid()) {
            return result;
        }
        const bool v6 = url.host.find(':') != std::string::npos;
        std::string request = "POST " + requestTarget(url, path) + " HTTP/1.1\r\n";
        request += "Host: " + (v6 ? "[" + url.host + "]" : url.host) + ":" + url.port + "\r\n";
        request += "Content-Type: application/json\r\n";
        request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
        for (const auto& [name, value] : headers) {
            request += name + ": " + value + "\r\n";
        }
        request += "Connection: close\r\n\r\n";
        request += body;
        if (!sendAll(fd.get(), request, deadline, result.error)) {
            return result;
        }
        result.status = receiveStatus(fd.get(), deadline, result.error);
        result.ok = result.status >= 200 && result.status < 300;
        if (result.status != 0 && !result.ok) {
            result.error = "HTTP status " + std::to_string(result.status);
        }
    } catch (const std::exception& e) {
        result.error = e.what();
    }
    return result;
}

} // namespace baton::spank
