// Benchmark of the simulator and the policy comparison on the ls6-a100 trace.
// Figures: whole-trace replay time with EASY and conservative backfill against plain FCFS (baseline), the
// fit to the recorded starts, and every policy's interruption metrics with ratios against `avg` (Mirage's
// baseline), plus the comparison's wall-clock time against the 120 s budget.
#include "sim/comparison.hpp"
#include "sim/trace_input.hpp"
#include "sim/validation.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

using namespace baton::sim;

namespace {

std::filesystem::path traceDir()
{
    if (const char* dir = std::getenv("BATON_TRACE_DIR"))
        return dir;
    return std::filesystem::path(BATON_SOURCE_ROOT) / ".." / "shared" / "traces";
}

double ratio(double a, double b)
{
    return b == 0 ? std::nan("") : a / b;
}

} // namespace

int main()
{
    const auto path = traceDir() / "ls6-a100.log";
    if (!std::filesystem::exists(path)) {
        std::cerr << "skipped: " << path << " not found (set BATON_TRACE_DIR)\n";
        return 77;
    }
    try {
        // The fitted cluster (see provisioner/sim/README.md): 74 nodes, age 100, size 10, priority 1000.
        SchedulerConfig sc;
        sc.nodes = 74;
        sc.ageWeight = 100;
        sc.sizeWeight = 10;
        sc.recordedWeight = 1000;
        auto jobs = loadJobs(path).jobs;
        prepareTrace(jobs, sc.nodes);
        auto trace = std::make_shared<const std::vector<Job>>(std::move(jobs));
        auto config = defaultComparisonConfig(*trace);
        config.scheduler = sc;
        config.split = 1677628800; // 2023-03-01, Mirage's split for ls6
        config.protocol.probePriority = medianRecordedPriority(*trace, config.split);

        SchedulerConfig fcfs = sc;
        fcfs.backfill = Backfill::None;
        SchedulerConfig planned = sc;
        planned.backfill = Backfill::Conservative;
        const auto base = validateReplay(trace, fcfs, config.warmupEnd);
        const auto easy = validateReplay(trace, sc, config.warmupEnd);
        const auto conservative = validateReplay(trace, planned, config.warmupEnd);
        std::printf("replay of %zu jobs on %d nodes\n", trace->size(), sc.nodes);
        std::printf("%-22s %9s %12s %9s %9s %7s %8s\n", "scheduler", "seconds", "jobs/s", "medAE(s)",
            "p90AE(s)", "corr", "logcorr");
        for (const auto& [name, r] : { std::pair { "FCFS (baseline)", base },
                 std::pair { "EASY backfill", easy }, std::pair { "conservative backfill", conservative } })
            std::printf("%-22s %9.3f %12.0f %9.0f %9.0f %7.3f %8.3f\n", name, r.replaySeconds,
                static_cast<double>(trace->size()) / r.replaySeconds, r.medianAbsError, r.p90AbsError,
                r.correlation, r.logCorrelation);
        std::printf("EASY / FCFS replay time: %.2f; conservative / FCFS: %.2f\n\n",
            ratio(easy.replaySeconds, base.replaySeconds),
            ratio(conservative.replaySeconds, base.replaySeconds));

        const auto t0 = std::chrono::steady_clock::now();
        const auto cmp = runComparison(trace, config, nullptr);
        const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const PolicyRow* avg = nullptr;
        for (const auto& row : cmp.rows)
            if (row.name == "avg")
                avg = &row;
        std::printf("comparison: %zu evaluation probes, %zu training samples\n", cmp.evaluationProbes,
            cmp.trainingSamples);
        std::printf("%-17s %5s %9s %9s %8s %8s %10s %9s %8s %10s %8s %6s\n", "policy", "q", "|mean|(m)",
            "vs avg", "+-10m%", "vs avg", "overlap(m)", "vs avg", "eff+-%", "effOvl(m)", "chain%", "jobs");
        for (const auto& row : cmp.rows) {
            const auto& m = row.metrics;
            char q[16] = "-";
            if (!row.rules.empty())
                std::snprintf(q, sizeof q, "size");
            else if (!std::isnan(row.q))
                std::snprintf(q, sizeof q, "%.2f", row.q);
            std::printf("%-17s %5s %9.1f %9.2f %8.1f %8.2f %10.1f %9.2f %8.1f %10.2f %8.2f %6.2f\n",
                row.name.c_str(), q, std::abs(m.mean) / 60,
                ratio(std::abs(m.mean), std::abs(avg->metrics.mean)), 100 * m.fractionWithin,
                ratio(m.fractionWithin, avg->metrics.fractionWithin), m.meanOverlap / 60,
                ratio(m.meanOverlap, avg->metrics.meanOverlap), 100 * m.effectiveWithin,
                m.effectiveMeanOverlap / 60, row.chain ? 100 * row.chain->efficiency : 0.0,
                row.chain ? row.chain->meanJobs : 0.0);
        }
        for (const auto& row : cmp.rows)
            if (!row.rules.empty())
                std::printf("%s's rules: %s\n", row.name.c_str(), describeRules(row.rules).c_str());
        std::printf("chains: %zu per policy (7 days of compute as 48 h jobs), %.1f s\n", cmp.chainStarts,
            cmp.chainSeconds);
        std::printf("comparison wall time: %.1f s (budget 120 s, ratio %.2f)\n", total, total / 120.0);
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "sim_bench: " << e.what() << '\n';
        return 1;
    }
}
