// The checkpointer on file systems that fail the way network file systems do, with fault_shim.so
// preloaded (meson sets LD_PRELOAD): renameat2 flags refused with EINVAL (NFS, FUSE without rename2) and
// stat errors other than ENOENT (EIO, ESTALE) on a committed checkpoint's manifest.
#include "baton/ckpt/checkpointer.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/manifest.hpp"
#include "ckpt_test_util.hpp"
#include "rename_probe.hpp"
#include "tests/support/process.hpp"

using namespace baton::ckpt;
using baton::test::fillPattern;
using baton::test::matchesPattern;
using baton::test::TempDir;

namespace fs = std::filesystem;

namespace {

Options quietOptions(const fs::path& dir, std::vector<std::string>* logged = nullptr)
{
    Options options;
    options.chainDir = dir;
    options.log = [logged](std::string_view line) {
        if (logged != nullptr)
            logged->emplace_back(line);
    };
    return options;
}

// Sets a variable the shim reads for the lifetime of one test.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const std::string& value)
        : name_(name)
    {
        ::setenv(name, value.c_str(), 1);
    }
    ~ScopedEnv() { ::unsetenv(name_); }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    const char* name_;
};

std::vector<std::string> hiddenEntries(const fs::path& dir)
{
    std::vector<std::string> hidden;
    for (const auto& entry : fs::directory_iterator(dir)) {
        std::string name = entry.path().filename().string();
        if (name.front() == '.')
            hidden.push_back(name);
    }
    return hidden;
}

pid_t deadPid()
{
    pid_t child = ::fork();
    if (child == 0)
        ::_exit(0);
    ::waitpid(child, nullptr, 0);
    return child;
}

std::string ownHost()
{
    std::string tag = temporaryOwnerTag();
    return tag.substr(0, tag.rfind('-'));
}

TEST(RenameFallback, CommitsAndReplacesWithPlainRename)
{
    TempDir dir("ckpt-nfs");
    ScopedEnv refuse("BATON_TEST_REFUSE_RENAME_FLAGS", "1");
    baton::test::expectRenameFlagsRefused(dir.path(), "fault_shim.so is not preloaded");
    std::vector<std::string> logged;
    auto options = quietOptions(dir.path() / "chain", &logged);
    std::vector<std::byte> state(100000);
    {
        Checkpointer ckpt(options);
        ckpt.registerRegion("s", state.data(), state.size());
        for (std::uint64_t it : { 1, 2 }) {
            fillPattern(state.data(), state.size(), 1, it);
            ASSERT_TRUE(ckpt.checkpointNow(it)) << ckpt.lastError();
        }
        // The same iteration again (a final checkpoint after an interval one) replaces it.
        fillPattern(state.data(), state.size(), 1, 99);
        ASSERT_TRUE(ckpt.checkpointNow(2, CheckpointFlags { .final = true })) << ckpt.lastError();
        ASSERT_TRUE(ckpt.checkpointNow(3)) << ckpt.lastError();
    }
    bool told = false;
    for (const auto& line : logged)
        told = told || line.find("refuses rename flags") != std::string::npos;
    EXPECT_TRUE(told) << "the fallback was not logged";
    auto list = listCheckpoints(dir.path() / "chain");
    ASSERT_EQ(list.size(), 2u); // keep = 2
    EXPECT_EQ(list[0].iteration, 2u);
    EXPECT_TRUE(hiddenEntries(dir.path() / "chain").empty());

    fs::remove_all(list[1].dir); // leave the replaced checkpoint of iteration 2 as the newest
    std::vector<std::byte> out(state.size());
    Checkpointer reader(quietOptions(dir.path() / "chain"));
    reader.registerRegion("s", out.data(), out.size());
    auto result = reader.restore();
    ASSERT_TRUE(result.restored);
    EXPECT_EQ(result.iteration, 2u);
    EXPECT_TRUE(result.final);
    EXPECT_TRUE(matchesPattern(out.data(), out.size(), 1, 99));
}

