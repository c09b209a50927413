// Mirage's protocol and metrics on a tiny trace whose answer is worked out by hand, and determinism.
#include "sim/protocol.hpp"

#include "fixed_lead_policy.hpp"
#include "job_factory.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

using namespace baton::sim;
using baton::sim::test::FixedLeadPolicy;
using baton::sim::test::job;
using baton::sim::test::randomJobs;

// Two nodes. X holds one until 600; the predecessor takes the other from 0 to 1000.
// Y (900, long) takes the node X frees; Z (950, short) then waits for the predecessor's node.
//  - reactive: at 1000 Z (older) beats the fresh successor, which starts when Z ends: +100.
//  - lead 200: submitted at 800 onto X's free node: -200.
//  - lead 75: submitted at 930 (first tick with <= 75 s left), older than Z, starts at 1000: 0.
//  - avg: every recent wait is 0, so it never submits early: like reactive, +100.
TEST(Protocol, HandComputedInterruptions)
{
    auto trace = std::make_shared<const std::vector<Job>>(
        std::vector<Job> { job(1, 0, 1, 600, 600), job(2, 900, 1, 2000, 2000), job(3, 950, 1, 100, 100) });
    SchedulerConfig sc;
    sc.nodes = 2;
    sc.ageWeight = 1000;
    sc.sizeWeight = 0;
    ProtocolConfig pc;
    pc.from = 0;
    pc.to = 1;
    pc.shapes = { 1 };
    pc.limit = 1000;
    pc.tick = 10;
    pc.horizon = 10000;
    ReactivePolicy reactive;
    AveragePolicy avg;
    FixedLeadPolicy lead200(200), lead75(75);
    const Policy* policies[] = { &reactive, &lead200, &lead75, &avg };
    const auto r = runProtocol(trace, sc, pc, policies);
    ASSERT_EQ(r.probes.size(), 1u);
    const auto& p = r.probes[0];
    EXPECT_EQ(p.predecessorEnd, 1000);
    EXPECT_EQ(p.outcomes[0].submitted, 1000);
    EXPECT_EQ(p.outcomes[0].interruption, std::optional<std::int64_t>(100));
    EXPECT_EQ(p.outcomes[1].submitted, 800);
    EXPECT_EQ(p.outcomes[1].interruption, std::optional<std::int64_t>(-200));
    EXPECT_EQ(p.outcomes[2].submitted, 930);
    EXPECT_EQ(p.outcomes[2].interruption, std::optional<std::int64_t>(0));
    EXPECT_FALSE(p.oracle.has_value());

    // In hindsight: before 900 the successor takes X's free node at once (early); from 900 (Y has the
    // node) it is older than Z and starts at 1000. The earliest such tick is the bound.
    pc.oracle = true;
    const auto o = runProtocol(trace, sc, pc, policies);
    ASSERT_TRUE(o.probes[0].oracle.has_value());
    EXPECT_EQ(o.probes[0].oracle->submitted, 900);
    EXPECT_EQ(o.probes[0].oracle->interruption, std::optional<std::int64_t>(0));
    EXPECT_EQ(p.outcomes[3].interruption, std::optional<std::int64_t>(100));
}

TEST(Protocol, MetricsOfKnownInterruptions)
{
    const std::vector<std::optional<std::int64_t>> x { 100, -200, 0, std::nullopt };
    const auto m = summarize(x, 100, 60);
    EXPECT_EQ(m.count, 3u);
    EXPECT_EQ(m.unstarted, 1u);
    EXPECT_NEAR(m.mean, -100.0 / 3, 1e-9);
    EXPECT_DOUBLE_EQ(m.median, 0);
    EXPECT_NEAR(m.p90, 80, 1e-9); // linear interpolation between 0 and 100
    EXPECT_NEAR(m.fractionZero, 1.0 / 3, 1e-12);
    EXPECT_NEAR(m.fractionWithin, 2.0 / 3, 1e-12);
    EXPECT_NEAR(m.meanOverlap, 200.0 / 3, 1e-9);
    EXPECT_NEAR(m.meanGap, 100.0 / 3, 1e-9);
    EXPECT_DOUBLE_EQ(m.effectiveWithin, 1.0);
    EXPECT_NEAR(m.effectiveMeanOverlap, 20, 1e-9);

    EXPECT_NEAR(symmetricCost(x, 1000), (100 + 200 + 0 + 1000) / 4.0, 1e-9);
    // lost: 100 + 60 (handover) + 0 + 1000; forfeited 200 over 4 probes; limit 1000.
    EXPECT_NEAR(handoverCost(x, 1000, 60, 1000), 1000 * (1160 / 4.0) / (1000 - 50.0), 1e-9);
    EXPECT_NEAR(meanOverlap(x), 50, 1e-9);
}

