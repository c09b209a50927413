// The squeue --json reader on a document recorded from Slurm 22.05.8 and on broken documents.
#include "slurm/squeue_json.hpp"

#include "tests/support/process.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <sstream>

using namespace baton::slurm;

namespace {

std::string readData(const std::string& name)
{
    std::ifstream in(baton::test::sourceRoot() / "tests" / "data" / name, std::ios::binary);
    EXPECT_TRUE(in) << name;
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::map<JobId, QueueJob> byId(const QueueSnapshot& s)
{
    std::map<JobId, QueueJob> m;
    for (const auto& j : s.jobs)
        m[j.jobId] = j;
    return m;
}

TEST(SqueueJson, ReadsTheRecorded2205Document)
{
    const auto snapshot = parseSqueueJson(readData("squeue_2205.json"), 1795427010);
    EXPECT_EQ(snapshot.takenAt, 1795427010);
    EXPECT_EQ(snapshot.slurmRelease, "22.05.8");
    EXPECT_TRUE(snapshot.errors.empty());
    ASSERT_EQ(snapshot.jobs.size(), 9u);
    auto jobs = byId(snapshot);

    const auto& cancelled = jobs.at(1);
    EXPECT_EQ(cancelled.state, "CANCELLED");
    EXPECT_EQ(cancelled.comment, "baton:abc:1");
    EXPECT_EQ(cancelled.userName, "root");
    EXPECT_EQ(cancelled.name, "demo");
    EXPECT_EQ(cancelled.submitTime, 1795426880);
    EXPECT_EQ(cancelled.startTime, 1795426881);
    EXPECT_EQ(cancelled.endTime, 1795426982);
    EXPECT_EQ(cancelled.timeLimitMinutes, 10);
    EXPECT_EQ(cancelled.nodeCount, 1);
    EXPECT_EQ(cancelled.priority, 4294901759);
    EXPECT_EQ(cancelled.exitStatus, 143); // bash ended by the TERM of scancel
    EXPECT_TRUE(cancelled.batch);
    EXPECT_EQ(cancelled.workdir, "/home/alice/run");
    EXPECT_EQ(cancelled.partition, "debug");
    EXPECT_EQ(cancelled.nodes, "node001");
    EXPECT_TRUE(cancelled.started());
    EXPECT_FALSE(cancelled.active());

    const auto& nobody = jobs.at(2);
    EXPECT_EQ(nobody.userId, 65534u);
    EXPECT_EQ(nobody.userName, "nobody");
    EXPECT_EQ(nobody.comment, "baton:xyz:2");
    EXPECT_EQ(nobody.exitSignal, 15); // killed by the signal itself: raw status 15

    EXPECT_EQ(jobs.at(4).comment, "odd \"quoted\"");
    EXPECT_EQ(jobs.at(4).stateReason, "BeginTime");
    EXPECT_FALSE(jobs.at(4).started()); // cancelled while pending: no nodes, though it has a start time
    EXPECT_EQ(jobs.at(4).eligibleTime, 1795430480); // its --begin
    EXPECT_EQ(jobs.at(3).eligibleTime, jobs.at(3).submitTime);
    EXPECT_EQ(jobs.at(6).eligibleTime, 0); // held: not eligible yet

    EXPECT_TRUE(jobs.at(5).active());
    EXPECT_FALSE(jobs.at(5).timeLimitMinutes.has_value()); // UNLIMITED is null

    EXPECT_TRUE(jobs.at(6).pending());
    EXPECT_EQ(jobs.at(6).priority, 0);
    EXPECT_EQ(jobs.at(6).stateReason, "JobHeldUser");
    EXPECT_EQ(jobs.at(6).timeLimitMinutes, 2880);

    EXPECT_EQ(jobs.at(7).state, "FAILED");
    EXPECT_EQ(jobs.at(7).exitStatus, 3);
    EXPECT_EQ(jobs.at(7).tasks, 1);
    EXPECT_FALSE(jobs.at(7).memoryPerNodeMiB.has_value()); // null in 22.05: not asked for

    EXPECT_EQ(jobs.at(9).arrayJobId, 8);
    EXPECT_EQ(jobs.at(9).arrayTaskId, 0);
    EXPECT_EQ(jobs.at(8).arrayTaskString, "1-2");
    EXPECT_FALSE(jobs.at(8).arrayTaskId.has_value());
}

// Slurm 24.11 (data_parser v0.0.42), recorded by tests/data/record-slurm-json.sh in a clean Debian 13
// root: job states as arrays, numbers as {set, infinite, number}, the exit code as an object, the GPU
// request in tres_per_node. The same kinds of job as the 22.05 document, plus a node failure, a requeue
// and a GPU job.
TEST(SqueueJson, ReadsTheRecorded2411Document)
{
    const auto snapshot = parseSqueueJson(readData("squeue_2411.json"), 1795660800);
    EXPECT_EQ(snapshot.slurmRelease, "24.11.5");
    EXPECT_TRUE(snapshot.errors.empty());
    ASSERT_EQ(snapshot.jobs.size(), 10u);
    auto jobs = byId(snapshot);

    const auto& completed = jobs.at(1);
    EXPECT_EQ(completed.state, "COMPLETED");
    EXPECT_EQ(completed.name, "completed");
    EXPECT_EQ(completed.comment, "baton:3:1:0123456789abcdef0123456789abcdef");
    EXPECT_EQ(completed.userName, "nobody");
    EXPECT_EQ(completed.userId, 65534u);
    EXPECT_EQ(completed.submitTime, 1795660755);
    EXPECT_EQ(completed.startTime, 1795660757);
    EXPECT_EQ(completed.endTime, 1795660757);
    EXPECT_FALSE(completed.timeLimitMinutes.has_value()); // the partition's INFINITE
    EXPECT_EQ(completed.nodeCount, 1);
    EXPECT_EQ(completed.exitStatus, 0);
    EXPECT_EQ(completed.exitSignal, 0);
    EXPECT_TRUE(completed.batch);
    EXPECT_EQ(completed.partition, "debug");
    EXPECT_EQ(completed.nodes, "baton6c6e2b");
    EXPECT_TRUE(completed.started());
    EXPECT_FALSE(completed.active());

    EXPECT_EQ(jobs.at(2).state, "FAILED");
    EXPECT_EQ(jobs.at(2).exitStatus, 3);
    EXPECT_EQ(jobs.at(2).stateReason, "NonZeroExitCode");

    const auto& cancelled = jobs.at(3);
    EXPECT_EQ(cancelled.state, "CANCELLED");
    EXPECT_EQ(cancelled.exitSignal, 15);
    EXPECT_EQ(cancelled.timeLimitMinutes, 10);
    EXPECT_TRUE(cancelled.started());

    EXPECT_EQ(jobs.at(4).state, "NODE_FAIL");
    EXPECT_EQ(jobs.at(4).stateReason, "NodeDown");
    EXPECT_TRUE(jobs.at(4).started());

    const auto& requeued = jobs.at(5);
    EXPECT_TRUE(requeued.pending());
    EXPECT_EQ(requeued.stateReason, "BeginTime");
    EXPECT_EQ(requeued.eligibleTime, 1795660888); // the {set, infinite, number} form of 23.02 and later
    EXPECT_FALSE(requeued.started()); // pending again, its next start time in the future
    EXPECT_TRUE(requeued.nodes.empty());

    EXPECT_TRUE(jobs.at(6).active());
    EXPECT_EQ(jobs.at(6).timeLimitMinutes, 30);
    EXPECT_EQ(jobs.at(6).comment, "baton:3:2:0123456789abcdef0123456789abcdef");
    EXPECT_TRUE(jobs.at(7).active());
    EXPECT_EQ(jobs.at(7).timeLimitMinutes, 60);
    // The request as sbatch took it: what a successor of a plain `sbatch --baton` job asks for again.
    EXPECT_EQ(jobs.at(7).tresPerNode, "gres/gpu:1");
    EXPECT_EQ(jobs.at(7).tasks, 1);
    EXPECT_EQ(jobs.at(7).cpusPerTask, 1);
    EXPECT_EQ(jobs.at(7).memoryPerNodeMiB, 0);
    EXPECT_FALSE(jobs.at(7).memoryPerCpuMiB.has_value());
    EXPECT_EQ(jobs.at(7).account, "");

    EXPECT_TRUE(jobs.at(8).pending());
    EXPECT_EQ(jobs.at(8).arrayJobId, 8);
    EXPECT_EQ(jobs.at(8).arrayTaskString, "0-2");
    EXPECT_FALSE(jobs.at(8).arrayTaskId.has_value());

    EXPECT_EQ(jobs.at(9).stateReason, "JobHeldUser");
    EXPECT_EQ(jobs.at(9).priority, 0);
    EXPECT_EQ(jobs.at(9).timeLimitMinutes, 2880);

    const auto& withdrawn = jobs.at(10);
    EXPECT_EQ(withdrawn.state, "CANCELLED");
    EXPECT_EQ(withdrawn.stateReason, "BeginTime");
    EXPECT_FALSE(withdrawn.started()); // cancelled while pending: no nodes
    EXPECT_EQ(withdrawn.startTime, withdrawn.endTime);
}

TEST(SqueueJson, MissingFieldsKeepDefaults)
{
    const auto s = parseSqueueJson(R"({"jobs": [{"job_id": 7}, {"job_id": 8, "job_state": "PENDING"}]})", 5);
    ASSERT_EQ(s.jobs.size(), 2u);
    EXPECT_EQ(s.jobs[0].jobId, 7);
    EXPECT_EQ(s.jobs[0].state, "");
    EXPECT_EQ(s.jobs[0].nodeCount, 0);
    EXPECT_FALSE(s.jobs[0].timeLimitMinutes.has_value());
    EXPECT_TRUE(s.jobs[1].pending());
    EXPECT_TRUE(parseSqueueJson(R"({"jobs": []})", 0).jobs.empty());
}

TEST(SqueueJson, DecodesEscapes)
{
    const auto s = parseSqueueJson(
        R"({"jobs": [{"job_id": 1, "comment": "a\"b\\c\/d\u00e9\ud83d\ude00\n", "name": null}]})", 0);
    ASSERT_EQ(s.jobs.size(), 1u);
    EXPECT_EQ(s.jobs[0].comment, "a\"b\\c/d\xc3\xa9\xf0\x9f\x98\x80\n");
    EXPECT_EQ(s.jobs[0].name, "");
}

