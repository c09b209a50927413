// The trace readers on small hand-written files, malformed inputs, and the shared real traces.
#include "trace/trace_reader.hpp"

#include "tests/support/trace_files.hpp"
#include "trace/fields.hpp"
#include "trace_checks.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

namespace {

using namespace baton::test; // trace_checks.hpp
using namespace baton::trace;

TEST(Fields, TimestampsAreUtc)
{
    EXPECT_EQ(parseTimestamp("1970-01-01T00:00:00"), 0);
    EXPECT_EQ(parseTimestamp("2022-11-01T15:34:14"), 1667316854);
    EXPECT_EQ(parseTimestamp("2024-02-29 12:00:00"), 1709208000);
    EXPECT_FALSE(parseTimestamp("2023-02-29T00:00:00"));
    EXPECT_FALSE(parseTimestamp("Unknown"));
    EXPECT_FALSE(parseTimestamp("2022-11-01T15:34"));
    EXPECT_EQ(formatTimestamp(1667316854), "2022-11-01 15:34:14");
    EXPECT_EQ(formatTimestamp(-1), "1969-12-31 23:59:59");
    for (std::int64_t t : { std::int64_t { 0 }, std::int64_t { 951782400 }, std::int64_t { 4102444799 } })
        EXPECT_EQ(parseTimestamp(formatTimestamp(t)), t);
    EXPECT_TRUE(isUnsetTime("None"));
}

TEST(Fields, SlurmDurations)
{
    EXPECT_EQ(parseSlurmDuration("1-00:00:00"), 86400);
    EXPECT_EQ(parseSlurmDuration("02:00:00"), 7200);
    EXPECT_EQ(parseSlurmDuration("30:00"), 1800);
    EXPECT_EQ(parseSlurmDuration("45"), 2700);
    EXPECT_FALSE(parseSlurmDuration("UNLIMITED"));
}

TEST(Fields, Utf8Validation)
{
    EXPECT_TRUE(isValidUtf8("plain"));
    EXPECT_TRUE(isValidUtf8("gr\xc3\xbc\xc3\x9f"));
    EXPECT_FALSE(isValidUtf8("\xff\xfe"));
    EXPECT_FALSE(isValidUtf8("cut \xc3"));
    EXPECT_FALSE(isValidUtf8("\xc0\xaf")); // overlong
}

TEST(SacctText, ReadsTabSpaceAndAlignedRows)
{
    auto [jobs, summary] = readAs(dataFile("sacct_good.log"), TraceFormat::SacctText);
    ASSERT_EQ(jobs.size(), 3u);
    EXPECT_EQ(summary.rowsRead, 3u);
    EXPECT_EQ(summary.rejectedTotal(), 0u);

    EXPECT_EQ(jobs[0].jobId, 100);
    EXPECT_EQ(jobs[0].name, "first");
    EXPECT_EQ(jobs[0].user, "00001");
    EXPECT_EQ(jobs[0].submit, utc("2022-11-01T09:00:00"));
    EXPECT_EQ(jobs[0].start, utc("2022-11-01T10:00:00"));
    EXPECT_EQ(jobs[0].end, utc("2022-11-01T12:00:00"));
    EXPECT_EQ(jobs[0].timeLimit, 2880 * 60);
    EXPECT_EQ(jobs[0].nodes, 2);
    EXPECT_EQ(jobs[0].priority, 1234);
    EXPECT_EQ(jobs[0].exitCode, 0);
    EXPECT_EQ(jobs[0].waitSeconds(), 3600);
    EXPECT_EQ(jobs[0].runSeconds(), 7200);

    EXPECT_EQ(jobs[1].name, "second");
    EXPECT_EQ(jobs[1].exitCode, 1);
    EXPECT_EQ(jobs[1].waitSeconds(), 60);

    EXPECT_EQ(jobs[2].jobId, 102);
    EXPECT_EQ(jobs[2].name, "two words");
    EXPECT_EQ(jobs[2].nodes, 4);
    EXPECT_EQ(jobs[2].timeLimit, 7200);
}

TEST(SacctText, BadRowsAreCountedByReasonAndSkipped)
{
    TraceSummary summary;
    auto jobs = readAll(dataFile("sacct_bad_rows.log"), TraceFormat::Sacct, &summary);
    ASSERT_EQ(jobs.size(), 2u);
    EXPECT_EQ(jobs[0].jobId, 200);
    EXPECT_EQ(jobs[1].jobId, 210);
    EXPECT_FALSE(jobs[1].end.has_value()); // still running when the trace was taken
    EXPECT_EQ(summary.rowsRead, 11u);
    EXPECT_EQ(summary.accepted, 2u);
    EXPECT_EQ(rejectedFor(summary, "wrong field count"), 2u);
    EXPECT_EQ(rejectedFor(summary, "never started"), 1u);
    EXPECT_EQ(rejectedFor(summary, "end before start"), 1u);
    EXPECT_EQ(rejectedFor(summary, "bad submit time"), 1u);
    EXPECT_EQ(rejectedFor(summary, "invalid characters in name"), 1u);
    EXPECT_EQ(rejectedFor(summary, "start before submit"), 1u);
    EXPECT_EQ(rejectedFor(summary, "bad node count"), 1u);
    EXPECT_EQ(rejectedFor(summary, "job step"), 1u);
    EXPECT_EQ(summary.rejectedTotal(), 9u);
    EXPECT_EQ(summary.rejected.at("wrong field count").firstLine, 4u);
    const std::string text = summary.toString();
    EXPECT_NE(text.find("rows read 11, accepted 2, rejected 9"), std::string::npos) << text;
    EXPECT_NE(text.find("end before start"), std::string::npos) << text;
}

TEST(SacctText, TruncatedFileIsAnError)
{
    auto reader = openTrace(dataFile("sacct_truncated.log"));
    TraceJob job;
    ASSERT_TRUE(reader->next(job));
    EXPECT_EQ(job.jobId, 300);
    try {
        reader->next(job);
        FAIL() << "a cut-off last line must not pass";
    } catch (const TraceError& error) {
        EXPECT_NE(std::string(error.what()).find("truncated"), std::string::npos) << error.what();
    }
}

TEST(SacctParsable, ReadsHeaderNamedColumns)
{
    auto [jobs, summary] = readAs(dataFile("sacct_parsable.txt"), TraceFormat::SacctParsable);
    ASSERT_EQ(jobs.size(), 2u);
    EXPECT_EQ(jobs[0].jobId, 400);
    EXPECT_EQ(jobs[0].user, "alice");
    EXPECT_EQ(jobs[0].timeLimit, 86400);
    EXPECT_EQ(jobs[0].nodes, 8);
    EXPECT_EQ(jobs[0].state, "TIMEOUT");
    EXPECT_EQ(jobs[1].timeLimit, 7200);
    EXPECT_EQ(jobs[1].waitSeconds(), 5);
    EXPECT_EQ(rejectedFor(summary, "job step"), 1u);
    EXPECT_EQ(rejectedFor(summary, "never started"), 1u);
    EXPECT_EQ(rejectedFor(summary, "wrong field count"), 1u);
}

TEST(SacctJson, StreamsJobsOfOldAndNewSlurm)
{
    auto [jobs, summary] = readAs(dataFile("sacct.json"), TraceFormat::SacctJson, TraceFormat::Sacct);
    ASSERT_EQ(jobs.size(), 2u);
    EXPECT_EQ(jobs[0].jobId, 500);
    EXPECT_EQ(jobs[0].name, "old \"style\" {x}");
    EXPECT_EQ(jobs[0].nodes, 2);
    EXPECT_EQ(jobs[0].timeLimit, 7200);
    EXPECT_EQ(jobs[0].state, "COMPLETED");
    EXPECT_EQ(jobs[0].requestedProcs, 16);
    EXPECT_EQ(jobs[0].waitSeconds(), 60);
    EXPECT_EQ(jobs[1].nodes, 4);
    EXPECT_EQ(jobs[1].priority, 77);
    EXPECT_EQ(jobs[1].exitCode, 3);
    EXPECT_EQ(jobs[1].state, "FAILED");
    EXPECT_EQ(jobs[1].timeLimit, 1800);
    EXPECT_EQ(summary.rowsRead, 5u);
    EXPECT_EQ(rejectedFor(summary, "never started"), 1u);
    EXPECT_EQ(rejectedFor(summary, "bad job id"), 1u);
    EXPECT_EQ(rejectedFor(summary, "malformed job object"), 1u);
}

// Real `sacct --json` output of Slurm 22.05 and 24.11 (tests/data/record-slurm-json.sh, one node with
// accounting): completed, failed, cancelled while running, node-failed, requeued, running and a job
// holding one GPU (--gres=gpu:1, AccountingStorageTRES=gres/gpu).
void expectRecordedSacct(const ReadTrace& trace, const std::string& user)
{
    const auto& jobs = trace.jobs;
    ASSERT_EQ(jobs.size(), 7u);
    EXPECT_EQ(trace.summary.rowsRead, 7u);
    const std::vector<std::string> names
        = { "completed", "failed", "cancelled-running", "node-failed", "requeued", "running", "gpu" };
    const std::vector<std::string> states
        = { "COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "", "RUNNING", "RUNNING" };
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        SCOPED_TRACE(names[i]);
        EXPECT_EQ(jobs[i].jobId, static_cast<std::int64_t>(i + 1));
        EXPECT_EQ(jobs[i].name, names[i]);
        EXPECT_EQ(jobs[i].user, user);
        EXPECT_EQ(jobs[i].partition, "debug");
        EXPECT_EQ(jobs[i].nodes, 1);
        EXPECT_EQ(jobs[i].cpus, 1);
        if (!states[i].empty()) {
            EXPECT_EQ(jobs[i].state, states[i]);
        }
        ASSERT_TRUE(jobs[i].waitSeconds());
        EXPECT_GE(*jobs[i].waitSeconds(), 0);
        EXPECT_LT(*jobs[i].waitSeconds(), 60);
    }
    // A partition without a limit: none; -t 10, -t 30 and -t 1:00:00 in minutes.
    EXPECT_EQ(jobs[0].timeLimit, -1);
    EXPECT_EQ(jobs[2].timeLimit, 600);
    EXPECT_EQ(jobs[5].timeLimit, 1800);
    EXPECT_EQ(jobs[6].timeLimit, 3600);
    EXPECT_TRUE(jobs[0].end);
    EXPECT_FALSE(jobs[5].end); // still running
    EXPECT_EQ(jobs[6].gpus, 1);
    EXPECT_EQ(jobs[0].gpus, 0);
}

TEST(SacctJson, ReadsTheRecorded2205Document)
{
    auto trace = readAs(dataFile("sacct_2205.json"), TraceFormat::SacctJson);
    // 22.05 writes "user": null where the user has no association; the state is a string.
    expectRecordedSacct(trace, "");
    EXPECT_EQ(trace.jobs[4].state, "REQUEUED");
}

TEST(SacctJson, ReadsTheRecorded2411Document)
{
    auto trace = readAs(dataFile("sacct_2411.json"), TraceFormat::SacctJson);
    expectRecordedSacct(trace, "nobody");
    // 24.11 writes the state as a list (["PENDING", "REQUEUED"]), numbers as {set, infinite, number} and
    // the exit code as an object; the failed job's return code is there.
    EXPECT_EQ(trace.jobs[4].state, "PENDING");
    EXPECT_EQ(trace.jobs[1].exitCode, 3);
    EXPECT_EQ(trace.jobs[0].exitCode, 0);
}

// Members of unexpected types reject their job, never the import.
TEST(SacctJson, MembersOfWrongTypesRejectTheirJobOnly)
{
    baton::test::TempDir dir;
    const auto path = dir.path() / "types.json";
    std::ofstream(path) << R"({"jobs": [
        {"job_id": 1, "allocation_nodes": {"set": "yes", "number": 1},
         "time": {"submission": 1672531200, "start": 1672531260, "end": 1672531300}},
        {"job_id": 2, "allocation_nodes": 1, "exit_code": {"return_code": {"infinite": 0, "number": 1}},
         "time": {"submission": 1672531200, "start": 1672531260, "end": 1672531300}},
        {"job_id": 3, "allocation_nodes": 1, "tres": {"allocated": [{"type": 7, "name": ["gpu"], "count": 1}]},
         "state": {"current": 5}, "time": {"submission": 1672531200, "start": 1672531260, "end": 1672531300}}
    ]})";
    auto [jobs, summary] = readAs(path, TraceFormat::SacctJson);
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].jobId, 3);
    EXPECT_EQ(jobs[0].gpus, 0);
    EXPECT_EQ(jobs[0].state, "");
    EXPECT_EQ(rejectedFor(summary, "bad node count"), 1u);
    EXPECT_EQ(rejectedFor(summary, "bad exit code"), 1u);
}

