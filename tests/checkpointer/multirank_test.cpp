// Multi-rank checkpoints (format version 2) with the ranks as threads of this process, each with its own
// FileCoordinator: the global commit, replicated state written once, resharding on restore, collective
// fallback and the coordinator's bounded waits.
#include "baton/ckpt/checkpointer.hpp"

#include <gtest/gtest.h>

#include <exception>
#include <fstream>
#include <functional>
#include <thread>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/coordinator.hpp"
#include "baton/ckpt/manifest.hpp"
#include "ckpt_test_util.hpp"
#include "rank_threads.hpp"
#include "tests/support/process.hpp"

using namespace baton::ckpt;
using baton::test::fillPattern;
using baton::test::matchesPattern;
using baton::test::runRanks;
using baton::test::TempDir;

namespace {

constexpr std::size_t kWeights = (1 << 20) + 123; // replicated: not a multiple of any split
constexpr std::size_t kMoments = 3 * 100003 + 7; // the whole sharded array

int launches = 0; // each launch of ranks gets its own coordinator session

Options rankOptions(const std::filesystem::path& dir, int rank, int size, int session,
    std::chrono::milliseconds timeout = std::chrono::seconds(20))
{
    Options options;
    options.chainDir = dir;
    options.log = [](std::string_view) {};
    options.coordinator
        = std::make_shared<FileCoordinator>(dir, "launch-" + std::to_string(session), rank, size, timeout);
    return options;
}


std::pair<std::size_t, std::size_t> shardOf(std::size_t total, int rank, int size)
{
    std::size_t begin = total * static_cast<std::size_t>(rank) / static_cast<std::size_t>(size);
    std::size_t end = total * static_cast<std::size_t>(rank + 1) / static_cast<std::size_t>(size);
    return { begin, end - begin };
}

// One rank's data-parallel state: replicated weights, its shard of the moments, a step blob.
struct RankState {
    std::vector<std::byte> weights = std::vector<std::byte>(kWeights);
    std::vector<std::byte> moments;
    std::size_t shardAt = 0;
    std::vector<std::byte> wholeMoments = std::vector<std::byte>(kMoments);

    RankState(Checkpointer& ckpt, int rank, int size)
    {
        auto [at, length] = shardOf(kMoments, rank, size);
        shardAt = at;
        moments.resize(length);
        ckpt.registerRegion("weights", weights.data(), weights.size());
        ckpt.setRegionLayout("weights", RegionLayout::replicated());
        ckpt.registerRegion("moments", moments.data(), moments.size());
        ckpt.setRegionLayout("moments", RegionLayout::sharded(at, kMoments));
    }

    void fill(Checkpointer& ckpt, std::uint64_t iteration)
    {
        fillPattern(weights.data(), weights.size(), 1, iteration);
        fillPattern(wholeMoments.data(), wholeMoments.size(), 2, iteration);
        std::copy_n(
            wholeMoments.begin() + static_cast<std::ptrdiff_t>(shardAt), moments.size(), moments.begin());
        ckpt.setBlob("step", std::to_string(iteration));
    }

    bool matches(std::uint64_t iteration)
    {
        fillPattern(wholeMoments.data(), wholeMoments.size(), 2, iteration);
        return matchesPattern(weights.data(), weights.size(), 1, iteration)
            && std::equal(
                moments.begin(), moments.end(), wholeMoments.begin() + static_cast<std::ptrdiff_t>(shardAt));
    }
};

// `size` ranks checkpoint `iteration` together.
void save(const std::filesystem::path& dir, int size, std::uint64_t iteration, int keep = 2)
{
    const int session = ++launches;
    runRanks(size, [&](int rank) {
        Options options = rankOptions(dir, rank, size, session);
        options.keep = keep;
        Checkpointer ckpt(std::move(options));
        RankState state(ckpt, rank, size);
        state.fill(ckpt, iteration);
        if (!ckpt.checkpointNow(iteration))
            throw Error("rank " + std::to_string(rank) + ": " + ckpt.lastError());
    });
}

// `size` ranks restore together; returns each rank's iteration (or throws the first rank's error).
std::vector<std::uint64_t> restoreAll(const std::filesystem::path& dir, int size)
{
    std::vector<std::uint64_t> iterations(static_cast<std::size_t>(size), 0);
    const int session = ++launches;
    runRanks(size, [&](int rank) {
        Checkpointer ckpt(rankOptions(dir, rank, size, session));
        RankState state(ckpt, rank, size);
        auto result = ckpt.restore();
        if (!result.restored) {
            std::string why;
            for (const auto& fallback : result.fallbacks)
                why += "; " + fallback.dir.filename().string() + ": " + fallback.reason;
            throw Error("rank " + std::to_string(rank) + " restored nothing" + why);
        }
        if (!state.matches(result.iteration))
            throw Error("rank " + std::to_string(rank) + ": state is not iteration "
                + std::to_string(result.iteration));
        auto step = result.blobs.at("step");
        if (std::string(reinterpret_cast<const char*>(step.data()), step.size())
            != std::to_string(result.iteration))
            throw Error("rank " + std::to_string(rank) + ": the step blob does not match");
        iterations[static_cast<std::size_t>(rank)] = result.iteration;
    });
    return iterations;
}

} // namespace

