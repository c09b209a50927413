// Helpers of the plugin's unit tests (the sources of spank_core_test): files, error messages, modes,
// manifests, and HTTP servers that answer or stay silent.
#pragma once

#include "spank_plugin/unique_fd.hpp"

#include "tests/support/http_sink.hpp"
#include "tests/support/process.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <netinet/in.h>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>

namespace baton::spank::test {

// What every source of spank_core_test uses (each has `using namespace baton::spank::test`).
using baton::test::TempDir;
using testing::HasSubstr;
namespace fs = std::filesystem;

inline std::string readText(const std::filesystem::path& path)
{
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

inline void writeText(const std::filesystem::path& path, const std::string& text)
{
    std::ofstream(path) << text;
}

inline std::string messageOf(const std::function<void()>& body)
{
    try {
        body();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "no error";
}

inline mode_t modeOf(const std::filesystem::path& path)
{
    struct stat info { };
    EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
    return info.st_mode & 07777;
}

inline uid_t ownerOf(const std::filesystem::path& path)
{
    struct stat info { };
    EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
    return info.st_uid;
}

inline UniqueFd openDir(const std::filesystem::path& path)
{
    return UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

inline constexpr uid_t nobodyUid = 65534;
inline constexpr gid_t nobodyGid = 65534;

inline std::string manifest(long long iteration, int version = 1)
{
    return nlohmann::json {
        { "format_version", version }, { "iteration", iteration }, { "epoch", 1 },
        { "created_unix", 1700000000.5 }, { "total_bytes", iteration * 10 },
        { "regions", nlohmann::json::array() }, { "blobs", nlohmann::json::array() }, { "sampler", nullptr },
        { "tuning", { { "interval", 7 }, { "overhead_percent", 4.5 } } },
        { "timings", { { "snapshot_seconds", 0.1 }, { "persist_seconds", 0.2 } } }
    }.dump();
}

// A real HTTP server on a free loopback port, recording what it receives.
// batond's event endpoint below a base path.
class EventServer : public baton::test::HttpSink {
public:
    explicit EventServer(int status = 204)
        : HttpSink("/base", "/v1/events", status)
    { }
};

// A listening socket that never accepts: connect succeeds, no answer ever comes.
class SilentListener {
public:
    SilentListener()
        : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0))
    {
        sockaddr_in address {};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t length = sizeof address;
        EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&address), length), 0);
        EXPECT_EQ(::listen(fd_.get(), 4), 0);
        EXPECT_EQ(::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
        port_ = ntohs(address.sin_port);
    }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    void close() { fd_.reset(); }

private:
    UniqueFd fd_;
    int port_ = 0;
};


} // namespace baton::spank::test
