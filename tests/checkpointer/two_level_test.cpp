// Two-level storage (Options::localDir): checkpoints commit node-locally, drain to the chain directory
// in the background, and only the chain directory's copies count for another node.
#include "baton/ckpt/checkpointer.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "baton/ckpt/chain.hpp"
#include "ckpt_test_util.hpp"
#include "tests/support/process.hpp"

using namespace baton::ckpt;
using baton::test::fillPattern;
using baton::test::matchesPattern;
namespace fs = std::filesystem;

namespace {

constexpr std::size_t kStateBytes = 4 << 20;

std::string readFile(const fs::path& path)
{
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

void writeFile(const fs::path& path, const std::string& text)
{
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

struct Levels {
    baton::test::TempDir root { "ckpt-two-level" };
    fs::path shared() const { return root.path() / "shared" / "chain"; }
    fs::path local() const { return root.path() / "local" / "chain"; }

    Options options(const std::string& node = "node-a") const
    {
        Options options;
        options.chainDir = shared();
        options.localDir = local();
        options.nodeName = node;
        options.keep = 2;
        options.localKeep = 1;
        options.log = [](std::string_view) {};
        return options;
    }
};

std::vector<std::uint64_t> committedIterations(const fs::path& dir)
{
    std::vector<std::uint64_t> iterations;
    std::error_code ec;
    if (!fs::exists(dir, ec))
        return iterations;
    for (const auto& info : listCheckpoints(dir)) {
        if (info.committed)
            iterations.push_back(info.iteration);
    }
    return iterations;
}

// A process's training state: one region filled with the pattern of its iteration.
struct State {
    std::vector<std::byte> bytes = std::vector<std::byte>(kStateBytes);
    void registerWith(Checkpointer& ckpt) { ckpt.registerRegion("weights", bytes.data(), bytes.size()); }
    void fill(std::uint64_t iteration) { fillPattern(bytes.data(), bytes.size(), 7, iteration); }
    bool holds(std::uint64_t iteration) const { return matchesPattern(bytes.data(), bytes.size(), 7, iteration); }
};

RestoreResult restoreOn(const Levels& levels, const std::string& node, State& state)
{
    Checkpointer ckpt(levels.options(node));
    state.registerWith(ckpt);
    return ckpt.restore();
}

TEST(TwoLevel, CommitsLocallyThenDrainsAVerifiedCopyToTheChain)
{
    Levels levels;
    State state;
    {
        Checkpointer ckpt(levels.options());
        state.registerWith(ckpt);
        for (std::uint64_t iteration = 1; iteration <= 4; ++iteration) {
            state.fill(iteration);
            ASSERT_TRUE(ckpt.checkpointNow(iteration));
            ASSERT_TRUE(ckpt.waitDurable());
            const DrainStatus status = ckpt.drainStatus();
            EXPECT_TRUE(status.twoLevel);
            ASSERT_TRUE(status.sharedIteration.has_value());
            EXPECT_EQ(*status.sharedIteration, iteration);
        }
        EXPECT_EQ(ckpt.drainStatus().drained, 4u);
        EXPECT_EQ(ckpt.drainStatus().failed, 0u);
    }
    // Retention on both levels: keep 2 in the chain, 1 node-locally.
    EXPECT_EQ(committedIterations(levels.shared()), (std::vector<std::uint64_t> { 3, 4 }));
    EXPECT_EQ(committedIterations(levels.local()), (std::vector<std::uint64_t> { 4 }));
    VerifyResult shared = verifyCheckpoint(levels.shared() / checkpointDirName(4));
    ASSERT_TRUE(shared.ok) << shared.reason;
    EXPECT_EQ(shared.manifest->document.value("node", std::string()), "node-a");
    // Nothing half-written is left on either level.
    for (const auto& dir : { levels.shared(), levels.local() }) {
        for (const auto& entry : fs::directory_iterator(dir))
            EXPECT_NE(entry.path().filename().string().front(), '.') << entry.path();
    }

    // Same node: the node-local copy (same iteration as the chain's) is read; another node: the chain's.
    State same, other;
    auto onSameNode = restoreOn(levels, "node-a", same);
    ASSERT_TRUE(onSameNode.restored);
    EXPECT_TRUE(onSameNode.nodeLocal);
    EXPECT_EQ(onSameNode.dir, levels.local() / checkpointDirName(4)) << "named as opened, not by its descriptor";
    EXPECT_EQ(onSameNode.iteration, 4u);
    EXPECT_TRUE(same.holds(4));
    auto onOtherNode = restoreOn(levels, "node-b", other);
    ASSERT_TRUE(onOtherNode.restored);
    EXPECT_FALSE(onOtherNode.nodeLocal);
    EXPECT_EQ(onOtherNode.iteration, 4u);
    EXPECT_TRUE(other.holds(4));
}

TEST(TwoLevel, AFinalCheckpointReturnsOnlyOnceItsSharedCopyCommitted)
{
    Levels levels;
    State state;
    Options options = levels.options();
    options.drainBytesPerSecond = 20e6; // 4 MiB: about 0.2 s per drain
    Checkpointer ckpt(options);
    state.registerWith(ckpt);
    state.fill(1);
    ASSERT_TRUE(ckpt.checkpointNow(1));
    state.fill(2);
    ASSERT_TRUE(ckpt.checkpointNow(2, CheckpointFlags { .final = true }));
    // No wait here: the final's return is the promise.
    EXPECT_EQ(committedIterations(levels.shared()).back(), 2u);
    auto manifest = parseManifest(readFile(levels.shared() / checkpointDirName(2) / kManifestName));
    EXPECT_TRUE(manifest.final);
}

// Session::finish() commits the newest checkpoint's iteration again, final and with training_done: that
// second copy is drained too (abandoning the first one's drain), and the final returns once it is there.
TEST(TwoLevel, AFinalCheckpointOfTheNewestIterationAgainReachesTheChainAsFinal)
{
    Levels levels;
    State state;
    Options options = levels.options();
    options.drainBytesPerSecond = 20e6; // about 0.2 s per drain: the second commit comes during the first's
    Checkpointer ckpt(options);
    state.registerWith(ckpt);
    state.fill(2);
    ASSERT_TRUE(ckpt.checkpointNow(2));
    ASSERT_TRUE(ckpt.checkpointNow(2, CheckpointFlags { .final = true, .trainingDone = true })) << ckpt.lastError();
    auto manifest = parseManifest(readFile(levels.shared() / checkpointDirName(2) / kManifestName));
    EXPECT_TRUE(manifest.final);
    EXPECT_TRUE(manifest.trainingDone);
    // Once the first copy had drained, the same again.
    state.fill(3);
    ASSERT_TRUE(ckpt.checkpointNow(3));
    ASSERT_TRUE(ckpt.waitDurable());
    ASSERT_TRUE(ckpt.checkpointNow(3, CheckpointFlags { .final = true, .trainingDone = true })) << ckpt.lastError();
    manifest = parseManifest(readFile(levels.shared() / checkpointDirName(3) / kManifestName));
    EXPECT_TRUE(manifest.final);
    EXPECT_TRUE(manifest.trainingDone);
    EXPECT_EQ(ckpt.drainStatus().failed, 0u);
}

TEST(TwoLevel, ADrainThatFallsBehindSkipsToTheNewestAndNeverBlocksASnapshot)
{
    Levels levels;
    State state;
    Options options = levels.options();
    options.drainBytesPerSecond = 8e6; // about 0.5 s per drain, while checkpoints commit every few ms
    Checkpointer ckpt(options);
    state.registerWith(ckpt);
    const auto start = std::chrono::steady_clock::now();
    for (std::uint64_t iteration = 1; iteration <= 12; ++iteration) {
        state.fill(iteration);
        ASSERT_TRUE(ckpt.checkpointNow(iteration));
        // The one being drained is kept node-locally whatever localKeep says.
        for (auto needed : committedIterations(levels.local()))
            EXPECT_LE(needed, iteration);
    }
    const double committing = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(committing, 3.0) << "node-local commits waited for the drain";
    ASSERT_TRUE(ckpt.waitDurable());
    const DrainStatus status = ckpt.drainStatus();
    EXPECT_EQ(*status.sharedIteration, 12u);
    EXPECT_GT(status.skipped, 0u);
    EXPECT_EQ(status.drained + status.skipped, 12u);
    State restored;
    auto result = restoreOn(levels, "node-b", restored);
    ASSERT_TRUE(result.restored);
    EXPECT_EQ(result.iteration, 12u);
    EXPECT_TRUE(restored.holds(12));
}

// The child checkpoints 1 (drained), then 2 with a drain too slow to finish, and is killed during it.
TEST(TwoLevel, KilledDuringADrainTheChainHoldsTheOlderCopyAndTheNodeItsNewerOne)
{
    Levels levels;
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        State state;
        Options options = levels.options();
        Checkpointer ckpt(options);
        state.registerWith(ckpt);
        state.fill(1);
        if (!ckpt.checkpointNow(1, CheckpointFlags { .final = true }))
            std::_Exit(3);
        std::_Exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    const pid_t slow = ::fork();
    ASSERT_GE(slow, 0);
    if (slow == 0) {
        State state;
        Options options = levels.options();
        options.drainBytesPerSecond = 1e6; // 4 s for 4 MiB: killed long before
        Checkpointer ckpt(options);
        state.registerWith(ckpt);
        auto restored = ckpt.restore();
        state.fill(2);
        ckpt.checkpointNow(2);
        ::pause();
        std::_Exit(0);
    }
    // Killed once the drain has begun writing into the chain.
    bool draining = false;
    for (int i = 0; i < 200 && !draining; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
        for (const auto& entry : fs::directory_iterator(levels.shared()))
            draining = draining || entry.path().filename().string().starts_with(".ckpt-000000000002.tmp-");
    }
    ASSERT_TRUE(draining) << "the drain of iteration 2 never started";
    ASSERT_EQ(::kill(slow, SIGKILL), 0);
    ASSERT_EQ(::waitpid(slow, &status, 0), slow);

    // The chain is not torn: only iteration 1, complete.
    EXPECT_EQ(committedIterations(levels.shared()), (std::vector<std::uint64_t> { 1 }));
    EXPECT_TRUE(verifyCheckpoint(levels.shared() / checkpointDirName(1)).ok);
    EXPECT_EQ(committedIterations(levels.local()).back(), 2u);

    // Another node never sees the newer node-local copy.
    State other;
    auto onOther = restoreOn(levels, "node-b", other);
    ASSERT_TRUE(onOther.restored);
    EXPECT_EQ(onOther.iteration, 1u);
    EXPECT_FALSE(onOther.nodeLocal);
    EXPECT_TRUE(other.holds(1));
    bool refusedLocal = false;
    for (const auto& fallback : onOther.fallbacks)
        refusedLocal = refusedLocal || fallback.reason.find("node-local copy written on node 'node-a'") != std::string::npos;
    EXPECT_TRUE(refusedLocal);

    // The same node takes it, verified, and drains it, so that the chain has it from now on.
    State same;
    {
        Checkpointer ckpt(levels.options("node-a"));
        same.registerWith(ckpt);
        auto onSame = ckpt.restore();
        ASSERT_TRUE(onSame.restored);
        EXPECT_EQ(onSame.iteration, 2u);
        EXPECT_TRUE(onSame.nodeLocal);
        EXPECT_TRUE(same.holds(2));
        ASSERT_TRUE(ckpt.waitDurable());
    }
    EXPECT_EQ(committedIterations(levels.shared()).back(), 2u);
    // The killed drain's temporary directory was cleared by the next process on this host.
    for (const auto& entry : fs::directory_iterator(levels.shared()))
        EXPECT_NE(entry.path().filename().string().front(), '.') << entry.path();
}

TEST(TwoLevel, ANodeLocalCopyThatDoesNotVerifyIsPassedOver)
{
    Levels levels;
    State state;
    {
        Checkpointer ckpt(levels.options());
        state.registerWith(ckpt);
        state.fill(1);
        ASSERT_TRUE(ckpt.checkpointNow(1, CheckpointFlags { .final = true }));
    }
    // A newer node-local copy, torn: its data file flipped.
    fs::copy(levels.local() / checkpointDirName(1), levels.local() / checkpointDirName(2));
    std::string manifest = readFile(levels.local() / checkpointDirName(2) / kManifestName);
    const auto at = manifest.find("\"iteration\": 1");
    ASSERT_NE(at, std::string::npos) << manifest.substr(0, 400);
    manifest.replace(at, 14, "\"iteration\": 2");
    writeFile(levels.local() / checkpointDirName(2) / kManifestName, manifest);
    {
        std::fstream data(levels.local() / checkpointDirName(2) / kDataFileName, std::ios::in | std::ios::out);
        data.seekp(100);
        data.put('\x55');
    }
    State restored;
    auto result = restoreOn(levels, "node-a", restored);
    ASSERT_TRUE(result.restored);
    EXPECT_EQ(result.iteration, 1u);
    EXPECT_TRUE(restored.holds(1));
    ASSERT_FALSE(result.fallbacks.empty());
}

// A node-local copy that rots before its drain is never copied into the chain, nor tried again.
TEST(TwoLevel, ANodeLocalCopyThatRotsBeforeItsDrainIsNotDrained)
{
    Levels levels;
    State state;
    Options options = levels.options();
    options.localKeep = 2;
    options.drainBytesPerSecond = 4e6; // iteration 1 drains for about a second
    Checkpointer ckpt(options);
    state.registerWith(ckpt);
    state.fill(1);
    ASSERT_TRUE(ckpt.checkpointNow(1));
    state.fill(2);
    ASSERT_TRUE(ckpt.checkpointNow(2)); // waits for its drain behind iteration 1's
    {
        std::fstream data(levels.local() / checkpointDirName(2) / kDataFileName, std::ios::in | std::ios::out);
        data.seekp(1000);
        data.put('\x55');
    }
    EXPECT_FALSE(ckpt.waitDurable());
    const DrainStatus status = ckpt.drainStatus();
    EXPECT_EQ(status.failed, 1u);
    EXPECT_EQ(status.retries, 0u);
    EXPECT_NE(status.lastError.find("checksum mismatch"), std::string::npos) << status.lastError;
    EXPECT_EQ(committedIterations(levels.shared()), (std::vector<std::uint64_t> { 1 }));
}

// The shared file system refuses writes for a while (read-only here): the drain retries with backoff,
// counts it, and commits once it can; training's node-local commits never wait.
TEST(TwoLevel, ADrainSurvivesABrieflyFailingSharedFileSystem)
{
    baton::test::TempDir mountPoint("ckpt-two-level-fs");
    if (baton::test::run({ "mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", mountPoint.path().string() }).exitCode
        != 0)
        GTEST_SKIP() << "cannot mount a tmpfs (needs root)";
    struct Unmount {
        fs::path dir;
        ~Unmount() { baton::test::run({ "umount", "-l", dir.string() }); }
    } unmount { mountPoint.path() };
    Levels levels;
    State state;
    Options options = levels.options();
    options.chainDir = mountPoint.path() / "chain";
    Checkpointer ckpt(options);
    state.registerWith(ckpt);
    state.fill(1);
    ASSERT_TRUE(ckpt.checkpointNow(1));
    ASSERT_TRUE(ckpt.waitDurable());
    ASSERT_EQ(baton::test::run({ "mount", "-o", "remount,ro", mountPoint.path().string() }).exitCode, 0);
    state.fill(2);
    ASSERT_TRUE(ckpt.checkpointNow(2)); // commits node-locally at once
    std::this_thread::sleep_for(std::chrono::milliseconds(1200)); // attempts 1 and 2 fail (0.5 s backoff)
    ASSERT_EQ(baton::test::run({ "mount", "-o", "remount,rw", mountPoint.path().string() }).exitCode, 0);
    ASSERT_TRUE(ckpt.waitDurable());
    const DrainStatus status = ckpt.drainStatus();
    EXPECT_GE(status.retries, 1u);
    EXPECT_EQ(status.failed, 0u);
    EXPECT_EQ(*status.sharedIteration, 2u);
    EXPECT_NE(status.lastError.find("Read-only"), std::string::npos) << status.lastError;
    EXPECT_TRUE(verifyCheckpoint(options.chainDir / checkpointDirName(2)).ok);
}

TEST(TwoLevel, ANodeLocalDirectoryOfAnotherUserIsRefused)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to give a directory to another user";
    Levels levels;
    fs::create_directories(levels.local());
    ASSERT_EQ(::chown(levels.local().c_str(), 65534, 65534), 0);
    std::string logged;
    Options options = levels.options();
    options.log = [&](std::string_view line) { logged += std::string(line) + "\n"; };
    State state;
    Checkpointer ckpt(options);
    state.registerWith(ckpt);
    state.fill(1);
    ASSERT_TRUE(ckpt.checkpointNow(1));
    EXPECT_FALSE(ckpt.drainStatus().twoLevel);
    EXPECT_NE(logged.find("belongs to uid 65534"), std::string::npos) << logged;
    EXPECT_EQ(committedIterations(levels.shared()), (std::vector<std::uint64_t> { 1 }));
    EXPECT_TRUE(committedIterations(levels.local()).empty());
}

// Two levels or one, as the trusted walk to the node-local directory decides; the log says why.
struct Started {
    std::string logged;
    bool twoLevel = false;
};

Started startWith(const Levels& levels)
{
    Started started;
    Options options = levels.options();
    options.log = [&](std::string_view line) { started.logged += std::string(line) + "\n"; };
    State state;
    Checkpointer ckpt(options);
    state.registerWith(ckpt);
    state.fill(1);
    EXPECT_TRUE(ckpt.checkpointNow(1));
    started.twoLevel = ckpt.drainStatus().twoLevel;
    return started;
}

// The documented layout on a shared scratch disk (/local/%u/baton): a user who makes /local/<victim>
// first controls every name below it, whoever owns the chain's own folder.
TEST(TwoLevel, ADirectoryOfAnotherUserOnTheWayIsRefused)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to give a directory to another user";
    Levels levels;
    fs::create_directories(levels.local().parent_path());
    ASSERT_EQ(::chown(levels.local().parent_path().c_str(), 65534, 65534), 0);
    const Started started = startWith(levels);
    EXPECT_FALSE(started.twoLevel);
    EXPECT_NE(started.logged.find("'" + levels.local().parent_path().string() + "' belongs to uid 65534"),
        std::string::npos) << started.logged;
    EXPECT_FALSE(fs::exists(levels.local()));
}

TEST(TwoLevel, ASymbolicLinkOfAnotherUserOnTheWayIsRefused)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to give a link to another user";
    Levels levels;
    const fs::path planted = levels.root.path() / "planted";
    fs::create_directories(planted);
    fs::create_directory_symlink(planted, levels.local().parent_path());
    ASSERT_EQ(::lchown(levels.local().parent_path().c_str(), 65534, 65534), 0);
    const Started started = startWith(levels);
    EXPECT_FALSE(started.twoLevel);
    EXPECT_NE(started.logged.find("is a symbolic link of uid 65534"), std::string::npos) << started.logged;
    EXPECT_FALSE(fs::exists(planted / "chain"));
}

