#include "trace_input.hpp"

#include "job_csv.hpp"

#include <stdexcept>

namespace baton::sim {

std::vector<Job> loadJobs(const std::filesystem::path& path)
{
    if (path.extension() == ".csv")
        return readJobCsv(path);
    throw std::runtime_error(path.string() + ": unsupported trace format (expected a simulator job .csv)");
}

} // namespace baton::sim