TEST(SacctJson, TruncatedJsonIsAnError)
{
    EXPECT_THROW(readAll(dataFile("sacct_truncated.json")), TraceError);
}

// 60,000 jobs with bulky step arrays (~20 MB): read one job at a time, memory stays flat.
TEST(SacctJson, LargeDocumentStreamsInConstantMemory)
{
    baton::test::TempDir dir;
    const auto path = dir.path() / "big.json";
    constexpr int jobCount = 60000;
    {
        std::ofstream out(path);
        out << "{\"meta\": {\"x\": [1, 2, {\"y\": \"]}\"}]}, \"jobs\": [\n";
        const std::string steps(200, 'x');
        for (int i = 0; i < jobCount; ++i) {
            out << (i ? ",\n" : "") << "{\"job_id\": " << i + 1 << ", \"name\": \"j" << i
                << "\", \"allocation_nodes\": 1, \"time\": {\"submission\": 1672531200, \"start\": "
                << 1672531200 + i << ", \"end\": " << 1672534800 + i << ", \"limit\": 60}, \"steps\": [\""
                << steps << "\", \"" << steps << "\"]}";
        }
        out << "\n], \"warnings\": []}\n";
    }
    rusage before {};
    getrusage(RUSAGE_SELF, &before);
    auto reader = openTrace(path);
    TraceJob job;
    std::int64_t waitSum = 0;
    while (reader->next(job))
        waitSum += *job.waitSeconds();
    rusage after {};
    getrusage(RUSAGE_SELF, &after);
    EXPECT_EQ(reader->summary().accepted, static_cast<std::uint64_t>(jobCount));
    EXPECT_EQ(waitSum, static_cast<std::int64_t>(jobCount) * (jobCount - 1) / 2);
    EXPECT_GT(std::filesystem::file_size(path), 20u << 20);
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 8 * 1024) << "KiB grown while reading";
}