// The reader expects each job's members in the order of the job before (Slurm's fixed order); a job
// in another order, a name written with an escape, or a name that only begins like the expected one
// must read exactly as a fresh reader would read it.
// Job names and comments are the users' own bytes, and Slurm passes them on as they are. A string that
// is not UTF-8 used to reach PostgreSQL and nlohmann's dump() (type_error 316) and fail the whole tick;
// now the reader replaces the bad bytes of that field (and a NUL) with U+FFFD and keeps everything else.
TEST(SqueueJson, InvalidUtf8InUserStringsIsReplacedInThatFieldOnly)
{
    const std::string recorded = readData("squeue_2205.json");
    std::string doc = recorded;
    const auto replace = [&](const std::string& from, const std::string& to) {
        const auto at = doc.find(from);
        ASSERT_NE(at, std::string::npos) << from;
        doc.replace(at, from.size(), to);
    };
    replace("\"name\": \"quick.sh\"", "\"name\": \"quick\xff\xfe.sh \xc3\xbc\"");
    // An overlong '/', an escaped NUL, a raw surrogate, a cut-off sequence at the end.
    replace(
        "\"comment\": \"odd \\\"quoted\\\"\"", "\"comment\": \"odd \xc0\xaf \\u0000 \xed\xa0\x80 \xe2\x82\"");
    const auto clean = byId(parseSqueueJson(recorded, 1));
    const auto read = byId(parseSqueueJson(doc, 1));
    ASSERT_EQ(read.size(), clean.size());
    const std::string fffd = "\xef\xbf\xbd";
    EXPECT_EQ(read.at(3).name, "quick" + fffd + fffd + ".sh \xc3\xbc"); // the valid ü stays
    EXPECT_EQ(
        read.at(4).comment, "odd " + fffd + fffd + " " + fffd + " " + fffd + fffd + fffd + " " + fffd + fffd);
    for (const auto& [id, job] : read) {
        for (const std::string* field : { &job.name, &job.comment, &job.userName, &job.workdir,
                 &job.partition, &job.stateReason, &job.nodes, &job.state }) {
            EXPECT_TRUE(isCleanUtf8(*field)) << id;
            EXPECT_NO_THROW(nlohmann::json(*field).dump()) << id;
        }
        if (id != 3) {
            EXPECT_EQ(job.name, clean.at(id).name);
        }
        if (id != 4) {
            EXPECT_EQ(job.comment, clean.at(id).comment);
        }
        EXPECT_EQ(job.state, clean.at(id).state);
        EXPECT_EQ(job.workdir, clean.at(id).workdir);
    }
    // What the tick met before: the raw name in a JSON document.
    EXPECT_THROW(nlohmann::json(std::string("quick\xff.sh")).dump(), nlohmann::json::type_error);
}

