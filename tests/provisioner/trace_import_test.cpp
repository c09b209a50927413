// Trace import into PostgreSQL: all or nothing, statistics in SQL, and batonctl's trace commands.
#include "db/trace_store.hpp"

#include "db/errors.hpp"
#include "db/migrations.hpp"
#include "db/transaction.hpp"
#include "pg_fixture.hpp"
#include "tests/support/trace_files.hpp"
#include "trace/fields.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

namespace {

using namespace baton::db;
using baton::test::dataFile;
namespace trace = baton::trace;

constexpr Statement countTraces { "test_count_traces", "SELECT count(*) FROM traces", true };
constexpr Statement countTraceJobs { "test_count_trace_jobs", "SELECT count(*) FROM trace_jobs", true };
constexpr Statement selectJob { "test_select_trace_job",
    "SELECT job_id, name, user_name, extract(epoch FROM submit_time)::bigint, extract(epoch FROM "
    "start_time)::bigint,"
    " extract(epoch FROM end_time)::bigint, time_limit_s, nodes, priority, exit_code, state, wait_s"
    " FROM trace_jobs WHERE seq = $1",
    true };

Connection migrated()
{
    Connection connection(baton::test::freshDatabase());
    migrate(connection);
    return connection;
}

void expectNothingImported(Connection& connection)
{
    EXPECT_EQ(connection.exec(countTraces).int64(0, 0), 0);
    EXPECT_EQ(connection.exec(countTraceJobs).int64(0, 0), 0);
}

// percentile_cont: linear interpolation between the closest ranks.
double percentileCont(std::vector<double> values, double fraction)
{
    std::sort(values.begin(), values.end());
    const double position = fraction * static_cast<double>(values.size() - 1);
    const auto lower = static_cast<std::size_t>(std::floor(position));
    const auto upper = std::min(lower + 1, values.size() - 1);
    return values[lower] + (position - static_cast<double>(lower)) * (values[upper] - values[lower]);
}

TEST(TraceImport, SmallSacctFileRoundTrip)
{
    Connection connection = migrated();
    ImportOptions options;
    options.name = "small'; DROP TABLE traces; --";
    auto result = importTrace(connection, dataFile("sacct_good.log"), options);
    EXPECT_EQ(result.rowsStored, 3u);
    EXPECT_EQ(result.summary.accepted, 3u);
    auto traces = listTraces(connection);
    ASSERT_EQ(traces.size(), 1u);
    EXPECT_EQ(traces[0].name, options.name);
    EXPECT_EQ(traces[0].format, "sacct-text");
    EXPECT_EQ(traces[0].rowsAccepted, 3);

    auto row = connection.exec(selectJob, Params(3));
    ASSERT_EQ(row.rows(), 1);
    EXPECT_EQ(row.int64(0, 0), 102);
    EXPECT_EQ(row.text(0, 1), "two words");
    EXPECT_EQ(row.text(0, 2), "00003");
    EXPECT_EQ(row.int64(0, 3), *trace::parseTimestamp("2022-11-02T00:00:00"));
    EXPECT_EQ(row.int64(0, 4), *trace::parseTimestamp("2022-11-03T00:00:00"));
    EXPECT_EQ(row.int64(0, 6), 7200);
    EXPECT_EQ(row.int64(0, 7), 4);
    EXPECT_EQ(row.int64(0, 8), 1100);
    EXPECT_EQ(row.int64(0, 9), 0);
    EXPECT_TRUE(row.isNull(0, 10)); // no State column in this layout
    EXPECT_EQ(row.int64(0, 11), 86400);

    auto stats = traceStats(connection, options.name);
    EXPECT_EQ(stats.jobs, 3);
    EXPECT_EQ(stats.started, 3);
    EXPECT_DOUBLE_EQ(*stats.waitP50, 3600);
    // nodes x run: 2 x 7200 + 1 x 1800 + 4 x 3600
    EXPECT_DOUBLE_EQ(stats.nodeSeconds, 30600);
    EXPECT_EQ(stats.firstSubmit, *trace::parseTimestamp("2022-11-01T09:00:00"));
    EXPECT_EQ(stats.lastEvent, *trace::parseTimestamp("2022-11-03T01:00:00"));
    ASSERT_EQ(stats.nodeMix.size(), 3u);
    EXPECT_THROW(traceStats(connection, "missing"), DbError);
}

TEST(TraceImport, NameClashRefusedUnlessReplace)
{
    Connection connection = migrated();
    ImportOptions options;
    options.name = "t";
    options.maxRejectedFraction = 1.0; // small.swf is half bad rows on purpose
    importTrace(connection, dataFile("sacct_good.log"), options);
    EXPECT_THROW(importTrace(connection, dataFile("small.swf"), options), DbError);
    EXPECT_EQ(traceStats(connection, "t").jobs, 3); // the first import is intact
    options.replace = true;
    importTrace(connection, dataFile("small.swf"), options);
    EXPECT_EQ(traceStats(connection, "t").jobs, 3);
    EXPECT_EQ(listTraces(connection).at(0).format, "swf");
    EXPECT_EQ(connection.exec(countTraceJobs).int64(0, 0), 3);
}

TEST(TraceImport, MalformedInputsLeaveNothing)
{
    Connection connection = migrated();
    baton::test::TempDir dir;
    const auto garbage = dir.path() / "garbage.log";
    {
        // A good header and rows, then binary garbage halfway: the rows before it must not stay.
        std::ofstream out(garbage, std::ios::binary);
        std::ifstream good(dataFile("sacct_good.log"));
        out << good.rdbuf();
        for (int i = 0; i < 100000; ++i)
            out.put(static_cast<char>(i * 31));
    }
    const auto sparse = dir.path() / "sparse.log";
    std::filesystem::copy_file(dataFile("sacct_good.log"), sparse);
    ASSERT_EQ(::truncate(sparse.c_str(), off_t { 8 } << 30), 0);
    const auto wideRows = dir.path() / "wide.swf";
    {
        std::ofstream out(wideRows);
        out << "; Version: 2\n";
        for (int i = 1; i <= 50; ++i)
            out << i << " 0 0 10 1 -1 -1 1 60 -1 1 1 1 -1 0 -1 -1 -1" << (i % 2 ? " 99\n" : "\n");
    }

    const std::pair<std::filesystem::path, const char*> cases[] = {
        { dataFile("sacct_truncated.log"), "truncated" },
        { dataFile("sacct_truncated.json"), "truncated" },
        { dataFile("sacct_bad_rows.log"), "too many rejected rows" },
        { dataFile("empty.txt"), "empty" },
        { dataFile("not_a_trace.txt"), "unknown trace layout" },
        { garbage, "binary data" },
        { sparse, "binary data" },
        { wideRows, "too many rejected rows" },
    };
    for (const auto& [path, message] : cases) {
        ImportOptions options;
        try {
            importTrace(connection, path, options);
            ADD_FAILURE() << path << " imported";
        } catch (const trace::TraceError& error) {
            EXPECT_NE(std::string(error.what()).find(message), std::string::npos)
                << path << ": " << error.what();
        }
        expectNothingImported(connection);
    }
    // The session survived every failure.
    ImportOptions options;
    importTrace(connection, dataFile("sacct_good.log"), options);
    EXPECT_EQ(connection.exec(countTraceJobs).int64(0, 0), 3);
}

// A submit time of 10^13 seconds and a state with an invalid UTF-8 byte reject their rows with a
// reason; the other rows import, with the values they had. (Before: the timestamp's microseconds
// overflowed into a wrapped value, and PostgreSQL refused the state's bytes, aborting the import.)
TEST(TraceImport, HugeAndInvalidFieldsRejectTheirRowsNotTheImport)
{
    Connection connection = migrated();
    baton::test::TempDir dir;
    const auto swf = dir.path() / "huge.swf";
    const auto sacct = dir.path() / "bad_state.txt";
    {
        std::ofstream out(swf);
        out << "; UnixStartTime: 1672531200\n";
        for (int i = 1; i <= 40; ++i)
            out << i << (i == 20 ? " 10000000000000" : " 60")
                << " 10 100 4 -1 -1 4 200 -1 1 7 1 -1 0 -1 -1 -1\n";
        std::ofstream text(sacct, std::ios::binary);
        text << "JobID|JobName|User|Submit|Start|End|Timelimit|NNodes|State\n";
        for (int i = 1; i <= 40; ++i)
            text << i << "|j|alice|2023-01-01T00:00:00|2023-01-01T00:10:00|2023-01-01T01:00:00|02:00:00|1|"
                 << (i == 7 ? "RUN\xc3(NING" : "COMPLETED") << "\n";
    }
    ImportOptions options;
    auto result = importTrace(connection, swf, options);
    EXPECT_EQ(result.rowsStored, 39u);
    EXPECT_EQ(result.summary.rejected.at("time out of range").count, 1u);
    auto row = connection.exec(selectJob, Params(20)); // seq counts stored rows: job 21 follows job 19
    ASSERT_EQ(row.rows(), 1);
    EXPECT_EQ(row.int64(0, 0), 21);
    EXPECT_EQ(row.int64(0, 3), 1672531200 + 60);

    result = importTrace(connection, sacct, options);
    EXPECT_EQ(result.rowsStored, 39u);
    EXPECT_EQ(result.summary.rejected.at("invalid characters in state").count, 1u);
    EXPECT_EQ(connection.exec(countTraceJobs).int64(0, 0), 78);
}

// Writes an SWF trace of `rows` jobs: what a long import reads.
void writeSwf(const std::filesystem::path& path, int rows)
{
    std::ofstream out(path);
    out << "; UnixStartTime: 1672531200\n";
    for (int i = 1; i <= rows; ++i)
        out << i << ' ' << i * 7 << ' ' << i % 600 << ' ' << 60 + i % 3600 << ' ' << 1 + i % 64 << " -1 -1 "
            << 1 + i % 64 << ' ' << 7200 << " -1 1 " << i % 97 << " 1 -1 0 -1 -1 -1\n";
}

// The session's statement_timeout is far shorter than the import: the import must not be cancelled
// by it (a COPY is one statement) while the client still parses and sends rows; other statements
// of the session keep the limit.
TEST(TraceImport, LongImportOutlivesTheStatementTimeout)
{
    const std::string database = baton::test::freshDatabase();
    {
        Connection setup(database);
        migrate(setup);
    }
    baton::test::TempDir dir;
    const auto path = dir.path() / "long.swf";
    constexpr int rows = 300'000;
    writeSwf(path, rows);
    ConnectionOptions options;
    options.statementTimeout = std::chrono::milliseconds(100);
    Connection connection(database, options);
    const auto started = std::chrono::steady_clock::now();
    auto result = importTrace(connection, path, ImportOptions {});
    const auto took = std::chrono::steady_clock::now() - started;
    EXPECT_GT(took, std::chrono::milliseconds(300)) << "the import must outlast the statement timeout";
    EXPECT_EQ(result.rowsStored, static_cast<std::uint64_t>(rows));
    EXPECT_EQ(connection.exec(countTraceJobs).int64(0, 0), rows);
    // Lifted for the import's transaction only.
    EXPECT_THROW(connection.execScript("SELECT pg_sleep(1)"), DbTimeout);
}

// A COPY that cannot proceed (the table is locked elsewhere) ends at the call deadline, cancelled,
// and the import leaves nothing behind.
TEST(TraceImport, BlockedCopyTimesOutAndLeavesNothing)
{
    const std::string database = baton::test::freshDatabase();
    {
        Connection setup(database);
        migrate(setup);
    }
    Connection holder(database);
    Transaction lock(holder);
    holder.execScript("LOCK TABLE trace_jobs IN ACCESS EXCLUSIVE MODE");

    ConnectionOptions options;
    options.callTimeout = std::chrono::milliseconds(500);
    Connection importer(database, options);
    const auto started = std::chrono::steady_clock::now();
    EXPECT_THROW(importTrace(importer, dataFile("sacct_good.log"), ImportOptions {}), DbTimeout);
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
    lock.commit();
    expectNothingImported(importer);
    importTrace(importer, dataFile("sacct_good.log"), ImportOptions {});
    EXPECT_EQ(importer.exec(countTraceJobs).int64(0, 0), 3);
}

TEST(TraceImport, WholeLs6TraceWithQuantilesMatchingCpp)
{
    const auto ls6 = baton::test::traceFile("ls6-a100.log");
    if (!ls6)
        GTEST_SKIP() << "shared traces not found: set BATON_TRACE_DIR";
    Connection connection = migrated();
    ImportOptions options;
    options.name = "ls6";
    auto result = importTrace(connection, *ls6, options);
    EXPECT_EQ(result.summary.rowsRead, 24777u);
    EXPECT_EQ(result.rowsStored, 24776u);
    EXPECT_EQ(connection.exec(countTraceJobs).int64(0, 0), 24776);

    auto jobs = trace::readAll(*ls6);
    std::vector<double> waits;
    double nodeSeconds = 0;
    for (const auto& job : jobs) {
        waits.push_back(static_cast<double>(*job.waitSeconds()));
        nodeSeconds += job.nodes * static_cast<double>(*job.runSeconds());
    }
    auto stats = traceStats(connection, "ls6");
    EXPECT_EQ(stats.jobs, 24776);
    EXPECT_NEAR(*stats.waitP50, percentileCont(waits, 0.5), 1e-6);
    EXPECT_NEAR(*stats.waitP90, percentileCont(waits, 0.9), 1e-6);
    EXPECT_NEAR(*stats.waitP99, percentileCont(waits, 0.99), 1e-6);
    EXPECT_NEAR(stats.nodeSeconds, nodeSeconds, 1e-3);
    EXPECT_EQ(stats.nodeMix.at(0), (std::pair<std::int32_t, std::int64_t> { 1, 19708 }));
}

// batonctl end to end: exit codes and output of its db and trace commands.
class Batonctl : public ::testing::Test {
protected:
    static std::string binary()
    {
        const char* path = std::getenv("BATONCTL");
        return path ? path : "batonctl";
    }
    baton::test::ProcessResult run(std::vector<std::string> args)
    {
        args.insert(args.begin(), binary());
        return baton::test::run(args);
    }
};

TEST_F(Batonctl, DbAndTraceCommands)
{
    const std::string database = baton::test::freshDatabase();
    auto version = run({ "version" });
    EXPECT_EQ(version.exitCode, 0);
    EXPECT_NE(version.output.find("batonctl "), std::string::npos);

    auto status = run({ "db", "status", "--database", database });
    EXPECT_EQ(status.exitCode, 1) << status.output; // migrations pending
    EXPECT_NE(status.output.find("pending"), std::string::npos);
    auto migrate = run({ "db", "migrate", "--database", database });
    ASSERT_EQ(migrate.exitCode, 0) << migrate.output;
    EXPECT_NE(migrate.output.find("applied migration 1"), std::string::npos) << migrate.output;
    migrate = run({ "db", "migrate", "--database=" + database });
    EXPECT_EQ(migrate.exitCode, 0);
    EXPECT_NE(migrate.output.find("up to date"), std::string::npos) << migrate.output;
    EXPECT_EQ(run({ "db", "status", "--database", database }).exitCode, 0);

    auto imported = run({ "trace", "import", dataFile("sacct_parsable.txt").string(), "--format", "sacct",
        "--name", "p", "--max-rejected", "0.8", "--database", database });
    ASSERT_EQ(imported.exitCode, 0) << imported.output;
    EXPECT_NE(imported.output.find("rows read 5, accepted 2, rejected 3"), std::string::npos)
        << imported.output;
    auto refused
        = run({ "trace", "import", dataFile("sacct_truncated.log").string(), "--database", database });
    EXPECT_EQ(refused.exitCode, 1);
    EXPECT_NE(refused.output.find("truncated"), std::string::npos) << refused.output;

    auto list = run({ "trace", "list", "--database", database });
    EXPECT_EQ(list.exitCode, 0);
    EXPECT_NE(list.output.find("sacct-parsable"), std::string::npos) << list.output;
    auto stats = run({ "trace", "stats", "p", "--nodes", "16", "--database", database });
    EXPECT_EQ(stats.exitCode, 0) << stats.output;
    EXPECT_NE(stats.output.find("2 jobs"), std::string::npos) << stats.output;
    EXPECT_NE(stats.output.find("p50"), std::string::npos) << stats.output;
    EXPECT_NE(stats.output.find("offered load"), std::string::npos) << stats.output;

    // The environment's database is used when --database is absent.
    setenv("BATON_DATABASE", database.c_str(), 1);
    EXPECT_EQ(run({ "trace", "stats", "p" }).exitCode, 0);
    unsetenv("BATON_DATABASE");
    EXPECT_EQ(run({ "trace", "stats", "nope", "--database", database }).exitCode, 1);
}

TEST_F(Batonctl, UsageErrors)
{
    for (const auto& args : std::vector<std::vector<std::string>> { {}, { "frobnicate" }, { "db" },
             { "db", "explode" }, { "db", "migrate", "--bogus" }, { "db", "migrate", "--database" },
             { "trace", "import" }, { "trace", "import", "x", "--format", "csv" }, { "trace", "stats" },
             { "trace", "import", "x", "--max-rejected", "2" }, { "version", "extra" } }) {
        auto result = run(args);
        EXPECT_EQ(result.exitCode, 2) << testing::PrintToString(args) << "\n" << result.output;
        EXPECT_NE(result.output.find("usage"), std::string::npos)
            << testing::PrintToString(args) << result.output;
    }
    EXPECT_EQ(run({ "help" }).exitCode, 0);
}

} // namespace
