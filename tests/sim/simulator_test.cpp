// The simulator against schedules computed by hand: priority order, ties, EASY and conservative backfill.
#include "sim/simulator.hpp"

#include "job_factory.hpp"
#include "replay_starts.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <map>

using namespace baton::sim;
using baton::sim::test::job;
using baton::sim::test::randomJobs;
using baton::sim::test::replay;

namespace {

SchedulerConfig cluster(
    int nodes, double ageWeight = 0, double sizeWeight = 0, Backfill backfill = Backfill::Easy)
{
    SchedulerConfig c;
    c.backfill = backfill;
    c.nodes = nodes;
    c.ageWeight = ageWeight;
    c.sizeWeight = sizeWeight;
    c.maxAge = 100;
    return c;
}

} // namespace

TEST(Simulator, FirstComeFirstServedWhenPrioritiesAreEqual)
{
    const auto s
        = replay({ job(1, 0, 4, 100, 200), job(2, 10, 2, 50, 100), job(3, 10, 2, 50, 100) }, cluster(4));
    EXPECT_EQ(s.at(1), 0);
    EXPECT_EQ(s.at(2), 100); // ends at its run time, not its limit
    EXPECT_EQ(s.at(3), 100);
}

TEST(Simulator, TiesGoToTheLowerIdAmongEqualSubmissions)
{
    const auto s
        = replay({ job(1, 0, 2, 100, 100), job(5, 10, 2, 100, 100), job(3, 10, 2, 100, 100) }, cluster(2));
    EXPECT_EQ(s.at(3), 100);
    EXPECT_EQ(s.at(5), 200);
}

TEST(Simulator, AHeldJobAgesFromItsSubmissionOrFromItsPredecessorsEnd)
{
    // A and B fill both nodes; H, submitted at 1, waits for A (ends at 50); C, submitted at 10, waits
    // for a node. At 50 one node frees. Aging from submission (ACCRUE_ALWAYS), H is older and starts;
    // aging from A's end (Slurm's default), H has no age yet, C (40 s) starts and H follows at C's end.
    auto held = job(3, 1, 1, 10, 10);
    held.afterId = 1;
    const std::vector<Job> jobs { job(1, 0, 1, 50, 50), job(2, 0, 1, 200, 200), held, job(4, 10, 1, 10, 10) };
    auto config = cluster(2, 1000);
    const auto fromSubmit = replay(jobs, config);
    EXPECT_EQ(fromSubmit.at(3), 50);
    EXPECT_EQ(fromSubmit.at(4), 60);
    config.heldJobsAge = false;
    const auto fromEnd = replay(jobs, config);
    EXPECT_EQ(fromEnd.at(4), 50);
    EXPECT_EQ(fromEnd.at(3), 60);
}

TEST(Simulator, AHeldJobWaitsFromItsPredecessorsEnd)
{
    // Two nodes. A and C start at 0; H, submitted at 0 too, is held until A ends at 50 and takes A's
    // node at once (the older submission, ahead of D, submitted at 40, which follows at H's end, 60).
    // H waited 0 s in the queue, not 50: a fresh submission meets the queue after eligibility.
    auto held = job(2, 0, 1, 10, 10);
    held.afterId = 1;
    std::vector<Job> jobs { job(1, 0, 1, 50, 50), held, job(3, 0, 1, 100, 100), job(4, 40, 1, 10, 10) };
    prepareTrace(jobs, 2);
    Simulator sim(std::make_shared<const std::vector<Job>>(jobs), cluster(2));
    std::vector<std::int64_t> starts(jobs.size(), -1);
    sim.recordStartsInto(&starts);
    sim.runToEnd();
    EXPECT_EQ(starts, (std::vector<std::int64_t> { 0, 50, 0, 60 }));
    EXPECT_DOUBLE_EQ(sim.recentMeanWait(), (0.0 + 0 + 0 + 20) / 4);
}

TEST(Simulator, PrioritiesAreTheAgesAtTheLastComputation)
{
    // X holds a node until 200, A the other until 100; H waits for A, C is submitted at 90. At 100 H
    // has no age (it was held), C 10 s: C starts. With priorities computed every 60 s (Slurm's
    // PriorityCalcPeriod), the last computation was at 60, before C's submission: neither has any age,
    // and the tie goes to the earlier submission, H.
    auto held = job(3, 1, 1, 10, 10);
    held.afterId = 2;
    const std::vector<Job> jobs { job(1, 0, 1, 200, 200), job(2, 0, 1, 100, 100), held,
        job(4, 90, 1, 10, 10) };
    auto config = cluster(2, 1000);
    config.heldJobsAge = false;
    const auto continuous = replay(jobs, config);
    EXPECT_EQ(continuous.at(4), 100);
    EXPECT_EQ(continuous.at(3), 110);
    config.priorityPeriod = 60;
    const auto everyMinute = replay(jobs, config);
    EXPECT_EQ(everyMinute.at(3), 100);
    EXPECT_EQ(everyMinute.at(4), 110);
}