TEST(SqueueJson, TellsCleanUtf8)
{
    for (const char* clean : { "", "plain", "z\xc3\xbcrich", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
             "\xf4\x8f\xbf\xbf", "\xed\x9f\xbf", "\xee\x80\x80" })
        EXPECT_TRUE(isCleanUtf8(clean)) << clean;
    for (const std::string& unclean :
        { std::string("\xff"), std::string("\xc0\xaf"), std::string("\xe0\x80\xaf"),
            std::string("\xed\xa0\x80"), std::string("\xf4\x90\x80\x80"), std::string("\xf8\x88\x80\x80\x80"),
            std::string("\xc3"), std::string("\xe2\x82"), std::string("\x80"), std::string("a\0b", 3) })
        EXPECT_FALSE(isCleanUtf8(unclean));
    std::string text("a\xff"
                     "b\xc3\xbc\0",
        6);
    replaceUncleanUtf8(text);
    EXPECT_EQ(text,
        "a\xef\xbf\xbd"
        "b\xc3\xbc\xef\xbf\xbd");
}

TEST(SqueueJson, MembersOutOfTheLearntOrderReadTheSame)
{
    const auto s = parseSqueueJson(R"({"jobs": [
      {"job_id": 1, "job_state": "RUNNING", "name": "a", "node_count": 2, "nodes": "n1"},
      {"nodes": "n2", "node_count": 3, "name": "b", "job_state": "PENDING", "job_id": 2},
      {"job_id": 3, "job_stat": "X", "job_state": "FAILED", "nam": "c", "name": "d"},
      {"job\u005fid": 4, "job_state": "COMPLETED", "name": "e", "node_count": 5, "nodes": "n3"},
      {"job_id": 5, "job_state": "RUNNING", "name": "f", "node_count": 6, "nodes": "n4", "extra": 1}]})",
        0);
    ASSERT_EQ(s.jobs.size(), 5u);
    const auto jobs = byId(s);
    EXPECT_EQ(jobs.at(1).state, "RUNNING");
    EXPECT_EQ(jobs.at(2).state, "PENDING");
    EXPECT_EQ(jobs.at(2).nodeCount, 3);
    EXPECT_EQ(jobs.at(2).nodes, "n2");
    EXPECT_EQ(jobs.at(2).name, "b");
    EXPECT_EQ(jobs.at(3).state, "FAILED");
    EXPECT_EQ(jobs.at(3).name, "d");
    EXPECT_EQ(jobs.at(4).state, "COMPLETED");
    EXPECT_EQ(jobs.at(4).nodeCount, 5);
    EXPECT_EQ(jobs.at(5).nodes, "n4");
    EXPECT_EQ(jobs.at(5).nodeCount, 6);
    EXPECT_THROW(
        parseSqueueJson(R"({"jobs": [{"job_id": 1, "name": "a"}, {"job_id" 2}]})", 0), SqueueParseError);
}

