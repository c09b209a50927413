#include "baton/ckpt/session.hpp"

#include "baton/ckpt/chain.hpp"
#include "baton/ckpt/tuning.hpp"
#include "common/baton_contract.hpp"
#include "baton_session.h"
#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
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
    // On a loaded machine the two jobs' measured speeds can differ by more than the tolerance after
    // all: then profiling again is the right decision, and the log must show the difference.
    const auto reprofiled = std::find_if(
        log.begin(), log.end(), [](const std::string& l) { return l.find("profiling again") != l.npos; });
    if (reprofiled == log.end()) {
        EXPECT_EQ(profiles, 0u);
        EXPECT_TRUE(std::any_of(
            log.begin(), log.end(), [](const std::string& l) { return l.find("keeping k") != l.npos; }));
    } else {
        double measured = 0, previous = 0;
        const std::string line = reprofiled->substr(reprofiled->find("iteration time"));
        ASSERT_EQ(std::sscanf(line.c_str(), "iteration time %lf s differs from the previous job's %lf s",
                      &measured, &previous),
            2)
            << *reprofiled;
        EXPECT_GT(std::abs(measured - previous), reprofileTolerance * previous) << *reprofiled;
        EXPECT_EQ(profiles, 1u);
    }
}

TEST(Session, ContinuesTheSamplersEpochOnAnotherWorldSize)
{
    // A job whose sampler is rank 0 of 4 ends after 10 iterations (positions 0..39 of epoch 0 taken by
    // the 4 ranks); the next job's sampler is rank 1 of 2: it continues at position 41 of the same order.
    TempDir dir("baton-session-reshard");
    std::vector<std::uint64_t> state(64);
    {
        Session session(sessionOptions(dir.path()));
        session.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);
        ResumableSampler sampler(100, 3, 4, 0);
        session.attachSampler(&sampler);
        train(session, sampler, state, 0, 10, std::chrono::milliseconds(1));
        session.markTrainingDone(); // finish() then commits iteration 9 whatever the policy did
        ASSERT_TRUE(session.finish());
    }
    std::vector<std::string> log;
    Session session(sessionOptions(dir.path(), &log));
    session.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);
    ResumableSampler sampler(100, 3, 2, 1);
    session.attachSampler(&sampler);
    ASSERT_TRUE(session.restore().restored);
    EXPECT_EQ(sampler.epoch(), 0u);
    EXPECT_EQ(sampler.offset(), 40u);
    EXPECT_EQ(sampler.position(), 0u);
    EXPECT_EQ(sampler.samplesInEpoch(0), 30u);
    EXPECT_EQ(sampler.next(), permutedIndex(41, 100, 3, 0));
    EXPECT_TRUE(std::any_of(log.begin(), log.end(),
        [](const std::string& l) { return l.find("4 ranks before, 2 now") != l.npos; }));

    // A sampler over another data set cannot continue that order.
    Session other(sessionOptions(dir.path()));
    other.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);
    ResumableSampler different(101, 3, 2, 1);
    other.attachSampler(&different);
    EXPECT_THROW(other.restore(), Error);
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

namespace {

// Iterations `first` .. `last` of 5 ms each over `state` (no sampler).
void trainPlain(Session& session, std::vector<std::uint64_t>& state, std::uint64_t first, std::uint64_t last)
{
    for (std::uint64_t it = first; it <= last; ++it) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        session.beforeUpdate();
        std::fill(state.begin(), state.end(), it);
        session.step(it);
    }
}

} // namespace

TEST(Session, MarkTrainingDoneEndsWithAFinalCheckpointThatSaysSo)
{
    TempDir dir("baton-session-done");
    std::vector<std::uint64_t> state(1024);
    Session session(sessionOptions(dir.path()));
    session.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);
    std::vector<SessionCheckpoint> seen;
    session.onCheckpoint([&](const SessionCheckpoint& checkpoint) { seen.push_back(checkpoint); });
    EXPECT_FALSE(session.restore().restored);
    trainPlain(session, state, 0, 29);
    session.markTrainingDone();
    EXPECT_TRUE(session.trainingDone());
    EXPECT_TRUE(session.finish());
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.back().reason, CheckpointReason::Finish);
    EXPECT_TRUE(seen.back().final);
    EXPECT_TRUE(seen.back().stats.trainingDone);
    const auto checkpoints = listCheckpoints(dir.path());
    ASSERT_FALSE(checkpoints.empty());
    EXPECT_EQ(checkpoints.back().iteration, 29u);
    const nlohmann::json manifest = readManifest(checkpoints.back().dir);
    EXPECT_EQ(manifest["final"], true);
    EXPECT_EQ(manifest["training_done"], true);
    // Earlier checkpoints are neither.
    for (std::size_t i = 0; i + 1 < checkpoints.size(); ++i) {
        const nlohmann::json earlier = readManifest(checkpoints[i].dir);
        EXPECT_EQ(earlier["final"], false);
        EXPECT_EQ(earlier["training_done"], false);
    }
    // A second finish() (the destructor's) writes nothing more.
    const auto committed = session.checkpointer().counters().committed;
    EXPECT_TRUE(session.finish());
    EXPECT_EQ(session.checkpointer().counters().committed, committed);
}

