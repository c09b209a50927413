// Training a wait predictor and its round trip through a model file.
#include "policy/predictor.hpp"

#include "tests/support/process.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

using namespace baton::sim;

namespace {

// Waits that depend on the queue ahead, with multiplicative noise: learnable, but not exactly.
std::vector<WaitSample> syntheticSamples(std::size_t n, unsigned seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> ahead(0, 200);
    std::normal_distribution<double> noise(0, 0.3);
    std::vector<WaitSample> samples;
    for (std::size_t i = 0; i < n; ++i) {
        WaitSample s;
        const float nodes = static_cast<float>(1 + rng() % 8);
        const float aheadHours = ahead(rng);
        at(s.x, Feature::Nodes) = nodes;
        at(s.x, Feature::AheadNodeHours) = aheadHours;
        at(s.x, Feature::HourOfDay) = static_cast<float>(rng() % 24);
        s.waitSeconds = std::expm1(std::log1p(60.0 * aheadHours * nodes) + noise(rng));
        samples.push_back(s);
    }
    return samples;
}

TrainOptions quick()
{
    TrainOptions o;
    o.rounds = 60;
    o.maxDepth = 4;
    o.learningRate = 0.2;
    return o;
}

} // namespace

TEST(Predictor, LearnsAndCalibratesQuantiles)
{
    const auto samples = syntheticSamples(3000, 1);
    const auto p = WaitPredictor::train(samples, quick());
    EXPECT_EQ(p.metrics().trainRows, 2400u);
    EXPECT_EQ(p.metrics().heldOutRows, 600u);
    EXPECT_LT(p.metrics().heldOutMaeLog, 0.5); // noise alone is ~0.24
    EXPECT_NEAR(p.metrics().heldOutCoverage90, 0.9, 0.05); // calibrated on these rows

    Features small {}, large {};
    at(small, Feature::Nodes) = 1;
    at(small, Feature::AheadNodeHours) = 10;
    at(large, Feature::Nodes) = 8;
    at(large, Feature::AheadNodeHours) = 190;
    const std::vector<Features> rows { small, large };
    const auto mu = p.predictLog(rows);
    EXPECT_LT(p.quantileSeconds(mu[0], 0.5), p.quantileSeconds(mu[1], 0.5));
    EXPECT_LT(p.quantileSeconds(mu[1], 0.1), p.quantileSeconds(mu[1], 0.5));
    EXPECT_LT(p.quantileSeconds(mu[1], 0.5), p.quantileSeconds(mu[1], 0.9));
}

TEST(Predictor, RoundTripThroughAFile)
{
    baton::test::TempDir dir("baton-sim-model");
    const auto samples = syntheticSamples(1000, 2);
    const auto trained = WaitPredictor::train(samples, quick());
    const auto file = dir.path() / "model.json";
    trained.save(file);
    const auto loaded = WaitPredictor::load(file);

    std::vector<Features> rows;
    for (std::size_t i = 0; i < 200; ++i)
        rows.push_back(samples[i].x);
    const auto a = trained.predictLog(rows);
    const auto b = loaded.predictLog(rows);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_FLOAT_EQ(static_cast<float>(a[i]), static_cast<float>(b[i]));
        for (double q : { 0.1, 0.5, 0.9 })
            EXPECT_NEAR(trained.quantileSeconds(a[i], q), loaded.quantileSeconds(b[i], q),
                1e-4 * (1 + trained.quantileSeconds(a[i], q)));
    }
    EXPECT_EQ(loaded.metrics().trainRows, trained.metrics().trainRows);
    EXPECT_DOUBLE_EQ(loaded.metrics().heldOutMaeLog, trained.metrics().heldOutMaeLog);
}

TEST(Predictor, SameSeedSameModel)
{
    const auto samples = syntheticSamples(800, 3);
    const auto a = WaitPredictor::train(samples, quick());
    const auto b = WaitPredictor::train(samples, quick());
    // Everything but the measured training time is identical.
    EXPECT_EQ(a.toJson()["booster"].dump(), b.toJson()["booster"].dump());
    EXPECT_EQ(a.toJson()["residual_quantiles"].dump(), b.toJson()["residual_quantiles"].dump());
}