TEST(Protocol, CheckpointAwareChoiceRespectsTheOverlapBudget)
{
    using Column = std::vector<std::optional<std::int64_t>>;
    // Always late by 600 s; half early by 300 s, half late by 600 s; always early by 5000 s (the
    // cheapest per useful hour, but over the budget).
    const std::vector<Column> candidates { { 600, 600 }, { -300, 600 }, { -5000, -5000 } };
    EXPECT_EQ(chooseUnderOverlapBudget(candidates, 1e5, 60, 172800, 1e9), 2u); // unbounded: hand over early
    EXPECT_EQ(chooseUnderOverlapBudget(candidates, 1e5, 60, 172800, 1800), 1u);
    EXPECT_EQ(chooseUnderOverlapBudget(candidates, 1e5, 60, 172800, 100), 0u);
    // Nothing within the budget: the least overlap.
    const std::vector<Column> allEarly { { -4000 }, { -3000 }, { -9000 } };
    EXPECT_EQ(chooseUnderOverlapBudget(allEarly, 1e5, 60, 172800, 1800), 1u);
}

TEST(Protocol, PredictChoiceCountsSuccessorsWithinTheTolerance)
{
    using Column = std::vector<std::optional<std::int64_t>>;
    // 0: two of four within 600 s, the least mean |x|; 1: three within, one long gap; 2: all four
    // within, each 600 s early (mean overlap 600 s); 3: three within, like 1, at a lower mean |x|.
    const std::vector<Column> candidates { { 700, 700, 0, 0 }, { 0, 0, 0, 9000 }, { -600, -600, -600, -600 },
        { 0, 0, 600, 8000 } };
    EXPECT_EQ(chooseMostWithin(candidates, 600, 1e5, 1e9), 2u); // no overlap bound: the most within
    EXPECT_EQ(chooseMostWithin(candidates, 600, 1e5, 500), 3u); // the tie goes to the lower mean |x|
    EXPECT_EQ(chooseMostWithin(std::span(candidates).first(2), 600, 1e5, 500), 1u); // within beats mean |x|
    // Nothing within the bound: the least overlap.
    const std::vector<Column> allEarly { { -4000 }, { -3000 }, { -9000 } };
    EXPECT_EQ(chooseMostWithin(allEarly, 600, 1e5, 1800), 1u);
}

TEST(Protocol, SameInputsGiveTheSameOutput)
{
    auto trace = std::make_shared<const std::vector<Job>>(randomJobs(42, 1200, 2400, 6, 600, 20000));
    SchedulerConfig sc;
    sc.nodes = 16;
    ProtocolConfig pc;
    pc.from = 86400;
    pc.to = 4 * 86400;
    pc.limit = 6 * 3600;
    pc.shapes = { 1, 4 };
    pc.sampleEvery = 3600;
    ReactivePolicy reactive;
    AveragePolicy avg;
    const Policy* policies[] = { &reactive, &avg };
    const auto a = runProtocol(trace, sc, pc, policies);
    const auto b = runProtocol(trace, sc, pc, policies);
    ASSERT_GT(a.probes.size(), 20u);
    ASSERT_EQ(a.probes.size(), b.probes.size());
    bool someWait = false;
    for (std::size_t i = 0; i < a.probes.size(); ++i) {
        EXPECT_EQ(a.probes[i].predecessorEnd, b.probes[i].predecessorEnd);
        for (std::size_t k = 0; k < 2; ++k) {
            EXPECT_EQ(a.probes[i].outcomes[k].submitted, b.probes[i].outcomes[k].submitted);
            EXPECT_EQ(a.probes[i].outcomes[k].interruption, b.probes[i].outcomes[k].interruption);
            someWait = someWait || a.probes[i].outcomes[k].interruption.value_or(0) != 0;
        }
    }
    EXPECT_TRUE(someWait) << "the synthetic queue should make some successors wait";

    // No submit-time policy comes closer to the predecessor's end than the hindsight bound.
    pc.oracle = true;
    const auto o = runProtocol(trace, sc, pc, policies);
    ASSERT_EQ(o.probes.size(), a.probes.size());
    bool oracleBeatsSome = false;
    for (const auto& p : o.probes) {
        ASSERT_TRUE(p.oracle.has_value());
        for (const auto& outcome : p.outcomes) {
            if (!outcome.interruption)
                continue;
            ASSERT_TRUE(p.oracle->interruption.has_value());
            EXPECT_LE(std::abs(*p.oracle->interruption), std::abs(*outcome.interruption));
            oracleBeatsSome
                = oracleBeatsSome || std::abs(*p.oracle->interruption) < std::abs(*outcome.interruption);
        }
    }
    EXPECT_TRUE(oracleBeatsSome);
    ASSERT_EQ(a.samples.size(), b.samples.size());
    for (std::size_t i = 0; i < a.samples.size(); ++i) {
        EXPECT_EQ(a.samples[i].x, b.samples[i].x);
        EXPECT_EQ(a.samples[i].waitSeconds, b.samples[i].waitSeconds);
    }
}
