// The trace readers on hostile input: numbers that do not fit, format detection, empty, binary,
// sparse and overlong files. Each rejects the row it concerns, or refuses the file with a clear error.
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


// Every number that does not fit what it is stored as, and every time outside 1970..9999, rejects its
// row with a reason: never an abort of the whole trace, never a wrapped value. (Run under UBSan by
// deploy/test.sh: a signed overflow or an out-of-range conversion anywhere in these paths fails it.)
TEST(Overflow, SwfHugeValuesRejectTheirRowOnly)
{
    baton::test::TempDir dir;
    const std::string good = "   0   10   100  4 -1 -1  4  200 -1 1 7 1 -1 0 -1 -1 -1\n";
    auto [jobs, summary] = readText(dir, "huge.swf",
        "; UnixStartTime: 1672531200\n"
        "1" + good
            + "2 10000000000000 10 100  4 -1 -1  4  200 -1 1 7 1 -1 0 -1 -1 -1\n" // submit 10^13
              "3 9223372036854775807 10 100 4 -1 -1 4 200 -1 1 7 1 -1 0 -1 -1 -1\n" // + UnixStartTime
                                                                                    // overflows
              "4 0 9223372036854775000 100 4 -1 -1 4 200 -1 1 7 1 -1 0 -1 -1 -1\n" // submit + wait overflows
              "5 0 10 9223372036854775000 4 -1 -1 4 200 -1 1 7 1 -1 0 -1 -1 -1\n" // start + run overflows
              "6 0 10 100 4 -1 -1 3000000000 200 -1 1 7 1 -1 0 -1 -1 -1\n" // requested procs > int32
              "7 0 10 100 -1 -1 -1 5000000000 200 -1 1 7 1 -1 0 -1 -1 -1\n" // procs from requested, > int32
              "8 0 10 100 4 -1 -1 4 4000000000000000000 -1 1 7 1 -1 0 -1 -1 -1\n" // requested time absurd
              "9 0 10 100 4 -1 -1 4 200 -1 1 7 1 -1 0 -1 -1 -1 99999999999999999999\n" // not 18 fields
              "10 0 10 100 4 -1 -1 4 200 -1 1 99999999999999999999 1 -1 0 -1 -1 -1\n" // > int64: bad number
              "11"
            + good,
        TraceFormat::Swf);
    ASSERT_EQ(jobs.size(), 2u) << summary.toString();
    EXPECT_EQ(jobs[0].jobId, 1);
    EXPECT_EQ(jobs[1].jobId, 11);
    EXPECT_EQ(summary.rowsRead, 11u);
    EXPECT_EQ(rejectedFor(summary, "time out of range"), 4u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "bad processor count"), 2u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "duration out of range"), 1u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "wrong field count"), 1u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "bad number"), 1u) << summary.toString();
    EXPECT_EQ(summary.rejected.at("time out of range").firstLine, 3u); // the comment is line 1
}

TEST(Overflow, SacctHugeValuesAndInvalidUtf8RejectTheirRowOnly)
{
    baton::test::TempDir dir;
    const std::string head = "JobID|JobName|User|Submit|Start|End|Timelimit|NNodes|State|ExitCode|ReqCPUS\n";
    const std::string times = "|2023-01-01T00:00:00|2023-01-01T00:10:00|2023-01-01T01:00:00|";
    auto [jobs, summary] = readText(dir, "huge.txt",
        head + "1|ok|alice" + times + "02:00:00|1|COMPLETED|0:0|4\n" + "2|a|alice" + times
            + "999999999999999-00:00:00|1|COMPLETED|0:0|4\n" // days * 86400 overflows
            + "9|a|alice" + times + "99999999-00:00:00|1|COMPLETED|0:0|4\n" // fits, but 270 000 years
            + "3|a|alice" + times + "02:00:00|1|COMPLETED|4294967297:0|4\n" // exit code > int32
            + "4|a|alice" + times + "02:00:00|1|COMPLETED|0:0|4294967296\n" // cpus > int32
            + "5|a|alice" + times
            + "02:00:00|1|COMPL\xff"
              "ETED|0:0|4\n" // state: invalid UTF-8
            + "6|a|alice" + times + "02:00:00|1|COMPLETED\x01|0:0|4\n" // state: a control character
            + "7|a|alice" + times + "9999999999999999:00:00|1|COMPLETED|0:0|4\n" // hours * 3600 overflows
            + "8|ok|bob" + times + "1-00:00:00|2|TIMEOUT|0:15|8\n",
        TraceFormat::SacctParsable);
    ASSERT_EQ(jobs.size(), 2u) << summary.toString();
    EXPECT_EQ(jobs[0].jobId, 1);
    EXPECT_EQ(jobs[1].jobId, 8);
    EXPECT_EQ(jobs[1].timeLimit, 86400);
    EXPECT_EQ(rejectedFor(summary, "bad time limit"), 2u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "duration out of range"), 1u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "bad exit code"), 1u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "bad cpu count"), 1u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "invalid characters in state"), 2u) << summary.toString();

    auto raw = readText(dir, "raw.txt",
        "JobID|Submit|Start|End|TimelimitRaw|NNodes\n"
        "1|2023-01-01T00:00:00|2023-01-01T00:10:00|2023-01-01T01:00:00|153722867280912931|1\n" // * 60
        "2|2023-01-01T00:00:00|2023-01-01T00:10:00|2023-01-01T01:00:00|30|1\n",
        TraceFormat::SacctParsable);
    ASSERT_EQ(raw.jobs.size(), 1u) << raw.summary.toString();
    EXPECT_EQ(raw.jobs[0].timeLimit, 1800);
    EXPECT_EQ(rejectedFor(raw.summary, "bad time limit"), 1u) << raw.summary.toString();
}

