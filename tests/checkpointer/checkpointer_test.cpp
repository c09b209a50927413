// Round trips, re-registration, hooks, manifest fields, retention and options of the checkpointer.
#include "baton/ckpt/checkpointer.hpp"

#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <random>
#include <thread>

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/manifest.hpp"
#include "ckpt_test_util.hpp"
#include "tests/support/process.hpp"

using namespace baton::ckpt;
using baton::test::fillPattern;
using baton::test::matchesPattern;
using baton::test::TempDir;

namespace {

Options quietOptions(const std::filesystem::path& dir)
{
    Options options;
    options.chainDir = dir;
    options.log = [](std::string_view) {};
    return options;
}

struct Layout {
    std::string label;
    std::vector<std::size_t> sizes;
};

class RoundTrip : public ::testing::TestWithParam<Layout> { };

TEST_P(RoundTrip, RestoresEveryByte)
{
    TempDir dir("ckpt-roundtrip");
    const auto& sizes = GetParam().sizes;
    std::vector<std::vector<std::byte>> state(sizes.size());
    {
        Checkpointer ckpt(quietOptions(dir.path()));
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            state[i].resize(sizes[i]);
            fillPattern(state[i].data(), sizes[i], i, 7);
            ckpt.registerRegion("r" + std::to_string(i), state[i].data(), sizes[i]);
        }
        ckpt.setBlob("step", std::string_view("7"));
        ASSERT_TRUE(ckpt.checkpointNow(7)) << ckpt.lastError();
        EXPECT_EQ(ckpt.counters().committed, 1u);
    }
    std::vector<std::vector<std::byte>> restored(sizes.size());
    Checkpointer ckpt(quietOptions(dir.path()));
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        restored[i].assign(sizes[i], std::byte { 0x5a });
        ckpt.registerRegion("r" + std::to_string(i), restored[i].data(), sizes[i]);
    }
    auto result = ckpt.restore();
    ASSERT_TRUE(result.restored) << (result.fallbacks.empty() ? "" : result.fallbacks[0].reason);
    EXPECT_EQ(result.iteration, 7u);
    EXPECT_TRUE(result.fallbacks.empty());
    EXPECT_EQ(restored, state);
    ASSERT_EQ(result.blobs.count("step"), 1u);
    EXPECT_EQ(result.blobs["step"].size(), 1u);
    EXPECT_EQ(result.manifest["regions"].size(), sizes.size());
}

std::vector<std::size_t> manySmall()
{
    std::mt19937 rng(42);
    std::vector<std::size_t> sizes(2000);
    for (auto& s : sizes)
        s = rng() % 200;
    return sizes;
}

INSTANTIATE_TEST_SUITE_P(Layouts, RoundTrip,
    ::testing::Values(Layout { "none", {} }, Layout { "oneByte", { 1 } }, Layout { "empty", { 0, 0 } },
        Layout { "unaligned", { 3, 4095, 4097, 65537, (1 << 20) + 13 } },
        Layout { "pageMultiples", { 4096, 8192, 1 << 20 } }, Layout { "large", { (64 << 20) + 1, 5 } },
        Layout { "manySmall", manySmall() }),
    [](const auto& info) { return info.param.label; });

TEST(Checkpointer, OneGibibyteRegion)
{
    TempDir dir("ckpt-gib");
    const std::size_t size = std::size_t(1) << 30;
    std::vector<std::byte> state(size);
    fillPattern(state.data(), size, 1, 1);
    {
        Checkpointer ckpt(quietOptions(dir.path()));
        ckpt.registerRegion("weights", state.data(), size);
        ASSERT_TRUE(ckpt.checkpointNow(1)) << ckpt.lastError();
        EXPECT_EQ(ckpt.lastCheckpoint().bytes, size);
    }
    std::vector<std::byte> restored(size);
    Checkpointer ckpt(quietOptions(dir.path()));
    ckpt.registerRegion("weights", restored.data(), size);
    ASSERT_TRUE(ckpt.restore().restored);
    EXPECT_TRUE(restored == state);
}

