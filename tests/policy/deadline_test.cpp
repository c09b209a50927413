#include "baton/ckpt/deadline.hpp"

#include "baton/ckpt/policy.hpp"
#include "baton/ckpt/simulation.hpp"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>

using namespace baton::ckpt;

TEST(DeadlineEnvironment, ParsesAndRejects)
{
    EXPECT_EQ(parseDeadline("BATON_DEADLINE", nullptr), std::nullopt);
    EXPECT_EQ(parseDeadline("BATON_DEADLINE", ""), std::nullopt);
    EXPECT_DOUBLE_EQ(*parseDeadline("BATON_DEADLINE", "1700000000"), 1700000000.0);
    EXPECT_DOUBLE_EQ(*parseDeadline("BATON_DEADLINE", "1700000000.5"), 1700000000.5);
    EXPECT_DOUBLE_EQ(*parseMargin("BATON_DEADLINE_MARGIN", "0"), 0.0);
    for (const char* bad : { "soon", "12s", " 12", "-5", "0", "nan", "inf" }) {
        try {
            parseDeadline("BATON_DEADLINE", bad);
            ADD_FAILURE() << bad << " accepted";
        } catch (const std::invalid_argument& error) {
            EXPECT_NE(std::string(error.what()).find("BATON_DEADLINE"), std::string::npos) << error.what();
        }
    }
    EXPECT_THROW(parseMargin("BATON_DEADLINE_MARGIN", "-1"), std::invalid_argument);
    EXPECT_THROW(parseMargin("BATON_DEADLINE_MARGIN", "ten"), std::invalid_argument);
}

TEST(DeadlineEnvironment, AppliesToPolicyOptions)
{
    std::map<std::string, std::string> env { { "BATON_DEADLINE", "2000000000" },
        { "BATON_DEADLINE_MARGIN", "30" }, { "BATON_OVERHEAD", "3.5" } };
    const auto lookup = [&](const char* name) -> const char* {
        const auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
    };
    const PolicyOptions options = applyEnvironment({}, lookup);
    EXPECT_DOUBLE_EQ(*options.deadline, 2e9);
    EXPECT_DOUBLE_EQ(options.deadlineMargin, 30);
    EXPECT_DOUBLE_EQ(options.targetPercent, 3.5);
    env["BATON_OVERHEAD"] = "0";
    EXPECT_THROW(applyEnvironment({}, lookup), std::invalid_argument);
    env["BATON_OVERHEAD"] = "5";
    env["BATON_DEADLINE_MARGIN"] = "a minute";
    EXPECT_THROW(applyEnvironment({}, lookup), std::invalid_argument);
    env.clear();
    const PolicyOptions defaults = applyEnvironment({}, lookup);
    EXPECT_FALSE(defaults.deadline);
    EXPECT_DOUBLE_EQ(defaults.deadlineMargin, 60);
    EXPECT_DOUBLE_EQ(defaults.targetPercent, 5);
}

TEST(DeadlinePlanner, DueWhenOneMoreIterationWouldBeTooLate)
{
    double now = 1000;
    DeadlinePlanner planner([&] { return now; });
    EXPECT_FALSE(planner.finalCheckpointDue(false)); // no deadline
    planner.setDeadline(1100);
    planner.setMargin(10);
    planner.setSafetyFactor(2);
    planner.setSlack(0);
    planner.observeIteration(1.0);
    planner.observeCheckpoint(2.0, 3.0); // 5 s, 10 s with the safety factor
    // Must commit by 1090; waiting one more iteration then checkpointing ends at now + 1 + 10.
    now = 1078.9;
    EXPECT_FALSE(planner.finalCheckpointDue(false));
    now = 1079.0;
    EXPECT_TRUE(planner.finalCheckpointDue(false));
    // A checkpoint in flight must commit first: due earlier.
    now = 1069.0;
    EXPECT_TRUE(planner.finalCheckpointDue(true));
    EXPECT_FALSE(planner.finalCheckpointDue(false));
    now = 1080;
    planner.finalCheckpointStarted();
    EXPECT_FALSE(planner.finalCheckpointDue(false));
    EXPECT_FALSE(planner.shouldExit());
    planner.finalCheckpointFailed();
    EXPECT_TRUE(planner.finalCheckpointDue(false));
    planner.finalCheckpointStarted();
    planner.finalCheckpointCommitted();
    EXPECT_TRUE(planner.shouldExit());
    EXPECT_FALSE(planner.finalCheckpointDue(false));
}

TEST(DeadlinePlanner, SlackStartsTheFinalCheckpointEarlier)
{
    double now = 1000;
    DeadlinePlanner planner([&] { return now; });
    planner.setDeadline(1100);
    planner.setMargin(10);
    planner.setSafetyFactor(1);
    planner.observeIteration(1.0);
    planner.observeCheckpoint(1.0, 1.0);
    planner.setSlack(5);
    now = 1082.5; // 7.5 s left: within 1 + 2 + 5, not within 1 + 2
    EXPECT_TRUE(planner.finalCheckpointDue(false));
    planner.setSlack(0);
    EXPECT_FALSE(planner.finalCheckpointDue(false));
    EXPECT_THROW(planner.setSlack(-1), std::invalid_argument);
}

TEST(DeadlinePlanner, KeepsTheSlowestCheckpointAndFollowsSlowIterations)
{
    DeadlinePlanner planner([] { return 0.0; });
    planner.observeCheckpoint(1, 1);
    planner.observeCheckpoint(0.5, 0.5);
    EXPECT_DOUBLE_EQ(planner.checkpointSeconds(), 2.0);
    EXPECT_THROW(planner.setMargin(-1), std::invalid_argument);
    EXPECT_THROW(planner.setSafetyFactor(0.5), std::invalid_argument);
}

TEST(DeadlinePolicy, FinalCheckpointCommitsBeforeDeadlineMinusMargin)
{
    // Simulated job: 0.12 s iterations, 1.15 s per checkpoint; deadline 20 s away, margin 2 s.
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
        SyntheticJobOptions jobOptions;
        jobOptions.jitter = 0.3;
        jobOptions.seed = seed;
        SyntheticJob job(jobOptions);
        PolicyOptions options;
        options.deadline = 20.0;
        options.deadlineMargin = 2.0;
        Policy policy(options, [&] { return job.now(); });
        Decision decision;
        double committedAt = -1;
        bool finalStarted = false;
        while (!policy.shouldExit() && job.now() < 30) {
            const auto step = job.step(decision.checkpoint);
            if (step.committed) {
                policy.checkpointCommitted(step.timings);
                if (finalStarted && policy.shouldExit())
                    committedAt = job.now();
            }
            decision = policy.onIteration(step.seconds);
            finalStarted = finalStarted || decision.final;
        }
        ASSERT_TRUE(policy.shouldExit()) << "seed " << seed;
        EXPECT_LE(committedAt, 18.0) << "seed " << seed;
        EXPECT_GE(committedAt, 14.0) << "seed " << seed
                                     << ": the final checkpoint should not be needlessly early";
    }
}
