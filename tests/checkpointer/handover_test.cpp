// The manifest's handover fields (job_id, seq, final, training_done) and restore's wait for
// the predecessor's final checkpoint (BATON_HANDOVER_WAIT).
#include "baton/ckpt/checkpointer.hpp"

#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/manifest.hpp"
#include "ckpt_test_util.hpp"
#include "common/baton_contract.hpp"
#include "tests/support/process.hpp"

using namespace baton::ckpt;
using baton::test::fillPattern;
using baton::test::matchesPattern;
using baton::test::TempDir;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kStateBytes = 64 << 10;

// Unset identity variables, so that the environment of whoever runs the test cannot leak into them.
class Handover : public ::testing::Test {
protected:
    void SetUp() override
    {
        for (const char* name :
            { "BATON_JOB_ID", "BATON_CHAIN_SEQ", "BATON_RESTART_COUNT", "BATON_HANDOVER_WAIT" })
            ::unsetenv(name);
    }
    void TearDown() override { SetUp(); }
};

Options jobOptions(const std::filesystem::path& dir, std::optional<std::uint64_t> chainSeq,
    std::vector<std::string>* log = nullptr)
{
    Options options;
    options.chainDir = dir;
    options.keep = 100;
    options.jobId = chainSeq ? 1000 + *chainSeq : std::optional<std::uint64_t>();
    options.chainSeq = chainSeq;
    options.log = [log](std::string_view line) {
        if (log != nullptr)
            log->emplace_back(line);
    };
    return options;
}