TEST(SacctJson, TextFileIsNotJson)
{
    try {
        readAll(dataFile("sacct_good.log"), TraceFormat::SacctJson);
        FAIL() << "fixed-width text read as JSON";
    } catch (const TraceError& error) {
        EXPECT_NE(std::string(error.what()).find("not sacct JSON"), std::string::npos) << error.what();
    }
}

TEST(Swf, ReadsFieldsAndUnixStartTime)
{
    auto [jobs, summary] = readAs(dataFile("small.swf"), TraceFormat::Swf);
    ASSERT_EQ(jobs.size(), 3u);
    EXPECT_EQ(jobs[0].submit, 1672531200);
    EXPECT_EQ(jobs[0].start, 1672531210);
    EXPECT_EQ(jobs[0].end, 1672531310);
    EXPECT_EQ(jobs[0].nodes, 4);
    EXPECT_EQ(jobs[0].timeLimit, 200);
    EXPECT_EQ(jobs[0].user, "7");
    EXPECT_EQ(jobs[0].state, "COMPLETED");
    EXPECT_FALSE(jobs[1].start.has_value()); // wait -1: unknown
    EXPECT_EQ(jobs[1].runTime, 50);
    EXPECT_EQ(jobs[1].state, "CANCELLED");
    EXPECT_EQ(jobs[2].timeLimit, -1);
    EXPECT_EQ(rejectedFor(summary, "wrong field count"), 1u);
    EXPECT_EQ(rejectedFor(summary, "bad processor count"), 1u);
    EXPECT_EQ(rejectedFor(summary, "bad number"), 1u);
}

