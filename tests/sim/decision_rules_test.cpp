// predict's decision rules: the predictor's wait distribution read both ways, the window rule, the
// per-size choice between rules, and the rules as stored with a model.
#include "policy/policy.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

using namespace baton::sim;

namespace {

// A predictor whose waits depend on the job's size and the queue ahead, with log-normal noise.
std::shared_ptr<const WaitPredictor> trainedPredictor()
{
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> ahead(0, 200);
    std::normal_distribution<double> noise(0, 0.8);
    std::vector<WaitSample> samples;
    for (int i = 0; i < 2000; ++i) {
        WaitSample s;
        const float nodes = static_cast<float>(1 + rng() % 8);
        const float aheadHours = ahead(rng);
        at(s.x, Feature::Nodes) = nodes;
        at(s.x, Feature::AheadNodeHours) = aheadHours;
        s.waitSeconds = std::expm1(std::log1p(30.0 * aheadHours * nodes) + noise(rng));
        samples.push_back(s);
    }
    TrainOptions options;
    options.rounds = 40;
    options.maxDepth = 4;
    options.learningRate = 0.3;
    return std::make_shared<const WaitPredictor>(WaitPredictor::train(samples, options));
}

// The ticks of a predecessor's last `ticks` minutes, for a successor of `nodes` nodes with `ahead`
// node-hours queued before it.
std::vector<DecisionPoint> lastMinutes(
    const WaitPredictor& predictor, int nodes, int ticks, float ahead = 100)
{
    Features x {};
    at(x, Feature::Nodes) = static_cast<float>(nodes);
    at(x, Feature::AheadNodeHours) = ahead;
    const double meanLog = predictor.predictLog(std::vector<Features> { x }).front();
    std::vector<DecisionPoint> points(static_cast<std::size_t>(ticks));
    for (int i = 0; i < ticks; ++i) {
        points[static_cast<std::size_t>(i)].remaining = 60LL * (ticks - i);
        points[static_cast<std::size_t>(i)].features = x;
        points[static_cast<std::size_t>(i)].meanLogWait = meanLog;
    }
    return points;
}

} // namespace

TEST(DecisionRules, ProbabilityIsTheQuantileReadBackwards)
{
    const auto predictor = trainedPredictor();
    const double meanLog = 8.0;
    double last = 0;
    for (double q = 0.02; q < 0.985; q += 0.03) {
        const double wait = predictor->quantileSeconds(meanLog, q);
        EXPECT_NEAR(predictor->probabilityAtMost(meanLog, wait), q, 0.011) << "q " << q;
        const double p = predictor->probabilityAtMost(meanLog, wait * 1.01);
        EXPECT_GE(p, last) << "monotone at q " << q;
        last = p;
    }
    EXPECT_DOUBLE_EQ(predictor->probabilityAtMost(meanLog, 0), 0.01) << "below the table: its lowest step";
    EXPECT_DOUBLE_EQ(predictor->probabilityAtMost(meanLog, 1e12), 0.99);
}

TEST(DecisionRules, WindowSubmitsAtTheFirstTickWhoseChanceReachesTau)
{
    const auto predictor = trainedPredictor();
    // About 20 min of predicted wait: the chance peaks in the last half hour.
    const auto points = lastMinutes(*predictor, 4, 48 * 60, 10);
    const double tolerance = 600;
    const auto chance = [&](const DecisionPoint& p) {
        const double r = static_cast<double>(p.remaining);
        return predictor->probabilityAtMost(p.meanLogWait, r + tolerance)
            - (r > tolerance ? predictor->probabilityAtMost(p.meanLogWait, r - tolerance) : 0.0);
    };
    std::set<std::size_t> seen;
    for (double tau : { 0.2, 0.4, 0.6, 0.8, 0.95 }) {
        const WindowPolicy window("w", predictor, tau, tolerance);
        const std::size_t at = window.firstSubmit(points);
        std::size_t expected = points.size();
        for (std::size_t i = 0; i < points.size() && expected == points.size(); ++i)
            if (chance(points[i]) >= tau)
                expected = i;
        EXPECT_EQ(at, expected) << "tau " << tau;
        seen.insert(at);
    }
    EXPECT_GE(seen.size(), 3u) << "the taus should submit at different ticks, one of them never";
    EXPECT_TRUE(seen.contains(points.size())) << "a chance of 0.95 is never reached";
    // The lowest tau submits before the last half hour.
    EXPECT_LE(*seen.begin(), points.size() - 30) << "at the latest in the last half hour";
    EXPECT_THROW(WindowPolicy("w", predictor, 1.0, tolerance), std::invalid_argument);
    EXPECT_THROW(WindowPolicy("w", predictor, 0.5, 0), std::invalid_argument);
    EXPECT_THROW(WindowPolicy("w", nullptr, 0.5, tolerance), std::invalid_argument);
}

