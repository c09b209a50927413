// The plugin's HTTP client against a real server, a silent one, a closed port and a silent name server.
#include "spank_core_support.hpp"

#include "spank_plugin/http_client.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>

namespace {

using namespace baton::spank;
using namespace baton::spank::test;

TEST(HttpUrl, ParsesHostsPortsAndPaths)
{
    const auto plain = parseHttpUrl("http://head");
    EXPECT_EQ(plain.host, "head");
    EXPECT_EQ(plain.port, "80");
    EXPECT_EQ(plain.basePath, "");
    const auto full = parseHttpUrl("http://10.0.0.1:8760/baton/");
    EXPECT_EQ(full.host, "10.0.0.1");
    EXPECT_EQ(full.port, "8760");
    EXPECT_EQ(full.basePath, "/baton");
    const auto v6 = parseHttpUrl("http://[::1]:99");
    EXPECT_EQ(v6.host, "::1");
    EXPECT_EQ(v6.port, "99");
    for (const char* bad : { "https://h", "http://", "http://h:", "http://h:0", "http://h:70000",
             "http://h:x", "http://[::1", "http://u@h" }) {
        EXPECT_THROW(parseHttpUrl(bad), std::invalid_argument) << bad;
    }
}

TEST(HttpClient, PostsToARealServer)
{
    EventServer server;
    const auto result
        = postJson(parseHttpUrl(server.url()), "/v1/events", "{\"x\":1}", std::chrono::seconds(5));
    EXPECT_TRUE(result.ok) << result.error;
    EXPECT_EQ(result.status, 204);
    EXPECT_EQ(server.bodies(), std::vector<std::string> { "{\"x\":1}" });
}

TEST(HttpClient, ErrorStatusIsAFailure)
{
    EventServer server(500);
    const auto result = postJson(parseHttpUrl(server.url()), "/v1/events", "{}", std::chrono::seconds(5));
    EXPECT_FALSE(result.ok);
    EXPECT_EQ(result.status, 500);
    EXPECT_THAT(result.error, HasSubstr("500"));
}

TEST(HttpClient, SilentServerTimesOut)
{
    SilentListener listener;
    const auto start = std::chrono::steady_clock::now();
    const auto result
        = postJson(parseHttpUrl(listener.url()), "/v1/events", "{}", std::chrono::milliseconds(300));
    const auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_FALSE(result.ok);
    EXPECT_THAT(result.error, HasSubstr("timed out"));
    EXPECT_GE(elapsed, std::chrono::milliseconds(250));
    EXPECT_LT(elapsed, std::chrono::seconds(2));
}

TEST(HttpClient, ClosedPortFailsFast)
{
    SilentListener listener;
    const std::string url = listener.url();
    listener.close();
    const auto result = postJson(parseHttpUrl(url), "/v1/events", "{}", std::chrono::seconds(5));
    EXPECT_FALSE(result.ok);
    EXPECT_THAT(result.error, HasSubstr("connect"));
}

// In a forked child with private mount and network namespaces: /etc/resolv.conf names a UDP socket
// on 127.0.0.1:53 that never answers, and postJson must give up on the name at its deadline.
// Returns 0 when it did, 77 when this machine does not allow the namespaces, else a failure code.
int postThroughSilentNameServer(const fs::path& resolvConf)
{
    if (::unshare(CLONE_NEWNS | CLONE_NEWNET) != 0) {
        // Not root: a user namespace maps this user to root inside.
        const std::string uid = std::to_string(::getuid()), gid = std::to_string(::getgid());
        if (::unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET) != 0) {
            std::perror("unshare");
            return 77;
        }
        writeText("/proc/self/setgroups", "deny");
        writeText("/proc/self/uid_map", "0 " + uid + " 1");
        writeText("/proc/self/gid_map", "0 " + gid + " 1");
    }
    // The file system type is ignored for these two; "none" rather than NULL keeps valgrind quiet.
    if (::mount("none", "/", "none", MS_REC | MS_PRIVATE, nullptr) != 0
        || ::mount(resolvConf.c_str(), "/etc/resolv.conf", "none", MS_BIND, nullptr) != 0) {
        std::perror("mount");
        return 77;
    }
    // Loopback up, and an address that is not loopback, so that AI_ADDRCONFIG still asks for IPv4.
    const UniqueFd control(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq lo {};
    std::strcpy(lo.ifr_name, "lo");
    lo.ifr_flags = IFF_UP | IFF_LOOPBACK | IFF_RUNNING;
    ifreq alias {};
    std::strcpy(alias.ifr_name, "lo:1");
    auto* address = reinterpret_cast<sockaddr_in*>(&alias.ifr_addr);
    address->sin_family = AF_INET;
    address->sin_addr.s_addr = htonl(0xC0000201); // 192.0.2.1, a documentation address
    if (::ioctl(control.get(), SIOCSIFFLAGS, &lo) != 0 || ::ioctl(control.get(), SIOCSIFADDR, &alias) != 0) {
        std::perror("ioctl");
        return 77;
    }
    const UniqueFd nameServer(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in dns {};
    dns.sin_family = AF_INET;
    dns.sin_port = htons(53);
    dns.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(nameServer.get(), reinterpret_cast<sockaddr*>(&dns), sizeof dns) != 0) {
        std::perror("bind 127.0.0.1:53");
        return 77;
    }

    const auto start = std::chrono::steady_clock::now();
    const auto result = postJson(parseHttpUrl("http://batond.baton-test.example:8760"), "/v1/events", "{}",
        std::chrono::milliseconds(300));
    const auto elapsed = std::chrono::steady_clock::now() - start;
    char query[512];
    const bool asked = ::recv(nameServer.get(), query, sizeof query, MSG_DONTWAIT) > 0;
    if (result.ok || result.error.find("timed out") == std::string::npos) {
        std::fprintf(stderr, "expected a resolution time-out, got: %s\n", result.error.c_str());
        return 1;
    }
    if (elapsed > std::chrono::seconds(2)) {
        std::fprintf(stderr, "gave up only after %lld ms\n",
            static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()));
        return 2;
    }
    if (!asked) {
        std::fprintf(stderr, "the silent name server was never asked\n");
        return 3;
    }
    return 0;
}

TEST(HttpClient, SilentNameServerTimesOut)
{
    TempDir temp;
    writeText(temp.path() / "resolv.conf", "nameserver 127.0.0.1\noptions timeout:5 attempts:2\n");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        std::_Exit(postThroughSilentNameServer(temp.path() / "resolv.conf"));
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        GTEST_SKIP() << "this machine allows no private mount and network namespaces";
    }
    EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's message above";
}

TEST(HttpClient, NamesAndAddressesResolve)
{
    EventServer server;
    std::string url = server.url();
    url.replace(url.find("127.0.0.1"), 9, "localhost");
    const auto byName = postJson(parseHttpUrl(url), "/v1/events", "{}", std::chrono::seconds(5));
    EXPECT_TRUE(byName.ok) << byName.error;
    const auto unknown = postJson(
        parseHttpUrl("http://no-such-host.invalid:8760"), "/v1/events", "{}", std::chrono::seconds(5));
    EXPECT_FALSE(unknown.ok);
    EXPECT_THAT(unknown.error, HasSubstr("cannot resolve 'no-such-host.invalid'"));
}

} // namespace