// The reader compares the bytes between one member and the next with those of the job before; a job laid
// out otherwise (other indentation, spacing, line breaks, a member missing or added, a name that only
// begins like the expected one) must read exactly as the same jobs written compactly.
TEST(SqueueJson, JobsLaidOutDifferentlyReadTheSame)
{
    const std::vector<std::pair<std::string, std::string>> members
        = { { "job_id", "" }, { "user_id", "1001" }, { "name", "\"train\"" }, { "job_state", "\"RUNNING\"" },
              { "nodes", "\"n[1-2]\"" }, { "node_count", "2" }, { "comment", "\"baton:k:1\"" } };
    // Separators (after the comma) and colons of each job's layout.
    const std::vector<std::pair<std::string, std::string>> layouts
        = { { "\n      ", ": " }, { "\n      ", ": " }, { "\n        ", ": " }, { "\n      ", ":" },
              { " ", " : " }, { "\n\t", ": " }, { "\n      ", ": " } };
    std::string pretty = "{\n  \"jobs\": [", compact = "{\"jobs\":[";
    for (std::size_t j = 0; j < layouts.size(); ++j) {
        const auto& [separator, colon] = layouts[j];
        pretty += std::string(j ? "," : "") + "\n    {";
        compact += std::string(j ? "," : "") + "{";
        bool first = true;
        for (const auto& [name, value] : members) {
            std::string text = name == "job_id" ? std::to_string(j + 1) : value;
            if (j == 5 && name == "nodes")
                continue; // a member missing
            std::string key = name;
            if (j == 6 && name == "node_count")
                key = "node_countx"; // a name that only begins like the expected one
            pretty += std::string(first ? "" : ",") + separator + "\"" + key + "\"" + colon + text;
            compact += std::string(first ? "" : ",") + "\"" + key + "\":" + text;
            first = false;
        }
        if (j == 2) { // a member added
            pretty += "," + separator + "\"extra\"" + colon + "[1, {\"nodes\": \"x\"}]";
            compact += ",\"extra\":[1,{\"nodes\":\"x\"}]";
        }
        pretty += "\n    }";
        compact += "}";
    }
    pretty += "\n  ]\n}\n";
    compact += "]}";
    const auto a = parseSqueueJson(pretty, 0), b = parseSqueueJson(compact, 0);
    ASSERT_EQ(a.jobs.size(), layouts.size());
    ASSERT_EQ(b.jobs.size(), layouts.size());
    for (std::size_t j = 0; j < layouts.size(); ++j) {
        SCOPED_TRACE("job " + std::to_string(j + 1));
        EXPECT_EQ(a.jobs[j].jobId, static_cast<JobId>(j + 1));
        EXPECT_EQ(a.jobs[j].userId, b.jobs[j].userId);
        EXPECT_EQ(a.jobs[j].name, b.jobs[j].name);
        EXPECT_EQ(a.jobs[j].state, b.jobs[j].state);
        EXPECT_EQ(a.jobs[j].nodes, b.jobs[j].nodes);
        EXPECT_EQ(a.jobs[j].nodeCount, b.jobs[j].nodeCount);
        EXPECT_EQ(a.jobs[j].comment, b.jobs[j].comment);
    }
    EXPECT_EQ(a.jobs[5].nodes, "");
    EXPECT_EQ(a.jobs[6].nodeCount, 0);
    EXPECT_EQ(a.jobs[4].nodes, "n[1-2]");
    EXPECT_EQ(a.jobs[4].userId, 1001u);
}