TEST(Checkpointer, ReRegistrationChangesTheLayout)
{
    TempDir dir("ckpt-rereg");
    Checkpointer ckpt(quietOptions(dir.path()));
    std::vector<std::byte> weights(1000), optimizer(5000), bigger(3000);
    fillPattern(weights.data(), weights.size(), 1, 1);
    ckpt.registerRegion("weights", weights.data(), weights.size());
    ASSERT_TRUE(ckpt.checkpointNow(1));

    // Optimizer state appears after the first step; the weights move to a bigger buffer.
    fillPattern(optimizer.data(), optimizer.size(), 2, 2);
    fillPattern(bigger.data(), bigger.size(), 1, 2);
    ckpt.registerRegion("optimizer", optimizer.data(), optimizer.size());
    ckpt.registerRegion("weights", bigger.data(), bigger.size());
    ASSERT_TRUE(ckpt.checkpointNow(2));

    std::vector<std::byte> w(3000), o(5000);
    Checkpointer reader(quietOptions(dir.path()));
    reader.registerRegion("weights", w.data(), w.size());
    reader.registerRegion("optimizer", o.data(), o.size());
    auto result = reader.restore();
    ASSERT_TRUE(result.restored);
    EXPECT_EQ(result.iteration, 2u);
    EXPECT_EQ(w, bigger);
    EXPECT_EQ(o, optimizer);

    // Unregistering drops a region from the next checkpoint.
    ckpt.unregisterRegion("optimizer");
    ASSERT_TRUE(ckpt.checkpointNow(3));
    auto manifest = parseManifest(
        baton::test::run({ "cat", (dir.path() / checkpointDirName(3) / kManifestName).string() }).output);
    ASSERT_EQ(manifest.regions.size(), 1u);
    EXPECT_EQ(manifest.regions[0].name, "weights");
}

TEST(Checkpointer, UnregisteredRegionsAreReportedAndSizeMismatchIsAnError)
{
    TempDir dir("ckpt-claims");
    std::vector<std::byte> a(100), b(200);
    {
        Checkpointer ckpt(quietOptions(dir.path()));
        ckpt.registerRegion("a", a.data(), a.size());
        ckpt.registerRegion("b", b.data(), b.size());
        ASSERT_TRUE(ckpt.checkpointNow(1));
    }
    {
        Checkpointer ckpt(quietOptions(dir.path()));
        ckpt.registerRegion("a", a.data(), a.size());
        auto result = ckpt.restore();
        ASSERT_TRUE(result.restored);
        EXPECT_EQ(result.unclaimedRegions, std::vector<std::string> { "b" });
    }
    Checkpointer ckpt(quietOptions(dir.path()));
    ckpt.registerRegion("a", a.data(), 99);
    EXPECT_THROW(ckpt.restore(), Error);
}

// A training thread drives the hooks while persists run in the background; every committed checkpoint
// must hold exactly the state of its iteration.
TEST(Checkpointer, HooksFromATrainingThreadWhilePersistRuns)
{
    TempDir dir("ckpt-hooks");
    const std::size_t size = 8 << 20;
    std::vector<std::byte> weights(size), extra(12345);
    Checkpointer ckpt(quietOptions(dir.path()));
    ckpt.registerRegion("weights", weights.data(), size);
    ckpt.registerRegion("extra", extra.data(), extra.size());

    std::thread training([&] {
        for (std::uint64_t it = 1; it <= 60; ++it) {
            // "forward/backward": read only; then the update rewrites the state for this iteration.
            ckpt.beforeUpdate();
            fillPattern(weights.data(), size, 1, it);
            fillPattern(extra.data(), extra.size(), 2, it);
            ckpt.afterUpdate(it);
            if (it % 3 == 0)
                ckpt.requestCheckpoint(it);
            if (it % 10 == 5)
                ckpt.scheduleCheckpoint();
            // Requests while one is in flight are dropped: on a busy disk one fsync may outlast the
            // whole loop, so every 20 iterations the loop lets the one in flight commit.
            if (it % 20 == 0)
                ckpt.wait();
        }
        ckpt.wait();
    });
    training.join();

    auto counters = ckpt.counters();
    EXPECT_GT(counters.committed, 2u);
    EXPECT_EQ(counters.failed, 0u);
    EXPECT_EQ(counters.requested, counters.committed);
    auto stats = ckpt.lastCheckpoint();
    EXPECT_TRUE(stats.finished && stats.committed);
    EXPECT_GT(stats.persistSeconds, 0.0);
    EXPECT_EQ(stats.bytes, 12352u + size); // "extra" first, then "weights" at the next 64-byte boundary

    std::vector<std::byte> w(size), e(extra.size());
    Checkpointer reader(quietOptions(dir.path()));
    reader.registerRegion("weights", w.data(), size);
    reader.registerRegion("extra", e.data(), e.size());
    auto result = reader.restore();
    ASSERT_TRUE(result.restored);
    EXPECT_TRUE(matchesPattern(w.data(), size, 1, result.iteration)) << result.iteration;
    EXPECT_TRUE(matchesPattern(e.data(), e.size(), 2, result.iteration)) << result.iteration;
}