// A directory everyone may write lets anyone rename what is in it; a sticky one (as /tmp) does not.
TEST(TwoLevel, AWorldWritableDirectoryOnTheWayIsRefusedUnlessSticky)
{
    Levels levels;
    fs::create_directories(levels.local().parent_path());
    ASSERT_EQ(::chmod(levels.local().parent_path().c_str(), 0777), 0);
    const Started open = startWith(levels);
    EXPECT_FALSE(open.twoLevel);
    EXPECT_NE(open.logged.find("is writable by other users and not sticky"), std::string::npos) << open.logged;
    ASSERT_EQ(::chmod(levels.local().parent_path().c_str(), 01777), 0);
    EXPECT_TRUE(startWith(levels).twoLevel);
}

// Once open, the node-local level is used through its descriptor: a rename on the way (by whoever
// could) does not redirect the checkpoints into a directory put in its place.
TEST(TwoLevel, RenamingTheDirectoryAwayDoesNotRedirectItsCheckpoints)
{
    Levels levels;
    const fs::path movedTo = levels.root.path() / "local" / "moved";
    State state;
    {
        Checkpointer ckpt(levels.options());
        state.registerWith(ckpt);
        ASSERT_TRUE(ckpt.drainStatus().twoLevel);
        fs::rename(levels.local(), movedTo);
        fs::create_directories(levels.local());
        state.fill(1);
        ASSERT_TRUE(ckpt.checkpointNow(1));
        ASSERT_TRUE(ckpt.waitDurable());
    }
    EXPECT_EQ(committedIterations(movedTo), (std::vector<std::uint64_t> { 1 }));
    EXPECT_TRUE(committedIterations(levels.local()).empty());
    EXPECT_EQ(committedIterations(levels.shared()), (std::vector<std::uint64_t> { 1 }));
}

} // namespace
