// Jobs sized in nodes, cores or GPUs as the trace gives them; partitions as separate pools; jobs
// that can never fit; per-user limits and dependencies in the replay.
#include "sim/job_csv.hpp"
#include "sim/simulator.hpp"
#include "sim/trace_input.hpp"
#include "tests/support/process.hpp"

#include "job_factory.hpp"
#include "replay_starts.hpp"

#include "trace/trace_reader.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

using namespace baton::sim;
using baton::sim::test::job;
using baton::sim::test::replay;

namespace {

std::filesystem::path data(const char* name)
{
    return baton::test::sourceRoot() / "tests/data/sim" / name;
}

std::map<std::int64_t, Job> byId(const std::vector<Job>& jobs)
{
    std::map<std::int64_t, Job> out;
    for (const auto& j : jobs)
        out[j.id] = j;
    return out;
}

SchedulerConfig cluster(int units)
{
    SchedulerConfig c;
    c.nodes = units;
    c.ageWeight = 1000;
    c.sizeWeight = 0;
    c.maxAge = 1000;
    return c;
}

} // namespace

TEST(TraceUnits, SwfCountsProcessorsAndTheHeaderGivesTheNodeSize)
{
    const auto loaded = loadJobs(data("partitions.swf"));
    EXPECT_EQ(loaded.plan.unit, ResourceUnit::Cores); // auto: SWF sizes are processors
    EXPECT_EQ(loaded.plan.coresPerNode, 4); // MaxProcs 16 / MaxNodes 4
    EXPECT_EQ(loaded.unitsPerNode(), 4);
    ASSERT_EQ(loaded.headerNodes, std::optional<std::int64_t>(4));
    ASSERT_EQ(loaded.headerProcs, std::optional<std::int64_t>(16));
    auto jobs = byId(loaded.jobs);
    EXPECT_EQ(jobs.at(1).nodes, 16);
    EXPECT_EQ(jobs.at(3).nodes, 20);
    EXPECT_EQ(jobs.at(122).nodes, 1);

    // In nodes, processors round up to whole nodes of 4.
    const auto inNodes = loadJobs(data("partitions.swf"), { .unit = ResourceUnit::Nodes });
    jobs = byId(inNodes.jobs);
    EXPECT_EQ(jobs.at(1).nodes, 4);
    EXPECT_EQ(jobs.at(3).nodes, 5);
    EXPECT_EQ(jobs.at(122).nodes, 1);
    // A given node size wins over the header's.
    const auto bigNodes
        = loadJobs(data("partitions.swf"), { .unit = ResourceUnit::Nodes, .coresPerNode = 8 });
    EXPECT_EQ(byId(bigNodes.jobs).at(1).nodes, 2);
    // SWF has no GPU counts.
    EXPECT_THROW(loadJobs(data("partitions.swf"), { .unit = ResourceUnit::Gpus }), std::invalid_argument);
}

TEST(TraceUnits, SwfPartitionsAreSeparatePools)
{
    const auto loaded = loadJobs(data("partitions.swf"));
    ASSERT_EQ(loaded.partitions.size(), 2u);
    std::map<std::string, std::size_t> sizes;
    const auto counts = loaded.partitionSizes();
    for (std::size_t i = 0; i < counts.size(); ++i)
        sizes[loaded.partitions[i]] = counts[i];
    EXPECT_EQ(sizes["1"], 121u);
    EXPECT_EQ(sizes["2"], 100u);
    for (const auto& j : loaded.jobsOf("2"))
        EXPECT_EQ(j.nodes, 1);
    EXPECT_TRUE(loaded.jobsOf("3").empty());
    EXPECT_EQ(recordedPeakUsage(loaded.jobsOf("1")), 16); // one whole-machine job at a time
}

TEST(TraceUnits, SacctTresGivesCoresAndGpus)
{
    baton::trace::TraceSummary summary;
    const auto rows
        = baton::trace::readAll(data("sacct_tres.txt"), baton::trace::TraceFormat::Auto, &summary);
    ASSERT_EQ(rows.size(), 4u) << summary.toString();
    EXPECT_EQ(summary.rejected.count("bad TRES list"), 1u) << summary.toString();
    std::map<std::int64_t, baton::trace::TraceJob> r;
    for (const auto& row : rows)
        r[row.jobId] = row;
    EXPECT_EQ(r.at(1).gpus, 4);
    EXPECT_EQ(r.at(1).cpus, 32);
    EXPECT_EQ(r.at(1).partition, "gpu");
    EXPECT_EQ(r.at(2).gpus, 3); // typed entries summed when there is no untyped one
    EXPECT_EQ(r.at(3).gpus, 0); // a TRES list without GPUs: none
    EXPECT_EQ(r.at(3).partition, "cpu");
    EXPECT_EQ(r.at(4).gpus, 1); // no allocation recorded: the request counts

    const auto gpus = loadJobs(data("sacct_tres.txt"), { .unit = ResourceUnit::Gpus });
    EXPECT_EQ(gpus.withoutGpus, 1u); // carol's CPU job is not in the GPU pool
    auto jobs = byId(gpus.jobs);
    ASSERT_EQ(jobs.size(), 3u);
    EXPECT_EQ(jobs.at(1).nodes, 4);
    EXPECT_EQ(jobs.at(2).nodes, 3);
    const auto cores = loadJobs(data("sacct_tres.txt"), { .unit = ResourceUnit::Cores });
    jobs = byId(cores.jobs);
    EXPECT_EQ(jobs.at(3).nodes, 128);
    EXPECT_EQ(jobs.at(2).nodes, 16);
    const auto nodes = loadJobs(data("sacct_tres.txt"));
    EXPECT_EQ(nodes.plan.unit, ResourceUnit::Nodes);
    EXPECT_EQ(byId(nodes.jobs).at(2).nodes, 2);
    EXPECT_EQ(nodes.partitions.size(), 2u);
}

