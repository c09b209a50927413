// The whole ls6-a100 trace replayed with the fitted configuration reproduces the recorded waits
// about as well as recorded in provisioner/sim/README.md. Skipped when the trace is absent.
#include "comparison.hpp"
#include "process.hpp"
#include "trace_input.hpp"
#include "validation.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

using namespace baton::sim;

namespace {

std::filesystem::path ls6Trace()
{
    const char* dir = std::getenv("BATON_TRACE_DIR");
    const auto base
        = dir ? std::filesystem::path(dir) : baton::test::sourceRoot() / ".." / "shared" / "traces";
    return base / "ls6-a100.log";
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
