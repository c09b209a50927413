// The data layer against a real PostgreSQL when calls take too long or the server goes away: statement
// and client deadlines, a server that stops reading or answering, reconnection with backoff.
#include "db/connection.hpp"
#include "db/copy_in.hpp"
#include "db/errors.hpp"
#include "db/transaction.hpp"
#include "pg_fixture.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/types.h>

#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

namespace {

using namespace baton::db;
using baton::test::freshDatabase;

constexpr Statement sleepSeconds { "test_sleep", "SELECT pg_sleep($1)", true };
constexpr Statement backendPid { "test_backend_pid", "SELECT pg_backend_pid()", true };

TEST(Timeouts, StatementTimeoutOnTheServer)
{
    ConnectionOptions options;
    options.statementTimeout = std::chrono::milliseconds(300);
    Connection connection(freshDatabase(), options);
    const auto started = std::chrono::steady_clock::now();
    EXPECT_THROW(connection.exec(sleepSeconds, Params(10)), DbTimeout);
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
    EXPECT_GT(connection.exec(backendPid).int64(0, 0), 0); // still usable
}

// The service's queries take milliseconds; JIT would compile one for 100-200 ms whenever the planner's
// estimate passes its threshold.
TEST(Timeouts, SessionsRunWithoutJit)
{
    Connection connection(freshDatabase());
    EXPECT_EQ(connection.exec(Statement { "test_jit", "SELECT current_setting('jit')" }).text(0, 0), "off");
}

TEST(Timeouts, ClientDeadlineCancelsTheCall)
{
    ConnectionOptions options;
    options.statementTimeout = std::chrono::milliseconds(60'000);
    options.callTimeout = std::chrono::milliseconds(400);
    Connection connection(freshDatabase(), options);
    const auto started = std::chrono::steady_clock::now();
    EXPECT_THROW(connection.exec(sleepSeconds, Params(10)), DbTimeout);
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(6));
    EXPECT_GT(connection.exec(backendPid).int64(0, 0), 0);
}

// A PostgreSQL process stopped with SIGSTOP for as long as the object lives: it keeps its sockets
// open and reads nothing, like a server that hangs or a network that stops forwarding.
class Stopped {
public:
    explicit Stopped(std::vector<pid_t> pids)
        : pids_(std::move(pids))
    {
        for (pid_t pid : pids_)
            EXPECT_EQ(::kill(pid, SIGSTOP), 0) << pid;
    }
    ~Stopped() { resume(); }
    void resume()
    {
        for (pid_t pid : pids_)
            ::kill(pid, SIGCONT);
        pids_.clear();
    }

private:
    std::vector<pid_t> pids_;
};

pid_t parentOf(pid_t pid)
{
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    // "pid (comm) state ppid ...": comm may hold spaces, so read after its closing parenthesis.
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    char state;
    pid_t parent = 0;
    rest >> state >> parent;
    return parent;
}

// Runs `body` on another thread; fails the test (and returns false) if it does not return within
// `limit`. `unstick` is called before waiting for it further, so that a hung call can end.
template<typename Body>
bool endsWithin(std::chrono::seconds limit, Body body, const std::function<void()>& unstick)
{
    auto done = std::async(std::launch::async, body);
    if (done.wait_for(limit) == std::future_status::ready) {
        done.get();
        return true;
    }
    ADD_FAILURE() << "still blocked after " << limit.count() << " s";
    unstick();
    done.get();
    return false;
}

constexpr Statement countSink { "test_count_sink", "SELECT count(*) FROM sink", true };

// The server stops reading in the middle of a COPY: sending times out at the call deadline, and the
// teardown (ending the COPY, rolling back) must not wait on the dead socket without a deadline.
TEST(Timeouts, CopyToAServerThatStopsReadingEndsWithinTheCallTimeout)
{
    const std::string database = freshDatabase();
    Connection(database).execScript("CREATE TABLE sink (n bigint, pad text)");
    ConnectionOptions options;
    options.callTimeout = std::chrono::milliseconds(1000);
    options.reconnectFor = std::chrono::milliseconds(10'000);
    Connection connection(database, options);
    const auto backend = static_cast<pid_t>(connection.exec(backendPid).int64(0, 0));
    std::optional<Stopped> stopped;
    std::chrono::steady_clock::duration took {}, total {};
    endsWithin(
        std::chrono::seconds(30),
        [&] {
            std::chrono::steady_clock::time_point started;
            {
                Transaction transaction(connection);
                CopyIn copy(connection, "COPY sink (n, pad) FROM STDIN WITH (FORMAT binary)");
                stopped.emplace(std::vector<pid_t> { backend });
                started = std::chrono::steady_clock::now();
                const std::string pad(1000, 'x');
                try {
                    for (std::int64_t n = 0; n < 100'000'000; ++n) {
                        copy.beginRow(2);
                        copy.int64(n);
                        copy.text(pad);
                    }
                    ADD_FAILURE() << "10^8 rows went into a stopped server";
                } catch (const DbTimeout&) {
                    took = std::chrono::steady_clock::now() - started;
                }
                // ~CopyIn and ~Transaction run here: they too must end without the server.
            }
            total = std::chrono::steady_clock::now() - started;
        },
        [&] { stopped->resume(); });
    EXPECT_GE(took, std::chrono::milliseconds(900));
    EXPECT_LT(total, std::chrono::milliseconds(2500)) << "the teardown waited on the stopped server";
    stopped->resume();
    // The session was given up; the next call reconnects, and nothing of the COPY was kept.
    EXPECT_EQ(connection.exec(countSink).int64(0, 0), 0);
    EXPECT_NE(connection.exec(backendPid).int64(0, 0), backend);
}

// The whole server stops (postmaster and backend): the cancel request that follows a missed
// deadline cannot be answered either, and must not block the caller past its grace.
TEST(Timeouts, CancelToAStoppedServerEndsWithinItsGrace)
{
    ConnectionOptions options;
    options.callTimeout = std::chrono::milliseconds(500);
    options.reconnectFor = std::chrono::milliseconds(10'000);
    Connection connection(freshDatabase(), options);
    const auto backend = static_cast<pid_t>(connection.exec(backendPid).int64(0, 0));
    const pid_t postmaster = parentOf(backend);
    ASSERT_GT(postmaster, 1);
    std::optional<Stopped> stopped;
    std::chrono::steady_clock::duration took {};
    endsWithin(
        std::chrono::seconds(30),
        [&] {
            stopped.emplace(std::vector<pid_t> { backend, postmaster });
            const auto started = std::chrono::steady_clock::now();
            EXPECT_THROW(connection.exec(sleepSeconds, Params(0)), DbTimeout);
            took = std::chrono::steady_clock::now() - started;
        },
        [&] { stopped->resume(); });
    EXPECT_LT(took, std::chrono::milliseconds(2500));
    stopped->resume();
    EXPECT_GT(connection.exec(backendPid).int64(0, 0), 0); // usable again
}

TEST(Connect, UnreachableServerGivesUpAfterBackoff)
{
    ConnectionOptions options;
    options.reconnectFor = std::chrono::milliseconds(1500);
    baton::test::TempDir nowhere;
    const auto started = std::chrono::steady_clock::now();
    try {
        Connection connection("host=" + nowhere.path().string() + " dbname=postgres user=postgres", options);
        FAIL() << "nothing listens there";
    } catch (const ConnectionLost& error) {
        EXPECT_NE(std::string(error.what()).find("attempts"), std::string::npos) << error.what();
    }
    const auto took = std::chrono::steady_clock::now() - started;
    EXPECT_GE(took, std::chrono::milliseconds(700)); // it did retry
    EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(Connect, ReconnectsAfterServerRestart)
{
    baton::test::PostgresServer server; // its own server: this test stops it
    Connection connection(server.conninfo());
    const auto pidBefore = connection.exec(backendPid).int64(0, 0);

    const auto script = (baton::test::sourceRoot() / "deploy" / "local" / "pg.sh").string();
    auto stopped = baton::test::run({ "bash", script, "stop", server.dir().string() });
    ASSERT_EQ(stopped.exitCode, 0) << stopped.output;
    // Bring the server back while the connection is retrying with backoff.
    std::thread restart([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        baton::test::run({ "bash", script, "start", server.dir().string() });
    });
    std::int64_t pidAfter = 0;
    EXPECT_NO_THROW(
        pidAfter = connection.exec(backendPid).int64(0, 0)); // retryable: re-sent on a new session
    restart.join();
    EXPECT_GT(pidAfter, 0);
    EXPECT_NE(pidAfter, pidBefore);

    // Inside a transaction nothing is retried: the transaction is void, and says so, until it ends.
    {
        Transaction transaction(connection);
        connection.exec(backendPid);
        ASSERT_EQ(baton::test::run({ "bash", script, "stop", server.dir().string() }).exitCode, 0);
        ASSERT_EQ(baton::test::run({ "bash", script, "start", server.dir().string() }).exitCode, 0);
        EXPECT_THROW(connection.exec(backendPid), ConnectionLost);
        EXPECT_THROW(connection.exec(backendPid), ConnectionLost);
        EXPECT_THROW(transaction.commit(), ConnectionLost);
    }
    EXPECT_FALSE(connection.inTransaction());
    EXPECT_GT(connection.exec(backendPid).int64(0, 0), 0);
}

} // namespace