TEST(SqueueJson, ReadsTheStructuredNumbersOfLaterReleases)
{
    const auto s = parseSqueueJson(
        R"({"jobs": [{"job_id": 1, "time_limit": {"set": true, "infinite": false, "number": 30},
                      "priority": {"set": true, "infinite": false, "number": 99}, "job_state": ["RUNNING", "COMPLETING"],
                      "exit_code": {"status": ["SUCCESS"], "return_code": {"set": true, "number": 0}}},
                     {"job_id": 2, "time_limit": {"set": true, "infinite": true, "number": 0}}]})",
        0);
    EXPECT_EQ(s.jobs[0].timeLimitMinutes, 30);
    EXPECT_EQ(s.jobs[0].priority, 99);
    EXPECT_EQ(s.jobs[0].state, "RUNNING");
    EXPECT_FALSE(s.jobs[1].timeLimitMinutes.has_value());
}

TEST(SqueueJson, KeepsTheDocumentsOwnErrors)
{
    const auto s
        = parseSqueueJson(R"({"errors": [{"error": "slurm_load_jobs failed", "errno": 1}], "jobs": []})", 0);
    ASSERT_EQ(s.errors.size(), 1u);
    EXPECT_EQ(s.errors[0], "slurm_load_jobs failed");
}

TEST(SqueueJson, RejectsMalformedDocumentsWithAClearError)
{
    const std::vector<std::string> bad = {
        "",
        "   ",
        "[]",
        "null",
        "{",
        R"({"jobs": )",
        R"({"jobs": [)",
        R"({"jobs": [{"job_id": 1})",
        R"({"jobs": [{"job_id": 1}]} trailing)",
        R"({"meta": {}})", // no jobs at all
        R"({"jobs": null})",
        R"({"jobs": {}})",
        R"({"jobs": [1, 2]})",
        R"({"jobs": [{"name": "no id"}]})",
        R"({"jobs": [{"job_id": "12"}]})",
        R"({"jobs": [{"job_id": 1, "node_count": 99999999999}]})",
        R"({"jobs": [{"job_id": 1, "user_id": -1}]})",
        R"({"jobs": [{"job_id": 1, "comment": 5}]})",
        R"({"jobs": [{"job_id": 1, "comment": "unterminated}]})",
        R"({"jobs": [{"job_id": 1, "comment": "bad \x escape"}]})",
        R"({"jobs": [{"job_id": 1, "comment": "\u12"}]})",
        R"({"jobs": [{"job_id": 1, "batch_flag": yes}]})",
        R"({"jobs": [{"job_id": 1, "other": [1, {"a": [}]}]})",
        R"({"jobs": [{"job_id": 1, "other": [1, 2}]})",
        R"({"jobs": [{"job_id": 1, "other": @}]})",
        R"({"jobs": [{"job_id": 1,}]})",
        R"({"jobs": [{"job_id" 1}]})",
        R"({jobs: []})",
        std::string(R"({"jobs": [{"job_id": 1, "x": )") + std::string(100000, '[') + "}]}",
        std::string("{\"jobs\": [{\"job_id\": 1, \"comment\": \"a\x01\"}]}"),
    };
    for (const auto& text : bad) {
        try {
            parseSqueueJson(text, 0);
            ADD_FAILURE() << "accepted: " << text.substr(0, 80);
        } catch (const SqueueParseError& e) {
            EXPECT_NE(std::string(e.what()).find("squeue JSON"), std::string::npos) << e.what();
        }
    }
}