TEST(Checkpointer, RequestsWhileInFlightAreCountedAsDropped)
{
    TempDir dir("ckpt-drop");
    std::vector<std::byte> state(32 << 20);
    Checkpointer ckpt(quietOptions(dir.path()));
    ckpt.registerRegion("s", state.data(), state.size());
    ASSERT_TRUE(ckpt.requestCheckpoint(1));
    // The persist of 32 MiB with fsync takes far longer than these calls.
    EXPECT_FALSE(ckpt.requestCheckpoint(2));
    EXPECT_FALSE(ckpt.requestCheckpoint(3));
    EXPECT_TRUE(ckpt.wait());
    auto counters = ckpt.counters();
    EXPECT_EQ(counters.droppedRequests, 2u);
    EXPECT_EQ(counters.committed, 1u);
}

// The first checkpoint takes over a staging pool allocated in the background after the first update,
// instead of allocating (pinning or populating) it on the training thread; a region that grows past it
// gets a new one, prepared again by the next afterUpdate().
TEST(Checkpointer, StagingIsPreparedInTheBackgroundBeforeTheFirstCheckpoint)
{
    TempDir dir("ckpt-staging");
    std::vector<std::byte> weights(24 << 20, std::byte { 7 });
    std::vector<std::byte> larger(40 << 20, std::byte { 9 });
    {
        Checkpointer unprepared(quietOptions(dir.path() / "unprepared"));
        unprepared.registerRegion("w", weights.data(), weights.size());
        ASSERT_TRUE(unprepared.checkpointNow(1));
        EXPECT_EQ(unprepared.counters().stagingAllocations, 1u);
        EXPECT_GT(unprepared.lastCheckpoint().stagingSeconds, 0.0);
    }
    Checkpointer ckpt(quietOptions(dir.path() / "prepared"));
    ckpt.registerRegion("w", weights.data(), weights.size());
    ckpt.setBlob("step", std::string(100, 's'));
    ckpt.afterUpdate(1);
    ASSERT_TRUE(ckpt.requestCheckpoint(1));
    ASSERT_TRUE(ckpt.wait()) << ckpt.lastError();
    EXPECT_EQ(ckpt.counters().stagingAllocations, 0u);

    ckpt.registerRegion("w", larger.data(), larger.size());
    ckpt.afterUpdate(2);
    ASSERT_TRUE(ckpt.checkpointNow(2));
    EXPECT_EQ(ckpt.counters().stagingAllocations, 0u);
    // Without afterUpdate() the request allocates itself, and the checkpoint is still complete.
    ckpt.registerRegion("w2", weights.data(), weights.size());
    ASSERT_TRUE(ckpt.checkpointNow(3));
    EXPECT_EQ(ckpt.counters().stagingAllocations, 1u);

    Checkpointer reader(quietOptions(dir.path() / "prepared"));
    std::vector<std::byte> w(larger.size()), w2(weights.size());
    reader.registerRegion("w", w.data(), w.size());
    reader.registerRegion("w2", w2.data(), w2.size());
    ASSERT_TRUE(reader.restore().restored);
    EXPECT_EQ(w, larger);
    EXPECT_EQ(w2, weights);
}

