// Crash consistency: a child process checkpoints in a loop and is SIGKILLed at random moments; after
// every kill, restore must return a complete, verified checkpoint (or none, before the first commit).
// Every third iteration is checkpointed twice, so that replacing a checkpoint is killed too. Run a second
// time with fault_shim.so preloaded and BATON_TEST_REFUSE_RENAME_FLAGS=1 (ckpt_crash_test_plain_rename):
// renameat2 flags fail with EINVAL as on NFS, and every commit takes the plain-rename protocol. With
// BATON_TEST_TWO_LEVEL=1 (ckpt_crash_test_two_level) the child checkpoints to two levels, node-local and
// shared: the kills then also land in drains, and the shared level must hold only verified checkpoints,
// as another node sees them.
#include "baton/ckpt/checkpointer.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "baton/ckpt/chain.hpp"
#include "ckpt_test_util.hpp"
#include "rename_probe.hpp"
#include "tests/support/process.hpp"

using namespace baton::ckpt;
using baton::test::fillPattern;
using baton::test::matchesPattern;

namespace {

const std::vector<std::size_t> kSizes = { 256 << 10, 1000, 77, 0, 65536 + 3 };

bool twoLevel()
{
    const char* value = std::getenv("BATON_TEST_TWO_LEVEL");
    return value != nullptr && std::string(value) == "1";
}

// With two levels, `dir` holds both: shared/ (the chain) and local/ (node "node-a"'s directory).
Options quietOptions(const std::filesystem::path& dir, const std::string& node = "node-a")
{
    Options options;
    options.chainDir = twoLevel() ? dir / "shared" : dir;
    if (twoLevel()) {
        options.localDir = dir / "local";
        options.nodeName = node;
    }
    options.keep = 2;
    options.log = [](std::string_view) {};
    return options;
}

// Restores the chain into fresh regions; returns the result and whether every region holds its pattern.
RestoreResult restoreAndCheck(const std::filesystem::path& dir, const std::string& node, bool& matches)
{
    std::vector<std::vector<std::byte>> out(kSizes.size());
    Checkpointer ckpt(quietOptions(dir, node));
    for (std::size_t i = 0; i < kSizes.size(); ++i) {
        out[i].resize(kSizes[i]);
        ckpt.registerRegion("r" + std::to_string(i), out[i].data(), kSizes[i]);
    }
    auto result = ckpt.restore();
    matches = true;
    for (std::size_t i = 0; result.restored && i < kSizes.size(); ++i)
        matches = matches && matchesPattern(out[i].data(), kSizes[i], i, result.iteration);
    return result;
}

// Runs in the forked child until it is killed: continue the chain, checkpoint every iteration.
[[noreturn]] void checkpointForever(const std::filesystem::path& dir)
{
    std::vector<std::vector<std::byte>> state(kSizes.size());
    Checkpointer ckpt(quietOptions(dir));
    for (std::size_t i = 0; i < kSizes.size(); ++i) {
        state[i].resize(kSizes[i]);
        ckpt.registerRegion("r" + std::to_string(i), state[i].data(), kSizes[i]);
    }
    auto restored = ckpt.restore();
    std::uint64_t iteration = restored.restored ? restored.iteration + 1 : 1;
    for (;; ++iteration) {
        for (std::size_t i = 0; i < kSizes.size(); ++i)
            fillPattern(state[i].data(), kSizes[i], i, iteration);
        ckpt.setBlob("iteration", std::to_string(iteration));
        if (iteration % 2 == 0) {
            ckpt.checkpointNow(iteration);
        } else {
            // The pipelined path: the hooks around an update while the previous persist may still run.
            ckpt.beforeUpdate();
            ckpt.afterUpdate(iteration);
            ckpt.requestCheckpoint(iteration);
            ckpt.beforeUpdate();
        }
        // The same iteration again, as a final checkpoint after an interval one: a replacement.
        if (iteration % 3 == 0)
            ckpt.checkpointNow(iteration, CheckpointFlags { .final = true });
    }
}

bool renameFlagsRefused()
{
    const char* refuse = std::getenv("BATON_TEST_REFUSE_RENAME_FLAGS");
    return refuse != nullptr && std::string(refuse) == "1";
}

// Another node sees the shared level alone: never torn, never going back. (Read first: the restore
// on the writer's node drains a newer node-local copy.)
void checkSharedLevel(const std::filesystem::path& dir, int round, std::uint64_t& lastShared)
{
    bool matches = false;
    auto shared = restoreAndCheck(dir, "node-b", matches);
    ASSERT_FALSE(shared.nodeLocal) << "round " << round;
    if (shared.restored) {
        ASSERT_TRUE(matches) << "round " << round << ", iteration " << shared.iteration;
        ASSERT_GE(shared.iteration, lastShared) << "round " << round;
        lastShared = shared.iteration;
    }
    for (const auto& fallback : shared.fallbacks) {
        if (fallback.reason.find("node-local copy written on node") == std::string::npos)
            ADD_FAILURE() << "round " << round << ": skipped " << fallback.dir << ": " << fallback.reason;
    }
}

// The writer's node restores the newest checkpoint: whole, its pattern intact, never going back.
void checkRestore(const std::filesystem::path& dir, int round, std::uint64_t& lastRestored, int& restoredCount)
{
    std::vector<std::vector<std::byte>> out(kSizes.size());
    Checkpointer ckpt(quietOptions(dir));
    for (std::size_t i = 0; i < kSizes.size(); ++i) {
        out[i].resize(kSizes[i]);
        ckpt.registerRegion("r" + std::to_string(i), out[i].data(), kSizes[i]);
    }
    auto result = ckpt.restore();
    if (!result.restored) {
        ASSERT_EQ(restoredCount, 0) << "round " << round << ": a committed checkpoint disappeared";
        return;
    }
    ++restoredCount;
    ASSERT_GE(result.iteration, lastRestored) << "round " << round;
    lastRestored = result.iteration;
    for (std::size_t i = 0; i < kSizes.size(); ++i)
        ASSERT_TRUE(matchesPattern(out[i].data(), kSizes[i], i, result.iteration))
            << "round " << round << ", region " << i << ", iteration " << result.iteration;
    const auto& blob = result.blobs["iteration"];
    ASSERT_EQ(std::string(reinterpret_cast<const char*>(blob.data()), blob.size()),
        std::to_string(result.iteration));
    // Every committed checkpoint verifies and nothing half-written carries a checkpoint's name.
    for (const auto& fallback : result.fallbacks)
        ADD_FAILURE() << "round " << round << ": skipped " << fallback.dir << ": " << fallback.reason;
}

TEST(CrashConsistency, RandomSigkillNeverLeavesATornCheckpoint)
{
    baton::test::TempDir dir("ckpt-crash");
    if (renameFlagsRefused()) {
        ASSERT_NO_FATAL_FAILURE(baton::test::expectRenameFlagsRefused(
            dir.path(), "BATON_TEST_REFUSE_RENAME_FLAGS=1 without fault_shim.so in LD_PRELOAD"));
    }
    std::mt19937 rng(std::random_device {}());
    std::uniform_int_distribution<int> delayMicros(0, 40000);
    const int kills = 300;
    std::uint64_t lastRestored = 0;
    std::uint64_t lastShared = 0;
    int restoredCount = 0;
    for (int round = 0; round < kills; ++round) {
        pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0)
            checkpointForever(dir.path());
        std::this_thread::sleep_for(std::chrono::microseconds(delayMicros(rng)));
        ASSERT_EQ(::kill(pid, SIGKILL), 0);
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFSIGNALED(status)) << "the child ended by itself, status " << status;