std::string readText(const std::filesystem::path& path)
{
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

Manifest manifestOf(const std::filesystem::path& chain, std::uint64_t iteration)
{
    return parseManifest(readText(chain / checkpointDirName(iteration) / kManifestName));
}

// One job's checkpoint of `iteration`: the state is the pattern of that iteration.
void writeCheckpoint(const std::filesystem::path& chain, std::optional<std::uint64_t> chainSeq,
    std::uint64_t iteration, CheckpointFlags flags)
{
    std::vector<std::byte> state(kStateBytes);
    fillPattern(state.data(), state.size(), 1, iteration);
    Checkpointer ckpt(jobOptions(chain, chainSeq));
    ckpt.registerRegion("state", state.data(), state.size());
    ASSERT_TRUE(ckpt.checkpointNow(iteration, flags)) << ckpt.lastError();
}

TEST_F(Handover, ManifestRecordsTheWriterAndTheFlags)
{
    TempDir dir("ckpt-handover-fields");
    writeCheckpoint(dir.path(), 3, 10, {});
    writeCheckpoint(dir.path(), 3, 20, { true, true });

    const Manifest plain = manifestOf(dir.path(), 10);
    EXPECT_EQ(plain.jobId, 1003u);
    EXPECT_EQ(plain.chainSeq, 3u);
    EXPECT_FALSE(plain.final);
    EXPECT_FALSE(plain.trainingDone);
    EXPECT_EQ(plain.document["final"], false);
    EXPECT_EQ(plain.document["training_done"], false);
    EXPECT_EQ(plain.document["job_id"], 1003);
    EXPECT_EQ(plain.document["seq"], 3);

    const Manifest last = manifestOf(dir.path(), 20);
    EXPECT_TRUE(last.final);
    EXPECT_TRUE(last.trainingDone);

    std::vector<std::byte> state(kStateBytes);
    Checkpointer reader(jobOptions(dir.path(), 4));
    reader.registerRegion("state", state.data(), state.size());
    const RestoreResult result = reader.restore();
    ASSERT_TRUE(result.restored);
    EXPECT_EQ(result.iteration, 20u);
    EXPECT_EQ(result.jobId, 1003u);
    EXPECT_EQ(result.chainSeq, 3u);
    EXPECT_TRUE(result.final);
    EXPECT_TRUE(result.trainingDone);
    EXPECT_EQ(result.handoverWaitSeconds, 0.0);

    // The fields belong to the format: a program cannot set them as extra fields.
    for (const char* key : { "job_id", "seq", "final", "training_done" })
        EXPECT_THROW(reader.setManifestField(key, true), Error) << key;
}

TEST_F(Handover, UnknownWriterIsNullAndTheEnvironmentFillsTheGap)
{
    TempDir dir("ckpt-handover-identity");
    writeCheckpoint(dir.path(), std::nullopt, 1, {});
    const Manifest unknown = manifestOf(dir.path(), 1);
    EXPECT_TRUE(unknown.document["job_id"].is_null());
    EXPECT_TRUE(unknown.document["seq"].is_null());
    EXPECT_FALSE(unknown.jobId);
    EXPECT_FALSE(unknown.chainSeq);

    ::setenv("BATON_JOB_ID", "4711", 1);
    ::setenv("BATON_CHAIN_SEQ", "2", 1);
    writeCheckpoint(dir.path(), std::nullopt, 2, {});
    EXPECT_EQ(manifestOf(dir.path(), 2).jobId, 4711u);
    EXPECT_EQ(manifestOf(dir.path(), 2).chainSeq, 2u);

    // Options set by the program win; garbage in the environment reads as unknown.
    ::setenv("BATON_JOB_ID", "12abc", 1);
    writeCheckpoint(dir.path(), 7, 3, {});
    EXPECT_EQ(manifestOf(dir.path(), 3).chainSeq, 7u);
    writeCheckpoint(dir.path(), std::nullopt, 4, {});
    EXPECT_FALSE(manifestOf(dir.path(), 4).jobId);
    EXPECT_EQ(manifestOf(dir.path(), 4).chainSeq, 2u);
}

TEST_F(Handover, OldManifestWithoutTheFieldsReadsAsDefaults)
{
    TempDir dir("ckpt-handover-old");
    writeCheckpoint(dir.path(), 1, 5, { true, true });
    const auto path = dir.path() / checkpointDirName(5) / kManifestName;
    Manifest manifest = manifestOf(dir.path(), 5);
    // As an older writer left it, plus a field of a newer one.
    for (const char* key : { "job_id", "seq", "final", "training_done" })
        manifest.document.erase(key);
    manifest.document["some_future_field"] = { { "x", 1 } };
    std::ofstream(path, std::ios::trunc) << renderManifest(manifest.document);

    const Manifest old = parseManifest(readText(path));
    EXPECT_FALSE(old.jobId);
    EXPECT_FALSE(old.chainSeq);
    EXPECT_FALSE(old.final);
    EXPECT_FALSE(old.trainingDone);

    std::vector<std::byte> state(kStateBytes);
    Checkpointer reader(jobOptions(dir.path(), 2));
    reader.registerRegion("state", state.data(), state.size());
    const RestoreResult result = reader.restore();
    ASSERT_TRUE(result.restored);
    EXPECT_FALSE(result.final);
    EXPECT_FALSE(result.trainingDone);
    EXPECT_TRUE(matchesPattern(state.data(), state.size(), 1, 5));

    // Values of the wrong type (another writer's) are not a reason to reject the checkpoint.
    manifest.document["final"] = "yes";
    manifest.document["seq"] = -1;
    manifest.document["job_id"] = "123";
    std::ofstream(path, std::ios::trunc) << renderManifest(manifest.document);
    const Manifest odd = parseManifest(readText(path));
    EXPECT_FALSE(odd.final);
    EXPECT_FALSE(odd.chainSeq);
    EXPECT_FALSE(odd.jobId);
}

TEST_F(Handover, EnvironmentVariables)
{
    ::setenv("BATON_CHAIN_DIR", "/tmp/some-chain", 1);
    Options options = Options::fromEnvironment();
    EXPECT_FALSE(options.jobId);
    EXPECT_FALSE(options.chainSeq);
    EXPECT_EQ(options.handoverWaitSeconds, 0.0);

    ::setenv("BATON_JOB_ID", "123", 1);
    ::setenv("BATON_CHAIN_SEQ", "4", 1);
    ::setenv("BATON_HANDOVER_WAIT", "120", 1);
    options = Options::fromEnvironment();
    EXPECT_EQ(options.jobId, 123u);
    EXPECT_EQ(options.chainSeq, 4u);
    EXPECT_EQ(options.handoverWaitSeconds, 120.0);
    for (const char* good : { "0", "2.5", "3600" }) {
        ::setenv("BATON_HANDOVER_WAIT", good, 1);
        EXPECT_EQ(Options::fromEnvironment().handoverWaitSeconds, std::stod(good)) << good;
    }
    for (const char* bad : { "-1", "3601", "abc", "", "5s", "nan", "inf", "1e9" }) {
        ::setenv("BATON_HANDOVER_WAIT", bad, 1);
        try {
            Options::fromEnvironment();
            ADD_FAILURE() << "accepted BATON_HANDOVER_WAIT=" << bad;
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find("BATON_HANDOVER_WAIT"), std::string::npos) << e.what();
        }
    }
    ::unsetenv("BATON_HANDOVER_WAIT");
    for (const char* name : { "BATON_JOB_ID", "BATON_CHAIN_SEQ" }) {
        ::setenv(name, "-3", 1);
        try {
            Options::fromEnvironment();
            ADD_FAILURE() << "accepted " << name << "=-3";
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
        }
        ::setenv(name, "1", 1);
    }
    options = Options();
    options.chainDir = "/tmp/x";
    options.handoverWaitSeconds = 3601;
    EXPECT_THROW(options.validate(), ConfigError);
    ::unsetenv("BATON_CHAIN_DIR");
}