TEST(RealTraces, Ls6A100)
{
    const auto trace = baton::test::traceFile("ls6-a100.log");
    if (!trace)
        GTEST_SKIP() << "shared traces not found: set BATON_TRACE_DIR";
    auto [jobs, summary] = readAs(*trace, TraceFormat::SacctText);
    EXPECT_EQ(summary.rowsRead, 24777u);
    EXPECT_EQ(summary.accepted, 24776u);
    EXPECT_EQ(rejectedFor(summary, "wrong field count"), 1u);
    ASSERT_EQ(jobs.size(), 24776u);
    EXPECT_EQ(jobs.front().jobId, 478729);
    EXPECT_EQ(jobs.back().jobId, 785116);
    for (const auto& job : jobs) {
        ASSERT_TRUE(job.start && job.end);
        ASSERT_GE(*job.waitSeconds(), 0);
        ASSERT_GE(job.nodes, 1);
    }
}

TEST(RealTraces, Lublin256)
{
    const auto trace = baton::test::traceFile("lublin_256.swf");
    if (!trace)
        GTEST_SKIP() << "shared traces not found: set BATON_TRACE_DIR";
    auto [jobs, summary] = readAs(*trace, TraceFormat::Swf);
    EXPECT_EQ(jobs.size(), 10000u);
    EXPECT_EQ(summary.rejectedTotal(), 0u);
}

} // namespace