TEST(Simulator, BackfillsOnlyJobsThatEndBeforeTheReservation)
{
    // A holds 3 of 4 nodes until 100; B needs all 4, so it is reserved at 100 with no spare node.
    // C (limit 50) ends before 100 and backfills; E (limit 200) would delay B and must wait. One job
    // blocked: both kinds of backfill agree.
    for (const auto backfill : { Backfill::Easy, Backfill::Conservative }) {
        SCOPED_TRACE(backfill == Backfill::Easy ? "easy" : "conservative");
        const auto s = replay({ job(1, 0, 3, 100, 100), job(2, 1, 4, 100, 100), job(3, 2, 1, 50, 50),
                                  job(4, 3, 1, 10, 200), job(5, 60, 1, 10, 200) },
            cluster(4, 0, 0, backfill));
        EXPECT_EQ(s.at(1), 0);
        EXPECT_EQ(s.at(3), 2);
        EXPECT_EQ(s.at(2), 100);
        EXPECT_EQ(s.at(4), 200);
        EXPECT_EQ(s.at(5), 200);
    }
}

TEST(Simulator, BackfillsLongJobsOnNodesTheReservationDoesNotNeed)
{
    // B needs 3 nodes at 100, when 4 are free: one spare node takes C (which outlives the
    // reservation); D finds no spare node left and waits for B to end.
    for (const auto backfill : { Backfill::Easy, Backfill::Conservative }) {
        SCOPED_TRACE(backfill == Backfill::Easy ? "easy" : "conservative");
        const auto s = replay(
            { job(1, 0, 2, 100, 100), job(2, 1, 3, 100, 100), job(3, 2, 1, 500, 500), job(4, 3, 1, 10, 500) },
            cluster(4, 0, 0, backfill));
        EXPECT_EQ(s.at(1), 0);
        EXPECT_EQ(s.at(3), 2);
        EXPECT_EQ(s.at(2), 100);
        EXPECT_EQ(s.at(4), 200);
    }
}

TEST(Simulator, ConservativeBackfillHoldsEveryBlockedJobsReservation)
{
    // 8 nodes: R1 holds 4 until 100, R2 2 until 300; 2 are free. B (4 nodes) is reserved at 100 with 2
    // spare, C (all 8) can start only at 300. D (1 node, 350 s) arrives at 3. EASY reserves for B alone:
    // D takes a spare node at once and C waits for it until 353. Conservative (Slurm's sched/backfill)
    // also holds C's reservation at 300, which D would delay: D waits until C has run, at 400.
    const std::vector<Job> jobs { job(1, 0, 4, 100, 100), job(2, 0, 2, 300, 300), job(3, 1, 4, 100, 100),
        job(4, 2, 8, 100, 100), job(5, 3, 1, 350, 350) };
    const auto easy = replay(jobs, cluster(8, 0, 0, Backfill::Easy));
    EXPECT_EQ(easy.at(3), 100);
    EXPECT_EQ(easy.at(5), 3);
    EXPECT_EQ(easy.at(4), 353);
    const auto conservative = replay(jobs, cluster(8, 0, 0, Backfill::Conservative));
    EXPECT_EQ(conservative.at(3), 100);
    EXPECT_EQ(conservative.at(4), 300);
    EXPECT_EQ(conservative.at(5), 400);
    // A shorter D fits before C's reservation in both.
    auto shortD = jobs;
    shortD[4] = job(5, 3, 1, 250, 250);
    EXPECT_EQ(replay(shortD, cluster(8, 0, 0, Backfill::Conservative)).at(5), 3);
}

TEST(Simulator, EveryKindOfBackfillKeepsToTheClusterAndStartsEveryJob)
{
    for (const auto backfill : { Backfill::None, Backfill::Easy, Backfill::Conservative }) {
        for (std::uint64_t seed = 1; seed <= 20; ++seed) {
            auto jobs = randomJobs(seed, 200, 30, 6, 20, 400);
            prepareTrace(jobs, 6);
            Simulator sim(std::make_shared<const std::vector<Job>>(jobs), cluster(6, 10, 1, backfill));
            std::vector<std::int64_t> starts(jobs.size(), -1);
            sim.recordStartsInto(&starts);
            while (!sim.finished()) {
                ASSERT_TRUE(sim.nextEventTime() != std::numeric_limits<std::int64_t>::max())
                    << "seed " << seed << ": jobs left pending with nothing to wait for";
                sim.advanceTo(sim.nextEventTime());
                int held = 0;
                for (const auto& r : sim.running())
                    held += r.nodes;
                ASSERT_EQ(held + sim.freeNodes(), 6) << "seed " << seed;
                ASSERT_GE(sim.freeNodes(), 0) << "seed " << seed;
            }
            for (std::size_t i = 0; i < jobs.size(); ++i)
                ASSERT_GE(starts[i], jobs[i].submit) << "seed " << seed << ", job " << jobs[i].id;
        }
    }
}

