// The configured policy, live: the same policy classes and queue features as the simulator, fed from
// the squeue snapshot instead of a replay.
#pragma once

#include "config.hpp"
#include "provisioner.hpp"
#include "slurm_cluster.hpp"

#include <connection.hpp>

#include <memory>

namespace baton::service {

// reactive and avg need nothing; predict and checkpoint-aware load the newest version of the
// configured model from the `models` table with the quantile chosen for them when it was trained.
// Without a model they fall back to avg, with a warning.
struct LivePolicy {
    std::shared_ptr<const sim::Policy> policy;
    std::shared_ptr<const sim::WaitPredictor> predictor; // null for reactive and avg
};
LivePolicy makeLivePolicy(const ServiceConfig& config, db::Connection& connection);

// The decision point of a chain's current job; with a predictor, its mean log-wait is filled in so that
// the decision records what the model predicted.
DecisionPointBuilder liveDecisionPoint(
    SlurmCluster& cluster, std::shared_ptr<const sim::WaitPredictor> predictor);

} // namespace baton::service
