// The simulator's own job list as CSV (header `id,submit,run_time,limit,nodes,priority,recorded_start,
// after`, times in epoch seconds; the last three may be left out or empty; `after` is the id of the job
// this one waits for, as Slurm's --dependency=afterany): small hand-written inputs for tests and
// experiments. Real traces come through the trace readers instead.
#pragma once

#include "policy/job.hpp"

#include <filesystem>
#include <vector>

namespace baton::sim {

// Throws std::runtime_error naming the file and line on malformed input.
std::vector<Job> readJobCsv(const std::filesystem::path& path);

} // namespace baton::sim