TEST(Session, TrainingDoneIsCommittedEvenWhenTheIterationIsAlreadySaved)
{
    TempDir dir("baton-session-done-saved");
    std::vector<std::uint64_t> state(1024);
    {
        Session session(sessionOptions(dir.path()));
        session.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);
        trainPlain(session, state, 0, 9);
        session.finish();
        ASSERT_TRUE(session.checkpointer().checkpointNow(9));
        EXPECT_EQ(readManifest(dir.path() / checkpointDirName(9))["training_done"], false);
        session.markTrainingDone(); // the destructor's finish() writes it
    }
    EXPECT_EQ(listCheckpoints(dir.path()).back().iteration, 9u);
    EXPECT_EQ(readManifest(dir.path() / checkpointDirName(9))["training_done"], true);

    // The next job restores it, sees that training is done and ends at once: still final and done.
    Session next(sessionOptions(dir.path()));
    next.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);
    const RestoreResult restored = next.restore();
    ASSERT_TRUE(restored.restored);
    EXPECT_TRUE(restored.trainingDone);
    EXPECT_TRUE(restored.final);
    next.markTrainingDone();
    EXPECT_TRUE(next.finish());
    const nlohmann::json manifest = readManifest(dir.path() / checkpointDirName(9));
    EXPECT_EQ(manifest["final"], true);
    EXPECT_EQ(manifest["training_done"], true);
}

// A training script declares its tensors after the session, so they are freed before the session's
// destructor runs: after a finish() that failed, the destructor must not snapshot them again.
TEST(Session, AfterAFailedFinishTheDestructorTakesNoSecondSnapshot)
{
    TempDir dir("baton-session-finish-failed");
    const auto chain = dir.path() / "chain";
    std::filesystem::create_directory(chain);
    SessionOptions options = sessionOptions(chain);
    Checkpointer checkpointer(options.checkpointer);
    std::uint64_t requested = 0;
    {
        Session session(checkpointer, options);
        std::vector<std::uint64_t> state(1024);
        checkpointer.registerRegion("state", state.data(), state.size() * sizeof state[0]);
        trainPlain(session, state, 0, 9);
        session.markTrainingDone();
        session.collect(true);
        std::filesystem::remove_all(chain); // nowhere to commit
        EXPECT_FALSE(session.finish());
        requested = checkpointer.counters().requested;
    }
    EXPECT_EQ(checkpointer.counters().requested, requested);
}

TEST(Session, HandoverCheckpointIsFinalButNotDone)
{
    TempDir dir("baton-session-final");
    std::vector<std::uint64_t> state(1024);
    Session session(sessionOptions(dir.path()));
    session.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);
    trainPlain(session, state, 0, 9);
    session.requestCheckpoint(true);
    // The request waits for an interval checkpoint still in flight (on a loaded machine), so train
    // until the session says to exit, at most 200 iterations.
    std::uint64_t last = 10;
    for (; last < 200; ++last) {
        trainPlain(session, state, last, last);
        if (session.shouldExit())
            break;
    }
    ASSERT_TRUE(session.shouldExit());
    session.finish();
    const nlohmann::json manifest = readManifest(dir.path() / checkpointDirName(last));
    EXPECT_EQ(manifest["final"], true);
    EXPECT_EQ(manifest["training_done"], false);
}