        if (twoLevel()) {
            ASSERT_NO_FATAL_FAILURE(checkSharedLevel(dir.path(), round, lastShared));
        }
        ASSERT_NO_FATAL_FAILURE(checkRestore(dir.path(), round, lastRestored, restoredCount));
    }
    EXPECT_GT(restoredCount, kills / 2);
    EXPECT_GT(lastRestored, 50u) << "the chain made too little progress";
    // Kills between a commit and its pruning leave extra checkpoints (older ones go only after a newer one
    // committed); the next undisturbed commit brings the chain back to `keep`.
    const Options options = quietOptions(dir.path());
    {
        Checkpointer ckpt(options);
        ASSERT_TRUE(ckpt.checkpointNow(lastRestored + 1));
        ASSERT_TRUE(ckpt.waitDurable());
    }
    int committed = 0;
    for (const auto& info : listCheckpoints(options.chainDir))
        committed += info.committed ? 1 : 0;
    EXPECT_EQ(committed, 2);
    // Nothing that was moved aside or half-written outlives the processes that made it.
    for (const auto& level : { options.chainDir, options.localDir }) {
        if (level.empty())
            continue;
        for (const auto& entry : std::filesystem::directory_iterator(level))
            EXPECT_NE(entry.path().filename().string().front(), '.') << entry.path();
    }
}

} // namespace
