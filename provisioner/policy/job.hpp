// One batch job as a queue holds it, independent of any trace file format: the simulator's input, and
// what the features read of a simulated or a live queue.
#pragma once

#include <cstdint>

namespace baton::sim {

// Times are seconds since the Unix epoch (UTC); durations are seconds.
struct Job {
    std::int64_t id = 0;
    std::int64_t submit = 0;
    std::int64_t runTime = 0; // what the job ran for; it ends at min(runTime, limit)
    std::int64_t limit = 0; // requested wall-clock limit, used for backfill reservations
    std::int64_t minLimit = 0; // Slurm's --time-min: backfill may lower the limit to this; 0 = never
    // Size in the replay's resource unit: nodes by default, or cores or GPUs (trace_input.hpp); the
    // simulated cluster is a pool of that many units.
    std::int32_t nodes = 1;
    std::int32_t user = -1; // dense user index (for per-user limits); -1 when unknown
    std::int64_t afterId = -1; // a dependency: may start only once the trace job with this id has ended
    double recordedPriority = 0; // an extra priority input (e.g. the trace's priority), normalised to [0, 1]
    std::int64_t recordedStart = -1; // when the real scheduler started it; -1 when unknown
};

} // namespace baton::sim
