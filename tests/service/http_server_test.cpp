// batond's HTTP server alone: routing, and the bounds it puts on a request before any handler (and so
// any authentication) sees it: one deadline for the whole request, header and body bytes, open
// connections; slow clients hold connections, never the handler threads.
#include "service/http_server.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

using baton::service::HttpRequest;
using baton::service::HttpResponse;
using baton::service::HttpServer;
using namespace std::chrono_literals;

namespace {

// A connected client socket with a receive timeout, closed on destruction.
class Client {
public:
    explicit Client(int port)
        : fd_(::socket(AF_INET, SOCK_STREAM, 0))
    {
        sockaddr_in address {};
        address.sin_family = AF_INET;
        address.sin_port = htons(static_cast<std::uint16_t>(port));
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
            throw std::runtime_error("cannot connect");
        const timeval timeout { 10, 0 };
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    }
    ~Client() { ::close(fd_); }
    Client(const Client&) = delete;

    // False once the server has closed the connection (or reset it).
    bool send(const std::string& text)
    {
        return ::send(fd_, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
    }
    // Everything the server sends until it closes (or the receive timeout passes).
    std::string readAll()
    {
        std::string received;
        char chunk[4096];
        for (;;) {
            const ssize_t got = ::recv(fd_, chunk, sizeof chunk, 0);
            if (got <= 0)
                return received;
            received.append(chunk, static_cast<std::size_t>(got));
        }
    }
    // True when the server has closed its side: a read returns end of file at once.
    bool closedByServer()
    {
        char byte;
        const ssize_t got = ::recv(fd_, &byte, 1, MSG_DONTWAIT);
        return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    }

private:
    int fd_;
};

std::string statusLine(const std::string& reply)
{
    return reply.substr(0, reply.find("\r\n"));
}

std::string bodyOf(const std::string& reply)
{
    const auto end = reply.find("\r\n\r\n");
    return end == std::string::npos ? std::string() : reply.substr(end + 4);
}

std::string roundTrip(int port, const std::string& request)
{
    Client client(port);
    client.send(request);
    return client.readAll();
}

// A server on a free port, serving from its own thread, stopped on destruction.
class RunningServer {
public:
    explicit RunningServer(HttpServer::Limits limits)
        : server(limits)
    {
        server.route("GET", "/hello/([a-z ]+)", [](const HttpRequest& request, HttpResponse& response) {
            response.setContent(request.matches[1] + "|" + request.param("q") + "|" + request.header("x-Tag"),
                "text/plain");
        });
        server.route("POST", "/echo", [](const HttpRequest& request, HttpResponse& response) {
            response.setContent(request.body, "application/octet-stream");
        });
        server.route("GET", "/throw", [](const HttpRequest&, HttpResponse&) { throw std::runtime_error("boom"); });
        server.route("GET", "/slow", [this](const HttpRequest&, HttpResponse& response) {
            slowStarted = true;
            std::this_thread::sleep_for(500ms);
            slowFinished = true;
            response.setContent("done", "text/plain");
        });
        server.onError([](HttpResponse& response) {
            response.setContent("refused " + std::to_string(response.status), "text/plain");
        });
        port = server.bind("127.0.0.1", 0);
        thread = std::thread([this] { server.serve(); });
    }
    ~RunningServer()
    {
        server.stop();
        thread.join();
    }

