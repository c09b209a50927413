// baton's chain metric: the ledger on hand-computed chains, and whole chains on a tiny queue.
#include "sim/protocol.hpp"

#include "fixed_lead_policy.hpp"
#include "job_factory.hpp"

#include <gtest/gtest.h>

#include <random>

using namespace baton::sim;
using baton::sim::test::FixedLeadPolicy;
using baton::sim::test::job;
using baton::sim::test::randomJobs;

// 100 h of compute, 48 h jobs, handover 60 s, 2 nodes.
//  job 1: starts 0, checkpoints at its limit (172,740 .. 172,800); its successor starts 10 min late.
//  job 2: starts 173,400, trains from there; its successor starts 1 h early (342,600): job 2 stops,
//         persists until 342,660 and exits; 341,940 s trained so far.
//  job 3: resumes at 342,660 and needs 18,060 s more: done at 360,720.
// Idle: 60 s per checkpoint of jobs 1 and 2, 60 s of job 3 waiting for job 2's; on 2 nodes 360 node-s.
TEST(Chain, LedgerWithAGapThenAHandover)
{
    ChainLedger ledger(100 * 3600, 60, 2);
    ledger.firstJobStarted(0, 48 * 3600);
    ASSERT_TRUE(ledger.needsSuccessor());
    EXPECT_EQ(ledger.successorStarted(173400, 48 * 3600), 172800); // the predecessor's end: its limit
    ASSERT_TRUE(ledger.needsSuccessor());
    EXPECT_EQ(ledger.limitEnd(), 346200);
    EXPECT_EQ(ledger.successorStarted(342600, 48 * 3600), 342660); // the handover
    ASSERT_FALSE(ledger.needsSuccessor());
    EXPECT_EQ(ledger.finish(), 360720);
    const auto& o = ledger.outcome();
    EXPECT_TRUE(o.finished);
    EXPECT_EQ(o.jobs, 3);
    EXPECT_EQ(o.compute, 360000);
    EXPECT_EQ(o.elapsed, 360720);
    EXPECT_DOUBLE_EQ(o.idleNodeSeconds, 360);
}

// A successor that starts while its predecessor is already writing the checkpoint before its limit
// (970, inside 940 .. 1000) resumes when that checkpoint is persisted (1000); it held its node 30 s idle.
TEST(Chain, LedgerSuccessorStartingDuringTheLimitCheckpoint)
{
    ChainLedger ledger(1500, 60, 1);
    ledger.firstJobStarted(0, 1000);
    EXPECT_EQ(ledger.successorStarted(970, 1000), 1000);
    EXPECT_EQ(ledger.outcome().compute, 940);
    ASSERT_FALSE(ledger.needsSuccessor()); // 560 s left, the job can train 910
    EXPECT_EQ(ledger.finish(), 1560);
    EXPECT_DOUBLE_EQ(ledger.outcome().idleNodeSeconds, 90);
    EXPECT_EQ(ledger.outcome().jobs, 2);

    ChainLedger one(36000, 60, 4); // fits in one job: no successor, no checkpoint counted
    one.firstJobStarted(500, 172800);
    EXPECT_FALSE(one.needsSuccessor());
    EXPECT_EQ(one.finish(), 36500);
    EXPECT_EQ(one.outcome().elapsed, 36000);
    EXPECT_DOUBLE_EQ(one.outcome().idleNodeSeconds, 0);

    EXPECT_THROW(ChainLedger(0, 60, 1), std::invalid_argument);
    ChainLedger bad(1000, 60, 1);
    EXPECT_THROW(bad.firstJobStarted(0, 60), std::invalid_argument); // no room to train
    bad.firstJobStarted(0, 100);
    EXPECT_THROW(bad.finish(), std::logic_error); // 1000 s do not fit in 40
}

