// LiveQueue: the features of a live queue equal the simulator's for the same state, and a recorded
// squeue document becomes the pending and running sets the scheduler really competes with.
#include "policy/live_queue.hpp"

#include "tests/support/process.hpp"

#include "policy/features_of.hpp"
#include "sim/simulator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

using namespace baton::slurm;
using baton::sim::Feature;
using baton::sim::Features;
using baton::sim::JobShape;
using baton::sim::SchedulerConfig;
using baton::sim::Simulator;

namespace {

constexpr int clusterNodes = 10;

std::vector<baton::sim::Job> trace()
{
    std::vector<baton::sim::Job> jobs;
    for (int i = 1; i <= 40; ++i) {
        baton::sim::Job j;
        j.id = i;
        j.submit = 1'700'000'000 + i * 47; // distinct submissions: distinct ages
        j.nodes = 1 + (i * 7) % 4;
        j.limit = 60 * (10 + (i * 13) % 50);
        j.runTime = j.limit * (30 + (i * 17) % 70) / 100;
        j.recordedPriority = 0.01 + 0.98 * ((i * 37) % 41) / 41.0; // distinct, in (0, 1)
        jobs.push_back(j);
    }
    return jobs;
}

struct World {
    std::shared_ptr<const std::vector<baton::sim::Job>> jobs;
    Simulator sim;
    std::vector<std::int64_t> starts;
    QueueSnapshot snapshot;
};

// The simulator replayed to `at`, and the squeue document a real Slurm in that state would give.
World replay(const SchedulerConfig& config, std::int64_t at)
{
    auto jobs = trace();
    baton::sim::prepareTrace(jobs, config.nodes);
    auto shared = std::make_shared<const std::vector<baton::sim::Job>>(std::move(jobs));
    World w { shared, Simulator(shared, config), std::vector<std::int64_t>(shared->size(), -1), {} };
    w.sim.recordStartsInto(&w.starts);
    w.sim.advanceTo(at);
    w.snapshot.takenAt = at;
    // Running jobs in the simulator's own order, so that even the node-hour sums add up alike.
    auto toQueueJob = [&](std::size_t i, bool running) {
        const auto& j = (*shared)[i];
        QueueJob q;
        q.jobId = j.id;
        q.submitTime = j.submit;
        q.nodeCount = j.nodes;
        q.timeLimitMinutes = j.limit / 60;
        q.priority = std::llround(j.recordedPriority * std::numeric_limits<std::uint32_t>::max());
        q.stateReason = "None";
        if (w.starts[i] < 0) {
            q.state = "PENDING";
            q.stateReason = "Priority";
        } else {
            q.startTime = w.starts[i];
            q.nodes = "n[1-" + std::to_string(j.nodes) + "]";
            q.state = running ? "RUNNING" : "COMPLETED";
            q.endTime = running ? w.starts[i] + j.limit : w.starts[i] + j.runTime;
        }
        return q;
    };
    auto indexOf = [&](std::int64_t id) {
        for (std::size_t i = 0; i < shared->size(); ++i)
            if ((*shared)[i].id == id)
                return i;
        throw std::logic_error("unknown job");
    };
    for (std::size_t i = 0; i < shared->size(); ++i) {
        const auto& j = (*shared)[i];
        const bool running = std::any_of(
            w.sim.running().begin(), w.sim.running().end(), [&](const auto& r) { return r.id == j.id; });
        if (j.submit <= at && !running)
            w.snapshot.jobs.push_back(toQueueJob(i, false));
    }
    for (const auto& r : w.sim.running())
        w.snapshot.jobs.push_back(toQueueJob(indexOf(r.id), true));
    return w;
}

const std::vector<JobShape> shapes = { { 1, 600 }, { 2, 3600 }, { 4, 7200 }, { 10, 1800 }, { 3, 60 } };

void expectSameAsSimulator(const Simulator& sim, const LiveQueue& live)
{
    ASSERT_EQ(live.pending().size(), sim.pending().size());
    ASSERT_EQ(live.running().size(), sim.running().size());
    ASSERT_EQ(live.freeNodes(), sim.freeNodes());
    ASSERT_GT(sim.pending().size(), 3u) << "the state should have a queue";
    for (const auto& shape : shapes) {
        const Features expected = baton::sim::featuresOf(sim, shape);
        const Features got = queueFeatures(static_cast<const baton::sim::QueueView&>(live), shape);
        for (std::size_t k = 0; k < baton::sim::featureCount; ++k)
            EXPECT_EQ(got[k], expected[k])
                << baton::sim::featureNames[k] << " for " << shape.nodes << " nodes";
    }
    // The batch form against the one-shape form.
    const auto batch = queueFeatures(live, std::span<const JobShape>(shapes));
    ASSERT_EQ(batch.size(), shapes.size());
    for (std::size_t s = 0; s < shapes.size(); ++s) {
        const Features one = queueFeatures(static_cast<const baton::sim::QueueView&>(live), shapes[s]);
        for (std::size_t k = 0; k < baton::sim::featureCount; ++k)
            EXPECT_FLOAT_EQ(batch[s][k], one[k]) << baton::sim::featureNames[k] << " shape " << s;
    }
}

TEST(LiveQueue, FeaturesEqualTheSimulatorsUnderReportedPriority)
{
    SchedulerConfig config;
    config.nodes = clusterNodes;
    config.ageWeight = 0;
    config.sizeWeight = 0;
    config.recordedWeight = 1; // the simulator ranks by the priority Slurm would report
    for (std::int64_t at : { 1'700'000'600, 1'700'001'200, 1'700'002'000 }) {
        auto w = replay(config, at);
        LiveQueue live(w.snapshot, { .totalNodes = clusterNodes });
        EXPECT_EQ(live.now(), at);
        EXPECT_DOUBLE_EQ(live.recentMeanWait(), w.sim.recentMeanWait());
        expectSameAsSimulator(w.sim, live);
    }
}

TEST(LiveQueue, FeaturesEqualTheSimulatorsWithItsPriorityFunction)
{
    SchedulerConfig config;
    config.nodes = clusterNodes;
    config.maxAge = 3600;
    auto w = replay(config, 1'700'001'500);
    const Simulator& sim = w.sim;
    LiveQueue live(w.snapshot, { .totalNodes = clusterNodes },
        [&sim](const baton::sim::Job& job, std::int64_t at) { return sim.priorityOf(job, at); });
    expectSameAsSimulator(sim, live);
}

std::string readData(const std::string& name)
{
    std::ifstream in(baton::test::sourceRoot() / "tests" / "data" / name, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

TEST(LiveQueue, ReadsTheRecordedQueue)
{
    const std::int64_t now = 1795427010;
    const auto snapshot = parseSqueueJson(readData("squeue_2205.json"), now);
    LiveQueue live(snapshot, { .totalNodes = 4, .unlimitedSeconds = 86400 });
    // Job 6 is held; the array record 8 still has tasks 1 and 2 to run.
    ASSERT_EQ(live.pending().size(), 2u);
    EXPECT_EQ(live.pending()[0].job.id, 8);
    EXPECT_EQ(live.pending()[0].job.limit, 120);
    EXPECT_GT(live.pending()[0].job.recordedPriority, 0.99);
    // Jobs 5 (no limit) and 9 hold nodes.
    ASSERT_EQ(live.running().size(), 2u);
    EXPECT_EQ(live.running()[0].limitEnd, 1795426989 + 86400);
    EXPECT_EQ(live.running()[1].limitEnd, 1795427003 + 120);
    EXPECT_EQ(live.freeNodes(), 2);
    // Started jobs 1, 2, 3, 5, 7, 9 waited 1, 1, 102, 0, 13, 14 s; job 4 was cancelled while pending.
    EXPECT_DOUBLE_EQ(live.recentMeanWait(), 131.0 / 6);
    // A fresh job ranks behind both pending tasks.
    const auto f = queueFeatures(static_cast<const baton::sim::QueueView&>(live), JobShape { 1, 600 });
    EXPECT_EQ(at(f, Feature::AheadJobs), 2.0f);
}

QueueJob startedJob(std::int64_t id, std::int64_t submit, std::int64_t start, const char* state = "COMPLETED")
{
    QueueJob j;
    j.jobId = id;
    j.state = state;
    j.submitTime = submit;
    j.startTime = start;
    j.nodeCount = 1;
    j.nodes = "n1";
    j.timeLimitMinutes = 10;
    return j;
}

QueueSnapshot snapshotAt(std::int64_t takenAt, std::vector<QueueJob> jobs)
{
    QueueSnapshot s;
    s.takenAt = takenAt;
    s.jobs = std::move(jobs);
    return s;
}

TEST(LiveQueue, RemembersTheStartsThatLeftSqueue)
{
    const auto first = snapshotAt(1000, { startedJob(1, 100, 110), startedJob(2, 100, 130, "RUNNING") });
    // Job 1 has left squeue (MinJobAge); job 2 is seen again; job 3 started since.
    const auto second = snapshotAt(2000, { startedJob(2, 100, 130), startedJob(3, 200, 260, "RUNNING") });
    RecentStarts history;
    EXPECT_DOUBLE_EQ(LiveQueue(first, { .totalNodes = 4 }, {}, &history).recentMeanWait(), 20.0);
    const LiveQueue later(second, { .totalNodes = 4 }, {}, &history);
    EXPECT_DOUBLE_EQ(later.recentMeanWait(), (10.0 + 30 + 60) / 3); // job 2 counted once
    EXPECT_EQ(history.size(), 3u);
    // Without the history only the snapshot's own starts count.
    EXPECT_DOUBLE_EQ(LiveQueue(second, { .totalNodes = 4 }).recentMeanWait(), 45.0);

    // The window keeps the latest starts, whatever the order they are seen in; a requeued job's new
    // start is a start of its own.
    RecentStarts lastTwo(2);
    lastTwo.add(second);
    lastTwo.add(first);
    EXPECT_DOUBLE_EQ(lastTwo.meanWait(), 45.0);
    lastTwo.add(snapshotAt(3000, { startedJob(2, 2500, 2900, "RUNNING") }));
    EXPECT_DOUBLE_EQ(lastTwo.meanWait(), (60.0 + 400) / 2);
    // Neither a job that never ran nor a start after the snapshot counts.
    QueueJob cancelled = startedJob(4, 100, 150);
    cancelled.nodes.clear();
    lastTwo.add(snapshotAt(3000, { cancelled, startedJob(5, 100, 3500, "RUNNING") }));
    EXPECT_EQ(lastTwo.size(), 2u);
    EXPECT_DOUBLE_EQ(RecentStarts().meanWait(), 0.0);
}

TEST(LiveQueue, AHeldJobWaitsFromItsEligibility)
{
    // Job 2 was submitted with job 1 and held by a dependency until 400: it waited 30 s, not 330.
    auto held = startedJob(2, 100, 430);
    held.eligibleTime = 400;
    // Slurm reports the submission itself as eligible_time for a job that never waited for anything.
    auto plain = startedJob(3, 100, 110);
    plain.eligibleTime = 100;
    EXPECT_DOUBLE_EQ(LiveQueue(snapshotAt(1000, { held, plain }), { .totalNodes = 4 }).recentMeanWait(), 20.0);
}

TEST(LiveQueue, NeedsTheClusterSize)
{
    EXPECT_THROW(LiveQueue(QueueSnapshot {}, {}), std::invalid_argument);
}

TEST(LiveQueue, CountsArrayTasks)
{
    EXPECT_EQ(countArrayTasks("0-9", 1000), 10u);
    EXPECT_EQ(countArrayTasks("1,3,5-7", 1000), 5u);
    EXPECT_EQ(countArrayTasks("0-99:2", 1000), 50u);
    EXPECT_EQ(countArrayTasks("1-100%4", 1000), 100u);
    EXPECT_EQ(countArrayTasks("0-999999999", 500), 500u);
    EXPECT_EQ(countArrayTasks("garbage", 1000), 1u);
    EXPECT_EQ(countArrayTasks("", 1000), 1u);
}

} // namespace