    HttpServer server;
    int port = 0;
    std::thread thread;
    std::atomic<bool> slowStarted { false }, slowFinished { false };
};

HttpServer::Limits smallLimits()
{
    HttpServer::Limits limits;
    limits.requestTime = 1000ms;
    limits.headerBytes = 4096;
    limits.bodyBytes = 1024;
    limits.maxConnections = 64;
    limits.handlerThreads = 1;
    return limits;
}

} // namespace

TEST(HttpServer, RoutesDecodeTheTargetAndFillRefusals)
{
    RunningServer running(smallLimits());
    const std::string hello = roundTrip(running.port,
        "GET /hello/two%20words?q=a+b%26c&q=second HTTP/1.1\r\nHost: x\r\nX-TAG: t1\r\n\r\n");
    EXPECT_EQ(statusLine(hello), "HTTP/1.1 200 OK");
    EXPECT_EQ(bodyOf(hello), "two words|a b&c|t1");
    EXPECT_NE(hello.find("Connection: close"), std::string::npos) << hello;

    const std::string echo
        = roundTrip(running.port, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
    EXPECT_EQ(bodyOf(echo), "hello");

    EXPECT_EQ(bodyOf(roundTrip(running.port, "GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")), "refused 404");
    EXPECT_EQ(bodyOf(roundTrip(running.port, "POST /hello/x HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")),
        "refused 405");
    EXPECT_EQ(bodyOf(roundTrip(running.port, "GET /hello/%zz HTTP/1.1\r\nHost: x\r\n\r\n")), "refused 400");
    EXPECT_EQ(bodyOf(roundTrip(running.port, "NOT HTTP AT ALL\r\n\r\n")), "refused 400");
    // A handler that throws is a 500 whose body says nothing of what it threw.
    const std::string thrown = roundTrip(running.port, "GET /throw HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(statusLine(thrown), "HTTP/1.1 500 Internal Server Error");
    EXPECT_EQ(bodyOf(thrown), "refused 500");
}

TEST(HttpServer, RefusesOversizedHeadersAndBodiesBeforeAnyHandler)
{
    RunningServer running(smallLimits());
    // One long header, and many short ones: both count against the same byte bound.
    const std::string longHeader = "GET /hello/x HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(8192, 'a') + "\r\n\r\n";
    EXPECT_EQ(statusLine(roundTrip(running.port, longHeader)), "HTTP/1.1 431 Request Header Fields Too Large");
    std::string manyHeaders = "GET /hello/x HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 2000; ++i)
        manyHeaders += "X-" + std::to_string(i) + ": v\r\n";
    EXPECT_EQ(statusLine(roundTrip(running.port, manyHeaders + "\r\n")), "HTTP/1.1 431 Request Header Fields Too Large");

    // A body over the limit is refused from its Content-Length; the reply still reaches a client that
    // goes on sending the body it announced.
    Client client(running.port);
    client.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n");
    client.send(std::string(100000, 'b'));
    const std::string refused = client.readAll();
    EXPECT_EQ(statusLine(refused), "HTTP/1.1 413 Payload Too Large") << refused.substr(0, 200);
    EXPECT_EQ(bodyOf(refused), "refused 413");
}

// A MUNGE credential carries the body: one header longer than 64 KiB (where Beast's own message type
// throws) is a request like any other when the limit allows it.
TEST(HttpServer, TakesAHeaderLongerThan64KiBWithinItsLimit)
{
    HttpServer::Limits limits = smallLimits();
    limits.headerBytes = 200 * 1024;
    RunningServer running(limits);
    const std::string tag(150 * 1024, 't');
    const std::string reply
        = roundTrip(running.port, "GET /hello/x HTTP/1.1\r\nHost: x\r\nX-Tag: " + tag + "\r\n\r\n");
    EXPECT_EQ(statusLine(reply), "HTTP/1.1 200 OK");
    EXPECT_EQ(bodyOf(reply), "x||" + tag);
    EXPECT_EQ(bodyOf(roundTrip(running.port, "GET /hello/after HTTP/1.1\r\nHost: x\r\n\r\n")), "after||");
}

// The whole request has one deadline: a client that trickles a byte at a time, each well within any
// per-read timeout, is cut off when it passes; and however many do so, a complete request is handled at
// once by the one handler thread, which none of them holds.
TEST(HttpServer, SlowClientsHoldNeitherHandlersNorConnectionsPastTheDeadline)
{
    RunningServer running(smallLimits());
    std::vector<std::unique_ptr<Client>> slow;
    for (int i = 0; i < 20; ++i) {
        slow.push_back(std::make_unique<Client>(running.port));
        slow.back()->send("GET /hello/x HTTP/1.1\r\n");
    }
    const auto started = std::chrono::steady_clock::now();
    const std::string answered = roundTrip(running.port, "GET /hello/quick HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(bodyOf(answered), "quick||");
    // Answered while every slow client was still connected (their deadline had not passed yet).
    if (std::chrono::steady_clock::now() - started < 900ms) {
        EXPECT_GE(running.server.openConnections(), 20U);
    }

    // They keep trickling, a header byte every 100 ms, for 5 s; the server must close each of them.
    std::vector<bool> closed(slow.size(), false);
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < until) {
        bool all = true;
        for (std::size_t i = 0; i < slow.size(); ++i) {
            if (!closed[i])
                closed[i] = !slow[i]->send("X") || slow[i]->closedByServer();
            all = all && closed[i];
        }
        if (all)
            break;
        std::this_thread::sleep_for(100ms);
    }
    for (std::size_t i = 0; i < slow.size(); ++i)
        EXPECT_TRUE(closed[i]) << "slow client " << i << " still connected 5 s after a 1 s request deadline";
    EXPECT_GE(std::chrono::steady_clock::now() - started, 900ms); // not before the deadline either
}

TEST(HttpServer, ClosesConnectionsBeyondTheCapAndAcceptsAgainBelowIt)
{
    HttpServer::Limits limits = smallLimits();
    limits.maxConnections = 4;
    limits.requestTime = 10'000ms;
    RunningServer running(limits);
    std::vector<std::unique_ptr<Client>> idle;
    for (int i = 0; i < 4; ++i)
        idle.push_back(std::make_unique<Client>(running.port));
    for (int i = 0; i < 50 && running.server.openConnections() < 4; ++i)
        std::this_thread::sleep_for(20ms);
    ASSERT_EQ(running.server.openConnections(), 4U);
    {
        Client over(running.port);
        over.send("GET /hello/x HTTP/1.1\r\nHost: x\r\n\r\n");
        EXPECT_EQ(over.readAll(), "") << "a connection over the cap got an answer";
    }
    idle.clear();
    for (int i = 0; i < 50 && running.server.openConnections() > 0; ++i)
        std::this_thread::sleep_for(20ms);
    EXPECT_EQ(bodyOf(roundTrip(running.port, "GET /hello/again HTTP/1.1\r\nHost: x\r\n\r\n")), "again||");
}

TEST(HttpServer, StopWaitsForTheHandlersThatAreRunning)
{
    RunningServer running(smallLimits());
    Client client(running.port);
    client.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    for (int i = 0; i < 200 && !running.slowStarted; ++i)
        std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(running.slowStarted);
    running.server.stop();
    // The handler ran to its end before stop() returned, so nothing it uses can go away under it.
    EXPECT_TRUE(running.slowFinished);
}