TEST(Chain, SummaryPoolsFinishedChains)
{
    ChainOutcome a { true, 3, 360000, 360720, 360, {} };
    ChainOutcome b { true, 1, 36000, 36000, 0, {} };
    ChainOutcome stuck { false, 2, 1000, 5000, 60, {} };
    const std::vector<ChainOutcome> all { a, b, stuck };
    const auto m = summarizeChains(all);
    EXPECT_EQ(m.chains, 2u);
    EXPECT_EQ(m.unfinished, 1u);
    EXPECT_DOUBLE_EQ(m.efficiency, 396000.0 / 396720.0);
    EXPECT_DOUBLE_EQ(m.minEfficiency, 360000.0 / 360720.0);
    EXPECT_DOUBLE_EQ(m.meanJobs, 2);
    EXPECT_DOUBLE_EQ(m.meanIdleNodeHours, 180.0 / 3600);
}

// The tiny queues' cluster: two nodes, ordered by age.
SchedulerConfig twoNodes()
{
    SchedulerConfig sc;
    sc.nodes = 2;
    sc.ageWeight = 1000;
    sc.sizeWeight = 0;
    return sc;
}

// One 1-node chain from time 0 in 1000 s jobs, deciding every 10 s.
ProtocolConfig oneChainAtZero()
{
    ProtocolConfig pc;
    pc.from = 0;
    pc.to = 1;
    pc.shapes = { 1 };
    pc.limit = 1000;
    pc.tick = 10;
    pc.horizon = 10000;
    return pc;
}

// Two nodes; 1500 s of compute as 1000 s jobs, handover 60 s, one chain from time 0 (W holds the
// other node until 100). X (900, 500 s) takes the free node; Y (950, 250 s) waits.
//  - reactive: at 1000 Y (older) takes the predecessor's node; the successor starts when Y ends, 1250;
//    job 1 trained 940 s, job 2 trains 560 s from 1250: done at 1810.
//  - lead 200: submitted at 800 onto the free node, handover: job 1 trains 800 s, persists until 860
//    and exits; job 2 resumes at 860 and is done at 1560. Idle: 60 + 60 node-s.
TEST(Chain, HandComputedChainsOnATinyQueue)
{
    auto trace = std::make_shared<const std::vector<Job>>(
        std::vector<Job> { job(1, 0, 1, 100, 100), job(2, 900, 1, 500, 500), job(3, 950, 1, 250, 250) });
    const SchedulerConfig sc = twoNodes();
    const ProtocolConfig pc = oneChainAtZero();
    ChainConfig cc { 1500, 60, 1 };
    ReactivePolicy reactive;
    FixedLeadPolicy lead200(200);
    const Policy* policies[] = { &reactive, &lead200 };
    const auto r = runChains(trace, sc, pc, cc, policies);
    ASSERT_EQ(r.chains.size(), 2u);
    ASSERT_EQ(r.chains[0].size(), 1u);
    const auto& reactiveChain = r.chains[0][0];
    EXPECT_TRUE(reactiveChain.finished);
    EXPECT_EQ(reactiveChain.jobs, 2);
    EXPECT_EQ(reactiveChain.elapsed, 1810);
    EXPECT_DOUBLE_EQ(reactiveChain.idleNodeSeconds, 60);
    const auto& early = r.chains[1][0];
    EXPECT_TRUE(early.finished);
    EXPECT_EQ(early.jobs, 2);
    EXPECT_EQ(early.elapsed, 1560);
    EXPECT_DOUBLE_EQ(early.idleNodeSeconds, 120);
    EXPECT_DOUBLE_EQ(summarizeChains(r.chains[1]).efficiency, 1500.0 / 1560.0);
}

