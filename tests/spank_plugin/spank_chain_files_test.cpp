// The plugin's chain files (the job registry and the event spool) and the events it builds.
#include "spank_core_support.hpp"

#include "spank_plugin/chain_files.hpp"
#include "spank_plugin/event.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fcntl.h>
#include <functional>
#include <set>
#include <sys/file.h>

namespace {

using namespace baton::spank;
using namespace baton::spank::test;

TEST(ChainFiles, RegistryCountsEarlierJobsOnce)
{
    TempDir temp;
    const UniqueFd dir = openDir(temp.path());
    const auto timeout = std::chrono::milliseconds(500);
    EXPECT_EQ(registerJob(dir.get(), "10", timeout), 0);
    EXPECT_EQ(registerJob(dir.get(), "10", timeout), 0); // another step of the same job
    EXPECT_EQ(registerJob(dir.get(), "11", timeout), 1);
    EXPECT_EQ(registerJob(dir.get(), "12", timeout), 2);
    EXPECT_EQ(registerJob(dir.get(), "11", timeout), 1);
    EXPECT_EQ(readText(temp.path() / ".baton-jobs"), "10\n11\n12\n");
    EXPECT_EQ(modeOf(temp.path() / ".baton-jobs"), 0600u);
    // A line torn by a full disk still counts, and the next entry starts on its own line.
    writeText(temp.path() / ".baton-jobs", "10\n1");
    EXPECT_EQ(registerJob(dir.get(), "13", timeout), 2);
    EXPECT_EQ(readText(temp.path() / ".baton-jobs"), "10\n1\n13\n");
}

TEST(ChainFiles, RegistryLockTimesOutInsteadOfHanging)
{
    TempDir temp;
    const UniqueFd dir = openDir(temp.path());
    registerJob(dir.get(), "1", std::chrono::milliseconds(100));
    UniqueFd holder(::open((temp.path() / ".baton-jobs").c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_EQ(::flock(holder.get(), LOCK_EX), 0);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THAT(messageOf([&] { registerJob(dir.get(), "2", std::chrono::milliseconds(200)); }),
        HasSubstr("timed out"));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// The registry is the job user's file, read as root's thread in slurmstepd under its lock: a huge
// (sparse) file, binary garbage or an endless line is refused at once with a message naming the bound,
// without reading it whole; the step is refused with that message instead of stalling slurmstepd.
TEST(ChainFiles, RegistryBeyondItsBoundsIsRefusedQuickly)
{
    const auto timeout = std::chrono::milliseconds(500);
    const auto refusal
        = [&](const std::function<void(const fs::path&)>& prepare, const RegistryLimits& limits) {
              TempDir temp;
              prepare(temp.path() / ".baton-jobs");
              const UniqueFd dir = openDir(temp.path());
              const auto start = std::chrono::steady_clock::now();
              const std::string message = messageOf([&] { registerJob(dir.get(), "77", timeout, limits); });
              EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500)) << message;
              return message;
          };
    // 512 MiB of holes: refused from its size, before a byte is read.
    EXPECT_THAT(refusal(
                    [](const fs::path& path) {
                        writeText(path, "1\n");
                        fs::resize_file(path, std::uintmax_t { 512 } << 20);
                    },
                    {}),
        HasSubstr("refusing '.baton-jobs': 536870912 bytes, more than the 1048576"));
    // Binary garbage.
    EXPECT_THAT(refusal(
                    [](const fs::path& path) {
                        std::string garbage = "10\n11\n";
                        for (int i = 0; i < 4096; ++i) {
                            garbage += static_cast<char>((i * 7919) & 0xff);
                        }
                        writeText(path, garbage);
                    },
                    {}),
        HasSubstr("line 3 is not a job id"));
    // One very long line of digits (not a job id either), within the byte bound.
    EXPECT_THAT(refusal([](const fs::path& path) { writeText(path, "1\n" + std::string(900000, '7')); }, {}),
        HasSubstr("line 2 is not a job id (900000 bytes)"));
    // Too many lines, with the bounds lowered so that the test stays small.
    RegistryLimits fewLines;
    fewLines.maxLines = 100;
    EXPECT_THAT(refusal(
                    [](const fs::path& path) {
                        std::string ids;
                        for (int i = 0; i < 200; ++i) {
                            ids += std::to_string(1000 + i) + "\n";
                        }
                        writeText(path, ids);
                    },
                    fewLines),
        HasSubstr("more than 100 lines"));
    // Empty lines are skipped and a registry within the bounds counts as before.
    TempDir temp;
    writeText(temp.path() / ".baton-jobs", "10\n\n11\n10\n");
    const UniqueFd dir = openDir(temp.path());
    EXPECT_EQ(registerJob(dir.get(), "12", timeout), 2);
    EXPECT_EQ(registerJob(dir.get(), "11", timeout), 1);
    EXPECT_EQ(readText(temp.path() / ".baton-jobs"), "10\n\n11\n10\n12\n");
    // The byte bound is the limits' (the read stops one byte past it if the file grows meanwhile).
    RegistryLimits small;
    small.maxBytes = 8;
    writeText(temp.path() / ".baton-jobs", "100\n200\n300\n");
    EXPECT_THAT(
        messageOf([&] { registerJob(dir.get(), "12", timeout, small); }), HasSubstr("more than the 8"));
}

TEST(ChainFiles, SpoolAppendsWholeLinesAndRefusesLinks)
{
    TempDir temp;
    const UniqueFd dir = openDir(temp.path());
    const auto timeout = std::chrono::milliseconds(500);
    appendToSpool(dir.get(), "{\"a\":1}", timeout);
    appendToSpool(dir.get(), "{\"b\":2}", timeout);
    const fs::path spool = temp.path() / ".baton-spool" / "events.jsonl";
    EXPECT_EQ(readText(spool), "{\"a\":1}\n{\"b\":2}\n");
    EXPECT_EQ(modeOf(temp.path() / ".baton-spool"), 0700u);
    EXPECT_EQ(modeOf(spool), 0600u);
    writeText(spool, "{\"torn\":");
    appendToSpool(dir.get(), "{\"c\":3}", timeout);
    EXPECT_EQ(readText(spool), "{\"torn\":\n{\"c\":3}\n");

    TempDir other;
    const fs::path victim = temp.path() / "victim";
    writeText(victim, "keep");
    fs::create_directory(other.path() / ".baton-spool");
    fs::create_symlink(victim, other.path() / ".baton-spool" / "events.jsonl");
    EXPECT_THROW(appendToSpool(openDir(other.path()).get(), "x", timeout), std::runtime_error);
    EXPECT_EQ(readText(victim), "keep");
}

StepEvent sampleEvent()
{
    StepEvent event;
    event.kind = "task_exit";
    event.jobId = 42;
    event.requeueCount = 1;
    event.step = "batch";
    event.chain = "c";
    event.chainDir = "/s/c";
    event.node = "n1";
    event.chainSeq = 3;
    event.deadlineUnix = 1700003600;
    event.task = 0;
    event.waitStatus = 7 << 8; // exited with 7
    event.checkpoint = summarizeManifest("ckpt-000000000200", manifest(200));
    event.timeUnix = 1700000001;
    return event;
}

TEST(Event, CarriesTheDocumentedFields)
{
    StepEvent event = sampleEvent();
    const auto json = eventJson(event);
    EXPECT_EQ(json["version"], 2);
    // One task_exit per step and node: the task is in the body, not in the key.
    EXPECT_EQ(json["idempotency_key"], "42.1.n1.batch.task_exit");
    EXPECT_EQ(json["task"], 0);
    EXPECT_FALSE(json.contains("tasks_exited"));
    event.tasksExited = 4;
    EXPECT_EQ(eventJson(event)["tasks_exited"], 4);
    EXPECT_EQ(json["job_id"], 42);
    EXPECT_EQ(json["requeue_count"], 1);
    EXPECT_EQ(json["chain"], "c");
    EXPECT_EQ(json["step"], "batch");
    EXPECT_EQ(json["node"], "n1");
    EXPECT_EQ(json["exit_status"], 7);
    EXPECT_TRUE(json["signal"].is_null());
    EXPECT_EQ(json["seq"], 3);
    EXPECT_EQ(json["deadline_unix"], 1700003600);
    EXPECT_EQ(json["checkpoint"]["iteration"], 200);
    EXPECT_EQ(json["checkpoint"]["total_bytes"], 2000);
    EXPECT_EQ(json["checkpoint"]["final"], false);
    EXPECT_EQ(json["checkpoint"]["training_done"], false);
    EXPECT_TRUE(json["checkpoint"]["seq"].is_null());
    EXPECT_TRUE(json["checkpoint"]["job_id"].is_null());
    EXPECT_EQ(json["checkpoint"]["world_size"], 1);
    EXPECT_TRUE(json["checkpoint"]["region_layouts"].is_null());
    EXPECT_TRUE(json["tasks"].is_null());
    event.tasks = 8;
    EXPECT_EQ(eventJson(event)["tasks"], 8);
    EXPECT_EQ(json["tuning"]["overhead_percent"], 4.5);

    event.waitStatus = SIGKILL; // killed
    event.checkpoint.reset();
    const auto killed = eventJson(event);
    EXPECT_TRUE(killed["exit_status"].is_null());
    EXPECT_EQ(killed["signal"], SIGKILL);
    EXPECT_TRUE(killed["checkpoint"].is_null());
    EXPECT_TRUE(killed["tuning"].is_null());
}

TEST(Event, KeyDiffersByRequeueAndNode)
{
    StepEvent event = sampleEvent();
    const std::string key = eventJson(event)["idempotency_key"];
    event.timeUnix += 10; // a resent report of the same step and node: the same key
    EXPECT_EQ(eventJson(event)["idempotency_key"], key);
    StepEvent requeued = sampleEvent();
    requeued.requeueCount = 2;
    StepEvent elsewhere = sampleEvent();
    elsewhere.node = "n2";
    StepEvent start = sampleEvent();
    start.kind = "step_start";
    start.task.reset();
    const std::set<std::string> keys { key, eventJson(requeued)["idempotency_key"],
        eventJson(elsewhere)["idempotency_key"], eventJson(start)["idempotency_key"] };
    EXPECT_EQ(keys.size(), 4u);
    EXPECT_EQ(eventJson(start)["idempotency_key"], "42.1.n1.batch.step_start");
}

TEST(Event, ForwardsOnlyKnownNumericTuning)
{
    StepEvent event = sampleEvent();
    event.checkpoint->final = true;
    event.checkpoint->trainingDone = true;
    event.checkpoint->chainSeq = 2;
    event.checkpoint->jobId = 41;
    event.checkpoint->tuning = { { "interval", 9 }, { "stall_seconds", INFINITY }, { "note", "x" },
        { "snapshot_seconds", { { "deep", 1 } } } };
    const auto json = eventJson(event);
    EXPECT_EQ(json["tuning"], (nlohmann::json { { "interval", 9 } }));
    EXPECT_EQ(json["checkpoint"]["final"], true);
    EXPECT_EQ(json["checkpoint"]["training_done"], true);
    EXPECT_EQ(json["checkpoint"]["seq"], 2);
    EXPECT_EQ(json["checkpoint"]["job_id"], 41);
}

} // namespace
