// How well a replay reproduces the recorded schedule: wait-time errors and correlation.
#pragma once

#include "scheduler_config.hpp"

#include "policy/job.hpp"
#include "policy/statistics.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace baton::sim {

struct FitReport {
    std::size_t jobs = 0; // jobs compared (recorded start known, submitted after warm-up)
    double medianAbsError = 0; // seconds, |simulated wait - recorded wait|
    double p90AbsError = 0;
    double correlation = 0; // Pearson, of the waits
    double logCorrelation = 0; // Pearson, of log(1 + wait): less dominated by a few long waits
    double recordedMeanWait = 0;
    double simulatedMeanWait = 0;
    double replaySeconds = 0; // wall-clock time of the replay
};

// One compared job's recorded and simulated wait: the residuals a fit leaves, for analysis.
struct JobWait {
    const Job* job = nullptr; // into the replayed trace
    std::int64_t recorded = 0; // seconds
    std::int64_t simulated = 0;
};

// Replays the whole trace and compares jobs submitted at or after `from` (to skip the warm-up).
// `waits`, when given, receives every compared job's waits in trace order.
FitReport validateReplay(std::shared_ptr<const std::vector<Job>> trace, const SchedulerConfig& config,
    std::int64_t from, std::vector<JobWait>* waits = nullptr);

} // namespace baton::sim