TEST(Checkpointer, ManifestFieldsRideAlongAndReservedOnesAreRefused)
{
    TempDir dir("ckpt-fields");
    {
        Checkpointer ckpt(quietOptions(dir.path()));
        ckpt.setEpoch(4);
        ckpt.setManifestField("tuning", { { "interval", 17 }, { "iteration_seconds", 0.25 } });
        ckpt.setManifestField("sampler", { { "seed", 1 }, { "epoch", 4 }, { "position", 99 } });
        EXPECT_THROW(ckpt.setManifestField("iteration", 5), Error);
        EXPECT_THROW(ckpt.setManifestField("manifest_checksum", "x"), Error);
        ASSERT_TRUE(ckpt.checkpointNow(10));
    }
    Checkpointer ckpt(quietOptions(dir.path()));
    auto result = ckpt.restore();
    ASSERT_TRUE(result.restored);
    EXPECT_EQ(result.epoch, 4u);
    EXPECT_EQ(result.manifest["tuning"]["interval"], 17);
    EXPECT_EQ(result.manifest["sampler"]["position"], 99);
    for (const char* key : { "format_version", "iteration", "epoch", "created_unix", "total_bytes", "regions",
             "blobs", "sampler", "tuning", "timings" })
        EXPECT_TRUE(result.manifest.contains(key)) << key;
    EXPECT_TRUE(result.manifest["timings"].contains("snapshot_seconds"));
    EXPECT_TRUE(result.manifest["timings"].contains("persist_seconds"));
}

// A name that cannot go into the manifest (not UTF-8) or that would be a path is refused when it is given,
// with a message saying why; before, it registered and then every checkpoint failed.
TEST(Checkpointer, NamesAreValidatedAtRegistration)
{
    TempDir dir("ckpt-names");
    Checkpointer ckpt(quietOptions(dir.path()));
    std::vector<std::byte> state(100);
    const std::vector<std::pair<std::string, std::string>> bad = {
        { "bad\xff", "not valid UTF-8" },
        { "caf\xc3", "not valid UTF-8" }, // truncated sequence
        { "\xc0\xaf", "not valid UTF-8" }, // overlong '/'
        { "\xed\xa0\x80", "not valid UTF-8" }, // UTF-16 surrogate
        { "\xf4\x90\x80\x80", "not valid UTF-8" }, // above U+10FFFF
        { std::string("a\0b", 3), "NUL" },
        { "layers\\0", "path separator" },
        { "/layers", "starts or ends with '/'" },
        { "layers/", "starts or ends with '/'" },
        { "layers//0", "path component" },
        { "layers/../0", "path component" },
        { "..", "path component" },
        { "", "empty" },
        { std::string(2000, 'a'), "longer than" },
    };
    for (const auto& [name, why] : bad) {
        for (int api = 0; api < 3; ++api) {
            try {
                if (api == 0)
                    ckpt.registerRegion(name, state.data(), state.size());
                else if (api == 1)
                    ckpt.setBlob(name, std::string_view("x"));
                else
                    ckpt.setManifestField(name, 1);
                ADD_FAILURE() << "accepted " << ::testing::PrintToString(name) << " (api " << api << ")";
            } catch (const Error& e) {
                EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
            }
        }
    }
    EXPECT_THROW(ckpt.setManifestField("note", std::string("bad\xff")), Error);
    EXPECT_TRUE(ckpt.checkpointNow(1)) << ckpt.lastError();

    // Names in any script, dots, dashes and '/' between levels (as baton.torch names tensors) are fine.
    ckpt.registerRegion("model/layers.0.weight", state.data(), state.size());
    ckpt.registerRegion("gewichte-\xc3\xa4\xe2\x82\xac\xf0\x9f\x98\x80", state.data(), state.size());
    ckpt.setBlob("rng\xe7\x8a\xb6\xe6\x80\x81", std::string_view("x"));
    ckpt.setManifestField("t\xc3\xbcning", { { "k", "v\xc3\xa9" } });
    EXPECT_TRUE(ckpt.checkpointNow(2)) << ckpt.lastError();
}

unsigned modeOf(const std::filesystem::path& path)
{
    struct stat st { };
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
}