TEST(DecisionRules, CheckpointAwareSubmitsAtTheEarlierOfItsQuantileAndAvg)
{
    const auto predictor = trainedPredictor();
    auto points = lastMinutes(*predictor, 4, 48 * 60, 10);
    const QuantilePolicy quantile("q", predictor, 0.5);
    const CheckpointAwarePolicy checkpoint(predictor, 0.5, 1, 60);
    const std::size_t byModel = quantile.firstSubmit(points);
    ASSERT_GT(byModel, 60u);
    ASSERT_LT(byModel, points.size());
    // A quiet queue: avg's rule would submit after the model's tick, which stands.
    for (auto& p : points)
        p.recentMeanWait = 60;
    EXPECT_EQ(checkpoint.firstSubmit(points), byModel);
    // The queue grows past what the model predicts: the recent wait reaches the time left first.
    const std::size_t byRecentWait = byModel - 60;
    points[byRecentWait].recentMeanWait = static_cast<double>(points[byRecentWait].remaining);
    EXPECT_EQ(AveragePolicy().firstSubmit(points), byRecentWait);
    EXPECT_EQ(checkpoint.firstSubmit(points), byRecentWait);
    EXPECT_EQ(checkpoint.name(), "checkpoint-aware");
    EXPECT_DOUBLE_EQ(checkpoint.q(), 0.5);
}

TEST(DecisionRules, CheckpointAwareFollowsAvgAloneAfterASuccessorThatStartedAtOnce)
{
    const auto predictor = trainedPredictor();
    auto points = lastMinutes(*predictor, 4, 48 * 60, 10);
    const CheckpointAwarePolicy checkpoint(predictor, 0.5, 1, 60);
    for (auto& p : points)
        p.recentMeanWait = 60;
    const std::size_t byModel = QuantilePolicy("q", predictor, 0.5).firstSubmit(points);
    const std::size_t byAverage = AveragePolicy().firstSubmit(points);
    ASSERT_LT(byModel, byAverage);
    // The chain's first job (no successor yet), and a successor that waited longer than the lead: the
    // model's earlier tick stands.
    EXPECT_EQ(checkpoint.firstSubmit(points), byModel);
    for (auto& p : points)
        p.lastSuccessorWait = 61;
    EXPECT_EQ(checkpoint.firstSubmit(points), byModel);
    // The last successor started within the lead: submitting early would only cut this job short.
    for (auto& p : points)
        p.lastSuccessorWait = 60;
    EXPECT_EQ(checkpoint.firstSubmit(points), byAverage);
    // avg's rule still submits early when the recent waits grow.
    const std::size_t byRecentWait = byModel - 60;
    points[byRecentWait].recentMeanWait = static_cast<double>(points[byRecentWait].remaining);
    EXPECT_EQ(checkpoint.firstSubmit(points), byRecentWait);
    // The lead floor is at most half the running job's limit (submitLeadFor), and so is "at once": under a
    // 100-s limit, a successor that waited 55 s did not start at once, although the configured lead is 60.
    for (auto& p : points) {
        p.recentMeanWait = 60;
        p.limit = 100;
        p.lastSuccessorWait = 55;
    }
    EXPECT_EQ(checkpoint.firstSubmit(points), byModel);
    for (auto& p : points)
        p.lastSuccessorWait = 50;
    EXPECT_EQ(checkpoint.firstSubmit(points), byAverage);
}

TEST(DecisionRules, LearnedPoliciesAreBuiltByTheirRules)
{
    const auto predictor = trainedPredictor();
    const DecisionRule quantile { DecisionRule::Kind::Quantile, 0.3, 2 };
    const DecisionRule window { DecisionRule::Kind::Window, 0.6, 1 };
    const std::vector<ShapeRulesPolicy::ForShape> perSize { { 1, window }, { 8, quantile } };
    const auto checkpoint = makeLearnedPolicy("checkpoint-aware", predictor, quantile, {}, 600, 45);
    const auto* built = dynamic_cast<const CheckpointAwarePolicy*>(checkpoint.get());
    ASSERT_NE(built, nullptr);
    EXPECT_DOUBLE_EQ(built->q(), 0.3);
    EXPECT_EQ(built->persist(), 2);
    EXPECT_EQ(built->submitLead(), 45);
    const auto perSizePredict = makeLearnedPolicy("predict", predictor, quantile, perSize, 600, 45);
    EXPECT_NE(dynamic_cast<const ShapeRulesPolicy*>(perSizePredict.get()), nullptr);
    const auto windowPredict = makeLearnedPolicy("predict", predictor, window, {}, 600, 45);
    EXPECT_NE(dynamic_cast<const WindowPolicy*>(windowPredict.get()), nullptr);
    EXPECT_THROW(
        makeLearnedPolicy("checkpoint-aware", predictor, window, {}, 600, 45), std::invalid_argument);
    EXPECT_THROW(
        makeLearnedPolicy("checkpoint-aware", predictor, quantile, perSize, 600, 45), std::invalid_argument);
    EXPECT_THROW(makeLearnedPolicy("avg", predictor, quantile, {}, 600, 45), std::invalid_argument);
}

