#include "baton/ckpt/session.hpp"

#include "baton/ckpt/chain.hpp"
#include "baton_session.h"
#include "process.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

using namespace baton::ckpt;
using baton::test::TempDir;

namespace {

nlohmann::json readManifest(const std::filesystem::path& dir)
{
    std::ifstream in(dir / "manifest.json");
    std::stringstream text;
    text << in.rdbuf();
    return parseManifest(text.str()).document;
}

SessionOptions sessionOptions(const std::filesystem::path& dir, std::vector<std::string>* log = nullptr)
{
    SessionOptions options;
    options.checkpointer.chainDir = dir;
    options.checkpointer.keep = 1000;
    // A generous target keeps k small even when the checkpoint is slow next to short iterations
    // (a loaded machine, valgrind).
    options.policy.targetPercent = 50;
    options.checkpointer.log = [log](std::string_view line) {
        if (log != nullptr)
            log->emplace_back(line);
    };
    return options;
}

// A training loop of `iterations` iterations of `sleep` each over `state`, drawing one index per
// iteration from `sampler`; returns the indices drawn.
std::vector<std::uint64_t> train(Session& session, ResumableSampler& sampler,
    std::vector<std::uint64_t>& state, std::uint64_t first, std::uint64_t iterations,
    std::chrono::microseconds sleep)
{
    std::vector<std::uint64_t> drawn;
    for (std::uint64_t it = first; it < first + iterations; ++it) {
        drawn.push_back(sampler.next());
        std::this_thread::sleep_for(sleep);
        session.beforeUpdate();
        std::fill(state.begin(), state.end(), it);
        session.step(it);
    }
    session.finish();
    return drawn;
}

} // namespace

TEST(Session, CheckpointsWithSamplerAndTuningAndResumesFromThem)
{
    TempDir dir("baton-session");
    std::vector<std::uint64_t> state(1 << 15); // 256 KiB
    std::vector<std::uint64_t> reference;
    {
        ResumableSampler sampler(1000, 7);
        for (int i = 0; i < 1000; ++i)
            reference.push_back(sampler.next());
    }
    std::uint64_t interval = 0;
    {
        Session session(sessionOptions(dir.path()));
        session.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);
        ResumableSampler sampler(1000, 7);
        session.attachSampler(&sampler);
        EXPECT_FALSE(session.restore().restored);
        train(session, sampler, state, 0, 100, std::chrono::milliseconds(20));
        EXPECT_FALSE(session.policy().profiling());
        interval = session.interval();
        EXPECT_GE(interval, 1u);
        EXPECT_GE(session.checkpointer().counters().committed, 2u);
        EXPECT_EQ(session.checkpointer().counters().droppedRequests, 0u);
    }
    const auto checkpoints = listCheckpoints(dir.path());
    ASSERT_FALSE(checkpoints.empty());
    const nlohmann::json manifest = readManifest(checkpoints.back().dir);
    ASSERT_TRUE(manifest["sampler"].is_object());
    // The sampler position is the number of indices drawn up to and including that iteration.
    EXPECT_EQ(manifest["sampler"]["position"].get<std::uint64_t>(), checkpoints.back().iteration + 1);
    EXPECT_EQ(manifest["tuning"]["interval"].get<std::uint64_t>(), interval);

    // The next job of the chain: same speed, so it keeps k without a profiling checkpoint, and the
    // sampler continues exactly where the checkpoint left it.
    std::vector<std::string> log;
    Session session(sessionOptions(dir.path(), &log));
    session.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);
    ResumableSampler sampler(1000, 7);
    session.attachSampler(&sampler);
    const RestoreResult restored = session.restore();
    ASSERT_TRUE(restored.restored);
    EXPECT_EQ(state.front(), restored.iteration);
    std::uint64_t profiles = 0;
    session.onCheckpoint(
        [&](const SessionCheckpoint& done) { profiles += done.reason == CheckpointReason::Profile; });
    const auto drawn
        = train(session, sampler, state, restored.iteration + 1, 30, std::chrono::milliseconds(20));
    EXPECT_TRUE(std::equal(
        drawn.begin(), drawn.end(), reference.begin() + static_cast<long>(restored.iteration + 1)));
    EXPECT_EQ(profiles, 0u);
    EXPECT_TRUE(std::any_of(
        log.begin(), log.end(), [](const std::string& l) { return l.find("keeping k") != l.npos; }));
}

TEST(Session, BadEnvironmentIsAConfigError)
{
    ::setenv("BATON_CHAIN_DIR", "/tmp", 1);
    ::setenv("BATON_DEADLINE", "tomorrow", 1);
    EXPECT_THROW(SessionOptions::fromEnvironment(), ConfigError);
    ::unsetenv("BATON_DEADLINE");
    ::setenv("BATON_OVERHEAD", "-1", 1);
    EXPECT_THROW(SessionOptions::fromEnvironment(), ConfigError);
    ::unsetenv("BATON_OVERHEAD");
    ::unsetenv("BATON_CHAIN_DIR");
}