TEST(Simulator, TimeMinLowersTheLimitToBackfillBeforeTheReservation)
{
    // A holds 3 of 4 nodes until 100; B needs all 4 and is reserved at 100. At 10 a 1-node job with a
    // 500 s limit arrives: on its own it waits for B to end; with --time-min 50 backfill starts it at once
    // with its limit cut to the 90 s left before B's reservation, so B still starts at 100.
    auto trace = std::make_shared<const std::vector<Job>>(
        std::vector<Job> { job(1, 0, 3, 100, 100), job(2, 1, 4, 100, 100) });
    for (const auto backfill : { Backfill::Easy, Backfill::Conservative }) {
        SCOPED_TRACE(backfill == Backfill::Easy ? "easy" : "conservative");
        Simulator sim(trace, cluster(4, 0, 0, backfill));
        sim.advanceTo(10);
        auto startAndLimit = [&](std::int64_t minLimit) {
            Simulator fork = sim.fork();
            Job late = job(-1, 10, 1, 500, 500);
            late.minLimit = minLimit;
            fork.submit(late);
            const auto start = fork.runUntilStarted(-1, 10000);
            return std::make_pair(start.value_or(-1), fork.grantedLimitOf(-1).value_or(-1));
        };
        EXPECT_EQ(startAndLimit(0), std::make_pair(std::int64_t { 200 }, std::int64_t { 500 }));
        EXPECT_EQ(startAndLimit(50), std::make_pair(std::int64_t { 10 }, std::int64_t { 90 }));
        // 10 + 95 passes the reservation: no room, so it waits and then gets its whole limit.
        EXPECT_EQ(startAndLimit(95), std::make_pair(std::int64_t { 200 }, std::int64_t { 500 }));

        Simulator cut = sim.fork();
        Job late = job(-1, 10, 1, 500, 500);
        late.minLimit = 50;
        cut.submit(late);
        cut.advanceTo(100);
        ASSERT_EQ(cut.running().size(), 1u); // the cut job ended at its granted limit, B took all nodes
        EXPECT_EQ(cut.running()[0].id, 2);
        EXPECT_EQ(cut.running()[0].start, 100);
    }
}

TEST(Simulator, ReservationsUseLimitsButJobsEndAtTheirRunTime)
{
    // A's limit says 1000 but it ends at 10; B starts then, not at 1000.
    const auto s = replay({ job(1, 0, 4, 10, 1000), job(2, 1, 4, 10, 10) }, cluster(4));
    EXPECT_EQ(s.at(2), 10);
}

TEST(Simulator, SizeWeightPutsLargerJobsFirst)
{
    const std::vector<Job> jobs { job(1, 0, 4, 100, 100), job(2, 1, 2, 100, 100), job(3, 2, 3, 100, 100) };
    const auto bySize = replay(jobs, cluster(4, 0, 100));
    EXPECT_EQ(bySize.at(3), 100);
    EXPECT_EQ(bySize.at(2), 200);
    const auto byOrder = replay(jobs, cluster(4, 0, 0));
    EXPECT_EQ(byOrder.at(2), 100);
    EXPECT_EQ(byOrder.at(3), 200);
}

TEST(Simulator, AgeWeightAgainstSizeWeight)
{
    // At 200: B (2 nodes, age 199) against C (3 nodes, age 10), maxAge 100, size weight 100.
    const std::vector<Job> jobs { job(1, 0, 4, 200, 200), job(2, 1, 2, 100, 100), job(3, 190, 3, 100, 100) };
    const auto ageWins = replay(jobs, cluster(4, 1000, 100)); // B: 1000 + 50, C: 100 + 75
    EXPECT_EQ(ageWins.at(2), 200);
    EXPECT_EQ(ageWins.at(3), 300);
    const auto sizeWins = replay(jobs, cluster(4, 10, 100)); // B: 10 + 50, C: 1 + 75
    EXPECT_EQ(sizeWins.at(3), 200);
    EXPECT_EQ(sizeWins.at(2), 300);
}

TEST(Simulator, InsertedJobsAndForksAreIndependent)
{
    auto trace = std::make_shared<const std::vector<Job>>(std::vector<Job> { job(1, 0, 2, 100, 100) });
    Simulator sim(trace, cluster(2));
    sim.advanceTo(0);
    Simulator fork = sim.fork();
    fork.submit(job(-1, 0, 1, 50, 50));
    EXPECT_EQ(fork.runUntilStarted(-1, 1000), std::optional<std::int64_t>(100));
    EXPECT_FALSE(sim.startOf(-1));
    EXPECT_EQ(sim.pending().size(), 0u);
    EXPECT_THROW(sim.submit(job(-2, 0, 3, 10, 10)), std::invalid_argument); // larger than the cluster
}

TEST(Simulator, PrepareTraceDropsJobsThatCanNeverRun)
{
    std::vector<Job> jobs { job(2, 5, 1, 10, 10), job(1, 5, 9, 10, 10), job(3, 1, 1, 10, 0),
        job(4, 0, 1, 50, 10) };
    EXPECT_EQ(prepareTrace(jobs, 4), 2u);
    ASSERT_EQ(jobs.size(), 2u);
    EXPECT_EQ(jobs[0].id, 4);
    EXPECT_EQ(jobs[0].runTime, 10); // clamped to its limit
    EXPECT_EQ(jobs[1].id, 2);
}