// A plugin of an earlier release sets only BATON_RESTART_COUNT: it is read where BATON_CHAIN_SEQ is
// unset, and never over it.
TEST_F(Handover, DeprecatedRestartCountVariableIsReadOnlyWithoutChainSeq)
{
    ::setenv("BATON_CHAIN_DIR", "/tmp/some-chain", 1);
    ::setenv("BATON_RESTART_COUNT", "3", 1);
    EXPECT_EQ(Options::fromEnvironment().chainSeq, 3u);
    Options unset;
    unset.identifyFromEnvironment();
    EXPECT_EQ(unset.chainSeq, 3u);

    ::setenv("BATON_CHAIN_SEQ", "5", 1);
    EXPECT_EQ(Options::fromEnvironment().chainSeq, 5u);
    Options both;
    both.identifyFromEnvironment();
    EXPECT_EQ(both.chainSeq, 5u);

    ::unsetenv("BATON_CHAIN_SEQ");
    ::setenv("BATON_RESTART_COUNT", "x", 1);
    try {
        Options::fromEnvironment();
        ADD_FAILURE() << "accepted BATON_RESTART_COUNT=x";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("BATON_RESTART_COUNT"), std::string::npos) << e.what();
    }
    ::unsetenv("BATON_CHAIN_DIR");
}

// A checkpoint written before `seq` was named so records `restart_count`: it is still read as the
// writer's seq, and a final one still counts as the predecessor's handover checkpoint.
TEST_F(Handover, ManifestOfAnEarlierReleaseWithRestartCountIsRead)
{
    TempDir dir("ckpt-handover-legacy");
    writeCheckpoint(dir.path(), 1, 30, { true, false });
    const auto path = dir.path() / checkpointDirName(30) / kManifestName;
    Manifest manifest = manifestOf(dir.path(), 30);
    manifest.document.erase("seq");
    manifest.document["restart_count"] = 1; // as an earlier release wrote it
    std::ofstream(path, std::ios::trunc) << renderManifest(manifest.document);
    EXPECT_EQ(parseManifest(readText(path)).chainSeq, 1u);

    Options options = jobOptions(dir.path(), 2);
    options.handoverWaitSeconds = 30;
    std::vector<std::byte> state(kStateBytes);
    Checkpointer successor(options);
    successor.registerRegion("state", state.data(), state.size());
    const RestoreResult result = successor.restore();
    ASSERT_TRUE(result.restored);
    EXPECT_EQ(result.iteration, 30u);
    EXPECT_EQ(result.chainSeq, 1u);
    EXPECT_FALSE(result.handoverTimedOut);
    EXPECT_LT(result.handoverWaitSeconds, 5.0);

    manifest.document["seq"] = 4; // both: `seq` is the one read
    std::ofstream(path, std::ios::trunc) << renderManifest(manifest.document);
    EXPECT_EQ(parseManifest(readText(path)).chainSeq, 4u);
}

