#include "baton/ckpt/adaptive.hpp"

#include "baton/ckpt/policy.hpp"
#include "baton/ckpt/simulation.hpp"

#include <gtest/gtest.h>

#include <algorithm>

using namespace baton::ckpt;

namespace {

// One cycle of k iterations of `ti` seconds where the checkpoint costs `cost` seconds in total, spread
// over the first `inFlight` iterations.
void feedCycle(AdaptiveInterval& adaptive, double ti, double cost, std::uint64_t inFlight = 2)
{
    adaptive.checkpointStarted();
    const std::uint64_t k = adaptive.interval();
    for (std::uint64_t i = 0; i < k; ++i) {
        const bool touched = i < std::min(inFlight, k);
        adaptive.recordIteration(
            ti + (touched ? cost / static_cast<double>(std::min(inFlight, k)) : 0), touched);
    }
}

} // namespace

TEST(AdaptiveInterval, RaisesWhenOverheadExceedsTarget)
{
    AdaptiveInterval adaptive(10, 1.0);
    std::vector<IntervalChange> seen;
    adaptive.onChange([&](const IntervalChange& change) { seen.push_back(change); });
    // Cost 0.8 s every 10 iterations of 1 s: 8 % > 5 %.
    for (int cycle = 0; cycle < 4; ++cycle)
        feedCycle(adaptive, 1.0, 0.8);
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.front().from, 10u);
    EXPECT_GE(seen.front().to, 16u); // 0.8 / (k · 1) <= 0.05 needs k >= 16
    EXPECT_NE(seen.front().reason.find("raise"), std::string::npos);
    EXPECT_NEAR(seen.front().measuredOverheadPercent, 8.0, 0.01);
    EXPECT_EQ(adaptive.changes().size(), seen.size());
}

TEST(AdaptiveInterval, HysteresisKeepsKSteadyBetweenBands)
{
    AdaptiveInterval adaptive(10, 1.0);
    // 3.5 %: above "well below" (2.5 %), under the target: nothing to do, ever.
    for (int cycle = 0; cycle < 200; ++cycle)
        feedCycle(adaptive, 1.0, 0.35);
    EXPECT_TRUE(adaptive.changes().empty());
    EXPECT_EQ(adaptive.interval(), 10u);
    EXPECT_NEAR(adaptive.measuredOverheadPercent(), 3.5, 1e-9);
}

TEST(AdaptiveInterval, LowersTowardMinimumAfterSustainedLowOverhead)
{
    AdaptiveInterval adaptive(10, 1.0, {}, 40);
    EXPECT_EQ(adaptive.interval(), 40u);
    for (int cycle = 0; cycle < 40; ++cycle)
        feedCycle(adaptive, 1.0, 0.4); // 1 % at k = 40
    EXPECT_LT(adaptive.interval(), 40u);
    EXPECT_GE(adaptive.interval(), 10u);
    // It never oscillates: each change after the first goes the same way.
    for (const auto& change : adaptive.changes())
        EXPECT_LT(change.to, change.from) << change.reason;
    EXPECT_NE(adaptive.changes().front().reason.find("lower"), std::string::npos);
}

TEST(AdaptiveInterval, PersistThatDoesNotFitRaisesK)
{
    AdaptiveInterval adaptive(4, 1.0);
    adaptive.checkpointStarted();
    for (int i = 0; i < 4; ++i)
        adaptive.recordIteration(1.0, true);
    adaptive.checkpointDeferred();
    adaptive.recordIteration(1.0, true);
    adaptive.checkpointCommitted(6.5);
    adaptive.recordIteration(1.0, true);
    adaptive.checkpointStarted();
    EXPECT_EQ(adaptive.interval(), 7u);
    EXPECT_NE(adaptive.changes().back().reason.find("did not finish"), std::string::npos);
}