TEST(MultiRank, OneManifestNamesEveryShardAndReplicatedBytesAreWrittenOnce)
{
    TempDir dir("ckpt-multirank");
    save(dir.path(), 4, 7);
    const auto checkpoint = dir.path() / checkpointDirName(7);
    Manifest manifest
        = parseManifest(baton::test::run({ "cat", (checkpoint / kManifestName).string() }).output);
    EXPECT_EQ(manifest.formatVersion, kShardedFormatVersion);
    EXPECT_EQ(manifest.worldSize, 4);
    ASSERT_EQ(manifest.files.size(), 4u);
    std::uint64_t weightBytes = 0;
    for (const auto& entry : manifest.regions) {
        if (entry.name == "weights") {
            weightBytes += entry.size;
            EXPECT_EQ(entry.layout, kLayoutReplicated);
            EXPECT_LE(entry.size, kWeights / 4 + 4096)
                << "rank " << entry.rank << " wrote more than its part";
        }
    }
    EXPECT_EQ(weightBytes, kWeights) << "every replicated byte is written exactly once";
    EXPECT_TRUE(verifyCheckpoint(checkpoint).ok);
    // Nothing but the checkpoint (and the coordinator's folder) is left in the chain.
    for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
        const auto name = entry.path().filename().string();
        EXPECT_TRUE(name == checkpoint.filename().string() || name == kCoordinatorDirName) << name;
    }
    EXPECT_EQ(restoreAll(dir.path(), 4), std::vector<std::uint64_t>(4, 7));
}

TEST(MultiRank, ReshardsFourToTwoAndTwoToFour)
{
    TempDir dir("ckpt-reshard");
    save(dir.path(), 4, 3);
    EXPECT_EQ(restoreAll(dir.path(), 2), std::vector<std::uint64_t>(2, 3));
    save(dir.path(), 2, 5);
    EXPECT_EQ(restoreAll(dir.path(), 4), std::vector<std::uint64_t>(4, 5));
}

TEST(MultiRank, OneProcessRestoresTheWholeArrays)
{
    TempDir dir("ckpt-reshard-one");
    save(dir.path(), 4, 9);
    Options options;
    options.chainDir = dir.path();
    options.log = [](std::string_view) {};
    Checkpointer ckpt(options);
    std::vector<std::byte> weights(kWeights), moments(kMoments);
    ckpt.registerRegion("weights", weights.data(), weights.size());
    ckpt.registerRegion("moments", moments.data(), moments.size());
    auto result = ckpt.restore();
    ASSERT_TRUE(result.restored);
    EXPECT_EQ(result.iteration, 9u);
    EXPECT_TRUE(matchesPattern(weights.data(), weights.size(), 1, 9));
    EXPECT_TRUE(matchesPattern(moments.data(), moments.size(), 2, 9));
}