// Checkpoints hold a user's model: what the library creates is private unless the caller asks otherwise.
TEST(Checkpointer, FilesAndDirectoriesArePrivateUnlessAsked)
{
    TempDir dir("ckpt-modes");
    const mode_t saved = ::umask(022);
    std::vector<std::byte> state(5000);
    {
        Checkpointer ckpt(quietOptions(dir.path() / "runs" / "chain"));
        ckpt.registerRegion("s", state.data(), state.size());
        ASSERT_TRUE(ckpt.checkpointNow(1)) << ckpt.lastError();
    }
    auto checkpoint = dir.path() / "runs" / "chain" / checkpointDirName(1);
    EXPECT_EQ(modeOf(dir.path() / "runs"), 0700u);
    EXPECT_EQ(modeOf(dir.path() / "runs" / "chain"), 0700u);
    EXPECT_EQ(modeOf(checkpoint), 0700u);
    EXPECT_EQ(modeOf(checkpoint / kDataFileName), 0600u);
    EXPECT_EQ(modeOf(checkpoint / kManifestName), 0600u);

    auto options = quietOptions(dir.path() / "shared");
    options.fileMode = 0640;
    {
        Checkpointer ckpt(options);
        ckpt.registerRegion("s", state.data(), state.size());
        ASSERT_TRUE(ckpt.checkpointNow(1)) << ckpt.lastError();
    }
    checkpoint = dir.path() / "shared" / checkpointDirName(1);
    EXPECT_EQ(modeOf(dir.path() / "shared"), 0750u);
    EXPECT_EQ(modeOf(checkpoint), 0750u);
    EXPECT_EQ(modeOf(checkpoint / kDataFileName), 0640u);
    EXPECT_EQ(modeOf(checkpoint / kManifestName), 0640u);
    ::umask(saved);

    for (unsigned bad : { 0400u, 0200u, 01700u, 010600u }) {
        options.fileMode = bad;
        EXPECT_THROW(Checkpointer { options }, ConfigError) << std::oct << bad;
    }
}

TEST(Checkpointer, RetentionKeepsTheNewestN)
{
    TempDir dir("ckpt-keep");
    auto options = quietOptions(dir.path());
    options.keep = 3;
    Checkpointer ckpt(options);
    std::vector<std::byte> state(1000);
    ckpt.registerRegion("s", state.data(), state.size());
    for (std::uint64_t it = 1; it <= 6; ++it)
        ASSERT_TRUE(ckpt.checkpointNow(it * 100));
    auto list = listCheckpoints(dir.path());
    ASSERT_EQ(list.size(), 3u);
    EXPECT_EQ(list[0].iteration, 400u);
    EXPECT_EQ(list[2].iteration, 600u);
    EXPECT_EQ(list[2].dir.filename(), "ckpt-000000000600");
}

TEST(Checkpointer, SameIterationTwiceReplacesTheCheckpoint)
{
    TempDir dir("ckpt-again");
    std::vector<std::byte> state(5000);
    Checkpointer ckpt(quietOptions(dir.path()));
    ckpt.registerRegion("s", state.data(), state.size());
    fillPattern(state.data(), state.size(), 1, 1);
    ASSERT_TRUE(ckpt.checkpointNow(5));
    fillPattern(state.data(), state.size(), 1, 2);
    ASSERT_TRUE(ckpt.checkpointNow(5)) << ckpt.lastError();
    std::vector<std::byte> out(5000);
    Checkpointer reader(quietOptions(dir.path()));
    reader.registerRegion("s", out.data(), out.size());
    ASSERT_TRUE(reader.restore().restored);
    EXPECT_EQ(out, state);
}

TEST(Checkpointer, NewerFormatVersionIsAClearError)
{
    TempDir dir("ckpt-version");
    {
        Checkpointer ckpt(quietOptions(dir.path()));
        ASSERT_TRUE(ckpt.checkpointNow(1));
    }
    auto path = dir.path() / checkpointDirName(1) / kManifestName;
    auto manifest = parseManifest(baton::test::run({ "cat", path.string() }).output);
    manifest.document["format_version"] = kMaxFormatVersion + 1;
    std::ofstream(path, std::ios::trunc) << renderManifest(manifest.document);
    Checkpointer ckpt(quietOptions(dir.path()));
    try {
        ckpt.restore();
        FAIL() << "restore accepted a newer format";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("format_version " + std::to_string(kMaxFormatVersion + 1)),
            std::string::npos)
            << e.what();
    }
}