// A crash between the two renames of a plain-rename replacement: the old checkpoint is moved aside and
// the new one has not taken its name. The next Checkpointer puts the old one back.
TEST(RenameFallback, InterruptedReplacementPutsTheOldCheckpointBack)
{
    TempDir dir("ckpt-nfs-crash");
    std::vector<std::byte> state(5000);
    fillPattern(state.data(), state.size(), 1, 5);
    {
        Checkpointer ckpt(quietOptions(dir.path()));
        ckpt.registerRegion("s", state.data(), state.size());
        ASSERT_TRUE(ckpt.checkpointNow(5));
    }
    const std::string tag = ownHost() + "-" + std::to_string(deadPid());
    const fs::path committed = dir.path() / checkpointDirName(5);
    const fs::path aside = dir.path() / ("." + checkpointDirName(5) + ".replaced-" + tag);
    const fs::path temporary = dir.path() / ("." + checkpointDirName(5) + ".tmp-" + tag);
    fs::copy(committed, temporary);
    fs::rename(committed, aside);
    {
        Checkpointer ckpt(quietOptions(dir.path()));
        std::vector<std::byte> out(state.size());
        ckpt.registerRegion("s", out.data(), out.size());
        auto result = ckpt.restore();
        ASSERT_TRUE(result.restored) << "the moved-aside checkpoint was not put back";
        EXPECT_EQ(result.iteration, 5u);
        EXPECT_EQ(out, state);
    }
    EXPECT_TRUE(hiddenEntries(dir.path()).empty());

    // Killed after the new checkpoint took the name: the old one is only garbage.
    fs::copy(committed, aside);
    {
        Checkpointer ckpt(quietOptions(dir.path()));
    }
    EXPECT_TRUE(hiddenEntries(dir.path()).empty());
    EXPECT_TRUE(verifyCheckpoint(committed).ok);
}

class StatFault : public ::testing::TestWithParam<int> { };

// EIO or ESTALE when examining a committed checkpoint says nothing about it: retention keeps it and
// restore skips it with the error as the reason.
TEST_P(StatFault, RetentionNeverDeletesACheckpointItCannotExamine)
{
    const int code = GetParam();
    TempDir dir("ckpt-statfault");
    auto options = quietOptions(dir.path());
    options.keep = 10;
    std::vector<std::byte> state(3000);
    {
        Checkpointer ckpt(options);
        ckpt.registerRegion("s", state.data(), state.size());
        for (std::uint64_t it = 1; it <= 3; ++it) {
            fillPattern(state.data(), state.size(), 1, it);
            ASSERT_TRUE(ckpt.checkpointNow(it));
        }
    }
    const fs::path oldest = dir.path() / checkpointDirName(1);
    ScopedEnv fault(
        "BATON_TEST_STAT_FAULT", std::to_string(code) + ":/" + checkpointDirName(1) + "/" + kManifestName);
    struct stat st { };
    ASSERT_EQ(::stat((oldest / kManifestName).c_str(), &st), -1) << "fault_shim.so is not preloaded";
    ASSERT_EQ(errno, code);

    auto list = listCheckpoints(dir.path());
    ASSERT_EQ(list.size(), 3u);
    EXPECT_FALSE(list[0].committed);

    auto removed = pruneChain(dir.path(), 1);
    EXPECT_EQ(removed, std::vector<fs::path> { dir.path() / checkpointDirName(2) });
    EXPECT_TRUE(fs::exists(oldest / kDataFileName)) << std::strerror(code) << " made retention delete it";

    // Retention after a commit, on the persist thread, with keep = 1.
    options.keep = 1;
    {
        Checkpointer ckpt(options);
        ckpt.registerRegion("s", state.data(), state.size());
        fillPattern(state.data(), state.size(), 1, 4);
        ASSERT_TRUE(ckpt.checkpointNow(4));
    }
    EXPECT_TRUE(fs::exists(oldest / kDataFileName));
    EXPECT_FALSE(fs::exists(dir.path() / checkpointDirName(3)));

    // Restore skips an unexaminable newest checkpoint with the error as the reason.
    ScopedEnv newest(
        "BATON_TEST_STAT_FAULT", std::to_string(code) + ":/" + checkpointDirName(4) + "/" + kManifestName);
    Checkpointer reader(options);
    std::vector<std::byte> out(state.size());
    reader.registerRegion("s", out.data(), out.size());
    auto result = reader.restore();
    ASSERT_FALSE(result.fallbacks.empty());
    EXPECT_NE(result.fallbacks[0].reason.find(std::strerror(code)), std::string::npos)
        << result.fallbacks[0].reason;
    ASSERT_TRUE(result.restored);
    EXPECT_EQ(result.iteration, 1u);
    EXPECT_TRUE(matchesPattern(out.data(), out.size(), 1, 1));
}

INSTANTIATE_TEST_SUITE_P(Errors, StatFault, ::testing::Values(EIO, ESTALE),
    [](const auto& info) { return info.param == EIO ? std::string("EIO") : std::string("ESTALE"); });

} // namespace