TEST(MultiRank, PerRankStateCannotChangeWorldSize)
{
    TempDir dir("ckpt-per-rank");
    int session = ++launches;
    runRanks(2, [&](int rank) {
        Checkpointer ckpt(rankOptions(dir.path(), rank, 2, session));
        std::vector<std::byte> own(4096, std::byte(rank));
        ckpt.registerRegion("rng", own.data(), own.size());
        ASSERT_TRUE(ckpt.checkpointNow(1)) << ckpt.lastError();
    });
    session = ++launches;
    std::vector<std::string> errors(4);
    runRanks(4, [&](int rank) {
        Checkpointer ckpt(rankOptions(dir.path(), rank, 4, session));
        std::vector<std::byte> own(4096);
        ckpt.registerRegion("rng", own.data(), own.size());
        try {
            ckpt.restore();
        } catch (const Error& e) {
            errors[static_cast<std::size_t>(rank)] = e.what();
        }
    });
    for (const auto& error : errors)
        EXPECT_NE(error.find("cannot be restored on 4 ranks"), std::string::npos) << error;
}

TEST(MultiRank, AllRanksFallBackTogether)
{
    TempDir dir("ckpt-fallback");
    save(dir.path(), 2, 1);
    save(dir.path(), 2, 2);
    // Damage rank 1's file of the newest checkpoint: rank 0's part still verifies, but nobody may use it.
    const auto file = dir.path() / checkpointDirName(2) / shardFileName(1);
    {
        std::fstream data(file, std::ios::in | std::ios::out | std::ios::binary);
        data.seekp(100);
        char byte = 0;
        data.read(&byte, 1);
        data.seekp(100);
        byte = static_cast<char>(byte ^ 0x5a);
        data.write(&byte, 1);
    }
    EXPECT_EQ(restoreAll(dir.path(), 2), std::vector<std::uint64_t>(2, 1));
}

TEST(MultiRank, RetentionRunsOnRankZeroOnly)
{
    TempDir dir("ckpt-retention");
    for (std::uint64_t it = 1; it <= 4; ++it)
        save(dir.path(), 3, it, 2);
    auto list = listCheckpoints(dir.path());
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[0].iteration, 3u);
    EXPECT_EQ(list[1].iteration, 4u);
}

TEST(MultiRank, AMissingRankFailsTheCheckpointWithAClearError)
{
    TempDir dir("ckpt-timeout");
    const int session = ++launches;
    std::string error, second;
    runRanks(2, [&](int rank) {
        Checkpointer ckpt(rankOptions(dir.path(), rank, 2, session, std::chrono::milliseconds(300)));
        std::vector<std::byte> weights(4096);
        ckpt.registerRegion("weights", weights.data(), weights.size());
        if (rank == 1)
            return; // gone before the checkpoint
        EXPECT_FALSE(ckpt.checkpointNow(1));
        error = ckpt.lastError();
        EXPECT_FALSE(ckpt.checkpointNow(2));
        second = ckpt.lastError();
    });
    EXPECT_NE(error.find("rank 1 of 2 did not reach"), std::string::npos) << error;
    EXPECT_NE(second.find("cannot coordinate again"), std::string::npos) << second;
    EXPECT_TRUE(listCheckpoints(dir.path()).empty()) << "nothing may be committed without every shard";
}

TEST(MultiRank, RanksThatCheckpointDifferentIterationsCommitNothing)
{
    TempDir dir("ckpt-mismatch");
    const int session = ++launches;
    std::vector<std::string> errors(2);
    runRanks(2, [&](int rank) {
        Checkpointer ckpt(rankOptions(dir.path(), rank, 2, session));
        std::vector<std::byte> weights(4096);
        ckpt.registerRegion("weights", weights.data(), weights.size());
        EXPECT_FALSE(ckpt.checkpointNow(rank == 0 ? 10 : 11));
        errors[static_cast<std::size_t>(rank)] = ckpt.lastError();
    });
    for (const auto& error : errors)
        EXPECT_NE(error.find("every rank must request the same checkpoints"), std::string::npos) << error;
    EXPECT_TRUE(listCheckpoints(dir.path()).empty());
}

