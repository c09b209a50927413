// A full (or read-only) file system: the checkpoint fails with the error reported, training goes on,
// the previous checkpoint stays intact, and later checkpoints commit once there is room again.
#include "baton/ckpt/checkpointer.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "baton/ckpt/chain.hpp"
#include "ckpt_test_util.hpp"
#include "tests/support/process.hpp"

using namespace baton::ckpt;
using baton::test::fillPattern;
using baton::test::matchesPattern;
using baton::test::run;

namespace {

// A small tmpfs mounted for the test's lifetime. Mounting needs privileges: without them the test
// binary exits 77 (skipped).
class SmallFileSystem {
public:
    explicit SmallFileSystem(const std::string& size)
        : dir_("ckpt-fullfs")
    {
        auto result = run({ "mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", dir_.path().string() });
        if (result.exitCode != 0) {
            std::cout << "SKIP: cannot mount a tmpfs (needs root): " << result.output << std::endl;
            std::_Exit(77);
        }
    }
    ~SmallFileSystem() { run({ "umount", "-l", dir_.path().string() }); }
    SmallFileSystem(const SmallFileSystem&) = delete;
    SmallFileSystem& operator=(const SmallFileSystem&) = delete;

    std::filesystem::path path() const { return dir_.path() / "chain"; }
    void remount(const std::string& mode)
    {
        ASSERT_EQ(run({ "mount", "-o", "remount," + mode, dir_.path().string() }).exitCode, 0);
    }

private:
    baton::test::TempDir dir_;
};

std::vector<std::byte> restoreRegion(
    const std::filesystem::path& chain, std::size_t size, std::uint64_t& iteration)
{
    Options options;
    options.chainDir = chain;
    options.log = [](std::string_view) {};
    Checkpointer reader(options);
    std::vector<std::byte> out(size);
    reader.registerRegion("state", out.data(), size);
    auto result = reader.restore();
    iteration = result.restored ? result.iteration : 0;
    return out;
}

TEST(FullDisk, PreviousCheckpointSurvivesAndTheErrorIsReported)
{
    SmallFileSystem fs("6m");
    std::vector<std::string> logged;
    Options options;
    options.chainDir = fs.path();
    options.log = [&](std::string_view line) { logged.emplace_back(line); };
    Checkpointer ckpt(options);

    std::vector<std::byte> small(1 << 20);
    fillPattern(small.data(), small.size(), 1, 1);
    ckpt.registerRegion("state", small.data(), small.size());
    ASSERT_TRUE(ckpt.checkpointNow(1)) << ckpt.lastError();

    // The state grows beyond what the file system can hold next to the first checkpoint.
    std::vector<std::byte> large(5 << 20);
    fillPattern(large.data(), large.size(), 1, 2);
    ckpt.registerRegion("state", large.data(), large.size());
    EXPECT_FALSE(ckpt.checkpointNow(2));
    EXPECT_NE(ckpt.lastError().find("No space left on device"), std::string::npos) << ckpt.lastError();
    auto stats = ckpt.lastCheckpoint();
    EXPECT_TRUE(stats.finished);
    EXPECT_FALSE(stats.committed);
    EXPECT_EQ(stats.error, ckpt.lastError());
    EXPECT_EQ(ckpt.counters().failed, 1u);
    ASSERT_FALSE(logged.empty());
    EXPECT_NE(logged.back().find("previous checkpoint stays valid"), std::string::npos);

    // Nothing of the failed attempt is left behind, the first checkpoint is intact.
    auto list = listCheckpoints(fs.path());
    ASSERT_EQ(list.size(), 1u);
    EXPECT_TRUE(verifyCheckpoint(list[0].dir).ok);
    std::size_t entries = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(fs.path()))
        ++entries;
    EXPECT_EQ(entries, 1u);
    std::uint64_t iteration = 0;
    auto out = restoreRegion(fs.path(), small.size(), iteration);
    EXPECT_EQ(iteration, 1u);
    EXPECT_EQ(out, small);

    // Training continues: once the state fits again, checkpoints commit.
    fillPattern(small.data(), small.size(), 1, 3);
    ckpt.registerRegion("state", small.data(), small.size());
    ASSERT_TRUE(ckpt.checkpointNow(3)) << ckpt.lastError();
    EXPECT_TRUE(ckpt.lastError().empty());
    out = restoreRegion(fs.path(), small.size(), iteration);
    EXPECT_EQ(iteration, 3u);
    EXPECT_EQ(out, small);
}

TEST(FullDisk, ReadOnlyFileSystemIsReportedAndHarmless)
{
    SmallFileSystem fs("4m");
    Options options;
    options.chainDir = fs.path();
    options.log = [](std::string_view) {};
    Checkpointer ckpt(options);
    std::vector<std::byte> state(100000);
    fillPattern(state.data(), state.size(), 1, 1);
    ckpt.registerRegion("state", state.data(), state.size());
    ASSERT_TRUE(ckpt.checkpointNow(1));

    fs.remount("ro");
    fillPattern(state.data(), state.size(), 1, 2);
    EXPECT_FALSE(ckpt.checkpointNow(2));
    EXPECT_NE(ckpt.lastError().find("Read-only file system"), std::string::npos) << ckpt.lastError();
    fs.remount("rw");

    std::uint64_t iteration = 0;
    auto out = restoreRegion(fs.path(), state.size(), iteration);
    EXPECT_EQ(iteration, 1u);
    EXPECT_TRUE(matchesPattern(out.data(), out.size(), 1, 1));
}

} // namespace
