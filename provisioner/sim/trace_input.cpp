#include "trace_input.hpp"

#include "job_csv.hpp"

#include "trace/trace_reader.hpp"

#include <algorithm>
#include <fstream>
#include <unordered_set>
#include <limits>
#include <map>
#include <stdexcept>

namespace baton::sim {

std::optional<ResourceUnit> parseUnit(std::string_view text)
{
    if (text == "auto")
        return ResourceUnit::Auto;
    if (text == "nodes")
        return ResourceUnit::Nodes;
    if (text == "cores")
        return ResourceUnit::Cores;
    if (text == "gpus")
        return ResourceUnit::Gpus;
    return std::nullopt;
}

std::string_view unitName(ResourceUnit unit)
{
    switch (unit) {
    case ResourceUnit::Auto:
        return "auto";
    case ResourceUnit::Nodes:
        return "nodes";
    case ResourceUnit::Cores:
        return "cores";
    case ResourceUnit::Gpus:
        return "gpus";
    }
    return "?";
}

namespace {

std::int64_t ceilDiv(std::int64_t a, std::int64_t b)
{
    return (a + b - 1) / b;
}

// The job's size in the plan's unit; nullopt when the row does not give it; 0 for a job that held
// no GPU when counting GPUs.
std::optional<std::int64_t> sizeIn(const trace::TraceJob& row, const UnitPlan& plan)
{
    const bool haveNodes = plan.nodesKnown && row.nodes > 0;
    switch (plan.unit) {
    case ResourceUnit::Auto:
    case ResourceUnit::Nodes:
        if (haveNodes)
            return row.nodes;
        if (row.cpus > 0 && plan.coresPerNode > 0)
            return ceilDiv(row.cpus, plan.coresPerNode);
        return std::nullopt;
    case ResourceUnit::Cores:
        if (row.cpus > 0)
            return row.cpus;
        if (haveNodes && plan.coresPerNode > 0)
            return static_cast<std::int64_t>(row.nodes) * plan.coresPerNode;
        return std::nullopt;
    case ResourceUnit::Gpus:
        if (row.gpus >= 0)
            return row.gpus;
        if (haveNodes && plan.gpusPerNode > 0)
            return static_cast<std::int64_t>(row.nodes) * plan.gpusPerNode; // whole GPU nodes
        return std::nullopt;
    }
    return std::nullopt;
}

} // namespace

int LoadedJobs::unitsPerNode() const
{
    switch (plan.unit) {
    case ResourceUnit::Cores:
        return std::max(plan.coresPerNode, 1);
    case ResourceUnit::Gpus:
        return std::max(plan.gpusPerNode, 1);
    default:
        return 1;
    }
}

std::vector<Job> LoadedJobs::jobsOf(const std::string& partition) const
{
    const auto it = std::find(partitions.begin(), partitions.end(), partition);
    if (it == partitions.end())
        return {};
    const auto index = static_cast<std::uint32_t>(it - partitions.begin());
    std::vector<Job> out;
    for (std::size_t i = 0; i < jobs.size(); ++i)
        if (partitionOf[i] == index)
            out.push_back(jobs[i]);
    return out;
}

std::vector<std::size_t> LoadedJobs::partitionSizes() const
{
    std::vector<std::size_t> sizes(partitions.size(), 0);
    for (auto p : partitionOf)
        ++sizes[p];
    return sizes;
}

std::optional<Job> toSimJob(const trace::TraceJob& row, double maxPriority, const UnitPlan& plan)
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
    const auto size = sizeIn(row, plan);
    if (!size || *size < 0 || *size > 1'000'000'000)
        return std::nullopt;
    j.limit = row.timeLimit > 0 ? row.timeLimit : row.requestedTime;
    if (j.limit <= 0)
        j.limit = std::max<std::int64_t>(j.runTime, 1);
    j.nodes = static_cast<std::int32_t>(*size);
    j.afterId = row.precedingJob;
    j.recordedStart = row.start.value_or(-1);
    j.recordedPriority
        = row.priority >= 0 && maxPriority > 0 ? static_cast<double>(row.priority) / maxPriority : 0;
    return j;
}

namespace {

// The simulator's own job CSV starts with its header; any other .csv (Eagle's job records) goes to the
// trace readers.
bool isJobCsv(const std::filesystem::path& path)
{
    std::ifstream in(path);
    std::string header;
    return !in || !std::getline(in, header) || header.rfind("id,", 0) == 0;
}

} // namespace

LoadedJobs loadJobs(const std::filesystem::path& path, const LoadOptions& options)
{
    LoadedJobs out;
    if (path.extension() == ".csv" && isJobCsv(path)) {
        if (options.unit != ResourceUnit::Auto && options.unit != ResourceUnit::Nodes)
            throw std::invalid_argument(path.string() + ": the job CSV counts nodes only");
        out.jobs = readJobCsv(path);
        out.partitions = { "" };
        out.partitionOf.assign(out.jobs.size(), 0);
        return out;
    }
    trace::TraceSummary summary;
    const auto rows = trace::readAll(path, trace::TraceFormat::Auto, &summary);
    out.readerSummary = summary.toString();
    out.headerNodes = summary.maxNodes;
    out.headerProcs = summary.maxProcs;

    const bool swf = summary.format == trace::TraceFormat::Swf;
    UnitPlan& plan = out.plan;
    plan.nodesKnown = !swf;
    plan.unit = options.unit != ResourceUnit::Auto ? options.unit
                                                   : (swf ? ResourceUnit::Cores : ResourceUnit::Nodes);
    plan.gpusPerNode = options.gpusPerNode;
    plan.coresPerNode = options.coresPerNode;
    if (plan.coresPerNode <= 0 && swf && summary.maxNodes) {
        // The header's MaxProcs / MaxNodes is the node size; a header with MaxNodes alone describes a
        // machine counted in nodes (as the Lublin model's), one processor each.
        plan.coresPerNode = summary.maxProcs
            ? static_cast<int>(std::max<std::int64_t>(*summary.maxProcs / *summary.maxNodes, 1))
            : 1;
    }
    if (swf && plan.unit == ResourceUnit::Gpus)
        throw std::invalid_argument(
            path.string() + ": an SWF trace has no GPU counts; use --unit cores or nodes");
    if (swf && plan.unit == ResourceUnit::Nodes && plan.coresPerNode <= 0)
        throw std::invalid_argument(path.string()
            + ": an SWF trace counts processors and its header gives no MaxNodes; give --cores-per-node");

    double maxPriority = 0;
    for (const auto& r : rows)
        maxPriority = std::max(maxPriority, static_cast<double>(r.priority));
    std::map<std::string, std::uint32_t> partitionIndex;
    std::map<std::string, std::int32_t> userIndex; // dense ids, for per-user limits
    std::int64_t maxId = 0;
    out.jobs.reserve(rows.size());
    for (const auto& r : rows) {
        maxId = std::max({ maxId, r.jobId, r.precedingJob }); // fresh ids must not name any trace job
        auto j = toSimJob(r, maxPriority, plan);
        if (!j) {
            ++out.unusable;
            continue;
        }
        if (j->nodes == 0) { // only when counting GPUs: a CPU-only job is not in the GPU pool
            ++out.withoutGpus;
            continue;
        }
        auto [it, added]
            = partitionIndex.try_emplace(r.partition, static_cast<std::uint32_t>(out.partitions.size()));
        if (added)
            out.partitions.push_back(r.partition);
        if (!r.user.empty())
            j->user
                = userIndex.try_emplace(r.user, static_cast<std::int32_t>(userIndex.size())).first->second;
        out.jobs.push_back(*j);
        out.partitionOf.push_back(it->second);
        if (r.timeLimit <= 0 && r.requestedTime <= 0)
            ++out.limitsFromRunTime;
    }
    // Job ids must name one job each: the simulator breaks ties and finds a dependency's predecessor by
    // id. Eagle's records keep an array's id on every task, so repeats get fresh ids above the largest.
    std::unordered_set<std::int64_t> seen;
    seen.reserve(out.jobs.size());
    for (auto& j : out.jobs)
        if (!seen.insert(j.id).second) {
            j.id = ++maxId;
            ++out.repeatedIds;
        }
    return out;
}

std::int64_t recordedPeakUsage(const std::vector<Job>& jobs)
{
    std::vector<std::pair<std::int64_t, std::int64_t>> events; // (time, +units or -units); ends first
    for (const auto& j : jobs) {
        if (j.recordedStart < 0)
            continue;
        events.emplace_back(j.recordedStart, j.nodes);
        events.emplace_back(j.recordedStart + j.runTime, -static_cast<std::int64_t>(j.nodes));
    }
    std::sort(events.begin(), events.end());
    std::int64_t now = 0, peak = 0;
    for (const auto& [t, delta] : events) {
        now += delta;
        peak = std::max(peak, now);
    }
    return peak;
}

std::size_t inferDependencies(std::vector<Job>& jobs, std::int64_t within)
{
    if (within < 0)
        throw std::invalid_argument("inferDependencies: the window must not be negative");
    // Per user, the recorded (end, start, id) in order of end, to find the latest end before each start.
    struct Ended {
        std::int64_t end, start, id;
        bool operator<(const Ended& o) const { return end < o.end; }
    };
    std::map<std::int32_t, std::vector<Ended>> endsByUser;
    for (const auto& j : jobs)
        if (j.user >= 0 && j.recordedStart >= 0)
            endsByUser[j.user].push_back({ j.recordedStart + j.runTime, j.recordedStart, j.id });
    for (auto& [user, ends] : endsByUser)
        std::sort(ends.begin(), ends.end());
    std::size_t found = 0;
    for (auto& j : jobs) {
        if (j.afterId >= 0 || j.user < 0 || j.recordedStart < 0)
            continue;
        const auto& ends = endsByUser[j.user];
        // The latest end at or before the start, within the window and after the submission. The
        // predecessor must have started strictly earlier: then no chain of dependencies can loop
        // (jobs of zero length starting together would otherwise wait for each other).
        auto it = std::upper_bound(ends.begin(), ends.end(), Ended { j.recordedStart, 0, 0 });
        while (it != ends.begin()) {
            --it;
            if (it->end <= j.submit || j.recordedStart - it->end > within)
                break;
            if (it->start < j.recordedStart) {
                j.afterId = it->id;
                ++found;
                break;
            }
        }
    }
    return found;
}

} // namespace baton::sim