TEST(Predictor, RejectsBadFilesClearly)
{
    baton::test::TempDir dir("baton-sim-model");
    EXPECT_THROW(WaitPredictor::load(dir.path() / "absent.json"), std::runtime_error);
    const auto garbage = dir.path() / "garbage.json";
    std::ofstream(garbage) << "\x01\x02 not json";
    EXPECT_THROW(WaitPredictor::load(garbage), std::runtime_error);
    const auto other = dir.path() / "other.json";
    std::ofstream(other) << R"({"format": "something else"})";
    EXPECT_THROW(WaitPredictor::load(other), std::runtime_error);
    EXPECT_THROW(WaitPredictor::train(syntheticSamples(5, 4), quick()), std::invalid_argument);

    // A model that cannot be written leaves no file behind.
    const auto model = WaitPredictor::train(syntheticSamples(200, 5), quick());
    EXPECT_THROW(model.save(dir.path() / "no-such-dir" / "model.json"), std::runtime_error);
    EXPECT_FALSE(std::filesystem::exists(dir.path() / "no-such-dir"));
}

// Waits that follow the queue's recent level: a tree predicts no wait beyond those it was trained on,
// a model relative to the recent wait follows the level past them.
TEST(Predictor, RelativeToTheRecentWaitFollowsAQueueThatGrows)
{
    std::mt19937 rng(6);
    std::uniform_real_distribution<double> level(60, 600); // the recent mean wait in training: 1-10 min
    std::normal_distribution<double> noise(0, 0.2);
    std::vector<WaitSample> samples;
    for (int i = 0; i < 2000; ++i) {
        WaitSample s;
        const double recent = level(rng);
        at(s.x, Feature::Nodes) = 1;
        at(s.x, Feature::RecentMeanWaitHours) = static_cast<float>(recent / 3600);
        s.waitSeconds = std::expm1(std::log1p(2 * recent) + noise(rng));
        samples.push_back(s);
    }
    TrainOptions relative = quick();
    relative.offset = WaitOffset::RecentWait;
    const auto plain = WaitPredictor::train(samples, quick());
    const auto followed = WaitPredictor::train(samples, relative);
    EXPECT_EQ(followed.offset(), WaitOffset::RecentWait);

    Features inRange {}, beyond {};
    at(inRange, Feature::Nodes) = at(beyond, Feature::Nodes) = 1;
    at(inRange, Feature::RecentMeanWaitHours) = 300.0f / 3600;
    at(beyond, Feature::RecentMeanWaitHours) = 3000.0f / 3600; // five times the longest trained on
    const std::vector<Features> rows { inRange, beyond };
    const auto plainLog = plain.predictLog(rows);
    const auto followedLog = followed.predictLog(rows);
    // Within the training range both predict about twice the recent wait.
    EXPECT_NEAR(plain.quantileSeconds(plainLog[0], 0.5), 600, 120);
    EXPECT_NEAR(followed.quantileSeconds(followedLog[0], 0.5), 600, 120);
    // Beyond it the plain trees stay at the longest waits they saw (~1,200 s); the relative model does not.
    EXPECT_LT(plain.quantileSeconds(plainLog[1], 0.5), 1500);
    EXPECT_NEAR(followed.quantileSeconds(followedLog[1], 0.5), 6000, 1500);

    // The offset is part of the model: a file keeps it and predicts the same.
    baton::test::TempDir dir("baton-sim-model");
    followed.save(dir.path() / "relative.json");
    const auto loaded = WaitPredictor::load(dir.path() / "relative.json");
    EXPECT_EQ(loaded.offset(), WaitOffset::RecentWait);
    EXPECT_FLOAT_EQ(static_cast<float>(loaded.predictLog(rows)[1]), static_cast<float>(followedLog[1]));
    auto doc = followed.toJson();
    EXPECT_EQ(doc["version"], 2);
    EXPECT_EQ(doc["offset"], "recent_mean_wait");
    doc["offset"] = "tomorrow's weather";
    EXPECT_THROW(WaitPredictor::fromJson(doc), std::runtime_error);
    doc["version"] = 1; // a version-1 reader would ignore the offset: version 1 never carries one
    doc["offset"] = "recent_mean_wait";
    EXPECT_THROW(WaitPredictor::fromJson(doc), std::runtime_error);
    EXPECT_EQ(plain.toJson()["version"], 1);
}