TEST(MultiRank, CoordinatorConfigurationFromTheEnvironment)
{
    TempDir dir("ckpt-coord-env");
    ::setenv("BATON_WORLD_SIZE", "3", 1);
    ::setenv("BATON_RANK", "2", 1);
    ::unsetenv("BATON_COORD_SESSION");
    ::unsetenv("SLURM_STEP_ID");
    EXPECT_THROW(FileCoordinator::fromEnvironment(dir.path()), ConfigError) << "a world of 3 needs a session";
    ::setenv("BATON_COORD_SESSION", "job-1", 1);
    auto coordinator = FileCoordinator::fromEnvironment(dir.path());
    ASSERT_TRUE(coordinator);
    EXPECT_EQ(coordinator->rank(), 2);
    EXPECT_EQ(coordinator->size(), 3);
    ::setenv("BATON_RANK", "3", 1);
    EXPECT_THROW(FileCoordinator::fromEnvironment(dir.path()), ConfigError);
    ::setenv("BATON_COORD_SESSION", "../escape", 1);
    ::setenv("BATON_RANK", "0", 1);
    EXPECT_THROW(FileCoordinator::fromEnvironment(dir.path()), ConfigError);
    // The batch script of a job sees the allocation's SLURM_NTASKS but is one process.
    ::unsetenv("BATON_WORLD_SIZE");
    ::unsetenv("BATON_RANK");
    ::unsetenv("BATON_COORD_SESSION");
    ::setenv("SLURM_NTASKS", "4", 1);
    ::setenv("SLURM_PROCID", "0", 1);
    ::setenv("SLURM_JOB_ID", "77", 1);
    EXPECT_FALSE(FileCoordinator::fromEnvironment(dir.path()));
    ::setenv("SLURM_STEP_ID", "0", 1); // inside srun: four ranks
    coordinator = FileCoordinator::fromEnvironment(dir.path());
    ASSERT_TRUE(coordinator);
    EXPECT_EQ(coordinator->size(), 4);
    EXPECT_EQ(coordinator->directory().filename(), "77.0");
    for (const char* name : { "SLURM_NTASKS", "SLURM_PROCID", "SLURM_JOB_ID", "SLURM_STEP_ID" })
        ::unsetenv(name);
}

namespace {

// Two-level storage with several ranks: each rank commits its shard in its own node-local directory
// (`local`/rank-R), the drain's collective rounds put the whole checkpoint in the chain.
void saveTwoLevel(const std::filesystem::path& dir, const std::filesystem::path& local, int size,
    std::uint64_t from, std::uint64_t to, double drainBytesPerSecond = 0, std::vector<DrainStatus>* drains = nullptr)
{
    const int session = ++launches;
    if (drains != nullptr)
        drains->assign(static_cast<std::size_t>(size), {});
    runRanks(size, [&](int rank) {
        Options options = rankOptions(dir, rank, size, session);
        options.localDir = local;
        options.drainBytesPerSecond = drainBytesPerSecond;
        Checkpointer ckpt(std::move(options));
        RankState state(ckpt, rank, size);
        for (std::uint64_t iteration = from; iteration <= to; ++iteration) {
            state.fill(ckpt, iteration);
            if (!ckpt.checkpointNow(iteration, CheckpointFlags { .final = iteration == to }))
                throw Error("rank " + std::to_string(rank) + ": " + ckpt.lastError());
        }
        if (!ckpt.drainStatus().twoLevel)
            throw Error("rank " + std::to_string(rank) + " did not use two levels");
        if (drains != nullptr)
            (*drains)[static_cast<std::size_t>(rank)] = ckpt.drainStatus();
    });
}

std::vector<std::uint64_t> committedIn(const std::filesystem::path& dir)
{
    std::vector<std::uint64_t> iterations;
    for (const auto& info : listCheckpoints(dir)) {
        if (info.committed)
            iterations.push_back(info.iteration);
    }
    return iterations;
}

} // namespace