TEST(DecisionRules, EachSizeFollowsTheRuleOfTheNearestChosenSize)
{
    const auto predictor = trainedPredictor();
    const DecisionRule window { DecisionRule::Kind::Window, 0.5, 1 };
    const DecisionRule quantile { DecisionRule::Kind::Quantile, 0.3, 1 };
    const ShapeRulesPolicy rules("predict", predictor, { { 8, quantile }, { 1, window } }, 600);
    EXPECT_EQ(describeRules(rules.rules()), "1 node: window tau=0.5; 8 nodes: quantile q=0.3");
    const auto byWindow = makeRulePolicy("w", predictor, window, 600);
    const auto byQuantile = makeRulePolicy("q", predictor, quantile, 600);
    // 2 nodes is nearer 1 (x2) than 8 (x4); 3 is nearer 8 (x2.7) than 1 (x3); 64 follows 8.
    for (const auto& [nodes, follows] :
        std::vector<std::pair<int, const Policy*>> { { 1, byWindow.get() }, { 2, byWindow.get() },
            { 3, byQuantile.get() }, { 8, byQuantile.get() }, { 64, byQuantile.get() } }) {
        const auto points = lastMinutes(*predictor, nodes, 24 * 60);
        EXPECT_EQ(rules.firstSubmit(points), follows->firstSubmit(points)) << nodes << " nodes";
    }
    // The two rules differ on these ticks, so the dispatch above is seen.
    const auto one = lastMinutes(*predictor, 1, 24 * 60);
    EXPECT_NE(byWindow->firstSubmit(one), byQuantile->firstSubmit(one));
    EXPECT_THROW(ShapeRulesPolicy("predict", predictor, {}, 600), std::invalid_argument);
}

TEST(DecisionRules, RulesRoundTripThroughJsonAndBadOnesAreRefused)
{
    const std::vector<ShapeRulesPolicy::ForShape> rules { { 1, { DecisionRule::Kind::Window, 0.65, 1 } },
        { 8, { DecisionRule::Kind::Quantile, 0.25, 3 } } };
    const auto back = rulesFromJson(rulesToJson(rules));
    ASSERT_EQ(back.size(), 2u);
    EXPECT_EQ(back[0].nodes, 1);
    EXPECT_EQ(back[0].rule.kind, DecisionRule::Kind::Window);
    EXPECT_DOUBLE_EQ(back[0].rule.value, 0.65);
    EXPECT_EQ(back[1].rule.persist, 3);
    EXPECT_EQ(describeRules(back), "1 node: window tau=0.65; 8 nodes: quantile q=0.25 over 3 ticks");
    for (const char* bad : { R"({"nodes": 1})", R"([{"nodes": 1, "rule": "window"}])",
             R"([{"nodes": 0, "rule": "window", "value": 0.5}])",
             R"([{"nodes": 1, "rule": "guess", "value": 0.5}])",
             R"([{"nodes": 1, "rule": "quantile", "value": 1.5}])", R"([3])" })
        EXPECT_THROW(rulesFromJson(nlohmann::json::parse(bad)), std::invalid_argument) << bad;
}

TEST(DecisionRules, LeadFloorHoldsUnderEveryPolicyButReactive)
{
    // A 120-s job decided every 10 s: remaining 120, 110, ..., 10.
    std::vector<DecisionPoint> points;
    for (std::int64_t remaining = 120; remaining > 0; remaining -= 10) {
        DecisionPoint p;
        p.now = 120 - remaining;
        p.remaining = remaining;
        p.recentMeanWait = 10; // avg alone submits at remaining 10 (index 11)
        points.push_back(p);
    }
    const AveragePolicy avg;
    const ReactivePolicy reactive;
    EXPECT_EQ(firstSubmitWithLead(avg, points, 0), 11u);
    EXPECT_EQ(firstSubmitWithLead(avg, points, 30), 9u); // remaining 30
    EXPECT_EQ(firstSubmitWithLead(reactive, points, 30), points.size()); // reactive waits for the end
    points[3].recentMeanWait = 100; // avg's own rule earlier than the floor: its tick stands
    EXPECT_EQ(firstSubmitWithLead(avg, points, 30), 3u);
    EXPECT_EQ(submitLeadFor(60, 120), 60);
    EXPECT_EQ(submitLeadFor(90, 120), 60); // at most half the limit
    EXPECT_EQ(submitLeadFor(90, 0), 90); // no limit known
}