// The predecessor (seq 1) commits its final checkpoint while the successor (seq 2) already
// waits in restore(): the successor must restore that one, not the older checkpoint it could see first.
TEST_F(Handover, WaitsForThePredecessorsFinalCheckpoint)
{
    TempDir dir("ckpt-handover-wait");
    writeCheckpoint(dir.path(), 0, 10, { true, false }); // an older job's final: not the predecessor's
    writeCheckpoint(dir.path(), 1, 20, {}); // the predecessor's last interval checkpoint

    std::vector<std::string> log;
    Options options = jobOptions(dir.path(), 2, &log);
    options.handoverWaitSeconds = 30;
    std::vector<std::byte> state(kStateBytes);
    Checkpointer successor(options);
    successor.registerRegion("state", state.data(), state.size());

    std::thread predecessor([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        writeCheckpoint(dir.path(), 1, 25, {}); // not final yet: still no handover
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        writeCheckpoint(dir.path(), 1, 30, { true, false }); // after SIGTERM
    });
    const RestoreResult result = successor.restore();
    predecessor.join();

    ASSERT_TRUE(result.restored);
    EXPECT_EQ(result.iteration, 30u);
    EXPECT_TRUE(result.final);
    EXPECT_EQ(result.chainSeq, 1u);
    EXPECT_TRUE(matchesPattern(state.data(), state.size(), 1, 30));
    EXPECT_FALSE(result.handoverTimedOut);
    EXPECT_GE(result.handoverWaitSeconds, 1.9);
    EXPECT_LT(result.handoverWaitSeconds, 25.0);
    bool logged = false;
    for (const auto& line : log)
        logged = logged
            || (line.find("handover") != std::string::npos && line.find("seq 1") != std::string::npos);
    EXPECT_TRUE(logged) << "the wait is logged";

    // Only the first restore waits.
    EXPECT_EQ(successor.restore().handoverWaitSeconds, 0.0);
}

TEST_F(Handover, GivesUpAfterTheBoundAndRestoresTheNewest)
{
    TempDir dir("ckpt-handover-timeout");
    writeCheckpoint(dir.path(), 0, 10, { true, false });
    writeCheckpoint(dir.path(), 1, 20, {}); // the predecessor died without a final checkpoint

    std::vector<std::string> log;
    Options options = jobOptions(dir.path(), 2, &log);
    options.handoverWaitSeconds = 1;
    std::vector<std::byte> state(kStateBytes);
    Checkpointer successor(options);
    successor.registerRegion("state", state.data(), state.size());
    const auto start = std::chrono::steady_clock::now();
    const RestoreResult result = successor.restore();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(result.restored);
    EXPECT_EQ(result.iteration, 20u);
    EXPECT_TRUE(matchesPattern(state.data(), state.size(), 1, 20));
    EXPECT_TRUE(result.handoverTimedOut);
    EXPECT_GE(result.handoverWaitSeconds, 1.0);
    EXPECT_LT(elapsed, 10.0);
    bool logged = false;
    for (const auto& line : log)
        logged = logged || line.find("no final checkpoint") != std::string::npos;
    EXPECT_TRUE(logged);
}

