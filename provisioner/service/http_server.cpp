#include "http_server.hpp"

#include "log.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <stdexcept>

namespace baton::service {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

std::string lowerCase(std::string_view text)
{
    std::string lower(text);
    std::transform(lower.begin(), lower.end(), lower.begin(),
        [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return lower;
}

int hexValue(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

// %XX decoding (and '+' as a blank in a query); a malformed escape is a bad request, not a guess.
std::string percentDecoded(std::string_view text, bool plusIsBlank)
{
    std::string decoded;
    decoded.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '%') {
            const int high = i + 2 < text.size() ? hexValue(text[i + 1]) : -1;
            const int low = i + 2 < text.size() ? hexValue(text[i + 2]) : -1;
            if (high < 0 || low < 0)
                throw std::invalid_argument("malformed percent escape in the request target");
            decoded += static_cast<char>(high * 16 + low);
            i += 2;
        } else if (text[i] == '+' && plusIsBlank) {
            decoded += ' ';
        } else {
            decoded += text[i];
        }
    }
    return decoded;
}

// Boost's string_view (1.74) does not convert to the standard one.
std::string_view standard(beast::string_view text)
{
    return { text.data(), text.size() };
}

// Reads a request straight into an HttpRequest. Beast's own message type caps each header's value at
// 64 KiB and throws beyond it; a MUNGE credential carries the body and can be longer. The byte bounds
// are the parser's own: header_limit and body_limit.
class RequestParser : public http::basic_parser<true> {
public:
    HttpRequest request;

private:
    void on_request_impl(http::verb, beast::string_view method, beast::string_view target, int,
        beast::error_code&) override
    {
        request.method = std::string(standard(method));
        request.target = std::string(standard(target));
    }
    void on_response_impl(int, beast::string_view, int, beast::error_code& error) override
    {
        error = http::error::bad_version; // never called for a request parser
    }
    void on_field_impl(
        http::field, beast::string_view name, beast::string_view value, beast::error_code&) override
    {
        request.headers.emplace(lowerCase(standard(name)), std::string(standard(value)));
    }
    void on_header_impl(beast::error_code&) override { }
    void on_body_init_impl(const boost::optional<std::uint64_t>& length, beast::error_code&) override
    {
        if (length)
            request.body.reserve(static_cast<std::size_t>(*length)); // at most body_limit, checked before
    }
    std::size_t on_body_impl(beast::string_view body, beast::error_code&) override
    {
        request.body.append(body.data(), body.size());
        return body.size();
    }
    void on_chunk_header_impl(std::uint64_t, beast::string_view, beast::error_code&) override { }
    std::size_t on_chunk_body_impl(std::uint64_t, beast::string_view body, beast::error_code&) override
    {
        request.body.append(body.data(), body.size());
        return body.size();
    }
    void on_finish_impl(beast::error_code&) override { }
};

// Splits the target into its decoded path and query; throws std::invalid_argument for a bad escape.
void decodeTarget(HttpRequest& request)
{
    const std::string_view target = request.target;
    const std::size_t question = target.find('?');
    request.path = percentDecoded(target.substr(0, question), false);
    if (question == std::string_view::npos)
        return;
    std::string_view query = target.substr(question + 1);
    while (!query.empty()) {
        const std::size_t amp = query.find('&');
        const std::string_view pair = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
        if (pair.empty())
            continue;
        const std::size_t equals = pair.find('=');
        request.query.emplace(percentDecoded(pair.substr(0, equals), true),
            equals == std::string_view::npos ? std::string() : percentDecoded(pair.substr(equals + 1), true));
    }
}

struct Route {
    std::string method;
    std::regex pattern;
    HttpServer::Handler handler;
};

} // namespace

std::string HttpRequest::header(std::string_view name) const
{
    const auto found = headers.find(lowerCase(name));
    return found == headers.end() ? std::string() : found->second;
}

std::string HttpRequest::param(const std::string& key) const
{
    const auto found = query.find(key);
    return found == query.end() ? std::string() : found->second;
}

// Declared in the order that makes destruction safe: the handler pool goes first (its queued work holds
// sessions, whose sockets need the I/O context), then the acceptor, then the I/O context.
struct HttpServer::State {
    explicit State(Limits given)
        : limits(given)
        , handlers(static_cast<std::size_t>(std::max(1, given.handlerThreads)))
    { }

