// The data layer against a real PostgreSQL: migrations, round trips through every table,
// transactions, timeouts and reconnection.
#include "connection.hpp"
#include "copy_in.hpp"
#include "errors.hpp"
#include "migrations.hpp"
#include "pg_fixture.hpp"
#include "repositories.hpp"
#include "transaction.hpp"

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

constexpr Statement countTables { "test_count_tables",
    "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'", true };
constexpr Statement countMigrations { "test_count_migrations", "SELECT count(*) FROM schema_migrations",
    true };
constexpr Statement pretendNewerSchema { "test_newer_schema",
    "INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'from_the_future', 'x')" };
constexpr Statement tamperChecksum { "test_tamper",
    "UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1" };
constexpr Statement sleepSeconds { "test_sleep", "SELECT pg_sleep($1)", true };
constexpr Statement backendPid { "test_backend_pid", "SELECT pg_backend_pid()", true };
constexpr Statement countChains { "test_count_chains", "SELECT count(*) FROM chains", true };

// Strings that break naive SQL building; stored verbatim they prove that values are bound.
const std::string injections[] = {
    "'; DROP TABLE chains; --",
    "Robert'); DELETE FROM jobs WHERE ('1'='1",
    "\\'\\\"$1 %s \\x00-free",
    "name with \"quotes\" and ; semicolons",
    "gr\xc3\xbc\xc3\x9f \xe2\x9c\x93 $$ dollar $$",
};

Connection migrated(const std::string& conninfo)
{
    Connection connection(conninfo);
    migrate(connection);
    return connection;
}

// Adds a chain by this name; returns its id.
std::int64_t addChain(Connection& connection, const std::string& name)
{
    Chain chain;
    chain.name = name;
    return ChainRepository(connection).insert(chain);
}

TEST(Migrations, FromEmptyThenIdempotent)
{
    Connection connection(freshDatabase());
    auto before = schemaStatus(connection);
    EXPECT_EQ(before.current, 0);
    EXPECT_EQ(before.pending.size(), knownMigrations().size());

    auto applied = migrate(connection);
    ASSERT_EQ(applied.size(), knownMigrations().size());
    EXPECT_EQ(applied.front(), 1);
    // chains, jobs, checkpoints, events, decisions, models, predictions, tuning, traces, trace_jobs,
    // submissions, handovers, credentials_used + migrations
    EXPECT_EQ(connection.exec(countTables).int64(0, 0), 14);

    EXPECT_TRUE(migrate(connection).empty());
    EXPECT_TRUE(migrate(connection).empty());
    EXPECT_EQ(
        connection.exec(countMigrations).int64(0, 0), static_cast<std::int64_t>(knownMigrations().size()));
    auto after = schemaStatus(connection);
    EXPECT_EQ(after.current, after.latestKnown);
    EXPECT_TRUE(after.pending.empty());
    EXPECT_EQ(after.applied.front().checksum, migrationChecksum(knownMigrations().front().sql));
}

TEST(Migrations, RefusesNewerSchema)
{
    Connection connection = migrated(freshDatabase());
    connection.exec(pretendNewerSchema);
    try {
        migrate(connection);
        FAIL() << "a newer schema must be refused";
    } catch (const DbError& error) {
        EXPECT_NE(std::string(error.what()).find("newer than this program knows"), std::string::npos)
            << error.what();
    }
}

TEST(Migrations, RefusesEditedMigration)
{
    Connection connection = migrated(freshDatabase());
    connection.exec(tamperChecksum);
    EXPECT_THROW(migrate(connection), DbError);
}

