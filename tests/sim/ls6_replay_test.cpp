// The whole ls6-a100 trace replayed with the fitted configuration reproduces the recorded waits
// about as well as recorded in provisioner/sim/README.md. Skipped when the trace is absent.
#include "comparison.hpp"
#include "process.hpp"
#include "simulator.hpp"
#include "trace_input.hpp"
#include "validation.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

using namespace baton::sim;

namespace {

std::filesystem::path traceFile(const char* name)
{
    const char* dir = std::getenv("BATON_TRACE_DIR");
    const auto base
        = dir ? std::filesystem::path(dir) : baton::test::sourceRoot() / ".." / "shared" / "traces";
    return base / name;
}

std::filesystem::path ls6Trace()
{
    return traceFile("ls6-a100.log");
}

} // namespace

TEST(Ls6Replay, FittedConfigurationReproducesRecordedWaits)
{
    const auto path = ls6Trace();
    if (!std::filesystem::exists(path))
        GTEST_SKIP() << path << " not found: set BATON_TRACE_DIR to the traces directory";
    SchedulerConfig config;
    config.nodes = 74;
    config.ageWeight = 100;
    config.sizeWeight = 10;
    config.recordedWeight = 1000;
    auto loaded = loadJobs(path);
    EXPECT_EQ(loaded.unusable, 0u);
    prepareTrace(loaded.jobs, config.nodes);
    ASSERT_GT(loaded.jobs.size(), 24000u);
    auto trace = std::make_shared<const std::vector<Job>>(std::move(loaded.jobs));
    const auto from = defaultComparisonConfig(*trace).warmupEnd;

    const auto easy = validateReplay(trace, config, from);
    EXPECT_GT(easy.jobs, 24000u);
    EXPECT_GT(easy.logCorrelation, 0.55);
    EXPECT_GT(easy.correlation, 0.3);
    EXPECT_LT(easy.medianAbsError, 1800);

    // Backfill matters on this trace: without it the mean wait grows by about half.
    config.backfill = false;
    const auto fcfs = validateReplay(trace, config, from);
    EXPECT_GT(fcfs.simulatedMeanWait, 1.2 * easy.simulatedMeanWait);
}

TEST(TraceInput, UnknownLimitFallsBackToTheRunTime)
{
    baton::trace::TraceJob row;
    row.jobId = 7;
    row.submit = 100;
    row.runTime = 3600;
    row.nodes = 4;
    auto job = toSimJob(row, 0);
    ASSERT_TRUE(job.has_value());
    EXPECT_EQ(job->limit, 3600);
    EXPECT_EQ(job->runTime, 3600);

    row.runTime = 0; // a job that ended at once still needs a positive limit
    job = toSimJob(row, 0);
    ASSERT_TRUE(job.has_value());
    EXPECT_EQ(job->limit, 1);

    row.nodes = 0; // without a node count there is nothing to schedule
    EXPECT_FALSE(toSimJob(row, 0).has_value());
}

// The Lublin-model SWF trace records no requested times: every job replays with its run time as limit.
TEST(LublinReplay, TraceWithoutRequestedTimesReplays)
{
    const auto path = traceFile("lublin_256.swf");
    if (!std::filesystem::exists(path))
        GTEST_SKIP() << path << " not found: set BATON_TRACE_DIR to the traces directory";
    auto loaded = loadJobs(path);
    EXPECT_EQ(loaded.unusable, 0u);
    EXPECT_EQ(loaded.jobs.size(), 10000u);
    EXPECT_EQ(loaded.limitsFromRunTime, 10000u);
    SchedulerConfig config;
    config.nodes = 256;
    prepareTrace(loaded.jobs, config.nodes);
    ASSERT_EQ(loaded.jobs.size(), 10000u);
    auto trace = std::make_shared<const std::vector<Job>>(std::move(loaded.jobs));
    std::vector<std::int64_t> starts(trace->size(), -1);
    Simulator sim(trace, config);
    sim.recordStartsInto(&starts);
    sim.runToEnd();
    ASSERT_EQ(starts.size(), trace->size());
    for (std::size_t i = 0; i < starts.size(); ++i) {
        ASSERT_GE(starts[i], (*trace)[i].submit)
            << "job " << (*trace)[i].id << " never started or started early";
    }
}