TEST(Checkpointer, EmptyChainRestoresNothing)
{
    TempDir dir("ckpt-empty");
    Checkpointer ckpt(quietOptions(dir.path() / "new" / "chain"));
    auto result = ckpt.restore();
    EXPECT_FALSE(result.restored);
    EXPECT_TRUE(std::filesystem::is_directory(dir.path() / "new" / "chain"));
}

// With CUDA built in but no usable device (or without CUDA), the host path runs and device regions are
// refused with a clear error.
TEST(Checkpointer, HostPathWithoutADevice)
{
    TempDir dir("ckpt-nodevice");
    Checkpointer ckpt(quietOptions(dir.path()));
    if (ckpt.deviceAvailable())
        GTEST_SKIP() << "a CUDA device is usable here; ckpt_cuda_test covers it";
    int fake = 0;
    try {
        ckpt.registerDeviceRegion("w", &fake, sizeof fake, 0);
        FAIL() << "a device region was accepted without a device";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("CUDA device"), std::string::npos) << e.what();
    }
    std::vector<std::byte> state(10000, std::byte { 1 });
    ckpt.registerRegion("s", state.data(), state.size());
    EXPECT_TRUE(ckpt.checkpointNow(1));
}

// Temporaries of dead local processes go; another host's (a job of the same chain running elsewhere)
// stay until they are a day old.
TEST(Checkpointer, StaleTemporariesOfThisHostOnly)
{
    TempDir dir("ckpt-stale");
    pid_t child = ::fork();
    if (child == 0)
        ::_exit(0);
    ::waitpid(child, nullptr, 0);
    std::string host = temporaryOwnerTag().substr(0, temporaryOwnerTag().rfind('-'));
    auto deadLocal = dir.path() / (".ckpt-000000000005.tmp-" + host + "-" + std::to_string(child));
    auto liveLocal = dir.path() / (".ckpt-000000000006.tmp-" + host + "-1"); // pid 1 always runs
    auto foreign = dir.path() / ".ckpt-000000000007.tmp-othernode-42";
    auto deleting = dir.path() / (".ckpt-000000000003.deleting-" + host + "-" + std::to_string(child));
    for (const auto& p : { deadLocal, liveLocal, foreign, deleting })
        std::filesystem::create_directory(p);
    {
        Checkpointer ckpt(quietOptions(dir.path()));
    }
    EXPECT_FALSE(std::filesystem::exists(deadLocal));
    EXPECT_FALSE(std::filesystem::exists(deleting));
    EXPECT_TRUE(std::filesystem::exists(liveLocal));
    EXPECT_TRUE(std::filesystem::exists(foreign));
    std::filesystem::last_write_time(
        foreign, std::filesystem::file_time_type::clock::now() - std::chrono::hours(25));
    {
        Checkpointer ckpt(quietOptions(dir.path()));
    }
    EXPECT_FALSE(std::filesystem::exists(foreign));
    EXPECT_TRUE(std::filesystem::exists(liveLocal));
}

TEST(Options, FromEnvironment)
{
    ::setenv("BATON_CHAIN_DIR", "/tmp/some-chain", 1);
    ::unsetenv("BATON_KEEP");
    auto options = Options::fromEnvironment();
    EXPECT_EQ(options.chainDir, "/tmp/some-chain");
    EXPECT_EQ(options.keep, 2);
    ::setenv("BATON_KEEP", "5", 1);
    EXPECT_EQ(Options::fromEnvironment().keep, 5);
    for (const char* bad : { "0", "-1", "two", "3x", "", "99999999999999999999" }) {
        ::setenv("BATON_KEEP", bad, 1);
        EXPECT_THROW(Options::fromEnvironment(), ConfigError) << bad;
    }
    ::unsetenv("BATON_KEEP");
    ::setenv("BATON_CHAIN_DIR", "relative/dir", 1);
    EXPECT_THROW(Options::fromEnvironment(), ConfigError);
    ::unsetenv("BATON_CHAIN_DIR");
    try {
        Options::fromEnvironment();
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("BATON_CHAIN_DIR"), std::string::npos);
    }
}

} // namespace
