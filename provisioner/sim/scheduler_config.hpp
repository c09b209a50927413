// Slurm-like scheduling parameters: multifactor priority weights and the cluster size.
#pragma once

#include <cstdint>

namespace baton::sim {

struct SchedulerConfig {
    int nodes = 84;
    // priority = ageWeight * min(age / maxAge, 1) + sizeWeight * nodes / clusterNodes
    //          + recordedWeight * recordedPriority   (as Slurm's priority/multifactor plugin)
    double ageWeight = 1000;
    double sizeWeight = 100;
    double recordedWeight = 0;
    std::int64_t maxAge = 7 * 24 * 3600; // PriorityMaxAge
    // A job held by a dependency ages from its submission (Slurm's PriorityFlags=ACCRUE_ALWAYS), or,
    // when false, only once the job it waits for has ended (Slurm's default: no age while ineligible).
    bool heldJobsAge = true;
    // Slurm recomputes pending jobs' priorities every PriorityCalcPeriod: the order is by age as of the
    // last recomputation (a job eligible since has none yet). 0: continuously.
    std::int64_t priorityPeriod = 0;
    bool backfill = true; // EASY backfill behind the first blocked job
    // Per-user limits, as a QOS's MaxJobsPerUser and MaxTRESPerUser: a user's job beyond them waits
    // without holding a reservation, as Slurm's pending reason QOSMaxJobsPerUserLimit. 0 = no limit.
    int userRunningJobs = 0;
    int userRunningUnits = 0;
};

} // namespace baton::sim