TEST(SqueueJson, TruncatedRecordingsNeverCrash)
{
    const std::string doc = readData("squeue_2205.json");
    const std::size_t end = doc.find_last_not_of(" \n") + 1; // any shorter prefix is incomplete
    for (std::size_t cut = 0; cut < end; cut += 7)
        EXPECT_THROW(parseSqueueJson(std::string_view(doc).substr(0, cut), 0), SqueueParseError) << cut;
}

TEST(SinfoJson, CountsUsableNodes)
{
    EXPECT_EQ(parseSinfoUsableNodes(readData("sinfo_2205.json")), 1);
    EXPECT_EQ(parseSinfoUsableNodes(readData("sinfo_2411.json")), 1);
    // 23.02 and later: groups by partition and state; a node of two partitions counts once.
    EXPECT_EQ(parseSinfoUsableNodes(R"({"sinfo": [
        {"node": {"state": ["DOWN"]}, "nodes": {"nodes": ["a"]}},
        {"node": {"state": ["IDLE"]}, "nodes": {"nodes": ["b", "c"]}},
        {"node": {"state": ["MIXED", "DRAIN"]}, "nodes": {"nodes": ["d"]}},
        {"node": {"state": ["ALLOCATED"]}, "nodes": {"nodes": ["b"]}}], "errors": []})"),
        2);
    EXPECT_THROW(parseSinfoUsableNodes(R"({"sinfo": [{"node": {}}]})"), SqueueParseError);
    EXPECT_EQ(parseSinfoUsableNodes(R"({"nodes": [{"state": "idle", "state_flags": []},
        {"state": "mixed", "state_flags": ["DRAIN"]}, {"state": "down", "state_flags": []},
        {"state": "allocated"}, {"state": ["IDLE", "DRAIN"]}]})"),
        2);
    EXPECT_THROW(parseSinfoUsableNodes("{}"), SqueueParseError);
    EXPECT_THROW(parseSinfoUsableNodes("{\"nodes\": [1]}"), SqueueParseError);
    EXPECT_THROW(parseSinfoUsableNodes("not json"), SqueueParseError);
}

