// What the features read of a queue: the simulator's state, or a live Slurm queue (live_queue.hpp), so
// that a live provisioner sees exactly the features its models were trained on.
#pragma once

#include "job.hpp"

#include <cstdint>
#include <span>

namespace baton::sim {

struct PendingJob {
    Job job;
    std::int64_t traceIndex = -1; // -1 for jobs inserted with submit()
};

struct RunningJob {
    std::int64_t id = 0;
    std::int64_t start = 0;
    std::int64_t end = 0; // when it really ends
    std::int64_t limitEnd = 0; // start + limit: what the scheduler plans with
    std::int32_t nodes = 0;
    std::int32_t user = -1;
    std::int64_t traceIndex = -1;
};

class QueueView {
public:
    virtual ~QueueView() = default;
    virtual std::int64_t now() const = 0;
    virtual int freeNodes() const = 0;
    virtual std::span<const PendingJob> pending() const = 0; // job.submit, nodes, limit are read
    virtual std::span<const RunningJob> running() const = 0; // limitEnd and nodes are read
    // The scheduler's priority of a job at time `at`; a job submitted at `at` is asked too.
    virtual double priorityOf(const Job& job, std::int64_t at) const = 0;
    // Mean queue wait (seconds) of recently started jobs; 0 when none is known. A job held by a
    // dependency waits from the moment it became eligible, not from its submission: a chain of jobs
    // submitted at once (`--dependency=singleton`) would otherwise count every earlier link's run time
    // as waiting, while what a fresh submission meets is the queue after eligibility.
    virtual double recentMeanWait() const = 0;
};

} // namespace baton::sim