TEST(SessionCApi, DrivesTheCheckpointerAndRestores)
{
    TempDir dir("baton-session-c");
    std::vector<std::uint64_t> state(1024);
    baton_sampler* sampler = baton_sampler_create(100, 3, 1, 0, 0);
    baton_session* session = baton_session_create(dir.path().c_str(), 50.0, 0);
    ASSERT_NE(session, nullptr) << baton_session_last_error();
    ASSERT_EQ(baton_session_register_region(session, "state", state.data(), state.size() * 8), 0);
    ASSERT_EQ(baton_session_set_blob(session, "step", "abc", 3), 0);
    ASSERT_EQ(baton_session_attach_sampler(session, sampler), 0);
    std::uint64_t iteration = 0;
    EXPECT_EQ(baton_session_restore(session, &iteration), 0);
    int started = 0;
    for (std::uint64_t it = 0; it < 60; ++it) {
        std::uint64_t index = 0;
        baton_sampler_next(sampler, &index);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        ASSERT_EQ(baton_session_before_update(session), 0);
        state[0] = it;
        const int rc = baton_session_step(session, it);
        ASSERT_GE(rc, 0) << baton_session_last_error();
        started += rc;
    }
    EXPECT_EQ(baton_session_finish(session), 0);
    EXPECT_GE(started, 2);
    EXPECT_GE(baton_session_interval(session), 1u);
    EXPECT_EQ(baton_session_should_exit(session), 0);
    // A handover: checkpoint now and exit once it has committed.
    ASSERT_EQ(baton_session_request_checkpoint(session, 1), 0);
    std::uint64_t index = 0;
    baton_sampler_next(sampler, &index);
    state[0] = 60;
    ASSERT_EQ(baton_session_before_update(session), 0);
    EXPECT_EQ(baton_session_step(session, 60), 1);
    EXPECT_EQ(baton_session_should_exit(session), 1);
    baton_session_destroy(session);

    session = baton_session_create(dir.path().c_str(), 0, 0);
    ASSERT_NE(session, nullptr);
    baton_sampler* resumed = baton_sampler_create(100, 3, 1, 0, 0);
    baton_session_attach_sampler(session, resumed);
    ASSERT_EQ(baton_session_register_region(session, "state", state.data(), state.size() * 8), 0);
    ASSERT_EQ(baton_session_restore(session, &iteration), 1) << baton_session_last_error();
    EXPECT_EQ(state[0], iteration);
    EXPECT_EQ(baton_sampler_position(resumed), iteration + 1);
    char blob[8] = {};
    EXPECT_EQ(baton_session_blob(session, "step", blob, sizeof blob), 3);
    EXPECT_STREQ(blob, "abc");
    EXPECT_EQ(baton_session_blob(session, "missing", blob, sizeof blob), -1);
    baton_session_destroy(session);
    baton_sampler_destroy(sampler);
    baton_sampler_destroy(resumed);
    EXPECT_EQ(baton_session_create(nullptr, 0, 0), nullptr); // no BATON_CHAIN_DIR
    EXPECT_NE(std::string(baton_session_last_error()).find("BATON_CHAIN_DIR"), std::string::npos);
}

TEST(SessionCApi, DrivesACheckpointerMadeThroughItsOwnCApi)
{
    TempDir dir("baton-session-ckpt");
    std::vector<std::uint64_t> state(512);
    baton_ckpt* ckpt = baton_ckpt_create(dir.path().c_str(), 2);
    ASSERT_NE(ckpt, nullptr);
    ASSERT_EQ(baton_ckpt_register_region(ckpt, "state", state.data(), state.size() * 8), 0);
    baton_session* session = baton_session_create_for(ckpt, 50.0, 0);
    ASSERT_NE(session, nullptr) << baton_session_last_error();
    int started = 0;
    std::uint64_t it = 0;
    for (; it < 30; ++it) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        baton_session_before_update(session);
        state[0] = it;
        started += baton_session_step(session, it);
    }
    ASSERT_EQ(baton_session_finish(session), 0); // nothing in flight: the request starts at once
    ASSERT_EQ(baton_session_request_checkpoint(session, 1), 0);
    EXPECT_EQ(baton_session_step(session, it), 1);
    EXPECT_EQ(baton_session_should_exit(session), 1);
    EXPECT_GE(started, 1);
    baton_session_destroy(session);
    baton_ckpt_stats stats {};
    ASSERT_EQ(baton_ckpt_get_stats(ckpt, &stats), 0);
    EXPECT_EQ(stats.iteration, it);
    EXPECT_EQ(stats.committed, 1);
    EXPECT_EQ(stats.dropped_requests, 0u);
    baton_ckpt_destroy(ckpt);
    EXPECT_EQ(baton_session_create_for(nullptr, 0, 0), nullptr);
}