TEST(Migrations, FailedMigrationLeavesNothing)
{
    Connection connection = migrated(freshDatabase());
    std::vector<Migration> migrations(knownMigrations().begin(), knownMigrations().end());
    const int next = static_cast<int>(migrations.size()) + 1;
    migrations.push_back({ next, "broken", "CREATE TABLE half_done (x int); SELECT no_such_function();" });
    EXPECT_THROW(migrate(connection, migrations), DbError);
    EXPECT_EQ(schemaStatus(connection).current, next - 1);
    EXPECT_EQ(connection.exec(countTables).int64(0, 0), 14); // half_done was rolled back
    migrations.back().sql = "CREATE TABLE now_fine (x int);";
    EXPECT_EQ(migrate(connection, migrations), std::vector<int> { next });
}

TEST(Migrations, ConcurrentMigratorsApplyOnce)
{
    const std::string conninfo = freshDatabase();
    std::vector<int> appliedA, appliedB;
    std::thread a([&] {
        Connection connection(conninfo);
        appliedA = migrate(connection);
    });
    std::thread b([&] {
        Connection connection(conninfo);
        appliedB = migrate(connection);
    });
    a.join();
    b.join();
    EXPECT_EQ(appliedA.size() + appliedB.size(), knownMigrations().size());
    Connection connection(conninfo);
    EXPECT_EQ(
        connection.exec(countMigrations).int64(0, 0), static_cast<std::int64_t>(knownMigrations().size()));
}