TEST_F(Handover, NoWaitForTheFirstJobOrWhenOff)
{
    TempDir dir("ckpt-handover-off");
    writeCheckpoint(dir.path(), 0, 10, {});
    for (auto [seq, wait] :
        { std::pair<std::optional<std::uint64_t>, double> { 0, 30.0 }, { std::nullopt, 30.0 }, { 5, 0.0 } }) {
        Options options = jobOptions(dir.path(), seq);
        options.handoverWaitSeconds = wait;
        Checkpointer ckpt(options);
        const auto start = std::chrono::steady_clock::now();
        const RestoreResult result = ckpt.restore();
        EXPECT_TRUE(result.restored);
        EXPECT_EQ(result.handoverWaitSeconds, 0.0);
        EXPECT_FALSE(result.handoverTimedOut);
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    }
}

TEST_F(Handover, WaitForHandoverReadsOnlyManifests)
{
    TempDir dir("ckpt-handover-poll");
    writeCheckpoint(dir.path(), 3, 40, { true, false });
    // A corrupt data file does not matter to the wait (restore judges the data later).
    std::ofstream(dir.path() / checkpointDirName(40) / kDataFileName, std::ios::trunc) << "torn";
    const HandoverWaitResult found = waitForHandover(dir.path(), 3, 5);
    EXPECT_TRUE(found.found);
    EXPECT_EQ(found.checkpoint.filename(), checkpointDirName(40));
    EXPECT_LT(found.seconds, 1.0);
    const HandoverWaitResult missing = waitForHandover(dir.path(), 4, 0.3, 0.05);
    EXPECT_FALSE(missing.found);
    EXPECT_GE(missing.seconds, 0.3);
}

// The predecessor's node died: batond, told by slurmctld, writes the chain's end marker, and the waiting
// successor restores the newest verified checkpoint at once instead of waiting out its bound. A marker of
// an older seq, or one that does not parse, says nothing.
TEST_F(Handover, TheEndMarkerOfTheDeadPredecessorEndsTheWait)
{
    TempDir dir("ckpt-handover-ended");
    writeCheckpoint(dir.path(), 0, 10, { true, false });
    writeCheckpoint(dir.path(), 1, 20, {}); // the predecessor's last, not final
    const fs::path marker = dir.path() / baton::contract::kHandoverEndedFile;
    std::ofstream(marker) << R"({"version": 1, "seq": 0, "job_id": 41, "state": "TIMEOUT", "time_unix": 1})";
    const HandoverWaitResult older = waitForHandover(dir.path(), 1, 0.3, 0.05);
    EXPECT_FALSE(older.found);
    EXPECT_TRUE(older.predecessorEnded.empty()) << "the marker of seq 0 is not about seq 1";
    std::ofstream(marker, std::ios::trunc) << R"({"version": 1, "seq": 1, "job_id": )";
    EXPECT_TRUE(waitForHandover(dir.path(), 1, 0.3, 0.05).predecessorEnded.empty()) << "a torn marker";

    std::vector<std::string> log;
    Options options = jobOptions(dir.path(), 2, &log);
    options.handoverWaitSeconds = 60;
    std::thread batond([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        const fs::path written = dir.path() / ".marker.tmp";
        std::ofstream(written) << R"({"version": 1, "seq": 1, "job_id": 42, "state": "NODE_FAIL", "time_unix": 1})";
        fs::rename(written, marker);
    });
    std::vector<std::byte> state(kStateBytes);
    Checkpointer successor(options);
    successor.registerRegion("state", state.data(), state.size());
    const RestoreResult result = successor.restore();
    batond.join();
    ASSERT_TRUE(result.restored);
    EXPECT_EQ(result.iteration, 20u);
    EXPECT_TRUE(matchesPattern(state.data(), state.size(), 1, 20));
    EXPECT_FALSE(result.handoverTimedOut);
    EXPECT_GE(result.handoverWaitSeconds, 0.4);
    EXPECT_LT(result.handoverWaitSeconds, 5.0) << "ended by the marker, not by the 60 s bound";
    bool logged = false;
    for (const auto& line : log)
        logged = logged || line.find("job 42 (seq 1) ended NODE_FAIL without a final checkpoint") != std::string::npos;
    EXPECT_TRUE(logged);
}

} // namespace
