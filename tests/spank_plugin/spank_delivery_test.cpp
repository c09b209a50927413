// Delivery of the plugin's events: posted to batond, signed with munge as root, spooled when batond
// does not answer.
#include "spank_core_support.hpp"

#include "common/munge_credential.hpp"
#include "spank_plugin/chain_files.hpp"
#include "spank_plugin/credentials.hpp"
#include "spank_plugin/event.hpp"
#include "spank_plugin/http_client.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <sstream>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <thread>

namespace {

using namespace baton::spank;
using namespace baton::spank::test;

std::size_t jsonLinesIn(const fs::path& path)
{
    std::istringstream lines(readText(path));
    std::size_t count = 0;
    for (std::string line; std::getline(lines, line);) {
        count += nlohmann::json::accept(line) ? 1 : 0;
    }
    return count;
}

bool mungeAnswers()
{
    try {
        baton::munge::decode(baton::munge::encode("probe"));
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

TEST(Delivery, PostsWhenBatondAnswersAndSpoolsWhenNot)
{
    if (!mungeAnswers()) {
        GTEST_SKIP() << "munged is not running";
    }
    TempDir temp;
    const UniqueFd dir = openDir(temp.path());
    const nlohmann::json event
        = { { "version", 2 }, { "kind", "step_start" }, { "idempotency_key", "1.0.n.0.step_start" } };
    const auto timeout = std::chrono::seconds(5);
    auto deadline = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(5); };
    {
        EventServer server;
        const auto url = parseHttpUrl(server.url());
        const SignedEvent signedEvent = signEvent(event, url, deadline());
        EXPECT_EQ(signedEvent.signError, "");
        const auto posted = deliverEvent(signedEvent, url, dir.get(), timeout, timeout);
        EXPECT_EQ(posted.how, Delivery::Posted) << posted.postError;
        const auto received = server.received();
        ASSERT_EQ(received.size(), 1u);
        EXPECT_EQ(nlohmann::json::parse(received[0].body), event);
        EXPECT_EQ(received[0].target, "/base/v1/events");
        // The header is a credential of this process (root in slurmstepd) bound to this very request.
        const std::string scheme(baton::munge::authorizationScheme);
        ASSERT_EQ(received[0].authorization.rfind(scheme, 0), 0u) << received[0].authorization;
        const auto identity = baton::munge::decode(received[0].authorization.substr(scheme.size()));
        EXPECT_EQ(identity.uid, ::getuid());
        EXPECT_EQ(identity.gid, ::getgid());
        if (::getuid() == 0) {
            EXPECT_EQ(identity.uid, 0u);
        }
        EXPECT_EQ(
            identity.payload, baton::munge::requestPayload("POST", "/base/v1/events", received[0].body));
    }
    EXPECT_FALSE(fs::exists(temp.path() / ".baton-spool"));
    SilentListener absent;
    const std::string url = absent.url();
    absent.close();
    const auto spooled = deliverEvent(signEvent(event, parseHttpUrl(url), deadline()), parseHttpUrl(url),
        dir.get(), std::chrono::seconds(1), std::chrono::seconds(1));
    EXPECT_EQ(spooled.how, Delivery::Spooled);
    EXPECT_THAT(spooled.postError, HasSubstr("connect"));
    const auto noUrl = deliverEvent(signEvent(event, std::nullopt, deadline()), std::nullopt, dir.get(),
        std::chrono::seconds(1), timeout);
    EXPECT_EQ(noUrl.how, Delivery::Spooled);
    // The spool stays plain JSON lines: no credential is stored.
    EXPECT_EQ(
        readText(temp.path() / ".baton-spool" / "events.jsonl"), event.dump() + "\n" + event.dump() + "\n");
}

// Every slurmstepd callback that reports signs as root: user_init runs with the job user's effective
// ids and saved uid 0 (as after slurmstepd's seteuid), the task callbacks and exit as root. A thread
// that cannot become root signs nothing (batond would refuse the user's credential) and the event is
// spooled.
TEST(Delivery, EventsAreSignedAsRootInEveryCallbackContext)
{
    if (::geteuid() != 0) {
        GTEST_SKIP() << "switching users needs root";
    }
    if (!mungeAnswers()) {
        GTEST_SKIP() << "munged is not running";
    }
    const auto url = parseHttpUrl("http://127.0.0.1:1/base");
    const nlohmann::json event = { { "version", 2 }, { "kind", "step_start" } };
    const auto deadline = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(5); };
    const auto signerOf = [&](const SignedEvent& signedEvent) {
        const std::string scheme(baton::munge::authorizationScheme);
        EXPECT_EQ(signedEvent.signError, "");
        EXPECT_EQ(signedEvent.authorization.rfind(scheme, 0), 0u) << signedEvent.authorization;
        const auto identity = baton::munge::decode(signedEvent.authorization.substr(scheme.size()));
        EXPECT_EQ(
            identity.payload, baton::munge::requestPayload("POST", "/base/v1/events", signedEvent.body));
        return identity.uid;
    };
    // task_exit and exit: slurmstepd is root.
    EXPECT_EQ(signerOf(signEventAsRoot(event, url, deadline())), 0u);
    // user_init: the job user's effective ids on this thread, saved uid 0.
    {
        ThreadCredentials asNobody(nobodyUid, nobodyGid, { nobodyGid });
        ASSERT_EQ(::geteuid(), nobodyUid);
        EXPECT_EQ(signerOf(signEvent(event, url, deadline())), nobodyUid) << "what the old report signed";
        EXPECT_EQ(signerOf(signEventAsRoot(event, url, deadline())), 0u);
        // Back to the job user's ids afterwards, for the spool.
        EXPECT_EQ(::geteuid(), nobodyUid);
        EXPECT_EQ(::getegid(), nobodyGid);
        EXPECT_EQ(::getgroups(0, nullptr), 1);
    }
    EXPECT_EQ(::geteuid(), 0u);
    // A thread that dropped root for good cannot sign as root: nothing is signed.
    std::thread([&] {
        ASSERT_EQ(::syscall(SYS_setresuid, nobodyUid, nobodyUid, nobodyUid), 0);
        const SignedEvent refused = signEventAsRoot(event, url, deadline());
        EXPECT_EQ(refused.authorization, "");
        EXPECT_THAT(refused.signError, HasSubstr("not signed as root"));
        EXPECT_EQ(refused.body, event.dump());
    }).join();
    EXPECT_EQ(::geteuid(), 0u);
}

// The circuit breaker of one slurmstepd: once batond did not answer, the next reports spool at once
// instead of each waiting for the whole timeout, until the breaker's time is up; an HTTP answer (even
// an error status) closes it again.
TEST(Delivery, BreakerSpoolsAtOnceAfterBatondWasUnreachable)
{
    TempDir temp;
    const UniqueFd dir = openDir(temp.path());
    SignedEvent event;
    event.body = "{\"kind\":\"task_exit\"}";
    event.authorization = "MUNGE x";
    // A silent batond is given 500 ms; a server that answers gets time even under valgrind.
    const auto timeout = std::chrono::milliseconds(500);
    const auto answerTimeout = std::chrono::seconds(10);
    DeliveryBreaker breaker(std::chrono::milliseconds(2000));
    SilentListener silent;
    const auto url = parseHttpUrl(silent.url());
    const auto timed = [&](const std::optional<HttpUrl>& to, std::chrono::milliseconds postTimeout) {
        const auto start = std::chrono::steady_clock::now();
        const auto result = deliverEvent(event, to, dir.get(), postTimeout, answerTimeout, &breaker);
        return std::pair(result, std::chrono::steady_clock::now() - start);
    };
    const auto [first, firstTook] = timed(url, timeout);
    EXPECT_EQ(first.how, Delivery::Spooled);
    EXPECT_THAT(first.postError, HasSubstr("timed out"));
    EXPECT_GE(firstTook, timeout);
    for (int i = 0; i < 5; ++i) {
        const auto [later, laterTook] = timed(url, timeout);
        EXPECT_EQ(later.how, Delivery::Spooled);
        EXPECT_THAT(later.postError, HasSubstr("not tried"));
        EXPECT_LT(laterTook, timeout / 2);
    }
    // After the breaker's time, batond is tried again; it answers now.
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));
    {
        EventServer server(500);
        const auto [answered, took] = timed(parseHttpUrl(server.url()), answerTimeout);
        EXPECT_EQ(answered.how, Delivery::Spooled);
        EXPECT_THAT(answered.postError, HasSubstr("HTTP status 500"));
        EXPECT_FALSE(breaker.open(std::chrono::steady_clock::now()));
    }
    {
        EventServer server;
        EXPECT_EQ(timed(parseHttpUrl(server.url()), answerTimeout).first.how, Delivery::Posted);
        EXPECT_EQ(server.received().size(), 1u);
    }
    EXPECT_EQ(jsonLinesIn(temp.path() / ".baton-spool" / "events.jsonl"), 7u);
}