namespace {

// The default synthetic job: Ti = 0.12 s, each checkpoint costs 0.05 s of stall + 0.05 s of persist
// interference = 0.1 s, so the profiled k for 5 % is ceil(0.1 / (0.05 · 0.12)) = 17.
SyntheticJobOptions defaultJob()
{
    SyntheticJobOptions options;
    options.jitter = 0.02;
    return options;
}

struct Trace {
    std::uint64_t checkpoints = 0;
    std::uint64_t maxInterval = 0;
    double actual = 0;
    double ideal = 0;
    double overhead() const { return (actual - ideal) / ideal * 100; }
};

// Runs `iterations` iterations; calls `afterCheckpoint` after each checkpoint start.
Trace run(Policy& policy, SyntheticJob& job, Decision& decision, std::uint64_t iterations,
    const std::function<void()>& afterCheckpoint = {})
{
    Trace trace;
    for (std::uint64_t i = 0; i < iterations; ++i) {
        const auto step = job.step(decision.checkpoint);
        trace.actual += step.seconds;
        trace.ideal += step.idealSeconds;
        if (step.committed)
            policy.checkpointCommitted(step.timings);
        decision = policy.onIteration(step.seconds);
        if (decision.checkpoint) {
            ++trace.checkpoints;
            if (afterCheckpoint)
                afterCheckpoint();
        }
        trace.maxInterval = std::max(trace.maxInterval, policy.interval());
    }
    return trace;
}

} // namespace

TEST(AdaptivePolicy, ProfilesTheSyntheticJob)
{
    SyntheticJob job(defaultJob());
    Policy policy({}, [&] { return job.now(); });
    Decision decision;
    run(policy, job, decision, 40);
    ASSERT_FALSE(policy.profiling());
    EXPECT_NEAR(policy.profile().iterationSeconds, 0.12, 0.005);
    EXPECT_NEAR(policy.profile().stallSeconds, 0.10, 0.01);
    EXPECT_GE(policy.interval(), 16u);
    EXPECT_LE(policy.interval(), 18u);
}

TEST(AdaptivePolicy, RecoversFromInterferenceAndComesBackDown)
{
    SyntheticJob job(defaultJob());
    Policy policy({}, [&] { return job.now(); });
    std::vector<std::string> log;
    policy.onLog([&](const std::string& line) { log.push_back(line); });
    Decision decision;
    run(policy, job, decision, 600);
    const std::uint64_t profiled = policy.interval();
    ASSERT_GT(profiled, 1u);

    // Another job shares the device: iterations take twice as long, snapshots four times as long.
    // The cost per checkpoint becomes 0.45 s against Ti = 0.24 s: 11 % at the profiled k.
    job.setInterference({ 2.0, 4.0, 1.0 });
    std::uint64_t checkpoints = 0;
    std::uint64_t recoveredAfter = 0;
    run(policy, job, decision, 3000, [&] {
        ++checkpoints;
        if (recoveredAfter == 0 && policy.interval() > profiled && policy.measuredOverheadPercent() <= 5.0)
            recoveredAfter = checkpoints;
    });
    EXPECT_GT(recoveredAfter, 0u);
    EXPECT_LE(recoveredAfter, 6u) << "checkpoints until the measured overhead was back under p";
    const std::uint64_t raised = policy.interval();
    EXPECT_GE(raised, 2 * profiled);
    // After the adaptation the real overhead stays under p.
    const Trace steady = run(policy, job, decision, 3000);
    EXPECT_LE(steady.overhead(), 5.0);
    EXPECT_LE(policy.measuredOverheadPercent(), 5.0);

    // The interference stops: k comes back down toward the profiled minimum.
    job.setInterference({});
    const Trace after = run(policy, job, decision, 6000);
    EXPECT_LT(policy.interval(), raised);
    EXPECT_GE(policy.interval(), profiled);
    EXPECT_LE(static_cast<double>(policy.interval()), 1.25 * static_cast<double>(profiled));
    EXPECT_LE(after.overhead(), 5.0);
    // Every change was logged with its reason.
    const auto changes = policy.changes();
    ASSERT_GE(changes.size(), 2u);
    for (const auto& change : changes)
        EXPECT_FALSE(change.reason.empty());
    EXPECT_GE(
        std::count_if(log.begin(), log.end(), [](const std::string& l) { return l.find("interval") == 0; }),
        static_cast<std::ptrdiff_t>(changes.size()));
}

TEST(AdaptivePolicy, SlowerStorageRaisesKSoPersistsNeverQueue)
{
    SyntheticJob job(defaultJob());
    Policy policy({}, [&] { return job.now(); });
    Decision decision;
    run(policy, job, decision, 400);
    const std::uint64_t profiled = policy.interval();
    // The file system becomes 5x slower: 5 s of persist is 42 iterations of 0.12 s.
    job.setInterference({ 1.0, 1.0, 5.0 });
    run(policy, job, decision, 3000);
    EXPECT_GE(policy.interval(), 42u);
    EXPECT_GT(policy.interval(), profiled);
    const std::uint64_t refusedBefore = job.refused();
    run(policy, job, decision, 3000);
    EXPECT_EQ(job.refused(), refusedBefore) << "the policy asked for a checkpoint while one was in flight";
}