TEST(TraceUnits, GpusFromNodeCountsNeedTheNodeSize)
{
    baton::trace::TraceJob row;
    row.jobId = 1;
    row.submit = 0;
    row.runTime = 60;
    row.nodes = 2; // as ls6: node counts only
    EXPECT_FALSE(toSimJob(row, 0, { .unit = ResourceUnit::Gpus }).has_value());
    auto j = toSimJob(row, 0, { .unit = ResourceUnit::Gpus, .gpusPerNode = 3 });
    ASSERT_TRUE(j.has_value());
    EXPECT_EQ(j->nodes, 6);
}

TEST(TraceUnits, NeverFittingJobsAreCountedAndDoNotBlockTheQueue)
{
    // Job 2 asks for more than the cluster has: dropped and counted, and job 3 behind it starts at
    // once instead of waiting forever behind it.
    std::vector<Job> jobs { job(1, 0, 2, 100, 100), job(2, 10, 9, 100, 100), job(3, 20, 1, 50, 50),
        job(4, 30, 1, 50, 0) };
    Dropped dropped;
    EXPECT_EQ(prepareTrace(jobs, 8, &dropped), 2u);
    EXPECT_EQ(dropped.neverFit, 1u);
    EXPECT_EQ(dropped.invalid, 1u); // job 4 has no limit
    const auto starts
        = replay({ job(1, 0, 2, 100, 100), job(2, 10, 9, 100, 100), job(3, 20, 1, 50, 50) }, cluster(8));
    EXPECT_EQ(starts.count(2), 0u);
    EXPECT_EQ(starts.at(3), 20);
}

TEST(TraceUnits, PerUserRunningLimitHoldsOnlyThatUsersJobs)
{
    auto a1 = job(1, 0, 1, 100, 100), a2 = job(2, 0, 1, 100, 100), b1 = job(3, 5, 1, 100, 100);
    a1.user = a2.user = 0;
    b1.user = 1;
    auto config = cluster(4);
    auto starts = replay({ a1, a2, b1 }, config);
    EXPECT_EQ(starts.at(2), 0); // no limit: both of user 0's jobs start at once
    config.userRunningJobs = 1;
    starts = replay({ a1, a2, b1 }, config);
    EXPECT_EQ(starts.at(1), 0);
    EXPECT_EQ(starts.at(2), 100); // waits for the user's first job, not for the nodes
    EXPECT_EQ(starts.at(3), 5); // another user's job is not held behind it
    config.userRunningJobs = 0;
    config.userRunningUnits = 1;
    starts = replay({ a1, a2, b1 }, config);
    EXPECT_EQ(starts.at(2), 100);
}

TEST(TraceUnits, DependenciesWaitForTheirPredecessorsEnd)
{
    auto first = job(1, 0, 1, 300, 300), second = job(2, 10, 1, 100, 100);
    second.afterId = 1;
    const auto starts = replay({ first, second }, cluster(4));
    EXPECT_EQ(starts.at(2), 300); // nodes were free at 10, the dependency held it
    // A dependency on a job not in the trace is ignored.
    second.afterId = 99;
    EXPECT_EQ(replay({ first, second }, cluster(4)).at(2), 10);
}

// The simulator's own CSV names a dependency in its eighth column; the columns before it may be empty.
TEST(TraceUnits, JobCsvCarriesDependencies)
{
    baton::test::TempDir dir;
    const auto path = dir.path() / "jobs.csv";
    std::ofstream(path) << "id,submit,run_time,limit,nodes,priority,recorded_start,after\n"
                           "1,0,300,300,1\n2,10,100,100,1,,,1\n3,20,100,100,1,,\n";
    const auto jobs = baton::sim::readJobCsv(path);
    ASSERT_EQ(jobs.size(), 3u);
    EXPECT_EQ(jobs[0].afterId, -1);
    EXPECT_EQ(jobs[1].afterId, 1);
    EXPECT_EQ(jobs[2].afterId, -1);
    const auto starts = replay(jobs, cluster(4));
    EXPECT_EQ(starts.at(2), 300); // held by job 1
    EXPECT_EQ(starts.at(3), 20);
    std::ofstream(path) << "id,submit,run_time,limit,nodes\n1,0,300,300,1,,,x\n";
    EXPECT_THROW(baton::sim::readJobCsv(path), std::runtime_error);
    std::ofstream(path) << "id,submit,run_time,limit,nodes\n1,0,300,300,1,,,1,9\n";
    EXPECT_THROW(baton::sim::readJobCsv(path), std::runtime_error);
}