    // Runs the route of a complete request (on a handler thread).
    HttpResponse dispatch(HttpRequest request) const;
    void fillRefusal(HttpResponse& response) const
    {
        if (response.status >= 400 && response.body.empty() && fillError)
            fillError(response);
    }

    Limits limits;
    std::vector<Route> routes;
    std::function<void(HttpResponse&)> fillError;
    std::atomic<std::size_t> open { 0 };
    std::atomic<bool> stopped { false };
    asio::io_context io { 1 };
    tcp::acceptor acceptor { io };
    asio::steady_timer acceptPause { io };
    asio::thread_pool handlers;
};

HttpResponse HttpServer::State::dispatch(HttpRequest request) const
{
    HttpResponse response;
    bool pathKnown = false;
    for (const Route& route : routes) {
        std::smatch match;
        if (!std::regex_match(request.path, match, route.pattern))
            continue;
        pathKnown = true;
        if (route.method != request.method)
            continue;
        request.matches.assign(match.begin(), match.end());
        try {
            route.handler(request, response);
        } catch (const std::exception& error) {
            logError("request " + request.method + " " + request.path + ": " + error.what());
            response = HttpResponse { 500, "", "text/plain" };
        }
        fillRefusal(response);
        return response;
    }
    response.status = pathKnown ? 405 : 404;
    fillRefusal(response);
    return response;
}

// One connection: read one request within the limits, have it handled, answer, close.
class HttpServer::Session : public std::enable_shared_from_this<Session> {
public:
    Session(State& state, tcp::socket socket)
        : state_(state)
        , stream_(std::move(socket))
    {
        ++state_.open;
    }
    ~Session() { --state_.open; }

    void start()
    {
        parser_.header_limit(static_cast<std::uint32_t>(state_.limits.headerBytes));
        parser_.body_limit(state_.limits.bodyBytes);
        // One deadline for the whole request, not one per read: a client that trickles a byte at a time
        // is cut off when it passes, however often it sends.
        stream_.expires_after(state_.limits.requestTime);
        http::async_read(stream_, buffer_, parser_,
            [self = shared_from_this()](beast::error_code error, std::size_t) { self->onRead(error); });
    }

private:
    void onRead(beast::error_code error)
    {
        if (error == http::error::body_limit)
            return refuse(413);
        if (error == http::error::header_limit)
            return refuse(431);
        if (error.category() == beast::http::make_error_code(http::error::bad_version).category())
            return refuse(400); // not HTTP as the parser knows it
        if (error)
            return; // timed out, reset or closed early: nobody to answer
        stream_.expires_never(); // the handler's own calls are bounded by their own timeouts
        HttpRequest request = std::move(parser_.request);
        try {
            decodeTarget(request);
        } catch (const std::invalid_argument&) {
            return refuse(400);
        }
        asio::post(state_.handlers, [self = shared_from_this(), request = std::move(request)]() mutable {
            HttpResponse response;
            try {
                response = self->state_.dispatch(std::move(request));
            } catch (...) { // a refusal's filler that threw: still an answer, and the pool thread lives
                response = HttpResponse { 500, "internal error\n", "text/plain" };
            }
            asio::post(self->stream_.get_executor(),
                [self, response = std::move(response)]() mutable { self->answer(std::move(response)); });
        });
    }

    void refuse(int status)
    {
        HttpResponse response;
        response.status = status;
        state_.fillRefusal(response);
        answer(std::move(response));
    }