// A queue that waits longer than a job: one node serves the chain (W holds the other until 3000); X
// (800, 700 s) competes for it. 2500 s of compute as 1000 s jobs, handover 60 s, a 1500 s lead (more
// than a limit: each successor is submitted as soon as its predecessor runs).
//  - one in flight: S1 submitted at 0 starts at 1000 (no gap); S2, submitted when S1 starts (1000), is
//    younger than X, which takes the node at 2000; S2 starts when X ends, 2700: job 2 trained 940 s
//    (1000 .. 1940), job 3 trains the last 620 s from 2700: done at 3320.
//  - two in flight: while S1 waits, S2 is decided as for a predecessor ending at 2000: 1500 s before
//    that is 500, before X came; S2 takes the node at 2000 and the training is done at 2620.
TEST(Chain, ASecondSuccessorInFlightBeatsAQueueLongerThanAJob)
{
    auto trace = std::make_shared<const std::vector<Job>>(
        std::vector<Job> { job(1, 0, 1, 3000, 3000), job(2, 800, 1, 700, 700) });
    const SchedulerConfig sc = twoNodes();
    const ProtocolConfig pc = oneChainAtZero();
    FixedLeadPolicy lead1500(1500);
    const Policy* policies[] = { &lead1500 };
    ChainConfig cc { 2500, 60, 1 };
    const auto one = runChains(trace, sc, pc, cc, policies);
    cc.successorsInFlight = 2;
    const auto two = runChains(trace, sc, pc, cc, policies);
    ASSERT_EQ(one.chains[0].size(), 1u);
    ASSERT_EQ(two.chains[0].size(), 1u);
    const ChainOutcome& single = one.chains[0][0];
    const ChainOutcome& ahead = two.chains[0][0];
    EXPECT_TRUE(single.finished);
    EXPECT_EQ(single.elapsed, 3320);
    ASSERT_EQ(single.handovers.size(), 2u);
    EXPECT_EQ(single.handovers[1].submitted, 1000);
    EXPECT_EQ(single.handovers[1].started, 2700);
    EXPECT_TRUE(ahead.finished);
    EXPECT_EQ(ahead.jobs, 3);
    EXPECT_EQ(ahead.elapsed, 2620);
    ASSERT_EQ(ahead.handovers.size(), 2u);
    EXPECT_EQ(ahead.handovers[0].submitted, 0);
    EXPECT_EQ(ahead.handovers[0].started, 1000);
    EXPECT_EQ(ahead.handovers[1].submitted, 500) << "queued while the first successor waited";
    EXPECT_EQ(ahead.handovers[1].started, 2000);
    EXPECT_EQ(ahead.compute, 2500);
}

// Chains are independent given the trace: splitting the probe moments over threads changes nothing.
TEST(Chain, ThreadsDoNotChangeTheChains)
{
    auto trace = std::make_shared<const std::vector<Job>>(randomJobs(42, 1200, 2400, 6, 600, 20000));
    SchedulerConfig sc;
    sc.nodes = 16;
    ProtocolConfig pc;
    pc.from = 86400;
    pc.to = 5 * 86400;
    pc.interval = 6 * 3600;
    pc.limit = 6 * 3600;
    pc.shapes = { 1, 4 };
    ReactivePolicy reactive;
    AveragePolicy avg;
    FixedLeadPolicy lead(1800);
    const Policy* policies[] = { &reactive, &avg, &lead };
    ChainConfig cc { 20 * 3600, 60, 1 };
    const auto one = runChains(trace, sc, pc, cc, policies);
    cc.threads = 3;
    const auto three = runChains(trace, sc, pc, cc, policies);
    ASSERT_EQ(one.chains.size(), 3u);
    ASSERT_EQ(one.chains[0].size(), 32u); // 16 moments x 2 shapes
    EXPECT_EQ(one.skipped, three.skipped);
    bool someGap = false;
    for (std::size_t k = 0; k < 3; ++k) {
        ASSERT_EQ(one.chains[k].size(), three.chains[k].size());
        for (std::size_t i = 0; i < one.chains[k].size(); ++i) {
            const auto &a = one.chains[k][i], &b = three.chains[k][i];
            EXPECT_EQ(a.finished, b.finished);
            EXPECT_EQ(a.jobs, b.jobs);
            EXPECT_EQ(a.compute, b.compute);
            EXPECT_EQ(a.elapsed, b.elapsed);
            EXPECT_EQ(a.idleNodeSeconds, b.idleNodeSeconds);
            someGap = someGap || (a.finished && a.elapsed > a.compute + 4 * 60);
        }
    }
    EXPECT_TRUE(someGap) << "the synthetic queue should make some successors wait";
    cc.threads = 0;
    EXPECT_THROW(runChains(trace, sc, pc, cc, policies), std::invalid_argument);
}