TEST(TraceUnits, DependenciesInferredFromTheRecordedSchedule)
{
    auto a = job(1, 0, 1, 100, 100), b = job(2, 50, 1, 100, 100), c = job(3, 500, 1, 10, 10),
         d = job(4, 50, 1, 10, 10), z1 = job(5, 0, 1, 0, 10), z2 = job(6, 0, 1, 0, 10);
    a.user = b.user = c.user = 0;
    d.user = 1;
    z1.user = z2.user = 2;
    a.recordedStart = 0; // ends at 100
    b.recordedStart = 110; // submitted before a's end, started 10 s after it: waits for a
    c.recordedStart = 500; // submitted after b's end: independent
    d.recordedStart = 100; // another user
    z1.recordedStart = z2.recordedStart
        = 200; // zero-length jobs starting together must not wait for each other
    std::vector<Job> jobs { a, b, c, d, z1, z2 };
    EXPECT_EQ(inferDependencies(jobs, 30), 1u);
    EXPECT_EQ(jobs[1].afterId, 1);
    EXPECT_EQ(jobs[2].afterId, -1);
    EXPECT_EQ(jobs[3].afterId, -1);
    EXPECT_EQ(jobs[4].afterId, -1);
    EXPECT_EQ(jobs[5].afterId, -1);
    std::vector<Job> narrow { a, b };
    EXPECT_EQ(inferDependencies(narrow, 5), 0u); // 10 s after the end is outside a 5 s window
}

// An Eagle job CSV goes to the trace readers although its name ends in .csv (the simulator's own job
// CSV still reads as before); an array's repeated id gets a fresh one, so that ties and dependencies
// name one job each; the partitions are separate pools and users are kept for per-user limits.
TEST(TraceUnits, EagleCsvIsATraceAndRepeatedIdsAreMadeUnique)
{
    const auto loaded = loadJobs(baton::test::sourceRoot() / "tests/data/eagle_small.csv");
    EXPECT_EQ(loaded.plan.unit, ResourceUnit::Nodes);
    EXPECT_NE(loaded.readerSummary.find("format eagle-csv"), std::string::npos) << loaded.readerSummary;
    // 5 accepted rows; the still-running one has no run time.
    EXPECT_EQ(loaded.unusable, 1u);
    ASSERT_EQ(loaded.jobs.size(), 4u);
    EXPECT_EQ(loaded.partitions, (std::vector<std::string> { "short", "gpu" }));
    EXPECT_EQ(loaded.partitionSizes(), (std::vector<std::size_t> { 3, 1 }));
    EXPECT_EQ(loaded.repeatedIds, 0u); // the repeat of 1003 is the unusable row
    const auto jobs = byId(loaded.jobs);
    EXPECT_EQ(jobs.at(1001).nodes, 2);
    EXPECT_EQ(jobs.at(1001).limit, 3600);
    EXPECT_EQ(jobs.at(1001).runTime, 1800);
    EXPECT_GE(jobs.at(1001).user, 0);
    EXPECT_NE(jobs.at(1001).user, jobs.at(1002).user);
    // Counting cores or GPUs reads processors_req and gpus_req.
    const auto cores = loadJobs(baton::test::sourceRoot() / "tests/data/eagle_small.csv",
        { .unit = ResourceUnit::Cores });
    EXPECT_EQ(byId(cores.jobs).at(1020).nodes, 144);
    const auto gpus = loadJobs(baton::test::sourceRoot() / "tests/data/eagle_small.csv",
        { .unit = ResourceUnit::Gpus });
    ASSERT_EQ(gpus.jobs.size(), 1u);
    EXPECT_EQ(gpus.jobs[0].nodes, 2);
    EXPECT_EQ(gpus.withoutGpus, 3u);

    baton::test::TempDir dir;
    const auto path = dir.path() / "array.csv";
    {
        std::ofstream out(path);
        out << "job_id,submit_time,start_time,end_time,wallclock_req,nodes_req,user\n";
        for (int task = 0; task < 3; ++task)
            out << "50,2019-01-01 00:00:00,2019-01-01 00:00:0" << task << ",2019-01-01 01:00:00,7200,1,u\n";
        out << "60,2019-01-01 00:00:00,2019-01-01 00:00:00,2019-01-01 01:00:00,7200,1,u\n";
    }
    const auto array = loadJobs(path);
    ASSERT_EQ(array.jobs.size(), 4u);
    EXPECT_EQ(array.repeatedIds, 2u);
    std::vector<std::int64_t> ids;
    for (const auto& j : array.jobs)
        ids.push_back(j.id);
    EXPECT_EQ(ids, (std::vector<std::int64_t> { 50, 61, 62, 60 })); // above every id of the trace

    const auto own = loadJobs(data("synthetic_jobs.csv")); // the simulator's job CSV
    EXPECT_TRUE(own.readerSummary.empty());
    EXPECT_FALSE(own.jobs.empty());
}
