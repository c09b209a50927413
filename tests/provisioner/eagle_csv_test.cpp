// NREL Eagle's job CSV: the reader on a hand-written file with every kind of bad row, CSV quoting, the
// header checks, and the public 1,000-job sample when it has been fetched.
#include "trace/trace_reader.hpp"

#include "tests/support/trace_files.hpp"
#include "trace/fields.hpp"
#include "trace_checks.hpp"

#include <gtest/gtest.h>

#include <bzlib.h>
#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

namespace {

using baton::test::dataFile;
using baton::test::rejectedFor;
using baton::test::utc;
using namespace baton::trace;

std::uint64_t firstLineOf(const TraceSummary& summary, const std::string& reason)
{
    auto it = summary.rejected.find(reason);
    return it == summary.rejected.end() ? 0 : it->second.firstLine;
}

std::filesystem::path writeFile(const baton::test::TempDir& dir, const char* name, const std::string& text)
{
    const auto path = dir.path() / name;
    std::ofstream out(path, std::ios::binary);
    out << text;
    return path;
}

void expectTraceError(const std::filesystem::path& path, const char* fragment)
{
    try {
        readAll(path);
        FAIL() << path << " must not read as a trace";
    } catch (const TraceError& error) {
        EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
}

const std::string header = "job_id,user,account,partition,qos,wallclock_req,nodes_req,processors_req,"
                           "gpus_req,mem_req,submit_time,start_time,end_time,run_time,state,name,work_dir,"
                           "submit_line\n";

} // namespace

TEST(Csv, SplitsQuotedFields)
{
    std::vector<std::string_view> fields;
    std::string scratch;
    ASSERT_TRUE(splitCsv("a,,c", fields, scratch));
    EXPECT_EQ(fields, (std::vector<std::string_view> { "a", "", "c" }));
    ASSERT_TRUE(splitCsv("1,\"x, y\",\"say \"\"hi\"\"\",", fields, scratch));
    EXPECT_EQ(fields, (std::vector<std::string_view> { "1", "x, y", "say \"hi\"", "" }));
    ASSERT_TRUE(splitCsv("\"two\nlines\",z", fields, scratch));
    EXPECT_EQ(fields, (std::vector<std::string_view> { "two\nlines", "z" }));
    EXPECT_FALSE(splitCsv("\"open,z", fields, scratch));
    EXPECT_FALSE(splitCsv("\"a\"b,z", fields, scratch));
    EXPECT_FALSE(splitCsv("a\"b,z", fields, scratch));
    EXPECT_TRUE(endsInQuote("1,\"two"));
    EXPECT_FALSE(endsInQuote("1,\"a \"\"b\"\"\",c"));
}

TEST(Csv, NumbersWrittenAsFloats)
{
    EXPECT_EQ(parseDecimalSeconds("172800.0"), 172800);
    EXPECT_EQ(parseDecimalSeconds("60.4"), 60);
    EXPECT_EQ(parseDecimalSeconds("59.5"), 60);
    EXPECT_EQ(parseDecimalSeconds("7200"), 7200);
    EXPECT_FALSE(parseDecimalSeconds("-1.0"));
    EXPECT_FALSE(parseDecimalSeconds("nan"));
    EXPECT_FALSE(parseDecimalSeconds("inf"));
    EXPECT_FALSE(parseDecimalSeconds("1e300"));
    EXPECT_FALSE(parseDecimalSeconds("12s"));
    EXPECT_FALSE(parseDecimalSeconds(""));
    EXPECT_EQ(parseWholeCount("36"), 36);
    EXPECT_EQ(parseWholeCount("36.0"), 36);
    EXPECT_FALSE(parseWholeCount("1.5"));
    EXPECT_FALSE(parseWholeCount("-4"));
    EXPECT_FALSE(parseWholeCount("two"));
}

TEST(EagleCsv, FormatNameAndDetection)
{
    EXPECT_EQ(parseFormat("eagle-csv"), TraceFormat::EagleCsv);
    EXPECT_EQ(formatName(TraceFormat::EagleCsv), "eagle-csv");
    EXPECT_EQ(detectFormat(dataFile("eagle_small.csv")), TraceFormat::EagleCsv);
    // Asked for sacct, an Eagle CSV is refused rather than misread.
    EXPECT_THROW(detectFormat(dataFile("eagle_small.csv"), TraceFormat::Sacct), TraceError);
}

// The good rows keep every field the simulator uses; each bad row is skipped with its own reason,
// at its own line; nothing else is lost.
TEST(EagleCsv, ReadsGoodRowsAndRejectsEachBadRowWithItsReason)
{
    TraceSummary summary;
    const auto jobs = readAll(dataFile("eagle_small.csv"), TraceFormat::Auto, &summary);
    EXPECT_EQ(summary.format, TraceFormat::EagleCsv);
    EXPECT_EQ(summary.rowsRead, 21u);
    EXPECT_EQ(summary.accepted, 5u) << summary.toString();
    ASSERT_EQ(jobs.size(), 5u);

    const auto& a = jobs[0]; // CRLF line ends
    EXPECT_EQ(a.jobId, 1001);
    EXPECT_EQ(a.user, "alice");
    EXPECT_EQ(a.partition, "short");
    EXPECT_EQ(a.nodes, 2);
    EXPECT_EQ(a.cpus, 72);
    EXPECT_EQ(a.requestedProcs, 72);
    EXPECT_EQ(a.gpus, 0);
    EXPECT_EQ(a.timeLimit, 3600);
    EXPECT_EQ(a.requestedTime, 3600);
    EXPECT_EQ(a.submit, utc("2019-01-01 08:00:00"));
    EXPECT_EQ(a.start, utc("2019-01-01 08:00:30"));
    EXPECT_EQ(a.end, utc("2019-01-01 08:30:30"));
    EXPECT_EQ(a.wait, 30);
    EXPECT_EQ(a.runTime, 1800);
    EXPECT_EQ(a.state, "COMPLETED");
    EXPECT_EQ(a.name, "train");

    const auto& b = jobs[1]; // quoted fields with a comma and escaped quotes
    EXPECT_EQ(b.jobId, 1002);
    EXPECT_EQ(b.gpus, 2);
    EXPECT_EQ(b.timeLimit, 172800);
    EXPECT_EQ(b.state, "TIMEOUT");
    EXPECT_EQ(b.name, "resnet, fold 3");
    EXPECT_EQ(b.partition, "gpu");

    const auto& c = jobs[2]; // a quoted name over two lines; a fractional limit; "CANCELLED by 12"
    EXPECT_EQ(c.jobId, 1003);
    EXPECT_EQ(c.name, "two lines"); // the line break, a control character, becomes a space
    EXPECT_EQ(c.timeLimit, 60);
    EXPECT_EQ(c.state, "CANCELLED");

    const auto& d = jobs[3]; // the same id again (an array task), still running, counts left empty
    EXPECT_EQ(d.jobId, 1003);
    EXPECT_EQ(d.nodes, 1); // "1.0"
    EXPECT_EQ(d.cpus, -1);
    EXPECT_EQ(d.gpus, -1);
    EXPECT_EQ(d.start, utc("2019-01-01 09:10:05"));
    EXPECT_FALSE(d.end);
    EXPECT_EQ(d.state, "RUNNING");

    EXPECT_EQ(jobs[4].jobId, 1020); // rows after the bad ones are read

    const std::map<std::string, std::uint64_t> reasons {
        { "wrong field count", 8 },
        { "bad job id", 9 },
        { "bad node count", 10 }, // 0, then 1.5 at line 11
        { "bad cpu count", 12 },
        { "bad gpu count", 13 },
        { "bad time limit", 14 },
        { "bad submit time", 15 },
        { "never started", 16 },
        { "bad start time", 17 },
        { "end before start", 18 },
        { "start before submit", 19 },
        { "bad end time", 20 },
        { "bad quoting", 21 },
        { "invalid characters in partition", 22 },
        { "invalid characters in name", 23 },
    };
    for (const auto& [reason, line] : reasons) {
        EXPECT_EQ(firstLineOf(summary, reason), line) << reason;
        EXPECT_EQ(rejectedFor(summary, reason), reason == "bad node count" ? 2u : 1u) << reason;
    }
    EXPECT_EQ(summary.rejected.size(), reasons.size());
    EXPECT_EQ(summary.rejectedTotal(), 16u);
}

// Columns are found by name: another order and extra columns (a pandas index, say) read the same;
// a missing column the replay needs, a repeated one or no rows at all is a clear error.
TEST(EagleCsv, ColumnsByNameAndHeaderErrors)
{
    baton::test::TempDir dir;
    const auto reordered = writeFile(dir, "reordered.csv",
        ",end_time,start_time,submit_time,NODES_REQ,wallclock_req,job_id,partition,extra\n"
        "0,2019-01-01 01:00:00,2019-01-01 00:10:00,2019-01-01 00:00:00,3,600,77,\"p 1\",x\n");
    TraceSummary summary;
    const auto jobs = readAll(reordered, TraceFormat::Auto, &summary);
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].jobId, 77);
    EXPECT_EQ(jobs[0].nodes, 3);
    EXPECT_EQ(jobs[0].timeLimit, 600);
    EXPECT_EQ(jobs[0].partition, "p 1");
    EXPECT_EQ(jobs[0].cpus, -1); // no processors_req column
    EXPECT_EQ(*jobs[0].waitSeconds(), 600);
    EXPECT_EQ(*jobs[0].runSeconds(), 3000);

    expectTraceError(writeFile(dir, "no_nodes.csv",
                         "job_id,submit_time,start_time,end_time,wallclock_req\n"
                         "1,2019-01-01 00:00:00,2019-01-01 00:00:00,2019-01-01 00:01:00,60\n"),
        "no nodes_req column");
    expectTraceError(writeFile(dir, "twice.csv",
                         "job_id,submit_time,start_time,end_time,wallclock_req,nodes_req,job_id\n"),
        "job_id appears twice");
    expectTraceError(writeFile(dir, "header_only.csv", header), "no job rows");
}

