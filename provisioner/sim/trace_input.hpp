// Loads a job list for the simulator: any trace the trace readers understand (sacct layouts, SWF),
// or the simulator's own job CSV. A job's size is counted in one resource unit (nodes, cores or GPUs),
// read from the trace; partitions are kept apart, since each is its own pool of nodes.
#pragma once

#include "policy/job.hpp"
#include "trace/trace_job.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace baton::sim {

// What the simulator allocates. Auto: nodes when the trace counts nodes (sacct, the job CSV),
// cores for SWF, whose only size is a processor count.
enum class ResourceUnit { Auto, Nodes, Cores, Gpus };
std::optional<ResourceUnit> parseUnit(std::string_view text); // "auto", "nodes", "cores", "gpus"
std::string_view unitName(ResourceUnit unit);

// How a trace row's counts become a size in the chosen unit.
struct UnitPlan {
    ResourceUnit unit = ResourceUnit::Nodes;
    bool nodesKnown = true; // false for SWF: its reader's `nodes` is a processor count
    int coresPerNode = 0; // 0: unknown (rows without the count in the unit then cannot be converted)
    int gpusPerNode = 0;
};

struct LoadOptions {
    ResourceUnit unit = ResourceUnit::Auto;
    int coresPerNode = 0; // 0: from the SWF header (MaxProcs / MaxNodes), else unknown
    int gpusPerNode = 0; // 0: unknown
};

struct LoadedJobs {
    std::vector<Job> jobs;
    // Parallel to `jobs`: the index into `partitions` of each job's partition.
    std::vector<std::uint32_t> partitionOf;
    std::vector<std::string> partitions; // names as the trace gives them; "" = none given
    UnitPlan plan; // the unit and node sizes used (Auto resolved)
    std::optional<std::int64_t> headerNodes; // SWF MaxNodes
    std::optional<std::int64_t> headerProcs; // SWF MaxProcs
    std::size_t unusable = 0; // trace rows without a run time or a size in the chosen unit
    std::size_t withoutGpus = 0; // unit gpus: rows of jobs that held no GPU (not in this pool)
    std::size_t limitsFromRunTime = 0; // rows with no requested limit: their run time stands in
    std::size_t repeatedIds = 0; // jobs whose id an earlier job had (array tasks): given fresh ids
    std::string readerSummary; // the trace reader's own account of rejected rows

    // Units in one node of the simulated cluster (1 for nodes).
    int unitsPerNode() const;
    // The jobs of one partition (by name), in trace order.
    std::vector<Job> jobsOf(const std::string& partition) const;
    // Number of jobs per partition, parallel to `partitions`.
    std::vector<std::size_t> partitionSizes() const;
};

// Converts one trace row; nullopt when it lacks what a replay needs (a run time; a size in the
// plan's unit, directly or through the node size). `maxPriority` normalises the recorded priority
// to [0, 1]. A row without a requested limit (SWF's -1, e.g. model-generated traces) gets its run
// time as the limit: backfill then works with exact estimates, the usual assumption for such traces.
// A row that says it held no GPU has size 0 in the GPU unit (callers leave it out of the pool).
std::optional<Job> toSimJob(const trace::TraceJob& row, double maxPriority, const UnitPlan& plan = {});

// `.csv` with the header `id,...`: the simulator's job CSV (job_csv.hpp, node counts); anything else,
// Eagle's job CSV included, goes to the trace readers.
// Throws std::runtime_error (or trace::TraceError) with the file name for unreadable input, and
// std::invalid_argument when the unit cannot be read from this trace (e.g. GPUs from an SWF file).
LoadedJobs loadJobs(const std::filesystem::path& path, const LoadOptions& options = {});

// Peak number of units in use at once in the recorded schedule (recorded start to start + run time),
// or 0 when no job has a recorded start: a lower bound on the pool's real size.
std::int64_t recordedPeakUsage(const std::vector<Job>& jobs);

// Dependencies inferred from the recorded schedule, for traces that do not record them (sacct has no
// dependency column): a job that started at most `within` seconds after another job of the same user
// ended, and was submitted before that end, is taken to have waited for it (afterok chains). Jobs
// that already have one keep it. Returns the number of dependencies set.
std::size_t inferDependencies(std::vector<Job>& jobs, std::int64_t within);

} // namespace baton::sim