TEST(Delivery, UnsignedEventsAreSpooledNotPosted)
{
    TempDir temp;
    const UniqueFd dir = openDir(temp.path());
    const nlohmann::json event = { { "version", 2 }, { "kind", "step_start" } };
    EventServer server;
    const auto url = parseHttpUrl(server.url());
    const SignedEvent unsigned_ = signEvent(event, url,
        std::chrono::steady_clock::now() + std::chrono::seconds(5), (temp.path() / "no-munged").string());
    EXPECT_EQ(unsigned_.authorization, "");
    EXPECT_THAT(unsigned_.signError, HasSubstr("munge"));
    const auto result
        = deliverEvent(unsigned_, url, dir.get(), std::chrono::seconds(5), std::chrono::seconds(5));
    EXPECT_EQ(result.how, Delivery::Spooled);
    EXPECT_THAT(result.postError, HasSubstr("not signed"));
    EXPECT_TRUE(server.received().empty());
    EXPECT_EQ(readText(temp.path() / ".baton-spool" / "events.jsonl"), event.dump() + "\n");
}

TEST(Delivery, SigningWaitsForMungedOnlyUntilTheDeadline)
{
    // A socket that accepts connections and never answers: libmunge would wait about 10 s.
    TempDir temp;
    const fs::path socketPath = temp.path() / "silent.socket";
    UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address {};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, socketPath.c_str(), sizeof address.sun_path - 1);
    ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(::listen(listener.get(), 16), 0);
    const auto url = parseHttpUrl("http://127.0.0.1:1");
    const auto start = std::chrono::steady_clock::now();
    const auto first
        = signEvent({ { "n", 1 } }, url, start + std::chrono::milliseconds(300), socketPath.string());
    EXPECT_THAT(first.signError, HasSubstr("did not answer in time"));
    // While that request is still pending, the next report does not start another one.
    const auto second = signEvent({ { "n", 2 } }, url, start + std::chrono::seconds(5), socketPath.string());
    EXPECT_THAT(second.signError, HasSubstr("earlier request"));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
    EXPECT_EQ(second.body, "{\"n\":2}");
}

} // namespace