    void answer(HttpResponse response)
    {
        reply_.version(11);
        reply_.result(static_cast<unsigned>(response.status));
        reply_.set(http::field::content_type, response.contentType);
        reply_.keep_alive(false); // one request per connection: the clients send one each anyway
        reply_.body() = std::move(response.body);
        reply_.prepare_payload();
        stream_.expires_after(state_.limits.writeTime);
        http::async_write(stream_, reply_, [self = shared_from_this()](beast::error_code error, std::size_t) {
            if (!error)
                self->lingerUntilClosed();
        });
    }

    // Closes our side and reads what the client still sends (the rest of a refused body) until it closes
    // too, for a moment at most: closing with unread data would reset the connection and could destroy
    // the reply before the client has read it.
    void lingerUntilClosed()
    {
        beast::error_code ignored;
        stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
        stream_.expires_after(std::chrono::seconds(2));
        drain();
    }

    void drain()
    {
        stream_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](beast::error_code error, std::size_t) {
            if (!error)
                self->drain();
        });
    }

    State& state_;
    beast::tcp_stream stream_;
    beast::flat_buffer buffer_;
    RequestParser parser_;
    http::response<http::string_body> reply_;
    std::array<char, 4096> discard_ {};
};

HttpServer::HttpServer(Limits limits)
    : state_(std::make_unique<State>(limits))
{ }

HttpServer::~HttpServer()
{
    stop();
}

void HttpServer::route(std::string method, const std::string& pattern, Handler handler)
{
    state_->routes.push_back(Route { std::move(method), std::regex(pattern), std::move(handler) });
}

void HttpServer::onError(std::function<void(HttpResponse&)> fill)
{
    state_->fillError = std::move(fill);
}

int HttpServer::bind(const std::string& address, int port)
{
    try {
        tcp::resolver resolver(state_->io);
        const auto endpoints = resolver.resolve(address, std::to_string(port),
            tcp::resolver::passive | tcp::resolver::numeric_service);
        const tcp::endpoint endpoint = *endpoints.begin();
        state_->acceptor.open(endpoint.protocol());
        state_->acceptor.set_option(asio::socket_base::reuse_address(true));
        state_->acceptor.bind(endpoint);
        state_->acceptor.listen(asio::socket_base::max_listen_connections);
        return state_->acceptor.local_endpoint().port();
    } catch (const boost::system::system_error& error) {
        throw std::runtime_error("cannot listen on " + address + ":" + std::to_string(port) + ": " + error.what());
    }
}

void HttpServer::accept()
{
    state_->acceptor.async_accept(asio::make_strand(state_->io), [this](beast::error_code error, tcp::socket socket) {
        if (state_->stopped || error == asio::error::operation_aborted)
            return;
        if (error) {
            // Out of descriptors, most likely: pause rather than spin, and let open connections finish.
            logWarning(std::string("accepting a connection: ") + error.message());
            state_->acceptPause.expires_after(std::chrono::milliseconds(100));
            state_->acceptPause.async_wait([this](beast::error_code waited) {
                if (!waited)
                    accept();
            });
            return;
        }
        if (state_->open >= state_->limits.maxConnections) {
            beast::error_code ignored;
            socket.close(ignored); // at capacity: the client retries, as it would after a reset
        } else {
            std::make_shared<Session>(*state_, std::move(socket))->start();
        }
        accept();
    });
}

void HttpServer::serve()
{
    accept();
    // An exception out of a completion handler ends that connection, not the server: run() may be
    // called again after one propagates.
    for (;;) {
        try {
            state_->io.run();
            return;
        } catch (const std::exception& error) {
            logError(std::string("HTTP server: ") + error.what());
        }
    }
}

void HttpServer::stop()
{
    if (state_->stopped.exchange(true))
        return;
    asio::post(state_->io, [this] {
        beast::error_code ignored;
        state_->acceptor.close(ignored);
        state_->acceptPause.cancel();
    });
    state_->handlers.join(); // the handlers already queued or running finish
    state_->io.stop();
}

std::size_t HttpServer::openConnections() const
{
    return state_->open;
}

} // namespace baton::service