// A quote that is never closed would swallow every later row into one: an error naming its line. A
// bad last line without its newline means the file was cut off.
TEST(EagleCsv, UnclosedQuoteAndCutOffFileAreErrors)
{
    baton::test::TempDir dir;
    const std::string good = "1,u,a,p,q,60.0,1,1,0,0.0,2019-01-01 00:00:00,2019-01-01 00:00:00,"
                             "2019-01-01 00:01:00,60.0,COMPLETED,n,w,s\n";
    expectTraceError(writeFile(dir, "open_quote.csv",
                         header + good
                             + "2,u,a,p,q,60.0,1,1,0,0.0,2019-01-01 00:00:00,2019-01-01 00:00:00,"
                               "2019-01-01 00:01:00,60.0,COMPLETED,\"never closed,w,s\n"
                             + good + good),
        "line 3 opens a quoted field that is never closed");
    expectTraceError(writeFile(dir, "cut.csv", header + good + "3,u,a,p,q,60.0,1,1,0,0.0,2019-01-01 00:0"),
        "is truncated");
}

namespace {

std::string fileText(const std::filesystem::path& path)
{
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::string gzipped(const std::string& text)
{
    z_stream z {};
    EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK); // 16: gzip header
    std::string out(deflateBound(&z, text.size()), '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
    z.avail_in = static_cast<uInt>(text.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
    out.resize(z.total_out);
    deflateEnd(&z);
    return out;
}

std::string bzipped(const std::string& text)
{
    std::string out(text.size() + text.size() / 100 + 600, '\0');
    auto size = static_cast<unsigned>(out.size());
    EXPECT_EQ(BZ2_bzBuffToBuffCompress(out.data(), &size, const_cast<char*>(text.data()),
                  static_cast<unsigned>(text.size()), 9, 0, 0),
        BZ_OK);
    out.resize(size);
    return out;
}

// The jobs as one comparable string each.
std::vector<std::string> described(const std::vector<TraceJob>& jobs)
{
    std::vector<std::string> out;
    for (const auto& j : jobs)
        out.push_back(std::to_string(j.jobId) + " " + j.user + " " + j.partition + " "
            + std::to_string(j.nodes) + " " + std::to_string(j.cpus) + " " + std::to_string(j.gpus) + " "
            + std::to_string(j.submit) + " " + std::to_string(j.start.value_or(-1)) + " "
            + std::to_string(j.end.value_or(-1)) + " " + std::to_string(j.timeLimit) + " " + j.state + " "
            + j.name);
    return out;
}

} // namespace

// gzip and bzip2 files (the full dataset is published compressed) read exactly as the plain file, bad
// rows and all, whatever their names; bzip2 made of several streams (pbzip2) reads to its end; a
// compressed file cut off is an error, not a shorter trace.
TEST(EagleCsv, CompressedFilesReadAsThePlainOne)
{
    baton::test::TempDir dir;
    const auto plainText = fileText(dataFile("eagle_small.csv"));
    TraceSummary plainSummary;
    const auto plain = described(readAll(dataFile("eagle_small.csv"), TraceFormat::Auto, &plainSummary));
    const auto half = plainText.find("\n1012,") + 1;
    const std::pair<const char*, std::string> files[] = {
        { "jobs.csv.gz", gzipped(plainText) },
        { "jobs.bin", gzipped(plainText) }, // found by its magic bytes, not its name
        { "members.csv.gz", gzipped(plainText.substr(0, half)) + gzipped(plainText.substr(half)) },
        { "jobs.csv.bz2", bzipped(plainText) },
        { "streams.csv.bz2", bzipped(plainText.substr(0, half)) + bzipped(plainText.substr(half)) },
    };
    for (const auto& [name, bytes] : files) {
        TraceSummary summary;
        const auto jobs = readAll(writeFile(dir, name, bytes), TraceFormat::Auto, &summary);
        EXPECT_EQ(summary.format, TraceFormat::EagleCsv) << name;
        EXPECT_EQ(described(jobs), plain) << name;
        EXPECT_EQ(summary.toString(), plainSummary.toString()) << name;
    }
    const auto gz = gzipped(plainText);
    expectTraceError(writeFile(dir, "cut.csv.gz", gz.substr(0, gz.size() / 2)), "damaged or truncated gzip");
    // Cut after whole lines: only the missing end of the stream (its 8-byte trailer) tells.
    const auto lines = gzipped(plainText.substr(0, half));
    expectTraceError(
        writeFile(dir, "lines.csv.gz", lines.substr(0, lines.size() - 8)), "damaged or truncated gzip");
    const auto bz = bzipped(plainText);
    expectTraceError(
        writeFile(dir, "cut.csv.bz2", bz.substr(0, bz.size() / 2)), "damaged or truncated bzip2");
}

TEST(EagleCsv, PublicSample)
{
    const auto path = baton::test::traceFile("sample_eagle_data.csv");
    if (!path)
        GTEST_SKIP() << "sample_eagle_data.csv not found in the traces directory: set BATON_TRACE_DIR "
                        "(deploy/fetch-traces.sh fetches it)";
    TraceSummary summary;
    const auto jobs = readAll(*path, TraceFormat::Auto, &summary);
    EXPECT_EQ(summary.format, TraceFormat::EagleCsv);
    EXPECT_EQ(summary.rowsRead, 1000u);
    EXPECT_EQ(summary.rejectedTotal(), 0u);
    ASSERT_EQ(jobs.size(), 1000u);
    std::map<std::string, int> partitions;
    int arrayTasks = 0, withGpus = 0, timeouts = 0;
    for (const auto& job : jobs) {
        ++partitions[job.partition];
        arrayTasks += job.jobId == 532939;
        withGpus += job.gpus > 0;
        timeouts += job.state == "TIMEOUT";
        ASSERT_TRUE(job.start && job.end) << job.jobId;
        ASSERT_GE(job.nodes, 1);
        ASSERT_GE(job.cpus, job.nodes);
        ASSERT_GT(job.timeLimit, 0);
        ASSERT_FALSE(job.user.empty());
    }
    EXPECT_EQ(partitions,
        (std::map<std::string, int> { { "partition001", 597 }, { "partition004", 1 }, { "partition007", 5 },
            { "partition008", 393 }, { "partition009", 4 } }));
    EXPECT_EQ(arrayTasks, 452); // one array's tasks, all under the array's id
    EXPECT_EQ(withGpus, 4);
    EXPECT_EQ(timeouts, 15);
    EXPECT_EQ(jobs.front().jobId, 532209);
    EXPECT_EQ(jobs.front().submit, utc("2019-01-01 08:55:55"));
    EXPECT_EQ(jobs.front().timeLimit, 172800);
    EXPECT_EQ(jobs.front().nodes, 10);
}
