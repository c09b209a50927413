// A real HTTP server on a free loopback port that answers POSTs to one path with a fixed status and
// keeps their bodies and Authorization headers: the stand-in for batond's event endpoint. Needs cpp-httplib.
#pragma once

#include <httplib.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace baton::test {

class HttpSink {
public:
    struct Received {
        std::string target; // as on the request line
        std::string authorization; // empty when absent
        std::string body;
    };

    // `basePath` is part of url(); requests go to basePath + path.
    HttpSink(const std::string& basePath, const std::string& path, int status)
        : basePath_(basePath)
    {
        server_.Post(
            basePath + path, [this, status](const httplib::Request& request, httplib::Response& response) {
                std::lock_guard lock(mutex_);
                bodies_.push_back(request.body);
                received_.push_back(
                    { request.target, request.get_header_value("Authorization"), request.body });
                response.status = status;
            });
        port_ = server_.bind_to_any_port("127.0.0.1");
        thread_ = std::thread([this] { server_.listen_after_bind(); });
        while (!server_.is_running())
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ~HttpSink()
    {
        server_.stop();
        thread_.join();
    }
    HttpSink(const HttpSink&) = delete;
    HttpSink& operator=(const HttpSink&) = delete;

    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + basePath_; }
    std::vector<std::string> bodies()
    {
        std::lock_guard lock(mutex_);
        return bodies_;
    }
    std::vector<Received> received()
    {
        std::lock_guard lock(mutex_);
        return received_;
    }

private:
    std::string basePath_;
    httplib::Server server_;
    int port_ = 0;
    std::thread thread_;
    std::mutex mutex_;
    std::vector<std::string> bodies_;
    std::vector<Received> received_;
};

} // namespace baton::test
