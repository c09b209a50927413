#include "baton/ckpt/tuning.hpp"

#include "baton/ckpt/policy.hpp"
#include "baton/ckpt/simulation.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

#include <nlohmann/json.hpp>

using namespace baton::ckpt;

TEST(TuningState, RoundTripsThroughTheManifestField)
{
    TuningState state;
    state.interval = 23;
    state.minimumInterval = 17;
    state.iterationSeconds = 0.12;
    state.updateSeconds = 0.02;
    state.snapshotSeconds = 0.15;
    state.persistSeconds = 1.0;
    state.stallSeconds = 0.1;
    state.overheadPercent = 4.2;
    state.targetPercent = 3.5;
    state.snapshotTarget = "device";
    const nlohmann::json json = state;
    for (const char* field : { "interval", "iteration_seconds", "snapshot_seconds", "persist_seconds",
             "overhead_percent", "stall_seconds" })
        EXPECT_TRUE(json.contains(field)) << field; // the fields docs/contracts.md names
    const auto back = nlohmann::json::parse(json.dump()).get<TuningState>();
    EXPECT_EQ(back.interval, 23u);
    EXPECT_EQ(back.minimumInterval, 17u);
    EXPECT_DOUBLE_EQ(back.iterationSeconds, 0.12);
    EXPECT_DOUBLE_EQ(back.stallSeconds, 0.1);
    EXPECT_DOUBLE_EQ(back.targetPercent, 3.5);
    EXPECT_EQ(back.snapshotTarget, "device");
}

TEST(TuningState, RejectsMalformedFields)
{
    const auto parse = [](const char* text) { return nlohmann::json::parse(text).get<TuningState>(); };
    EXPECT_THROW(parse(R"([])"), std::invalid_argument);
    EXPECT_THROW(parse(R"({"interval": 0, "iteration_seconds": 1, "snapshot_seconds": 0, "persist_seconds": 0,
                          "stall_seconds": 0, "overhead_percent": 0})"),
        std::invalid_argument);
    EXPECT_THROW(parse(R"({"interval": 3, "iteration_seconds": "1", "snapshot_seconds": 0,
                          "persist_seconds": 0, "stall_seconds": 0, "overhead_percent": 0})"),
        std::invalid_argument);
    EXPECT_THROW(parse(R"({"interval": 3, "iteration_seconds": 1})"), std::invalid_argument);
    const auto minimal = parse(R"({"interval": 3, "iteration_seconds": 1, "snapshot_seconds": 0,
                                   "persist_seconds": 0, "stall_seconds": 0, "overhead_percent": 0})");
    EXPECT_EQ(minimal.minimumInterval, 3u);
}

TEST(TuningState, ReprofilesBeyondTwentyPercent)
{
    TuningState previous;
    previous.iterationSeconds = 1.0;
    EXPECT_FALSE(needsReprofile(previous, 1.0));
    EXPECT_FALSE(needsReprofile(previous, 1.19));
    EXPECT_FALSE(needsReprofile(previous, 0.81));
    EXPECT_TRUE(needsReprofile(previous, 1.21));
    EXPECT_TRUE(needsReprofile(previous, 0.79));
}

namespace {

// Runs a policy over the default synthetic job; returns the number of profiling checkpoints.
int runJob(Policy& policy, SyntheticJob& job, std::uint64_t iterations)
{
    int profiles = 0;
    Decision decision;
    for (std::uint64_t i = 0; i < iterations; ++i) {
        const auto step = job.step(decision.checkpoint);
        if (step.committed)
            policy.checkpointCommitted(step.timings);
        decision = policy.onIteration(step.seconds);
        profiles += decision.reason == CheckpointReason::Profile;
    }
    return profiles;
}

} // namespace

TEST(TuningChain, NextJobStartsFromThePreviousK)
{
    SyntheticJob first(SyntheticJobOptions {});
    Policy firstPolicy({}, [&] { return first.now(); });
    EXPECT_EQ(runJob(firstPolicy, first, 500), 1);
    const TuningState carried = nlohmann::json(firstPolicy.tuning()).get<TuningState>();
    EXPECT_EQ(carried.interval, firstPolicy.interval());

    // Same speed: no profiling checkpoint, k taken over after the timing iterations.
    SyntheticJob second(SyntheticJobOptions {});
    PolicyOptions options;
    options.previous = carried;
    Policy secondPolicy(options, [&] { return second.now(); });
    std::vector<std::string> log;
    secondPolicy.onLog([&](const std::string& line) { log.push_back(line); });
    EXPECT_EQ(runJob(secondPolicy, second, 500), 0);
    EXPECT_EQ(secondPolicy.interval(), carried.interval);
    ASSERT_FALSE(log.empty());
    EXPECT_NE(log.front().find("keeping k"), std::string::npos) << log.front();

    // A job on slower hardware (+50 %): profiles again.
    SyntheticJobOptions slower;
    slower.computeSeconds = 0.16;
    slower.updateSeconds = 0.02;
    SyntheticJob third(slower);
    Policy thirdPolicy(options, [&] { return third.now(); });
    EXPECT_EQ(runJob(thirdPolicy, third, 500), 1);
}