// What slurmctld being down looks like in 22.05: exit 0, an error list, no nodes. No answer, not zero nodes.
TEST(SinfoJson, AnErrorListIsAnError)
{
    EXPECT_THROW(
        parseSinfoUsableNodes(R"({"errors": [{"error": "Unspecified error", "errno": -1}], "nodes": []})"),
        SqueueParseError);
}

} // namespace

// A queue large enough to be read by several threads: the result is the one-thread result, also when
// strings hold what looks like a boundary between jobs, and a damaged document is still an error.
std::string largeDocument(int jobs, const std::string& command)
{
    std::string doc = "{\"meta\": {\"Slurm\": {\"release\": \"22.05.8\"}}, \"errors\": [], \"jobs\": [\n";
    for (int i = 0; i < jobs; ++i) {
        doc += i ? ",\n  " : "  ";
        doc += "{\"job_id\": " + std::to_string(i + 1) + ", \"name\": \"job-" + std::to_string(i)
            + "\", \"command\": \"" + command
            + "\", \"job_state\": \"RUNNING\", \"user_id\": " + std::to_string(i % 7) + "}";
    }
    return doc + "\n], \"last\": {\"after\": [1, 2]}}";
}

TEST(SqueueJson, LargeQueuesReadInParallelGiveTheSequentialResult)
{
    const std::string plain(1200, 'x');
    // Every 100 bytes something that looks like the start of the next job, inside a string.
    std::string tricky;
    while (tricky.size() < 1200)
        tricky
            += "ab},{\\\"job_id\\\": 99, \\\"name\\\": \\\"},  {\\\"} ,{\\\\\\\"},{ padding padding padding";
    for (const std::string& command : { plain, tricky }) {
        const std::string doc = largeDocument(6000, command);
        ASSERT_GT(doc.size(), 6u << 20);
        const auto snapshot = parseSqueueJson(doc, 1);
        ASSERT_EQ(snapshot.jobs.size(), 6000u);
        for (int i = 0; i < 6000; ++i) {
            ASSERT_EQ(snapshot.jobs[i].jobId, i + 1);
            ASSERT_EQ(snapshot.jobs[i].name, "job-" + std::to_string(i));
            ASSERT_EQ(snapshot.jobs[i].userId, i % 7);
        }
        EXPECT_EQ(snapshot.slurmRelease, "22.05.8");
    }
}

