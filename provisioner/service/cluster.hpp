// What batond needs from Slurm, as an interface: the live implementation runs squeue, sbatch, scancel
// and scontrol (slurm_cluster.cpp); the state-machine unit tests use a scripted one.
#pragma once

#include "slurm/signal_scope.hpp"
#include "slurm/slurm_client.hpp"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace baton::service {

using slurm::SignalScope;
// Slurm's own types, as the Slurm client has them: what sbatch is given, and the failure of any Slurm
// command.
using slurm::SlurmError;

// Whether a Slurm call failed by running out of its time (slurm_timeout_seconds), not by an answer.
inline bool isTimeout(const SlurmError& error)
{
    return std::string_view(error.what()).find("timed out") != std::string_view::npos;
}
using slurm::SubmitRequest;

// One job as slurmctld reports it: the facts batond trusts.
// What a job asked for beyond its time, nodes, name and partition, as slurmctld reports it (0 or empty:
// not asked for, or not reported).
struct JobRequest {
    std::string account;
    std::string qos;
    std::string gres; // "gpu:2,shard:1": sbatch's --gres form
    std::string constraint;
    std::int64_t tasks = 0;
    std::int64_t tasksPerNode = 0;
    std::int64_t cpusPerTask = 0;
    std::int64_t memPerNodeMiB = 0;
    std::int64_t memPerCpuMiB = 0;
};

struct ClusterJob {
    std::int64_t id = 0;
    std::int64_t userId = -1;
    std::string userName;
    std::string name;
    std::string state; // PENDING, RUNNING, COMPLETED, TIMEOUT, FAILED, CANCELLED, ...
    std::string comment;
    std::int64_t submitTime = 0;
    std::int64_t startTime = 0; // 0 while pending
    std::int64_t endTime = 0; // 0 while not ended
    std::int64_t timeLimitSeconds = 0; // 0 = none
    int nodes = 1;
    double priority = 0;
    std::optional<int> exitCode;
    std::string workdir;
    std::string partition;
    JobRequest request;

    // Waiting to run, held included: a job requeued in a hold (REQUEUE_HOLD, SPECIAL_EXIT), held when its
    // reservation went (RESV_DEL_HOLD), or waiting for its nodes to power up may run later.
    bool pending() const
    {
        return state == "PENDING" || state == "CONFIGURING" || state == "REQUEUED" || state == "REQUEUE_HOLD"
            || state == "REQUEUE_FED" || state == "SPECIAL_EXIT" || state == "RESV_DEL_HOLD"
            || state == "POWER_UP_NODE";
    }
    // Holding its nodes, and its processes with them: a stopped job (STOPPED, scontrol suspend's SIGSTOP
    // without a release of its nodes) may go on training, as may one being signalled or resized.
    bool running() const
    {
        return state == "RUNNING" || state == "COMPLETING" || state == "SUSPENDED" || state == "STOPPED"
            || state == "SIGNALING" || state == "STAGE_OUT" || state == "RESIZING" || state == "UPDATE_DB";
    }
    bool ended() const { return !pending() && !running(); }
    // Ended without having run: cancelled while pending (slurmctld then sets the start to the end) or
    // refused. Such a job made no progress and holds no training.
    bool withdrawn() const
    {
        return ended() && (startTime <= 0 || (state == "CANCELLED" && startTime >= endTime));
    }
    bool started() const { return startTime > 0 && !withdrawn(); }
};

// The whole queue at one moment, from one squeue call: slurmctld's jobs as the state machine sees them,
// and the snapshot they were read from, on which the live policy computes its queue features.
struct ClusterQueue {
    slurm::QueueSnapshot squeue; // as the Slurm client parsed it (a scripted cluster may leave it empty)
    std::vector<ClusterJob> jobs;

    std::int64_t takenAt() const { return squeue.takenAt; } // epoch seconds

    // Lookups build an index on first use: fill `jobs` completely before the first one.
    const ClusterJob* find(std::int64_t id) const;
    // The job submitted under `comment` (an idempotency key) by `ownerUid`: a job of another user that
    // carries the same comment is never taken for it.
    const ClusterJob* findByComment(const std::string& comment, std::int64_t ownerUid) const;

private:
    void index() const;
    mutable std::unordered_map<std::int64_t, std::size_t> byId_;
    mutable std::unordered_multimap<std::string, std::size_t> byComment_;
    mutable std::size_t indexed_ = 0; // jobs.size() when the index was built
};

class Cluster {
public:
    virtual ~Cluster() = default;
    virtual ClusterQueue queue() = 0;
    // Submits as the owner; returns the job id. Throws SlurmError.
    virtual std::int64_t submit(const SubmitRequest& request) = 0;
    // Job controls act as the job's owner (the chain's): a user may control their own jobs, so batond
    // needs no Slurm operator rights.
    // `scancel [--full] --signal=SIG`, reaching the processes `scope` names.
    virtual void signal(
        std::int64_t jobId, const std::string& signal, SignalScope scope, std::int64_t ownerUid)
        = 0;
    virtual void cancel(std::int64_t jobId, std::int64_t ownerUid) = 0;
    // The batch script of a job (to resubmit a chain that started with plain sbatch).
    virtual std::string batchScript(std::int64_t jobId, std::int64_t ownerUid) = 0;
};

} // namespace baton::service
