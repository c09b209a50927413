// The whole ls6-a100 trace replayed with the fitted configuration reproduces the recorded waits
// about as well as recorded in provisioner/sim/README.md. Skipped when the trace is absent.
#include "sim/comparison.hpp"
#include "sim/simulator.hpp"
#include "sim/trace_input.hpp"
#include "sim/validation.hpp"
#include "tests/support/trace_files.hpp"

#include <gtest/gtest.h>

using namespace baton::sim;

namespace {

std::filesystem::path traceFile(const char* name)
{
    return baton::test::traceDirectory() / name;
}

std::filesystem::path ls6Trace()
{
    return traceFile("ls6-a100.log");
}

// The fit of the sim README: 74 nodes and these priority weights.
SchedulerConfig fittedLs6()
{
    SchedulerConfig config;
    config.nodes = 74;
    config.ageWeight = 100;
    config.sizeWeight = 10;
    config.recordedWeight = 1000;
    return config;
}

} // namespace

TEST(Ls6Replay, FittedConfigurationReproducesRecordedWaits)
{
    const auto path = ls6Trace();
    if (!std::filesystem::exists(path))
        GTEST_SKIP() << path << " not found: set BATON_TRACE_DIR to the traces directory";
    SchedulerConfig config = fittedLs6();
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
    config.backfill = Backfill::None;
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

// Lublin's SWF counts processors on a machine its header describes by nodes alone (MaxNodes 256):
// the unit is cores, one per node, and every job fits the 256-processor machine.
TEST(LublinReplay, SizesAreProcessorsOfTheHeadersMachine)
{
    const auto path = traceFile("lublin_256.swf");
    if (!std::filesystem::exists(path))
        GTEST_SKIP() << path << " not found: set BATON_TRACE_DIR to the traces directory";
    auto loaded = loadJobs(path);
    EXPECT_EQ(loaded.plan.unit, ResourceUnit::Cores);
    EXPECT_EQ(loaded.plan.coresPerNode, 1);
    ASSERT_EQ(loaded.headerNodes, std::optional<std::int64_t>(256));
    EXPECT_EQ(loaded.partitions.size(), 1u);
    EXPECT_EQ(recordedPeakUsage(loaded.jobs), 0); // a model: no recorded schedule
    Dropped dropped;
    prepareTrace(loaded.jobs, 256, &dropped);
    EXPECT_EQ(dropped.neverFit, 0u);
    EXPECT_EQ(loaded.jobs.size(), 10000u);
}

// Dependencies inferred from ls6's recorded schedule (a job of a user started within a minute of the
// end of another of that user's jobs it was queued behind) make the replay follow the recorded
// waits more closely: the log-wait correlation goes from 0.59 to above 0.63 (0.655 measured).
TEST(Ls6Replay, InferredDependenciesImproveTheFit)
{
    const auto path = ls6Trace();
    if (!std::filesystem::exists(path))
        GTEST_SKIP() << path << " not found: set BATON_TRACE_DIR to the traces directory";
    SchedulerConfig config = fittedLs6();
    auto loaded = loadJobs(path);
    auto plain = loaded.jobs;
    EXPECT_GT(inferDependencies(loaded.jobs, 60), 2500u);
    prepareTrace(plain, config.nodes);
    prepareTrace(loaded.jobs, config.nodes);
    auto base = std::make_shared<const std::vector<Job>>(std::move(plain));
    auto withDeps = std::make_shared<const std::vector<Job>>(std::move(loaded.jobs));
    const auto from = defaultComparisonConfig(*base).warmupEnd;
    const auto before = validateReplay(base, config, from);
    const auto after = validateReplay(withDeps, config, from);
    EXPECT_EQ(after.jobs, before.jobs); // every job still starts: no dependency loops
    EXPECT_GT(after.logCorrelation, 0.63);
    EXPECT_GT(after.logCorrelation, before.logCorrelation + 0.04);
    EXPECT_GT(after.correlation, before.correlation + 0.1);
}

// The fidelity recipe of the sim README: dependencies within 1200 s and the age factor saturating after
// a day reach the target, a log-wait correlation of 0.7 (0.699 measured; 0.69 asserted, as the
// figure sits at the edge), with the simulated mean wait within 10 % of the recorded one (the default
// replay's is a third short), and every job still started.
TEST(Ls6Replay, FidelityRecipeReachesTheTarget)
{
    const auto path = ls6Trace();
    if (!std::filesystem::exists(path))
        GTEST_SKIP() << path << " not found: set BATON_TRACE_DIR to the traces directory";
    SchedulerConfig config = fittedLs6();
    config.maxAge = 24 * 3600;
    auto loaded = loadJobs(path);
    EXPECT_GT(inferDependencies(loaded.jobs, 1200), 3500u);
    prepareTrace(loaded.jobs, config.nodes);
    auto trace = std::make_shared<const std::vector<Job>>(std::move(loaded.jobs));
    const auto fit = validateReplay(trace, config, defaultComparisonConfig(*trace).warmupEnd);
    EXPECT_EQ(fit.jobs, 24442u);
    EXPECT_GT(fit.logCorrelation, 0.69);
    EXPECT_GT(fit.correlation, 0.65);
    EXPECT_LT(fit.p90AbsError, 28000);
    EXPECT_NEAR(fit.simulatedMeanWait, fit.recordedMeanWait, 0.1 * fit.recordedMeanWait);
}
