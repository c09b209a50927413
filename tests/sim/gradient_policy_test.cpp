// The policy-gradient policy: same seed, same policy; training raises its reward on a small queue.
#include "policy/gradient_policy.hpp"

#include "job_factory.hpp"
#include "sim/protocol.hpp"

#include <gtest/gtest.h>

#include <random>

using namespace baton::sim;
using baton::sim::test::job;
using baton::sim::test::randomJobs;

namespace {

// A synthetic queue on 8 nodes (about 80 % loaded), busy enough that successors wait from minutes to hours,
// and the episodes of 12 h predecessors on it: decisions every 15 min within the last 6 h.
std::vector<ProbeEpisode> syntheticEpisodes(std::int64_t from, std::int64_t to)
{
    auto trace = std::make_shared<const std::vector<Job>>(randomJobs(7, 1500, 3000, 2, 1800, 21600));
    SchedulerConfig sc;
    sc.nodes = 8;
    ProtocolConfig pc;
    pc.from = from;
    pc.to = to;
    pc.interval = 3 * 3600;
    pc.limit = 12 * 3600;
    pc.shapes = { 1, 4 };
    pc.horizon = 3 * 86400;
    return collectEpisodes(trace, sc, pc, 900, 6 * 3600);
}

GradientOptions smallOptions(unsigned seed)
{
    GradientOptions o;
    o.seed = seed;
    o.hidden = 8;
    o.epochs = 30;
    o.batch = 16;
    o.learningRate = 0.01;
    o.decisionEvery = 900;
    o.window = 6 * 3600;
    o.unstartedSeconds = 3 * 86400;
    return o;
}

} // namespace

TEST(GradientPolicy, EpisodesRecordEveryDecisionAndTheEnd)
{
    const auto episodes = syntheticEpisodes(86400, 3 * 86400);
    ASSERT_FALSE(episodes.empty());
    for (const auto& e : episodes) {
        ASSERT_EQ(e.points.size(), 24u); // 6 h / 15 min
        ASSERT_EQ(e.interruptions.size(), 25u);
        EXPECT_EQ(e.points.front().remaining, 6 * 3600);
        EXPECT_EQ(e.points.back().remaining, 900);
    }
}

TEST(GradientPolicy, SameSeedSamePolicyOtherSeedOtherPolicy)
{
    const auto episodes = syntheticEpisodes(86400, 6 * 86400);
    const auto a = GradientPolicy::train(episodes, smallOptions(3));
    const auto b = GradientPolicy::train(episodes, smallOptions(3));
    const auto c = GradientPolicy::train(episodes, smallOptions(4));
    EXPECT_EQ(a.parameters(), b.parameters()); // bit for bit
    EXPECT_NE(a.parameters(), c.parameters());
    for (const auto& e : episodes) {
        EXPECT_EQ(a.firstSubmit(e.points), b.firstSubmit(e.points));
        for (const auto& p : e.points)
            EXPECT_EQ(a.submitProbability(p), b.submitProbability(p));
    }
}

TEST(GradientPolicy, TrainingRaisesTheRewardOnASyntheticQueue)
{
    const auto train = syntheticEpisodes(86400, 9 * 86400);
    const auto test = syntheticEpisodes(10 * 86400, 13 * 86400);
    ASSERT_GT(train.size(), 100u);
    ASSERT_GT(test.size(), 30u);
    GradientTraining report;
    auto untrained = smallOptions(1);
    untrained.epochs = 0;
    const auto before = GradientPolicy::train(train, untrained);
    const auto after = GradientPolicy::train(train, smallOptions(1), &report);
    ASSERT_EQ(report.expectedReward.size(), 30u);
    // The objective REINFORCE ascends, on the training episodes and on later, unseen ones; and the
    // greedy policy that is deployed.
    EXPECT_GT(after.expectedReward(train), before.expectedReward(train) + 0.1);
    EXPECT_GT(after.expectedReward(test), before.expectedReward(test));
    EXPECT_GT(report.greedyRewardAfter, report.greedyRewardBefore);
    EXPECT_GT(report.expectedReward.back(), report.expectedReward.front());
}

// A live provisioner's ticks do not fall on the training grid: every tick within the window is a
// decision, and submitNow agrees with the probability.
TEST(GradientPolicy, DecidesOnEveryTickOfTheWindow)
{
    const auto episodes = syntheticEpisodes(86400, 4 * 86400);
    const auto policy = GradientPolicy::train(episodes, smallOptions(2));
    DecisionPoint p = episodes.front().points.front();
    p.remaining = 6 * 3600 - 17; // off the 15-min grid
    EXPECT_TRUE(policy.decides(p));
    EXPECT_EQ(policy.submitNow(p), policy.submitProbability(p) >= 0.5);
    p.remaining = 6 * 3600 + 60; // before the window: waits whatever the queue
    EXPECT_FALSE(policy.decides(p));
    EXPECT_FALSE(policy.submitNow(p));
}

TEST(GradientPolicy, RejectsBadInput)
{
    std::vector<ProbeEpisode> none;
    EXPECT_THROW(GradientPolicy::train(none, smallOptions(0)), std::invalid_argument);
    std::vector<ProbeEpisode> lopsided(1);
    lopsided[0].points.resize(2);
    lopsided[0].interruptions.resize(2); // needs 3
    EXPECT_THROW(GradientPolicy::train(lopsided, smallOptions(0)), std::invalid_argument);
    auto bad = smallOptions(0);
    bad.hidden = 0;
    const auto episodes = syntheticEpisodes(86400, 2 * 86400);
    EXPECT_THROW(GradientPolicy::train(episodes, bad), std::invalid_argument);
}
