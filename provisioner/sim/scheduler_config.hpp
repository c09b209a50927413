// Slurm-like scheduling parameters: multifactor priority weights and the cluster size.
#pragma once

#include <cstdint>

namespace baton::sim {

// How jobs start ahead of a higher-priority job that does not fit. Easy: only the first such job holds a
// reservation (its shadow time and the nodes spare then). Conservative: every one holds a reservation at
// its earliest start on the plan of free nodes by limits, and a job starts now only if it delays none,
// as Slurm's sched/backfill plans each job it tests (up to bf_max_job_test).
enum class Backfill { None, Easy, Conservative };

// Its name on the command line: "none", "easy", "conservative".
constexpr const char* backfillName(Backfill b)
{
    return b == Backfill::None ? "none" : b == Backfill::Easy ? "easy" : "conservative";
}

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
    Backfill backfill = Backfill::Easy;
    // Per-user limits, as a QOS's MaxJobsPerUser and MaxTRESPerUser: a user's job beyond them waits
    // without holding a reservation, as Slurm's pending reason QOSMaxJobsPerUserLimit. 0 = no limit.
    int userRunningJobs = 0;
    int userRunningUnits = 0;
};

} // namespace baton::sim
