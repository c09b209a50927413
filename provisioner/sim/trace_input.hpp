// Loads a job list for the simulator: any trace the trace readers understand (sacct layouts, SWF),
// or the simulator's own job CSV.
#pragma once

#include "job.hpp"

#include <trace_job.hpp>

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace baton::sim {

struct LoadedJobs {
    std::vector<Job> jobs;
    std::size_t unusable = 0; // trace rows without a run time or node count
    std::size_t limitsFromRunTime = 0; // rows with no requested limit: their run time stands in
    std::string readerSummary; // the trace reader's own account of rejected rows
};

// Converts one trace row; nullopt when it lacks what a replay needs. `maxPriority` normalises the
// recorded priority to [0, 1]. A row without a requested limit (SWF's -1, e.g. model-generated traces)
// gets its run time as the limit: backfill then works with exact estimates, the usual assumption
// for such traces.
std::optional<Job> toSimJob(const trace::TraceJob& row, double maxPriority);

// `.csv`: the simulator's job CSV (job_csv.hpp); anything else goes to the trace readers.
// Throws std::runtime_error (or trace::TraceError) with the file name for unreadable input.
LoadedJobs loadJobs(const std::filesystem::path& path);

} // namespace baton::sim