TEST(RoundTrip, ChainsJobsAndInjectionStrings)
{
    Connection connection = migrated(freshDatabase());
    ChainRepository chains(connection);
    JobRepository jobs(connection);
    std::int64_t slurmId = 1000;
    for (const auto& evil : injections) {
        Chain chain;
        chain.name = evil;
        chain.chainDir = "/scratch/" + evil;
        const auto id = chains.insert(chain);
        auto back = chains.get(id);
        ASSERT_TRUE(back);
        EXPECT_EQ(back->name, evil);
        EXPECT_EQ(back->chainDir, chain.chainDir);
        EXPECT_EQ(back->state, "running");
        EXPECT_GT(back->createdAt, 1'600'000'000);
        EXPECT_EQ(chains.findByName(evil)->id, id);

        Job job;
        job.chainId = id;
        job.slurmJobId = ++slurmId;
        job.restartCount = 0;
        job.name = evil;
        job.submitTime = 1'700'000'000;
        job.timeLimitSeconds = 48 * 3600;
        job.nodes = 8;
        job.reason = evil;
        const auto jobId = jobs.insert(job);
        auto jobBack = jobs.get(jobId);
        ASSERT_TRUE(jobBack);
        EXPECT_EQ(jobBack->name, evil);
        EXPECT_EQ(jobBack->reason, evil);
        EXPECT_EQ(jobBack->submitTime, job.submitTime);
        EXPECT_FALSE(jobBack->startTime);
        EXPECT_EQ(jobBack->nodes, 8);
        EXPECT_EQ(jobBack->state, "PENDING");
    }
    EXPECT_EQ(connection.exec(countChains).int64(0, 0), static_cast<std::int64_t>(std::size(injections)));
    EXPECT_FALSE(chains.findByName("' OR '1'='1"));

    auto chain = chains.findByName(injections[0]);
    ASSERT_TRUE(chain);
    EXPECT_TRUE(chains.setState(chain->id, "finished"));
    EXPECT_EQ(chains.get(chain->id)->state, "finished");
    EXPECT_THROW(chains.setState(chain->id, "bogus"), DbError); // CHECK constraint
    Chain duplicate;
    duplicate.name = injections[0];
    try {
        chains.insert(duplicate);
        FAIL() << "chain names are unique";
    } catch (const DbError& error) {
        EXPECT_EQ(error.sqlState(), "23505");
    }

    // A successor job, then Slurm's report of the start and end.
    Job successor;
    successor.chainId = chain->id;
    successor.slurmJobId = 5000;
    successor.restartCount = 1;
    jobs.insert(successor);
    successor.submitTime = 1'700'000'100;
    successor.startTime = 1'700'000'200;
    successor.endTime = 1'700'172'800;
    successor.state = "TIMEOUT";
    EXPECT_TRUE(jobs.update(successor));
    auto all = jobs.forChain(chain->id);
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[1].slurmJobId, 5000);
    EXPECT_EQ(all[1].endTime, 1'700'172'800);
    EXPECT_EQ(all[1].state, "TIMEOUT");
    EXPECT_EQ(jobs.findBySlurmId(5000)->restartCount, 1);
    Job unknown;
    unknown.slurmJobId = 424242;
    EXPECT_FALSE(jobs.update(unknown));
}

TEST(RoundTrip, CheckpointsAndTuning)
{
    Connection connection = migrated(freshDatabase());
    const auto chainId = addChain(connection, "resnet");

    CheckpointRepository checkpoints(connection);
    Checkpoint checkpoint;
    checkpoint.chainId = chainId;
    checkpoint.slurmJobId = 77;
    checkpoint.iteration = 1200;
    checkpoint.epoch = 3;
    checkpoint.path = "/chains/resnet/ckpt-000000001200";
    checkpoint.totalBytes = 123456789;
    checkpoint.snapshotSeconds = 0.25;
    checkpoint.persistSeconds = 1.5;
    checkpoint.createdAt = 1'700'000'000;
    checkpoint.manifest = { { "format_version", 1 }, { "iteration", 1200 },
        { "regions", nlohmann::json::array() }, { "note", "'; DROP TABLE checkpoints; --" } };
    const auto id = checkpoints.insert(checkpoint);
    EXPECT_EQ(checkpoints.insert(checkpoint), id); // reported twice, stored once
    auto back = checkpoints.get(id);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->iteration, 1200);
    EXPECT_EQ(back->path, checkpoint.path);
    EXPECT_EQ(back->totalBytes, 123456789);
    EXPECT_EQ(back->snapshotSeconds, 0.25);
    EXPECT_EQ(back->createdAt, 1'700'000'000);
    EXPECT_EQ(back->manifest, checkpoint.manifest);
    checkpoint.iteration = 2400;
    checkpoint.snapshotSeconds.reset();
    const auto second = checkpoints.insert(checkpoint);
    EXPECT_NE(second, id);
    EXPECT_EQ(checkpoints.latest(chainId)->iteration, 2400);
    EXPECT_FALSE(checkpoints.latest(chainId)->snapshotSeconds);

    TuningRepository tuning(connection);
    EXPECT_FALSE(tuning.get(chainId));
    Tuning state { chainId, "gpu-snapshot", 50, 0.2, 0.05, 2.0, 3.5 };
    tuning.upsert(state);
    auto tuned = tuning.get(chainId);
    ASSERT_TRUE(tuned);
    EXPECT_EQ(tuned->profile, "gpu-snapshot");
    EXPECT_EQ(tuned->intervalK, 50);
    EXPECT_EQ(tuned->overheadPercent, 3.5);
    state.intervalK = 80;
    state.iterationSeconds.reset();
    tuning.upsert(state);
    EXPECT_EQ(tuning.get(chainId)->intervalK, 80);
    EXPECT_FALSE(tuning.get(chainId)->iterationSeconds);
}

TEST(RoundTrip, EventsAreDeduplicated)
{
    Connection connection = migrated(freshDatabase());
    EventRepository events(connection);
    Event event;
    event.idempotencyKey = "job-77-start-'1";
    event.kind = "job_start";
    event.chainName = "'; DROP TABLE events; --";
    event.slurmJobId = 77;
    event.payload = { { "version", 1 }, { "kind", "job_start" }, { "deadline", 1'700'172'800 } };
    EXPECT_TRUE(events.insert(event));
    EXPECT_FALSE(events.insert(event)); // delivered twice
    event.payload["deadline"] = 0;
    EXPECT_FALSE(events.insert(event)); // same key, different body: the first one stays
    auto back = events.findByKey("job-77-start-'1");
    ASSERT_TRUE(back);
    EXPECT_EQ(back->chainName, "'; DROP TABLE events; --");
    EXPECT_EQ(back->payload["deadline"], 1'700'172'800);
    EXPECT_FALSE(events.findByKey("missing"));
}

TEST(RoundTrip, DecisionsModelsPredictions)
{
    Connection connection = migrated(freshDatabase());
    const auto chainId = addChain(connection, "bert");

    DecisionRepository decisions(connection);
    Decision decision { 0, chainId, 1'700'000'000, "predict", "wait",
        { { "remaining_s", 3600 }, { "q90_wait_s", 1200 } }, std::nullopt };
    const auto decisionId = decisions.insert(decision);
    decision.decidedAt += 60;
    decision.action = "submit";
    decision.outcome = "submitted job 78";
    decisions.insert(decision);
    auto first = decisions.get(decisionId);
    ASSERT_TRUE(first);
    EXPECT_EQ(first->inputs["q90_wait_s"], 1200);
    EXPECT_FALSE(first->outcome);
    auto all = decisions.forChain(chainId);
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[1].action, "submit");
    EXPECT_EQ(all[1].outcome, "submitted job 78");
    decision.action = "explode";
    EXPECT_THROW(decisions.insert(decision), DbError);

    ModelRepository models(connection);
    Model model { 0, "wait-q90", 1, "xgboost", "/var/lib/baton/models/wait-q90-1.json", 0,
        { { "max_depth", 6 }, { "quantile", 0.9 } }, { { "mae_s", 812.5 }, { "pinball", 0.12 } } };
    const auto modelId = models.insert(model);
    model.version = 2;
    model.metrics["mae_s"] = 700.0;
    models.insert(model);
    auto v1 = models.get(modelId);
    ASSERT_TRUE(v1);
    EXPECT_EQ(v1->metrics["mae_s"], 812.5);
    EXPECT_EQ(v1->params["quantile"], 0.9);
    EXPECT_GT(v1->trainedAt, 1'600'000'000);
    EXPECT_EQ(models.latest("wait-q90")->version, 2);
    EXPECT_FALSE(models.latest("nope"));

    PredictionRepository predictions(connection);
    Prediction prediction { 0, chainId, 78, modelId, 1'700'000'060, 0.9, 1234.5, std::nullopt };
    const auto predictionId = predictions.insert(prediction);
    EXPECT_FALSE(predictions.get(predictionId)->actualWaitSeconds);
    EXPECT_TRUE(predictions.setActual(predictionId, 1500.25));
    auto back = predictions.get(predictionId);
    EXPECT_EQ(back->predictedWaitSeconds, 1234.5);
    EXPECT_EQ(back->actualWaitSeconds, 1500.25);
    EXPECT_EQ(back->quantile, 0.9);
    EXPECT_EQ(back->modelId, modelId);
    EXPECT_EQ(back->predictedAt, 1'700'000'060);
}

TEST(Transactions, RollBackUnlessCommitted)
{
    Connection connection = migrated(freshDatabase());
    ChainRepository chains(connection);
    {
        Transaction transaction(connection);
        Chain chain;
        chain.name = "rolled-back";
        chains.insert(chain);
        EXPECT_TRUE(connection.inTransaction());
    }
    EXPECT_FALSE(connection.inTransaction());
    EXPECT_FALSE(chains.findByName("rolled-back"));
    {
        Transaction transaction(connection);
        Chain chain;
        chain.name = "kept";
        chains.insert(chain);
        transaction.commit();
    }
    EXPECT_TRUE(chains.findByName("kept"));
    // An error inside a transaction: everything in it is gone, and the session is usable again.
    try {
        Transaction transaction(connection);
        Chain chain;
        chain.name = "lost";
        chains.insert(chain);
        chains.insert(chain); // unique violation
        transaction.commit();
    } catch (const DbError&) { }
    EXPECT_FALSE(chains.findByName("lost"));
    EXPECT_TRUE(chains.findByName("kept"));
}

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