// batond asks for the handover's final checkpoint in the chain directory before any TERM (a launcher
// such as torchrun would kill the ranks 30 s after it forwards one): a session of the named seq and job
// takes its final checkpoint and exits; a request for another seq or job, a torn or oversized one, or
// another version asks nothing. It looks at most once a second.
TEST(Session, TakesTheHandoverRequestInTheChainDirectoryAsSigterm)
{
    TempDir dir("baton-session-request");
    const auto write = [&](const std::string& text) {
        const auto temporary = dir.path() / "request.tmp";
        std::ofstream(temporary) << text;
        std::filesystem::rename(temporary, dir.path() / baton::contract::kHandoverRequestFile);
    };
    EXPECT_FALSE(handoverRequested(dir.path(), 3, 77u)) << "no request";
    write(R"({"version": 1, "seq": 3, "job_id": 77, "time_unix": 1})");
    EXPECT_TRUE(handoverRequested(dir.path(), 3, 77u));
    EXPECT_TRUE(handoverRequested(dir.path(), 3, std::nullopt)) << "a job that knows no id of its own";
    EXPECT_FALSE(handoverRequested(dir.path(), 2, 77u)) << "the successor's seq is another";
    EXPECT_FALSE(handoverRequested(dir.path(), 3, 78u)) << "a resubmitted job of the same seq";
    write(R"({"version": 1, "seq": 3})");
    EXPECT_TRUE(handoverRequested(dir.path(), 3, 77u)) << "no job id: the seq decides";
    for (const char* other : { R"({"version": 2, "seq": 3})", R"({"version": 1, "seq": "3"})",
             R"({"version": 1, "seq": 3, "job_id": "77"})", R"({"version": 1, "seq": 3)", "[]" }) {
        write(other);
        EXPECT_FALSE(handoverRequested(dir.path(), 3, 77u)) << other;
    }
    write(R"({"version": 1, "seq": 3, "pad": ")" + std::string(5000, 'x') + R"("})");
    EXPECT_FALSE(handoverRequested(dir.path(), 3, 77u)) << "over the bound";

    write(R"({"version": 1, "seq": 4, "job_id": 77})"); // for another seq: nothing
    std::vector<std::string> log;
    SessionOptions options = sessionOptions(dir.path(), &log);
    options.checkpointer.chainSeq = 3;
    options.checkpointer.jobId = 77;
    std::vector<std::uint64_t> state(1024);
    Session session(options);
    session.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);
    trainPlain(session, state, 0, 20);
    EXPECT_FALSE(session.shouldExit());
    write(R"({"version": 1, "seq": 3, "job_id": 77, "time_unix": 1})");
    // Within a second and a checkpoint still in flight (a loaded machine): at most 2,000 iterations.
    std::uint64_t last = 21;
    for (; last < 2000 && !session.shouldExit(); ++last)
        trainPlain(session, state, last, last);
    ASSERT_TRUE(session.shouldExit());
    session.finish();
    const std::uint64_t final = last - 1;
    EXPECT_EQ(readManifest(dir.path() / checkpointDirName(final))["final"], true);
    EXPECT_NE(std::find_if(log.begin(), log.end(),
                  [](const std::string& line) { return line.find("handover requested by batond") != std::string::npos; }),
        log.end());
}

TEST(Session, HandoverWaitFromTheEnvironment)
{
    TempDir dir("baton-session-handover");
    std::vector<std::uint64_t> state(1024);
    {
        SessionOptions options = sessionOptions(dir.path());
        options.checkpointer.chainSeq = 0;
        Session first(options);
        first.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);
        trainPlain(first, state, 0, 4);
        ASSERT_TRUE(first.checkpointer().checkpointNow(4)); // not final: the job died
    }
    ::setenv("BATON_CHAIN_DIR", dir.path().c_str(), 1);
    ::setenv("BATON_CHAIN_SEQ", "1", 1);
    ::setenv("BATON_HANDOVER_WAIT", "soon", 1);
    try {
        SessionOptions::fromEnvironment();
        ADD_FAILURE() << "accepted BATON_HANDOVER_WAIT=soon";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("BATON_HANDOVER_WAIT"), std::string::npos);
    }
    ::setenv("BATON_HANDOVER_WAIT", "0.5", 1);
    SessionOptions options = SessionOptions::fromEnvironment();
    ::unsetenv("BATON_HANDOVER_WAIT");
    ::unsetenv("BATON_CHAIN_SEQ");
    ::unsetenv("BATON_CHAIN_DIR");
    EXPECT_EQ(options.checkpointer.handoverWaitSeconds, 0.5);
    EXPECT_EQ(options.checkpointer.chainSeq, 1u);
    std::vector<std::string> log;
    options.checkpointer.log = [&log](std::string_view line) { log.emplace_back(line); };
    Session second(options);
    second.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);
    const RestoreResult restored = second.restore();
    ASSERT_TRUE(restored.restored);
    EXPECT_EQ(restored.iteration, 4u);
    EXPECT_TRUE(restored.handoverTimedOut);
    EXPECT_GE(restored.handoverWaitSeconds, 0.5);
    EXPECT_TRUE(std::any_of(log.begin(), log.end(),
        [](const std::string& l) { return l.find("handover: waiting up to") != l.npos; }));
}

