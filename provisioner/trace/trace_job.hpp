// One job of a scheduler trace, whatever format it came from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace baton::trace {

// Times are epoch seconds, UTC (traces without a zone are read as UTC). -1 means "unknown" for the
// integer fields that a format may not carry.
struct TraceJob {
    std::int64_t jobId = 0;
    std::string name;
    std::string user; // user id or name, as the trace gives it
    std::int64_t submit = 0;
    std::optional<std::int64_t> start; // absent: never started, or unknown (SWF wait = -1)
    std::optional<std::int64_t> end; // absent: still running, or unknown
    std::int64_t timeLimit = -1; // seconds
    // Node count. SWF has none: its reader stores the processor count here as well (as it always has,
    // for the database import); the simulator reads `cpus` for SWF and derives nodes from the node size.
    std::int32_t nodes = 0;
    std::int32_t cpus = -1; // allocated processors/cores (SWF 5, else 8; sacct AllocCPUS/NCPUS, TRES cpu=)
    std::int32_t gpus = -1; // allocated GPUs (sacct TRES gres/gpu); -1 when the trace does not say
    std::string partition; // SWF field 16 (its number), sacct Partition; empty when unknown
    std::int64_t precedingJob = -1; // SWF field 17: the job this one waited for; -1 when none or unknown
    std::int64_t priority = -1;
    std::int32_t exitCode = -1;
    std::string state; // e.g. COMPLETED, TIMEOUT; empty when the trace has none
    // Standard Workload Format fields (-1 when unknown or not SWF).
    std::int32_t requestedProcs = -1;
    std::int64_t requestedTime = -1; // seconds
    std::int64_t runTime = -1; // seconds
    std::int64_t wait = -1; // seconds

    // Sets when a job of a Slurm trace ran (end absent while it runs) and the SWF fields that follow from
    // it, or returns why those times are impossible. Every Slurm reader ends a row with it, so that a row
    // with several faults is rejected for the same reason whatever its format.
    const char* setRunTimes(std::int64_t startTime, std::optional<std::int64_t> endTime)
    {
        if (endTime && *endTime < startTime)
            return "end before start";
        if (startTime < submit)
            return "start before submit";
        start = startTime;
        end = endTime;
        wait = startTime - submit;
        runTime = endTime ? *endTime - startTime : -1;
        requestedTime = timeLimit;
        return nullptr;
    }

    // Queue wait, when the job started.
    std::optional<std::int64_t> waitSeconds() const
    {
        if (!start)
            return std::nullopt;
        return *start - submit;
    }
    // Run time, when both ends are known.
    std::optional<std::int64_t> runSeconds() const
    {
        if (!start || !end)
            return std::nullopt;
        return *end - *start;
    }
};

} // namespace baton::trace
