// Loads a job list for the simulator from a file.
#pragma once

#include "job.hpp"

#include <filesystem>
#include <vector>

namespace baton::sim {

// `.csv` files in the simulator's own job format (job_csv.hpp). Throws std::runtime_error otherwise.
std::vector<Job> loadJobs(const std::filesystem::path& path);

} // namespace baton::sim