TEST(SessionCApi, MarkTrainingDoneAndHandoverWait)
{
    TempDir dir("baton-session-c-done");
    std::vector<std::uint64_t> state(256);
    baton_session* session = baton_session_create(dir.path().c_str(), 50.0, 0);
    ASSERT_NE(session, nullptr) << baton_session_last_error();
    ASSERT_EQ(baton_session_register_region(session, "state", state.data(), state.size() * 8), 0);
    std::uint64_t iteration = 0;
    EXPECT_EQ(baton_session_restore(session, &iteration), 0);
    EXPECT_EQ(baton_session_handover_wait_seconds(session), 0.0);
    for (std::uint64_t it = 0; it < 12; ++it) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        ASSERT_EQ(baton_session_before_update(session), 0);
        state[0] = it;
        ASSERT_GE(baton_session_step(session, it), 0) << baton_session_last_error();
    }
    EXPECT_EQ(baton_session_mark_training_done(session), 0);
    EXPECT_EQ(baton_session_finish(session), 0) << baton_session_last_error();
    baton_session_destroy(session);
    const nlohmann::json manifest = readManifest(dir.path() / checkpointDirName(11));
    EXPECT_EQ(manifest["final"], true);
    EXPECT_EQ(manifest["training_done"], true);
    EXPECT_EQ(baton_session_mark_training_done(nullptr), -1);
    EXPECT_EQ(baton_session_handover_wait_seconds(nullptr), 0.0);
}

// What baton.torch drives the Session with: a fixed interval instead of the policy, a due checkpoint
// that waits for the one in flight instead of being dropped, a hook that stages state right before each
// checkpoint, and a collective hook through which one rank's final checkpoint becomes every rank's.
TEST(Session, FixedIntervalWaitsForInFlightAndRunsTheHooks)
{
    TempDir dir("baton-session-hooks");
    std::vector<std::uint64_t> state(1 << 18); // 2 MiB: a checkpoint is still in flight at the next step
    SessionOptions options = sessionOptions(dir.path());
    options.fixedInterval = 2;
    options.waitForInFlight = true;
    Session session(std::move(options));
    session.checkpointer().registerRegion("state", state.data(), state.size() * sizeof state[0]);
    std::vector<std::uint64_t> staged;
    session.beforeCheckpoint([&](std::uint64_t iteration) {
        staged.push_back(iteration);
        session.checkpointer().setBlob("step", std::to_string(iteration));
    });
    // Another rank was signalled at iteration 7: the agreed decision is a final checkpoint there.
    std::uint64_t asked = 0;
    session.agreeDecision([&](const Decision& own) {
        return ++asked == 8 ? Decision { true, true, CheckpointReason::Signal } : own;
    });
    EXPECT_FALSE(session.restore().restored);
    std::uint64_t it = 0;
    for (; it < 20 && !session.shouldExit(); ++it) {
        session.beforeUpdate();
        std::fill(state.begin(), state.end(), it);
        session.step(it);
    }
    EXPECT_EQ(it, 8u) << "the agreed final checkpoint at iteration 7 ends the training";
    EXPECT_EQ(staged, (std::vector<std::uint64_t> { 0, 2, 4, 6, 7 }));
    EXPECT_EQ(session.checkpointer().counters().droppedRequests, 0u) << "waited for, not dropped";
    const auto checkpoints = listCheckpoints(dir.path());
    ASSERT_EQ(checkpoints.size(), 5u);
    EXPECT_EQ(checkpoints.back().iteration, 7u);
    const nlohmann::json manifest = readManifest(checkpoints.back().dir);
    EXPECT_EQ(manifest["final"], true);
    Options readerOptions;
    readerOptions.chainDir = dir.path();
    Checkpointer reader(readerOptions);
    std::vector<std::uint64_t> restored(state.size());
    reader.registerRegion("state", restored.data(), restored.size() * sizeof restored[0]);
    const RestoreResult result = reader.restore();
    ASSERT_TRUE(result.restored);
    EXPECT_EQ(result.iteration, 7u);
    EXPECT_EQ(restored.front(), 7u);
    const auto& step = result.blobs.at("step");
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(step.data()), step.size()), "7")
        << "staged by the hook right before the checkpoint";
}
