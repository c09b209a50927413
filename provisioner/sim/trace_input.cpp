#include "trace_input.hpp"

#include "job_csv.hpp"

#include <trace_reader.hpp>

#include <algorithm>

namespace baton::sim {

std::optional<Job> toSimJob(const trace::TraceJob& row, double maxPriority)
{
    Job j;
    j.id = row.jobId;
    j.submit = row.submit;
    if (auto run = row.runSeconds(); run && *run >= 0)
        j.runTime = *run;
    else if (row.runTime >= 0)
        j.runTime = row.runTime;
    else
        return std::nullopt;
    if (row.nodes <= 0)
        return std::nullopt;
    j.limit = row.timeLimit > 0 ? row.timeLimit : row.requestedTime;
    if (j.limit <= 0)
        j.limit = std::max<std::int64_t>(j.runTime, 1);
    j.nodes = row.nodes;
    j.recordedStart = row.start.value_or(-1);
    j.recordedPriority
        = row.priority >= 0 && maxPriority > 0 ? static_cast<double>(row.priority) / maxPriority : 0;
    return j;
}

LoadedJobs loadJobs(const std::filesystem::path& path)
{
    LoadedJobs out;
    if (path.extension() == ".csv") {
        out.jobs = readJobCsv(path);
        return out;
    }
    trace::TraceSummary summary;
    const auto rows = trace::readAll(path, trace::TraceFormat::Auto, &summary);
    out.readerSummary = summary.toString();
    double maxPriority = 0;
    for (const auto& r : rows)
        maxPriority = std::max(maxPriority, static_cast<double>(r.priority));
    out.jobs.reserve(rows.size());
    for (const auto& r : rows) {
        if (auto j = toSimJob(r, maxPriority)) {
            out.jobs.push_back(*j);
            if (r.timeLimit <= 0 && r.requestedTime <= 0)
                ++out.limitsFromRunTime;
        } else {
            ++out.unusable;
        }
    }
    return out;
}

} // namespace baton::sim