TEST(Overflow, SacctJsonHugeNumbersRejectTheirJobOnly)
{
    baton::test::TempDir dir;
    auto job = [](const std::string& id, const std::string& time, const std::string& rest = "") {
        return "{\"job_id\": " + id + ", \"name\": \"n\", \"user\": \"u\", \"time\": {" + time
            + "}, \"allocation_nodes\": 1" + rest + "}";
    };
    const std::string ok = "\"submission\": 1672531200, \"start\": 1672531210, \"end\": 1672531310";
    auto [jobs, summary] = readText(dir, "huge.json",
        "{\"jobs\": [" + job("1", ok) + ","
            + job("2", "\"submission\": 10000000000000, \"start\": 10000000000010") + "," // 10^13
            + job("3", "\"submission\": 1e300, \"start\": 1e300") + "," // a double out of int64 range
            + job("4", "\"submission\": 18446744073709551615, \"start\": 18446744073709551615") + ","
            + job("5", ok + ", \"limit\": 9223372036854775807") + "," // minutes * 60 overflows
            + job("6", ok, ", \"exit_code\": {\"return_code\": 4294967297}") + ","
            + job("7", ok, ", \"required\": {\"CPUs\": 4294967296}") + ","
            + job("8", ok, ", \"state\": {\"current\": [\"RUN\\u0000NING\"]}") + ","
            + job("9", ok, ", \"priority\": 1e30") + "," + job("10", ok) + "]}",
        TraceFormat::SacctJson);
    ASSERT_EQ(jobs.size(), 2u) << summary.toString();
    EXPECT_EQ(jobs[0].jobId, 1);
    EXPECT_EQ(jobs[1].jobId, 10);
    EXPECT_EQ(rejectedFor(summary, "bad submit time"), 2u) << summary.toString(); // 1e300, 2^64 - 1
    EXPECT_EQ(rejectedFor(summary, "time out of range"), 1u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "bad time limit"), 1u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "bad exit code"), 1u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "bad cpu count"), 1u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "invalid characters in state"), 1u) << summary.toString();
    EXPECT_EQ(rejectedFor(summary, "bad priority"), 1u) << summary.toString();
}

TEST(Detection, FormatsByName)
{
    EXPECT_EQ(parseFormat("auto"), TraceFormat::Auto);
    EXPECT_EQ(parseFormat("sacct"), TraceFormat::Sacct);
    EXPECT_EQ(parseFormat("swf"), TraceFormat::Swf);
    EXPECT_FALSE(parseFormat("csv"));
    EXPECT_EQ(formatName(TraceFormat::SacctJson), "sacct-json");
}

TEST(Detection, SacctHintRefusesSwf)
{
    EXPECT_THROW(detectFormat(dataFile("small.swf"), TraceFormat::Sacct), TraceError);
}

void expectTraceError(
    const std::filesystem::path& path, const char* fragment, TraceFormat format = TraceFormat::Auto)
{
    try {
        readAll(path, format);
        FAIL() << path << " must not read as a trace";
    } catch (const TraceError& error) {
        EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
}

TEST(Malformed, EmptyAndUnknownFilesAreClearErrors)
{
    expectTraceError(dataFile("empty.txt"), "empty");
    expectTraceError(dataFile("empty.txt"), "empty", TraceFormat::SacctText);
    expectTraceError(dataFile("empty.txt"), "empty", TraceFormat::SacctJson);
    expectTraceError(dataFile("not_a_trace.txt"), "unknown trace layout");
    expectTraceError(dataFile("not_a_trace.txt"), "no JobID column", TraceFormat::SacctText);
    expectTraceError(dataFile("does-not-exist.log"), "cannot open");
}

TEST(Malformed, BinaryGarbageIsAnError)
{
    baton::test::TempDir dir;
    const auto path = dir.path() / "garbage.bin";
    {
        std::ofstream out(path, std::ios::binary);
        for (int i = 0; i < 5000; ++i)
            out.put(static_cast<char>((i * 7919) & 0xff));
    }
    expectTraceError(path, "binary data");
    expectTraceError(path, "binary data", TraceFormat::Swf);
}

// A 16 GiB file that is all hole after a valid header: read in constant memory, refused at the first
// NUL byte, in well under a second.
TEST(Malformed, HugeSparseFileIsRefusedQuickly)
{
    baton::test::TempDir dir;
    const auto path = dir.path() / "sparse.log";
    {
        std::ofstream out(path);
        std::ifstream good(dataFile("sacct_good.log"));
        out << good.rdbuf();
    }
    {
        int fd = ::open(path.c_str(), O_WRONLY);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(::ftruncate(fd, off_t { 16 } << 30), 0);
        ::close(fd);
    }
    rusage before {};
    getrusage(RUSAGE_SELF, &before);
    expectTraceError(path, "binary data");
    expectTraceError(path, "binary data", TraceFormat::SacctText);
    rusage after {};
    getrusage(RUSAGE_SELF, &after);
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "KiB grown while reading";
}

TEST(Malformed, OverlongLineIsAnError)
{
    baton::test::TempDir dir;
    const auto path = dir.path() / "long.swf";
    {
        std::ofstream out(path);
        out << "; Version: 2\n" << std::string(3u << 20, '1') << "\n";
    }
    expectTraceError(path, "longer than 1 MiB");
}

} // namespace
