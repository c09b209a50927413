// sbatch for a chain's recorded intent, the one action that is not idempotent: the tick submits
// successors with it, the HTTP API a new chain's first job. Every submission carries its intent's
// idempotency key as its comment, so that the next tick finds a job whose answer was lost.
#pragma once

#include "cluster.hpp"
#include "metrics.hpp"
#include "tables.hpp"

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace baton::service {

// The instance found that it no longer leads: the tick stops where it is (nothing of it is a chain's fault).
class LeadershipLost : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class Submitter {
public:
    Submitter(Tables& tables, Cluster& cluster, Metrics& metrics);

    // The idempotency key of job `seq`, also its `--comment`: baton:<chain id>:<seq>:<chain token>.
    static std::string submissionKey(const ChainRow& chain, int seq);

    // Asked right before each sbatch: an instance that lost the leadership submits nothing more
    // (throws LeadershipLost). Default: always leading.
    void setLeadershipCheck(std::function<bool()> stillLeading) { stillLeading_ = std::move(stillLeading); }

    // Submits job `seq` of the chain (the first job, a successor or a resubmission) under its
    // idempotency key; the intent must already be recorded. Returns the job id, or nullopt on failure.
    std::optional<std::int64_t> submitRecorded(const ChainRow& chain, int seq);

    // sbatch for the intent `key`; a failure is recorded, a success is for the caller to record.
    std::optional<std::int64_t> submitIntent(const ChainRow& chain, int seq, const std::string& key,
        const std::string& reason, const nlohmann::json& spec);

    // submitIntent in its three parts, for the tick, which runs the sbatch of many owners at once
    // (owner_actions.hpp): the request (nullopt, recorded as failed, when the chain has nothing to
    // submit; throws LeadershipLost), sbatch itself (no database: safe on another thread), and the
    // outcome (a failure recorded, the job id returned for the caller to record).
    std::optional<SubmitRequest> requestFor(const ChainRow& chain, int seq, const std::string& key,
        const std::string& reason, const nlohmann::json& spec);
    std::int64_t sbatch(const SubmitRequest& request) { return cluster_.submit(request); }
    std::optional<std::int64_t> outcome(const ChainRow& chain, int seq, const std::string& reason,
        std::optional<std::int64_t> jobId, const SlurmError* failure);

private:
    Tables& tables_;
    Cluster& cluster_;
    Metrics& metrics_;
    std::function<bool()> stillLeading_ = [] { return true; };
};

} // namespace baton::service