TEST(MultiRankTwoLevel, EachRankDrainsItsShardAndTheChainHoldsOneManifestRestoredOnAnyWorldSize)
{
    TempDir dir("ckpt-multirank-2l");
    TempDir local("ckpt-multirank-2l-local");
    saveTwoLevel(dir.path(), local.path(), 4, 1, 3);
    // The final checkpoint returned only once the chain had it (2 may have been skipped, replaced by 3
    // while 1 drained); keep 2 there.
    const auto inChain = committedIn(dir.path());
    ASSERT_FALSE(inChain.empty());
    EXPECT_EQ(inChain.back(), 3u);
    EXPECT_LE(inChain.size(), 2u);
    const auto checkpoint = dir.path() / checkpointDirName(3);
    Manifest manifest = parseManifest(baton::test::run({ "cat", (checkpoint / kManifestName).string() }).output);
    EXPECT_EQ(manifest.worldSize, 4);
    EXPECT_EQ(manifest.files.size(), 4u);
    EXPECT_TRUE(manifest.final);
    EXPECT_TRUE(verifyCheckpoint(checkpoint).ok);
    // Each rank kept its own shards node-locally; none of them is a checkpoint of the chain.
    for (int rank = 0; rank < 4; ++rank) {
        const auto own = local.path() / ("rank-" + std::to_string(rank));
        ASSERT_TRUE(std::filesystem::exists(own / checkpointDirName(3) / shardFileName(rank))) << own;
    }
    EXPECT_TRUE(committedIn(local.path()).empty());
    // Another world size restores it from the chain: two ranks, and one process.
    EXPECT_EQ(restoreAll(dir.path(), 2), std::vector<std::uint64_t>(2, 3));
    std::vector<std::byte> weights(kWeights);
    Options one;
    one.chainDir = dir.path();
    one.log = [](std::string_view) {};
    Checkpointer single(one);
    single.registerRegion("weights", weights.data(), weights.size());
    auto restored = single.restore();
    ASSERT_TRUE(restored.restored);
    EXPECT_EQ(restored.iteration, 3u);
    EXPECT_TRUE(matchesPattern(weights.data(), weights.size(), 1, 3));
}

// Every rank's Session::finish() commits the newest iteration again, final and with training_done (a
// plain `srun -n 2` of a training that ends): the ranks drain that second copy together, whichever
// rank's drain had already taken the first, and each rank's final returns once the chain has it.
TEST(MultiRankTwoLevel, AFinalCheckpointOfTheNewestIterationAgainReachesTheChainAsFinal)
{
    TempDir dir("ckpt-multirank-2l");
    TempDir local("ckpt-multirank-2l-local");
    const int session = ++launches;
    runRanks(2, [&](int rank) {
        Options options = rankOptions(dir.path(), rank, 2, session);
        options.localDir = local.path();
        options.drainBytesPerSecond = rank == 0 ? 0 : 6e6; // the ranks' drains out of step
        Checkpointer ckpt(std::move(options));
        RankState state(ckpt, rank, 2);
        for (std::uint64_t iteration = 1; iteration <= 3; ++iteration) {
            state.fill(ckpt, iteration);
            if (!ckpt.checkpointNow(iteration))
                throw Error("rank " + std::to_string(rank) + ": " + ckpt.lastError());
        }
        if (!ckpt.checkpointNow(3, CheckpointFlags { .final = true, .trainingDone = true }))
            throw Error("rank " + std::to_string(rank) + ": the final copy of 3: " + ckpt.lastError());
    });
    const auto checkpoint = dir.path() / checkpointDirName(3);
    Manifest manifest = parseManifest(baton::test::run({ "cat", (checkpoint / kManifestName).string() }).output);
    EXPECT_EQ(manifest.worldSize, 2);
    EXPECT_TRUE(manifest.final);
    EXPECT_TRUE(manifest.trainingDone);
    EXPECT_TRUE(verifyCheckpoint(checkpoint).ok);
    EXPECT_EQ(restoreAll(dir.path(), 2), std::vector<std::uint64_t>(2, 3));
}

TEST(MultiRankTwoLevel, ADrainThatFallsBehindTakesTheNewestCheckpointEveryRankHas)
{
    TempDir dir("ckpt-multirank-2l");
    TempDir local("ckpt-multirank-2l-local");
    std::vector<DrainStatus> drains;
    // About 0.1 s per shard copy while checkpoints commit node-locally every few milliseconds.
    saveTwoLevel(dir.path(), local.path(), 2, 1, 12, 6e6, &drains);
    EXPECT_EQ(committedIn(dir.path()).back(), 12u);
    for (const auto& drain : drains) {
        EXPECT_EQ(*drain.sharedIteration, 12u);
        EXPECT_GT(drain.skipped, 0u);
        EXPECT_EQ(drain.failed, 0u);
    }
    // The ranks agreed on every round: the same number of checkpoints reached the chain through each.
    EXPECT_EQ(drains[0].drained, drains[1].drained);
    EXPECT_EQ(restoreAll(dir.path(), 2), std::vector<std::uint64_t>(2, 12));
}
