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
std::shared_ptr<const sim::Policy> makeLivePolicy(const ServiceConfig& config, db::Connection& connection);

DecisionPointBuilder liveDecisionPoint(const ServiceConfig& config, SlurmCluster& cluster);

} // namespace baton::service
