#include "baton/ckpt/policy.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

using namespace baton::ckpt;

TEST(Policy, ProfilesThenCheckpointsEveryKIterations)
{
    double now = 0;
    PolicyOptions options;
    options.profileIterations = 3;
    Policy policy(options, [&] { return now; });
    EXPECT_TRUE(policy.profiling());
    EXPECT_EQ(policy.interval(), 0u);
    EXPECT_FALSE(policy.onIteration(1.0, 0.1).checkpoint);
    EXPECT_FALSE(policy.onIteration(1.0, 0.1).checkpoint);
    const Decision profile = policy.onIteration(1.0, 0.1);
    ASSERT_TRUE(profile.checkpoint);
    EXPECT_EQ(profile.reason, CheckpointReason::Profile);
    EXPECT_TRUE(policy.checkpointInFlight());
    // The checkpoint costs 0.5 s spread over two iterations; persist 1.5 s; it commits in the second.
    EXPECT_FALSE(policy.onIteration(1.25).checkpoint);
    policy.checkpointCommitted({ 0.5, 1.5, 4096 });
    EXPECT_FALSE(policy.onIteration(1.25).checkpoint);
    EXPECT_FALSE(policy.profiling());
    EXPECT_DOUBLE_EQ(policy.profile().iterationSeconds, 1.0);
    EXPECT_DOUBLE_EQ(policy.profile().updateSeconds, 0.1);
    EXPECT_DOUBLE_EQ(policy.profile().stallSeconds, 0.5);
    EXPECT_DOUBLE_EQ(policy.profile().persistSeconds, 1.5);
    // 0.5 / (k · 1) · 100 <= 5  =>  k = 10.
    ASSERT_EQ(policy.interval(), 10u);
    // Two iterations have passed since the profiling checkpoint started: seven more, then one.
    int quiet = 0;
    while (!policy.onIteration(1.0).checkpoint)
        ++quiet;
    EXPECT_EQ(quiet, 7);
    const TuningState tuning = policy.tuning();
    EXPECT_EQ(tuning.interval, 10u);
    EXPECT_DOUBLE_EQ(tuning.persistSeconds, 1.5);
    EXPECT_EQ(tuning.snapshotTarget, "host");
}

TEST(Policy, NeverStartsASecondCheckpointWhileOneIsInFlight)
{
    double now = 0;
    PolicyOptions options;
    options.profileIterations = 1;
    Policy policy(options, [&] { return now; });
    policy.onIteration(1.0);
    ASSERT_TRUE(policy.checkpointInFlight());
    policy.requestCheckpoint(false);
    for (int i = 0; i < 10; ++i)
        EXPECT_FALSE(policy.onIteration(1.0).checkpoint);
    policy.checkpointCommitted({ 0.1, 10, 1 });
    const Decision decision = policy.onIteration(1.0);
    EXPECT_EQ(decision.reason, CheckpointReason::Requested);
}

TEST(Policy, FailedFinalCheckpointIsRetried)
{
    double now = 0;
    PolicyOptions options;
    options.profileIterations = 1;
    Policy policy(options, [&] { return now; });
    std::vector<std::string> log;
    policy.onLog([&](const std::string& line) { log.push_back(line); });
    policy.onIteration(1.0);
    policy.checkpointFailed("No space left on device");
    EXPECT_TRUE(policy.profiling());
    EXPECT_FALSE(policy.onIteration(1.0).checkpoint); // the failed one's iteration is not clean
    EXPECT_EQ(policy.onIteration(1.0).reason, CheckpointReason::Profile);
    policy.checkpointCommitted({ 0.1, 0.1, 1 });
    policy.requestCheckpoint(true);
    Decision decision = policy.onIteration(1.0);
    ASSERT_TRUE(decision.final);
    policy.checkpointFailed("Input/output error");
    EXPECT_FALSE(policy.shouldExit());
    decision = policy.onIteration(1.0);
    ASSERT_TRUE(decision.final);
    policy.checkpointCommitted({ 0.1, 0.1, 1 });
    EXPECT_TRUE(policy.shouldExit());
    EXPECT_NE(log.front().find("No space left"), std::string::npos);
}

TEST(Policy, DeviceSnapshotWhenMemoryAllows)
{
    Policy policy;
    policy.setCheckpointBytes(1ull << 30);
    EXPECT_EQ(policy.snapshotTarget(), SnapshotTarget::Host);
    policy.setDeviceMemory(8ull << 30, 16ull << 30);
    EXPECT_EQ(policy.snapshotTarget(), SnapshotTarget::Device);
    policy.setDeviceMemory(15ull << 30, 16ull << 30);
    EXPECT_EQ(policy.snapshotTarget(), SnapshotTarget::Host);
}

TEST(Policy, RejectsBadTarget)
{
    PolicyOptions options;
    options.targetPercent = 0;
    EXPECT_THROW(Policy { options }, std::invalid_argument);
    options.targetPercent = 5;
    options.deadlineMargin = -3;
    EXPECT_THROW(Policy { options }, std::invalid_argument);
}