TEST(SqueueJson, LargeDamagedQueuesAreErrors)
{
    const std::string doc = largeDocument(6000, std::string(1200, 'y'));
    // A job broken in the second half, where another thread reads.
    std::string broken = doc;
    broken.replace(broken.find("\"job_id\": 5000,"), 15, "\"job_id\": 5000 ");
    EXPECT_THROW(parseSqueueJson(broken, 1), SqueueParseError);
    EXPECT_THROW(parseSqueueJson(doc.substr(0, doc.size() * 3 / 4), 1), SqueueParseError);
    EXPECT_THROW(parseSqueueJson(doc.substr(0, doc.size() - 3), 1), SqueueParseError);
}

// Strings are scanned eight bytes at a time: an escape, a quote, a multi-byte character or a control
// character at any offset in a word is found where it is.
TEST(SqueueJson, StringsAreReadRightAtEveryOffset)
{
    // The reader scans a block of bytes at a time (up to 16): every offset of the special bytes in and
    // across two blocks.
    for (int k = 0; k < 40; ++k) {
        const std::string a(static_cast<std::size_t>(k), 'a'), b(static_cast<std::size_t>(k % 7), 'b');
        const std::string doc = "{\"jobs\": [{\"job_id\": 1, \"name\": \"" + a + "\\\"" + b
            + "\", \"comment\": \"" + a + "\xc3\xa9\\\\" + b + "\", \"partition\": \"" + a + "\"}]}";
        const auto snapshot = parseSqueueJson(doc, 1);
        ASSERT_EQ(snapshot.jobs.size(), 1u);
        EXPECT_EQ(snapshot.jobs[0].name, a + "\"" + b) << k;
        EXPECT_EQ(snapshot.jobs[0].comment, a + "\xc3\xa9\\" + b) << k;
        EXPECT_EQ(snapshot.jobs[0].partition, a) << k;
        const std::string control = "{\"jobs\": [{\"job_id\": 1, \"name\": \"" + a + "\t" + b + "\"}]}";
        EXPECT_THROW(parseSqueueJson(control, 1), SqueueParseError) << k;
    }
}

// Skipped members are passed over by the same block scans: escaped quotes, backslashes, brackets inside
// strings and bytes above 0x7F, at every offset, must leave the reader exactly after the value.
TEST(SqueueJson, SkippedValuesEndRightAtEveryOffset)
{
    for (int k = 0; k < 40; ++k) {
        const std::string a(static_cast<std::size_t>(k), 'a'), b(static_cast<std::size_t>(k % 9), ' ');
        const std::string doc = "{\"jobs\": [{\"command\": \"" + a + "\\\"}]{[\\\\" + b + "\xff\",\n" + b
            + "\"job_resources\": {\"x\": [\"" + a + "]}\\\"\", {\"y\": \"" + b + "\\\\\"}, "
            + std::to_string(a.size()) + ", null]}, \"job_id\": 7," + b + "\"name\": \"" + a + "\"}]}";
        const auto snapshot = parseSqueueJson(doc, 1);
        ASSERT_EQ(snapshot.jobs.size(), 1u) << k;
        EXPECT_EQ(snapshot.jobs[0].jobId, 7) << k;
        EXPECT_EQ(snapshot.jobs[0].name, a) << k;
        // A quote left open inside a skipped value is an error, not a read past the document.
        EXPECT_THROW(parseSqueueJson(doc.substr(0, doc.find("\\\"}]{[")) + "\\", 1), SqueueParseError) << k;
    }
}