// Partition and the TRES lists: allocated counts win over requested ones; typed GPUs sum when there is
// no untyped entry; a job without GPU entries has none; a malformed count rejects the job only.
TEST(SacctJson, ReadsPartitionCpusAndGpusFromTres)
{
    baton::test::TempDir dir;
    auto job = [](int id, const std::string& tres) {
        return "{\"job_id\": " + std::to_string(id)
            + ", \"partition\": \"gpu-a100\", \"allocation_nodes\": 1, \"time\": {\"submission\": "
              "1672531200, \"start\": 1672531210, \"end\": 1672531310}, \"tres\": "
            + tres + "}";
    };
    auto [jobs, summary] = readText(dir, "tres.json",
        "{\"jobs\": ["
            + job(1,
                "{\"allocated\": [{\"type\": \"cpu\", \"count\": 32}, {\"type\": \"gres\", \"name\": "
                "\"gpu\", \"count\": 4}], \"requested\": [{\"type\": \"cpu\", \"count\": 8}]}")
            + ","
            + job(2,
                "{\"allocated\": [{\"type\": \"cpu\", \"count\": 16}, {\"type\": \"gres\", \"name\": "
                "\"gpu:a100\", \"count\": 2}, {\"type\": \"gres\", \"name\": \"gpu:h100\", \"count\": 1}]}")
            + "," + job(3, "{\"allocated\": [], \"requested\": [{\"type\": \"cpu\", \"count\": 64}]}") + ","
            + job(4, "{\"allocated\": [{\"type\": \"gres\", \"name\": \"gpu\", \"count\": \"x\"}]}") + "]}",
        TraceFormat::SacctJson);
    ASSERT_EQ(jobs.size(), 3u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "bad TRES list"), 1u) << summary.toString();
    EXPECT_EQ(jobs[0].partition, "gpu-a100");
    EXPECT_EQ(jobs[0].cpus, 32);
    EXPECT_EQ(jobs[0].gpus, 4);
    EXPECT_EQ(jobs[1].gpus, 3);
    EXPECT_EQ(jobs[2].cpus, 64);
    EXPECT_EQ(jobs[2].gpus, 0);
}

// Job 700 starts before its submission and ends before its start: every Slurm format rejects it for the
// same reason, and job 701 beside it is read.
TEST(SlurmReaders, NameATimesFaultAlike)
{
    baton::test::TempDir dir;
    const auto write = [&](const char* name, const std::string& text) {
        const auto path = dir.path() / name;
        std::ofstream(path) << text;
        return path;
    };
    const std::vector<std::filesystem::path> files {
        write("faults.txt",
            "JobID|JobName|User|Submit|Start|End|Timelimit|NNodes|State|ExitCode\n"
            "700|x|alice|2023-01-01T01:00:00|2023-01-01T00:30:00|2023-01-01T00:10:00|02:00:00|1|COMPLETED|0:"
            "0\n"
            "701|y|alice|2023-01-01T01:00:00|2023-01-01T01:30:00|2023-01-01T02:10:00|02:00:00|1|COMPLETED|0:"
            "0\n"),
        write("faults.json",
            R"({"jobs": [)"
            R"({"job_id": 700, "allocation_nodes": 1, "time": {"submission": 1672534800, "start": 1672533000, "end": 1672531800, "limit": 120}},)"
            R"({"job_id": 701, "allocation_nodes": 1, "time": {"submission": 1672534800, "start": 1672536600, "end": 1672539000, "limit": 120}}]})"),
        write("faults.csv",
            "job_id,user,partition,wallclock_req,nodes_req,submit_time,start_time,end_time,state\n"
            "700,alice,short,7200,1,2023-01-01 01:00:00,2023-01-01 00:30:00,2023-01-01 00:10:00,COMPLETED\n"
            "701,alice,short,7200,1,2023-01-01 01:00:00,2023-01-01 01:30:00,2023-01-01 02:10:00,COMPLETED\n"),
    };
    for (const auto& file : files) {
        TraceSummary summary;
        const auto jobs = readAll(file, TraceFormat::Auto, &summary);
        ASSERT_EQ(jobs.size(), 1u) << file << "\n" << summary.toString();
        EXPECT_EQ(jobs[0].jobId, 701) << file;
        EXPECT_EQ(jobs[0].waitSeconds(), 1800) << file;
        EXPECT_EQ(jobs[0].runTime, 2400) << file;
        EXPECT_EQ(jobs[0].requestedTime, 7200) << file;
        EXPECT_EQ(rejectedFor(summary, "end before start"), 1u) << file << "\n" << summary.toString();
    }
}
