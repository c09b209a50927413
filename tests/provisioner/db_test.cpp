// The data layer against a real PostgreSQL: migrations, round trips through the table stores (with
// values that break naive SQL building), transactions and their durability. Timeouts and reconnection
// are in db_timeouts_test.cpp.
#include "db/connection.hpp"
#include "db/errors.hpp"
#include "db/migrations.hpp"
#include "db/model_table.hpp"
#include "db/transaction.hpp"
#include "pg_fixture.hpp"
#include "service/chain_views.hpp"
#include "service/tables.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <thread>
#include <vector>

namespace {

using namespace baton::db;
using namespace baton::service;
using Json = nlohmann::json;
using baton::test::freshDatabase;

constexpr Statement countTables { "test_count_tables",
    "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'", true };
constexpr Statement countMigrations { "test_count_migrations", "SELECT count(*) FROM schema_migrations",
    true };
constexpr Statement pretendNewerSchema { "test_newer_schema",
    "INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'from_the_future', 'x')" };
constexpr Statement tamperChecksum { "test_tamper",
    "UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1" };
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

// Adds a chain by this name (owned by uid 1000); returns its id.
std::int64_t addChain(Connection& connection, const std::string& name)
{
    return ChainStore(connection).create(1000, "alice", name, std::nullopt, Json::object()).id;
}

ClusterJob clusterJob(std::int64_t id, const std::string& state)
{
    ClusterJob job;
    job.id = id;
    job.userId = 1000;
    job.name = "job-" + std::to_string(id);
    job.state = state;
    job.submitTime = 1'700'000'000;
    job.timeLimitSeconds = 48 * 3600;
    return job;
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
    Tables tables(connection);
    std::int64_t slurmId = 1000;
    for (const auto& evil : injections) {
        const Json spec { { "script", evil }, { "sbatch_args", Json::array({ evil }) } };
        const ChainRow created = tables.chains.create(1000, evil, evil, "/scratch/" + evil, spec);
        auto back = tables.chains.find(created.id);
        ASSERT_TRUE(back);
        EXPECT_EQ(back->name, evil);
        EXPECT_EQ(back->ownerName, evil);
        EXPECT_EQ(back->chainDir, "/scratch/" + evil);
        EXPECT_EQ(back->spec, spec);
        EXPECT_EQ(back->state, ChainState::Running);
        EXPECT_GT(back->updatedAt, 1'600'000'000);
        EXPECT_EQ(tables.chains.find(1000, evil)->id, created.id);
        EXPECT_EQ(tables.chains.spec(created.id), spec);
        // Created again: the same chain.
        EXPECT_EQ(tables.chains.create(1000, evil, evil, std::nullopt, Json::object()).id, created.id);

        ClusterJob job = clusterJob(++slurmId, "PENDING");
        job.name = evil;
        EXPECT_TRUE(tables.jobs.upsert(created.id, 0, job).empty());
        const auto owned = tables.jobs.bySlurmId(slurmId);
        ASSERT_TRUE(owned);
        EXPECT_EQ(owned->chainId, created.id);
        EXPECT_EQ(owned->job.submitTime, job.submitTime);
        EXPECT_FALSE(owned->job.startTime);
        EXPECT_EQ(owned->job.state, "PENDING");
    }
    EXPECT_EQ(connection.exec(countChains).int64(0, 0), static_cast<std::int64_t>(std::size(injections)));
    EXPECT_FALSE(tables.chains.find(1000, "' OR '1'='1"));
    EXPECT_EQ(tables.chains.list(1000, std::nullopt).size(), std::size(injections));
    EXPECT_EQ(tables.chains.list(1000, std::nullopt, 0, 2).size(), 2u);
    EXPECT_TRUE(tables.chains.list(1001, std::nullopt).empty());

    // The state machine's compare-and-set: a stale view changes nothing.
    const ChainRow chain = *tables.chains.find(1000, injections[0]);
    EXPECT_TRUE(tables.chains.transition(chain, ChainEvent::Pause, "paused by alice"));
    EXPECT_FALSE(tables.chains.transition(chain, ChainEvent::Pause, "again")); // read before the pause
    const ChainRow paused = *tables.chains.find(chain.id);
    EXPECT_EQ(paused.state, ChainState::Paused);
    EXPECT_EQ(paused.reason, "paused by alice");
    EXPECT_FALSE(tables.chains.transition(paused, ChainEvent::SuccessorStarted)); // not allowed there

    // Its own policy: none (the service's) until it names one; only the policies batond runs.
    EXPECT_FALSE(paused.policy);
    tables.chains.setPolicy(chain.id, "reactive");
    EXPECT_EQ(tables.chains.find(chain.id)->policy, "reactive");
    EXPECT_THROW(tables.chains.setPolicy(chain.id, "' OR '1'='1"), DbError);
    tables.chains.setPolicy(chain.id, std::nullopt);
    EXPECT_FALSE(tables.chains.find(chain.id)->policy);
    EXPECT_EQ(tables.chains.create(1000, "alice", "own-policy", std::nullopt, Json::object(), "avg").policy, "avg");

    // A successor job, then Slurm's report of its start and end.
    ClusterJob successor = clusterJob(5000, "PENDING");
    EXPECT_TRUE(tables.jobs.upsert(chain.id, 1, successor).empty());
    successor.state = "TIMEOUT";
    successor.startTime = 1'700'000'200;
    successor.endTime = 1'700'172'800;
    successor.exitCode = 0;
    EXPECT_TRUE(tables.jobs.upsert(chain.id, 1, successor).empty());
    const auto all = tables.jobs.ofChain(chain.id);
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[1].slurmJobId, 5000);
    EXPECT_EQ(all[1].endTime, 1'700'172'800);
    EXPECT_EQ(all[1].state, "TIMEOUT");
    EXPECT_EQ(all[1].exitCode, 0);
    // A second live job of the same seq is refused, and only it.
    const auto rejected = tables.jobs.upsert(chain.id, 1, clusterJob(5001, "RUNNING"));
    ASSERT_EQ(rejected.size(), 1u);
    EXPECT_EQ(rejected[0].slurmJobId, 5001);
    EXPECT_FALSE(tables.jobs.bySlurmId(5001));
}

TEST(RoundTrip, SubmissionsAndPredictions)
{
    Connection connection = migrated(freshDatabase());
    Tables tables(connection);
    const ChainRow chain = *tables.chains.find(addChain(connection, "resnet"));
    const std::string key = "baton:" + std::to_string(chain.id) + ":1:'; DROP TABLE submissions; --";
    const auto recorded = tables.submissions.recordIntents(
        { IntentRequest { chain.id, ChainState::Running, 1, key, "policy" } });
    ASSERT_EQ(recorded.size(), 1u);
    EXPECT_EQ(recorded.at(chain.id).key, key);
    EXPECT_EQ(recorded.at(chain.id).spec, Json::object());
    EXPECT_EQ(tables.chains.find(chain.id)->state, ChainState::SuccessorPending);
    // The chain is no longer where the request expected it: nothing is written.
    EXPECT_TRUE(tables.submissions
                    .recordIntents({ IntentRequest { chain.id, ChainState::Running, 1, key, "policy" } })
                    .empty());
    EXPECT_FALSE(tables.submissions.recordIntent(chain.id, 1, key, "policy")); // one intent per seq

    tables.submissions.recordSubmitted({ SubmittedJob { key, chain.id, 78, 1234.5 } });
    const auto submitted = tables.submissions.find(chain.id, 1);
    ASSERT_TRUE(submitted);
    EXPECT_EQ(submitted->state, "submitted");
    EXPECT_EQ(submitted->slurmJobId, 78);
    EXPECT_GT(submitted->createdAt, 1'600'000'000);
    EXPECT_EQ(tables.submissions.resolvePrediction(78, 1500.25), 1234.5);
    EXPECT_FALSE(tables.submissions.resolvePrediction(78, 1600.0)); // resolved once

    tables.submissions.markState(chain.id, 1, "failed", "sbatch: error: '; --");
    EXPECT_EQ(tables.submissions.find(chain.id, 1)->error, "sbatch: error: '; --");
}

TEST(RoundTrip, CheckpointsAndHandovers)
{
    Connection connection = migrated(freshDatabase());
    Tables tables(connection);
    const auto chainId = addChain(connection, "resnet");
    Json summary { { "name", "ckpt-000000001200" }, { "iteration", 1200 }, { "total_bytes", 123456789 },
        { "created_unix", 1'700'000'000 }, { "note", "'; DROP TABLE checkpoints; --" } };
    EXPECT_EQ(tables.checkpoints.record(chainId, 77, summary, "/chains/resnet").iteration, 1200);
    tables.checkpoints.record(chainId, 77, summary, "/chains/resnet"); // reported twice: stored once
    auto newest = tables.checkpoints.latest(chainId);
    ASSERT_TRUE(newest);
    EXPECT_EQ(newest->path, "/chains/resnet/ckpt-000000001200");
    EXPECT_EQ(newest->slurmJobId, 77);
    EXPECT_EQ(newest->createdAt, 1'700'000'000);
    EXPECT_FALSE(tables.checkpoints.trainingDone(chainId));
    summary["name"] = "ckpt-000000002400";
    summary["iteration"] = 2400;
    summary["training_done"] = true;
    EXPECT_TRUE(tables.checkpoints.record(chainId, 78, summary, "/chains/resnet").trainingDone);
    EXPECT_EQ(tables.checkpoints.latest(chainId)->iteration, 2400);
    EXPECT_TRUE(tables.checkpoints.trainingDone(chainId));
    // A successor (79) reports its predecessor's final checkpoint as it starts, before the predecessor's
    // own report: the checkpoint stays the predecessor's, as its manifest says.
    summary["name"] = "ckpt-000000003600";
    summary["iteration"] = 3600;
    summary["job_id"] = 78;
    summary["final"] = false;
    EXPECT_EQ(tables.checkpoints.record(chainId, 79, summary, "/chains/resnet").writerJobId, 78);
    summary["final"] = true;
    tables.checkpoints.record(chainId, 78, summary, "/chains/resnet");
    newest = tables.checkpoints.latest(chainId);
    EXPECT_EQ(newest->slurmJobId, 78);
    EXPECT_TRUE(newest->final);
    // A manifest's job_id that is no Slurm job id: the reporter stands in.
    for (const Json& notAJob : { Json(-1), Json(0), Json(1LL << 40), Json("78"), Json(nullptr) }) {
        summary["job_id"] = notAJob;
        EXPECT_EQ(tables.checkpoints.record(chainId, 79, summary, "/chains/resnet").writerJobId, 79) << notAJob;
    }
    // The next job restored it and committed it again with training_done: the newer copy is 80's; the
    // older copy's report, arriving after it, changes nothing but what it adds to the flags.
    summary["job_id"] = 80;
    summary["created_unix"] = 1'700'000'005;
    summary["training_done"] = true;
    tables.checkpoints.record(chainId, 80, summary, "/chains/resnet");
    summary["job_id"] = 78;
    summary["created_unix"] = 1'700'000'000;
    summary["training_done"] = false;
    tables.checkpoints.record(chainId, 78, summary, "/chains/resnet");
    newest = tables.checkpoints.latest(chainId);
    EXPECT_EQ(newest->slurmJobId, 80);
    EXPECT_EQ(newest->createdAt, 1'700'000'005);
    EXPECT_TRUE(newest->final);
    EXPECT_TRUE(newest->trainingDone);
    summary["iteration"] = -1;
    EXPECT_THROW(tables.checkpoints.record(chainId, 78, summary, "/chains/resnet"), std::invalid_argument);

    tables.handovers.start(chainId, 0, 77, 78, 1'700'000'000);
    auto signal = tables.handovers.signal(chainId, 0);
    EXPECT_EQ(signal.signalledAt, 1'700'000'000);
    EXPECT_FALSE(signal.sentAt);
    tables.handovers.recordSignal(chainId, 0, 1'700'000'005);
    signal = tables.handovers.signal(chainId, 0);
    EXPECT_EQ(signal.sentAt, 1'700'000'005);
    EXPECT_EQ(signal.attempts, 1);
    EXPECT_EQ(tables.handovers.complete(chainId, 0, 1'700'000'030), 30.0);
    EXPECT_FALSE(tables.handovers.complete(chainId, 0, 1'700'000'040)); // completed once
}

TEST(RoundTrip, EventsAreDeduplicated)
{
    Connection connection = migrated(freshDatabase());
    EventStore events(connection);
    Json payload { { "version", 1 }, { "kind", "job_start" }, { "deadline", 1'700'172'800 } };
    const std::string chain = "'; DROP TABLE events; --";
    EXPECT_TRUE(events.insert("job-77-start-'1", "job_start", chain, 77, payload, 1000));
    EXPECT_FALSE(events.insert("job-77-start-'1", "job_start", chain, 77, payload, 1000)); // delivered twice
    payload["deadline"] = 0;
    EXPECT_FALSE(events.insert("job-77-start-'1", "job_start", chain, 77, payload, 1000)); // the first stays
    auto pending = events.unprocessed(10);
    ASSERT_EQ(pending.size(), 1u);
    EXPECT_EQ(pending[0].chainName, chain);
    EXPECT_EQ(pending[0].payload["deadline"], 1'700'172'800);
    events.markProcessed({ pending[0].id });
    EXPECT_TRUE(events.unprocessed(10).empty());

    CredentialStore credentials(connection);
    EXPECT_TRUE(credentials.firstUse("MUNGE:'; --"));
    EXPECT_FALSE(credentials.firstUse("MUNGE:'; --"));
}

TEST(RoundTrip, DecisionsAndModels)
{
    Connection connection = migrated(freshDatabase());
    const auto chainId = addChain(connection, "bert");
    DecisionStore decisions(connection);
    decisions.recordMany({ DecisionInput { chainId, "predict", "wait", { { "remaining_s", 3600 } }, "" },
        DecisionInput { chainId, "reactive", "pause", { { "job_id", 78 } }, "job cancelled" } });
    EXPECT_TRUE(decisions.pausedForJob(chainId, 78));
    EXPECT_FALSE(decisions.pausedForJob(chainId, 79));
    EXPECT_THROW(decisions.record(chainId, "predict", "explode", Json::object(), ""), DbError);
    const Json shown = ChainViews(connection, "avg").detail(*ChainStore(connection).find(chainId));
    ASSERT_EQ(shown["decisions"].size(), 2u);
    EXPECT_EQ(shown["decisions"][0]["action"], "pause"); // the newest first
    EXPECT_EQ(shown["decisions"][0]["outcome"], "job cancelled");
    EXPECT_EQ(shown["decisions"][0]["policy"], "reactive"); // each row its own
    EXPECT_EQ(shown["decisions"][1]["policy"], "predict");

    ModelTable models(connection);
    Model model { 0, "wait-q90", 1, "xgboost", "/var/lib/baton/models/wait-q90-1.json", 0,
        { { "max_depth", 6 }, { "quantile", 0.9 } }, { { "mae_s", 812.5 }, { "pinball", 0.12 } } };
    EXPECT_GT(models.insert(model), 0);
    model.version = 2;
    model.metrics["mae_s"] = 700.0;
    models.insert(model);
    const auto latest = models.latest("wait-q90");
    ASSERT_TRUE(latest);
    EXPECT_EQ(latest->version, 2);
    EXPECT_EQ(latest->metrics["mae_s"], 700.0);
    EXPECT_GT(latest->trainedAt, 1'600'000'000);
    EXPECT_FALSE(models.latest("nope"));
}

TEST(Transactions, RollBackUnlessCommitted)
{
    Connection connection = migrated(freshDatabase());
    ChainStore chains(connection);
    {
        Transaction transaction(connection);
        addChain(connection, "rolled-back");
        EXPECT_TRUE(connection.inTransaction());
    }
    EXPECT_FALSE(connection.inTransaction());
    EXPECT_FALSE(chains.find(1000, "rolled-back"));
    {
        Transaction transaction(connection);
        addChain(connection, "kept");
        transaction.commit();
    }
    EXPECT_TRUE(chains.find(1000, "kept"));
    // An error inside a transaction: everything in it is gone, and the session is usable again.
    try {
        Transaction transaction(connection);
        const std::int64_t id = addChain(connection, "lost");
        DecisionStore(connection).record(id, "test", "explode", Json::object(), ""); // CHECK constraint
        transaction.commit();
    } catch (const DbError&) { }
    EXPECT_FALSE(chains.find(1000, "lost"));
    EXPECT_TRUE(chains.find(1000, "kept"));
}

// Durability is the transaction's: it holds inside it and ends with it, whatever the session's default.
TEST(Transactions, DurabilityIsATransactionOption)
{
    Connection connection = migrated(freshDatabase());
    const Statement setting { "test_synchronous_commit", "SELECT current_setting('synchronous_commit')" };
    connection.execScript("SET synchronous_commit TO off");
    {
        Transaction transaction(connection, Durability::Durable);
        EXPECT_EQ(connection.exec(setting).text(0, 0), "on");
        transaction.commit();
    }
    EXPECT_EQ(connection.exec(setting).text(0, 0), "off");
    connection.execScript("SET synchronous_commit TO on");
    {
        Transaction transaction(connection, Durability::Relaxed);
        EXPECT_EQ(connection.exec(setting).text(0, 0), "off");
    }
    {
        Transaction transaction(connection);
        EXPECT_EQ(connection.exec(setting).text(0, 0), "on");
    }
}

} // namespace
